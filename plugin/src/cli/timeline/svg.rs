//! The timeline as SVG: a row per group, a bar per batch from its likely start to its likely end
//! with a whisker to its cautious end, waits and soaks shaded, drains that wait or block
//! patterned and labelled (never by colour alone), "now" and the estimated end marked. Each
//! batch is a `<g class="batch">` whose `<title>` is its details (the tooltip on hover) and
//! whose data attributes carry its times, for tools and tests.

use std::fmt::Write as _;

use super::{Bar, Stretch, Timeline, escape, show_instant};
use crate::duration::human_duration;

const WIDTH: i64 = 1100;
/// The label column; the chart runs from `CHART_X` to `WIDTH - MARGIN`.
const LABEL_WIDTH: i64 = 220;
const CHART_X: i64 = LABEL_WIDTH + 10;
const MARGIN: i64 = 30;
const ROW_HEIGHT: i64 = 44;
const BAR_HEIGHT: i64 = 18;
/// The title, the legend and the axis above the first row.
const TOP: i64 = 96;
/// Candidate tick spacings, in seconds: the first giving at most `MAX_TICKS` ticks is used.
const TICKS: [i64; 14] = [
    60, 300, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400, 172_800, 604_800, 2_592_000,
    31_536_000,
];
const MAX_TICKS: i64 = 10;

/// Fills and patterns: drains that wait are hatched, blocked ones cross-hatched, and both carry
/// a word above the bar.
const STYLE: &str = "
text { font-family: sans-serif; font-size: 12px; fill: #222; }
.title { font-size: 16px; font-weight: bold; }
.small { font-size: 10px; fill: #555; }
.axis { stroke: #bbb; stroke-width: 1; }
.gap { stroke: #888; stroke-width: 1; stroke-dasharray: 2 3; }
.row { fill: #f6f7f9; }
.work { fill: #3b6fb6; }
.canary .work, .work.canary { fill: #7a55b0; }
.work.drain-waits { fill: url(#hatch); }
.work.drain-blocks { fill: url(#cross); }
.inside { font-size: 10px; fill: #222; }
.wait { fill: #f1c56b; }
.soak { fill: #8cc79a; }
.whisker { stroke: #222; stroke-width: 1.5; }
.now { stroke: #1a7f37; stroke-width: 2; }
.end { stroke: #b3261e; stroke-width: 1.5; stroke-dasharray: 5 3; }
.stop { fill: #b3261e; font-weight: bold; }
.drain-word { font-size: 10px; font-weight: bold; fill: #b3261e; }
";

/// The timeline as a standalone SVG document.
pub fn draw(t: &Timeline) -> String {
    let scale = Scale::of(t);
    let height = TOP + ROW_HEIGHT * (t.rows.len().max(1) as i64) + 60;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" aria-labelledby="timeline-title" data-now="{}" data-end="{}" data-end-p90="{}">"#,
        t.now, t.end, t.end_p90
    );
    let _ = write!(
        svg,
        "<title id=\"timeline-title\">{}</title><style>{STYLE}</style>",
        escape(&t.title)
    );
    svg.push_str(PATTERNS);
    let _ = write!(
        svg,
        r#"<text class="title" x="10" y="22">{}</text><text class="small" x="10" y="40">from {} to about {} (p90 {}) [{}]</text>"#,
        escape(&t.title),
        escape(&show_instant(t.now)),
        escape(&show_instant(t.end)),
        escape(&show_instant(t.end_p90)),
        escape(&t.basis)
    );
    legend(&mut svg);
    axis(&mut svg, &scale, height);
    for (i, row) in t.rows.iter().enumerate() {
        let y = TOP + ROW_HEIGHT * i as i64;
        let _ = write!(
            svg,
            r#"<g class="group" data-row="{}"><rect class="row" x="0" y="{}" width="{WIDTH}" height="{}"/><text x="10" y="{}">{}</text>"#,
            escape(&row.label),
            y + 2,
            ROW_HEIGHT - 4,
            y + ROW_HEIGHT / 2 + 4,
            escape(&clip(&row.label, 32))
        );
        if let Some(lead) = &row.lead {
            stretch(&mut svg, &scale, y, lead, "wait");
        }
        let mut words_end = 0;
        for (index, bar) in row.bars.iter().enumerate() {
            let at = BarAt {
                y,
                row: &row.label,
                index,
            };
            draw_bar(&mut svg, &scale, at, bar, &mut words_end);
        }
        if let Some(why) = &row.stops {
            let x = row.bars.last().map_or(CHART_X, |b| scale.x(b.to));
            let _ = write!(
                svg,
                r#"<text class="stop" x="{}" y="{}">■ stops: {}<title>{}</title></text>"#,
                x + 4,
                y + ROW_HEIGHT / 2 + 4,
                escape(&clip(why, 40)),
                escape(why)
            );
        }
        svg.push_str("</g>");
    }
    gaps(&mut svg, &scale, height);
    markers(&mut svg, t, &scale, height);
    svg.push_str("</svg>\n");
    svg
}

const PATTERNS: &str = r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#3b6fb6"/><line x1="0" y1="0" x2="0" y2="6" stroke="#f1c56b" stroke-width="3"/></pattern><pattern id="cross" width="6" height="6" patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#b3261e"/><path d="M0 0L6 6M6 0L0 6" stroke="#fff" stroke-width="1.2"/></pattern></defs>"##;

/// Where instants go on the chart: linearly, but for the long waits during which no batch works
/// (a window that opens tomorrow), each drawn [`GAP_WIDTH`] wide with its length written on it,
/// so that a day's pause does not squeeze the batches to a few pixels.
struct Scale {
    from: i64,
    to: i64,
    gaps: Vec<Gap>,
    /// Pixels per second outside the gaps.
    per_second: f64,
}

/// A stretch of the axis drawn narrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gap {
    from: i64,
    to: i64,
}

/// The pixels a long wait takes.
const GAP_WIDTH: i64 = 150;
/// A wait is drawn narrow when longer than this share of the axis.
const GAP_SHARE: i64 = 5;

impl Scale {
    fn of(t: &Timeline) -> Scale {
        let bars = || t.rows.iter().flat_map(|r| &r.bars);
        let latest = bars().map(|b| b.to_p90).chain([t.end_p90, t.end]).max();
        let earliest = (t.rows.iter())
            .filter_map(|r| r.lead.as_ref().map(|l| l.from))
            .chain([t.now])
            .min()
            .unwrap_or(t.now);
        let (from, to) = (earliest, latest.unwrap_or(t.now).max(earliest + 60));
        // Where some batch works (its waits left out), merged.
        let mut busy: Vec<(i64, i64)> = bars()
            .map(|b| (b.waits.last().map_or(b.from, |w| w.to), b.to.max(b.to_p90)))
            .collect();
        busy.sort_unstable();
        let mut gaps = Vec::new();
        let mut idle_from = from;
        for (start, end) in busy.into_iter().chain([(to, to)]) {
            if start - idle_from > (to - from) / GAP_SHARE {
                gaps.push(Gap {
                    from: idle_from,
                    to: start,
                });
            }
            idle_from = idle_from.max(end);
        }
        let narrowed: i64 = gaps.iter().map(|g| g.to - g.from).sum();
        let pixels = (WIDTH - MARGIN - CHART_X - GAP_WIDTH * gaps.len() as i64) as f64;
        Scale {
            from,
            to,
            per_second: pixels / ((to - from - narrowed).max(60)) as f64,
            gaps,
        }
    }

    fn x(&self, at: i64) -> i64 {
        let (mut x, mut since) = (CHART_X as f64, self.from);
        for g in &self.gaps {
            if at <= g.from {
                break;
            }
            x += (g.from - since) as f64 * self.per_second;
            if at < g.to {
                let share = (at - g.from) as f64 / (g.to - g.from) as f64;
                return (x + share * GAP_WIDTH as f64).round() as i64;
            }
            x += GAP_WIDTH as f64;
            since = g.to;
        }
        (x + (at - since) as f64 * self.per_second).round() as i64
    }

    /// The width of `from..to`, at least 2 pixels so that a short batch stays visible.
    fn width(&self, from: i64, to: i64) -> i64 {
        (self.x(to) - self.x(from)).max(2)
    }

    /// Whether `at` falls in a narrowed wait (no tick is drawn there).
    fn narrowed(&self, at: i64) -> bool {
        self.gaps.iter().any(|g| g.from < at && at < g.to)
    }
}

fn legend(svg: &mut String) {
    let items: [(&str, &str); 6] = [
        ("work", "batch"),
        ("work canary", "canary"),
        ("wait", "pause, window or gate wait"),
        ("soak", "soak"),
        ("work drain-waits", "drain waits on a budget"),
        ("work drain-blocks", "drain blocked"),
    ];
    let mut x = 10;
    for (class, text) in items {
        let _ = write!(
            svg,
            r#"<rect class="{class}" x="{x}" y="48" width="14" height="10"/><text class="small" x="{}" y="57">{text}</text>"#,
            x + 18
        );
        x += 24 + 6 * text.len() as i64;
    }
    let _ = write!(
        svg,
        r#"<line class="whisker" x1="{x}" y1="53" x2="{}" y2="53"/><text class="small" x="{}" y="57">to p90</text>"#,
        x + 16,
        x + 20
    );
}

/// Ticks along the top, labelled in UTC, with faint lines down the rows.
fn axis(svg: &mut String, scale: &Scale, height: i64) {
    let narrowed: i64 = scale.gaps.iter().map(|g| g.to - g.from).sum();
    let span = (scale.to - scale.from - narrowed).max(60);
    let step = (TICKS.iter().copied())
        .find(|s| span / s <= MAX_TICKS)
        .unwrap_or(TICKS[TICKS.len() - 1]);
    let mut at = scale.from.div_euclid(step) * step;
    if at < scale.from {
        at += step;
    }
    while at <= scale.to {
        if scale.narrowed(at) {
            at += step;
            continue;
        }
        let x = scale.x(at);
        let label = match step {
            s if s >= 86_400 => jiff_format(at, "%a %d %b"),
            _ => jiff_format(at, "%a %H:%M"),
        };
        let _ = write!(
            svg,
            r#"<line class="axis" x1="{x}" y1="{}" x2="{x}" y2="{}"/><text class="small" x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            TOP - 12,
            height - 40,
            TOP - 16,
            escape(&label)
        );
        at += step;
    }
}

fn jiff_format(at: i64, format: &str) -> String {
    jiff::Timestamp::from_second(at)
        .map(|t| t.strftime(format).to_string())
        .unwrap_or_default()
}

/// A wait or a soak: shaded, its reason in its tooltip and, where it is wide enough, written in.
fn stretch(svg: &mut String, scale: &Scale, y: i64, s: &Stretch, class: &str) {
    let (x, top, width) = (
        scale.x(s.from),
        y + (ROW_HEIGHT - BAR_HEIGHT) / 2,
        scale.width(s.from, s.to),
    );
    let said = format!("{} ({})", s.reason, human_duration(s.to - s.from));
    let _ = write!(
        svg,
        r#"<rect class="{class}" x="{x}" y="{top}" width="{width}" height="{BAR_HEIGHT}"><title>{}</title></rect>"#,
        escape(&said)
    );
    // About 6 pixels a character at the inside text's size.
    let room = usize::try_from((width - 8) / 6).unwrap_or(0);
    if room >= 8 {
        let _ = write!(
            svg,
            r#"<text class="inside" x="{}" y="{}">{}</text>"#,
            x + 4,
            top + BAR_HEIGHT / 2 + 4,
            escape(&clip(&said, room))
        );
    }
}

/// Draws `bar`; `words_end` is where the last drain word written on its row ends, so that words
/// never overlap (the bar's pattern and the table below still tell every batch).
fn draw_bar(svg: &mut String, scale: &Scale, at: BarAt<'_>, bar: &Bar, words_end: &mut i64) {
    let BarAt { y, row, index } = at;
    let top = y + (ROW_HEIGHT - BAR_HEIGHT) / 2;
    let class = if bar.canary { "batch canary" } else { "batch" };
    let _ = write!(
        svg,
        r#"<g class="{class}" data-row="{}" data-index="{index}" data-label="{}" data-from="{}" data-to="{}" data-to-p90="{}" data-drain="{}"><title>{}</title>"#,
        escape(row),
        escape(&bar.label),
        bar.from,
        bar.to,
        bar.to_p90,
        bar.drain,
        escape(&tooltip(bar))
    );
    // The work: after the waits, before the soak.
    let work_from = bar.waits.last().map_or(bar.from, |w| w.to);
    let work_to = bar.soak.as_ref().map_or(bar.to, |s| s.from).max(work_from);
    let work = match bar.drain {
        "blocks" => "work drain-blocks",
        "waits" | "holds" | "pending" => "work drain-waits",
        _ => "work",
    };
    for w in &bar.waits {
        stretch(svg, scale, y, w, "wait");
    }
    let _ = write!(
        svg,
        r#"<rect class="{work}" x="{}" y="{top}" width="{}" height="{BAR_HEIGHT}"/>"#,
        scale.x(work_from),
        scale.width(work_from, work_to)
    );
    if let Some(s) = &bar.soak {
        stretch(svg, scale, y, s, "soak");
    }
    if bar.to_p90 > bar.to {
        let mid = top + BAR_HEIGHT / 2;
        let (x1, x2) = (scale.x(bar.to), scale.x(bar.to_p90));
        let _ = write!(
            svg,
            r#"<line class="whisker" x1="{x1}" y1="{mid}" x2="{x2}" y2="{mid}"/><line class="whisker" x1="{x2}" y1="{}" x2="{x2}" y2="{}"/>"#,
            mid - 4,
            mid + 4
        );
    }
    let word_x = word_at(scale.x(work_from), bar.drain);
    if bar.drain != "ok" && word_x >= *words_end {
        let _ = write!(
            svg,
            r#"<text class="drain-word" x="{word_x}" y="{}">{}</text>"#,
            top - 3,
            bar.drain
        );
        *words_end = word_x + word_width(bar.drain);
    }
    svg.push_str("</g>");
}

/// About how wide a drain word is drawn (10 px bold).
fn word_width(word: &str) -> i64 {
    7 * word.chars().count() as i64
}

/// Where a drain word starts for a bar at `x`: at the bar, or as far right as it fits whole.
pub(super) fn word_at(x: i64, word: &str) -> i64 {
    x.min(WIDTH - MARGIN - word_width(word))
}

/// Where a bar is drawn: its row's top, the row's label, its index in the row.
struct BarAt<'a> {
    y: i64,
    row: &'a str,
    index: usize,
}

fn tooltip(bar: &Bar) -> String {
    let mut text = bar.label.clone();
    for f in &bar.details {
        let _ = write!(text, "\n{}: {}", f.name, f.value);
    }
    text
}

/// The edges of each narrowed wait, dashed, and its length between them.
fn gaps(svg: &mut String, scale: &Scale, height: i64) {
    for g in &scale.gaps {
        let (x1, x2) = (scale.x(g.from), scale.x(g.to));
        for x in [x1, x2] {
            let _ = write!(
                svg,
                r#"<line class="gap" x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
                TOP - 12,
                height - 40
            );
        }
        let _ = write!(
            svg,
            r#"<text class="small" x="{}" y="{}" text-anchor="middle">≈ {} drawn short</text>"#,
            (x1 + x2) / 2,
            TOP - 3,
            escape(&human_duration(g.to - g.from))
        );
    }
}

/// "now" and the estimated end (likely and cautious), and where the run stops.
fn markers(svg: &mut String, t: &Timeline, scale: &Scale, height: i64) {
    let bottom = height - 40;
    let now = scale.x(t.now);
    let _ = write!(
        svg,
        r#"<line class="now" x1="{now}" y1="{}" x2="{now}" y2="{bottom}"/><text class="small" x="{now}" y="{}" text-anchor="middle">now</text>"#,
        TOP - 10,
        bottom + 14
    );
    for (at, word) in [(t.end, "estimated end"), (t.end_p90, "p90 end")] {
        if word == "p90 end" && t.end_p90 <= t.end {
            continue;
        }
        let x = scale.x(at);
        let _ = write!(
            svg,
            r#"<line class="end" x1="{x}" y1="{}" x2="{x}" y2="{bottom}"/><text class="small" x="{x}" y="{}" text-anchor="end">{word} {}</text>"#,
            TOP - 10,
            bottom + if word == "p90 end" { 28 } else { 14 },
            escape(&show_instant(at))
        );
    }
    if let Some(why) = &t.stopped {
        let _ = write!(
            svg,
            r#"<text class="stop" x="10" y="{}">The run stops: {}</text>"#,
            bottom + 28,
            escape(&clip(why, 90))
        );
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}
