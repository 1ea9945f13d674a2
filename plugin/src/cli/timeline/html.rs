//! The plan as one self-contained page for change review: what the plan rests on, its
//! warnings, the timeline, and a printable table of every batch. Nothing is loaded from
//! elsewhere: styles and the picture are inline, there is no script, and the page's
//! Content-Security-Policy forbids any other load.

use std::fmt::Write as _;

use super::{Timeline, escape, show_instant};

/// No script, no outside load; inline styles and the inline SVG only.
const POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

const STYLE: &str = "
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; margin: 0 0 8px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 0 0 16px; }
dt { font-weight: bold; }
dd { margin: 0; }
.warnings { background: #fff4d6; border-left: 4px solid #f1c56b; padding: 8px 16px; }
.stopped { background: #fde7e6; border-left: 4px solid #b3261e; padding: 8px 16px; }
.timeline { overflow-x: auto; margin: 16px 0; }
.timeline svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
tr.drain-blocks td.drain { background: #fde7e6; font-weight: bold; }
tr.drain-waits td.drain, tr.drain-holds td.drain, tr.drain-pending td.drain { background: #fff4d6; }
ul.details { margin: 0; padding-left: 16px; }
@media print {
  body { margin: 0; }
  .timeline { overflow: visible; }
  tr { break-inside: avoid; }
}
";

/// The page.
pub fn page(t: &Timeline) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{}</title><style>{STYLE}</style></head><body>
<h1>{}</h1>
"#,
        escape(&t.title),
        escape(&t.title)
    );
    html.push_str("<dl class=\"facts\">");
    let _ = write!(
        html,
        "<dt>Planned for</dt><dd>{}</dd>",
        escape(&show_instant(t.now))
    );
    for f in &t.facts {
        let _ = write!(
            html,
            "<dt>{}</dt><dd>{}</dd>",
            escape(&f.name),
            escape(&f.value)
        );
    }
    html.push_str("</dl>\n");
    if let Some(why) = &t.stopped {
        let _ = writeln!(
            html,
            "<p class=\"stopped\"><strong>A gate stops the run:</strong> {}</p>",
            escape(why)
        );
    }
    if !t.warnings.is_empty() {
        html.push_str("<div class=\"warnings\"><strong>Warnings</strong><ul>");
        for w in &t.warnings {
            let _ = write!(html, "<li>{}</li>", escape(w));
        }
        html.push_str("</ul></div>\n");
    }
    let _ = writeln!(
        html,
        "<div class=\"timeline\">{}</div>",
        super::svg::draw(t).trim_end()
    );
    table(&mut html, t);
    html.push_str("</body></html>\n");
    html
}

/// Every batch: where it is, when, its drain, and its details.
fn table(html: &mut String, t: &Timeline) {
    html.push_str(
        "<table class=\"batches\"><thead><tr><th>Group</th><th>Batch</th><th>Starts</th><th>Ends</th><th>p90 end</th><th>Drain</th><th>Details</th></tr></thead><tbody>\n",
    );
    for row in &t.rows {
        for (index, bar) in row.bars.iter().enumerate() {
            let _ = write!(
                html,
                r#"<tr class="batch drain-{}" data-row="{}" data-index="{index}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="drain">{}</td><td><ul class="details">"#,
                bar.drain,
                escape(&row.label),
                escape(&row.label),
                escape(&bar.label),
                escape(&show_instant(bar.from)),
                escape(&show_instant(bar.to)),
                escape(&show_instant(bar.to_p90)),
                bar.drain
            );
            for f in &bar.details {
                let _ = write!(
                    html,
                    "<li><strong>{}</strong>: {}</li>",
                    escape(&f.name),
                    escape(&f.value)
                );
            }
            html.push_str("</ul></td></tr>\n");
        }
        if let Some(why) = &row.stops {
            let _ = writeln!(
                html,
                "<tr class=\"stops\"><td>{}</td><td colspan=\"6\"><strong>stops here:</strong> {}</td></tr>",
                escape(&row.label),
                escape(why)
            );
        }
    }
    html.push_str("</tbody></table>\n");
}
