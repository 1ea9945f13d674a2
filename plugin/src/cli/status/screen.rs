//! The full-screen view of `status --watch`, drawn from a [`Scene`] with ratatui: what holds
//! the run and was asked of it, each group's progress, the nodes of the batch in flight with the
//! pods their drains have left and what blocks them, the last Events, and the keys.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::scene::Scene;
use super::terminal::Footer;

/// The keys, said when no prompt or notice is.
pub const KEYS_HELP: &str = "p pause · r resume · a abort · q quit";

/// Width of a group's progress bar, in cells.
const BAR: usize = 24;

/// Everything one frame shows.
pub struct View<'a> {
    pub scene: &'a Scene,
    pub footer: &'a Footer<'a>,
    /// The cluster, as the header names it.
    pub cluster: &'a str,
    pub now: jiff::Timestamp,
}

impl View<'_> {
    fn tint(&self, colour: Color) -> Style {
        tint(self.footer.colour, colour)
    }
}

/// `colour` as a style, or none without colours.
pub fn tint(colours: bool, colour: Color) -> Style {
    match colours {
        true => Style::default().fg(colour),
        false => Style::default(),
    }
}

/// The footer's lines: the prompt, or what the last command said (a line each) then the keys,
/// or the keys; `subject` is what the keys act on.
pub fn footer_lines(footer: &Footer, subject: &str) -> Vec<Line<'static>> {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    match (footer.prompt.line(subject), footer.notice) {
        (Some(prompt), _) => vec![Line::styled(prompt, bold)],
        (None, Some(notice)) => (notice.lines())
            .map(|l| Line::styled(l.to_string(), tint(footer.colour, Color::Cyan)))
            .chain([Line::from(KEYS_HELP)])
            .collect(),
        (None, None) => vec![Line::from(KEYS_HELP)],
    }
}

/// The rows `lines` take, wrapped at word boundaries into `width` columns.
pub fn rows_of(lines: &[Line], width: u16) -> u16 {
    let rows: usize = (lines.iter())
        .map(|l| wrapped_rows(&l.to_string(), width))
        .sum();
    rows as u16
}

/// `[██████░░░░] 3/9`
fn bar(done: usize, of: usize) -> String {
    let filled = (done * BAR).checked_div(of).unwrap_or(0).min(BAR);
    format!("[{}{}]", "█".repeat(filled), "░".repeat(BAR - filled))
}

fn clock(at: jiff::Timestamp) -> String {
    at.strftime("%H:%M:%S").to_string()
}

/// The rows `text` takes when wrapped at word boundaries into `width` columns.
fn wrapped_rows(text: &str, width: u16) -> usize {
    let width = usize::from(width.max(1));
    let (mut rows, mut used) = (1, 0);
    for word in text.split_inclusive(' ') {
        let all = Span::raw(word).width();
        // A space at the end of a row may hang past it.
        let visible = Span::raw(word.trim_end()).width();
        if used > 0 && used + visible > width {
            rows += 1;
            used = 0;
        }
        if visible > width {
            // A word wider than the row is broken across rows.
            rows += (visible - 1) / width;
            used = (visible - 1) % width + 1 + (all - visible);
        } else {
            used += all;
        }
    }
    rows
}

pub fn draw(frame: &mut Frame, view: &View) {
    let scene = view.scene;
    let records = scene.records();
    let bold = Style::default().add_modifier(Modifier::BOLD);

    let mut summary: Vec<Line> = match scene.known() {
        true => (records.lines(view.now).into_iter())
            .map(Line::from)
            .collect(),
        false => vec![Line::from("Reading the rotation's Lease…")],
    };
    if let Some(end) = scene.ended() {
        let style = match end.reason.as_str() {
            "Finished" => view.tint(Color::Green),
            _ => view.tint(Color::Red),
        };
        summary.push(Line::styled(
            format!("The run ended: {}: {}", end.reason, end.note),
            style,
        ));
    } else if scene.let_go() {
        summary.push(Line::from("The run let go of the lock."));
    }
    for problem in scene.problems.values() {
        summary.push(Line::styled(
            format!("Not seen: {problem}"),
            view.tint(Color::Red),
        ));
    }

    let groups: Vec<Line> = match records.progress() {
        Some(p) if !p.groups.is_empty() => (p.groups.iter())
            .map(|g| {
                let mut spans = vec![
                    Span::styled(format!("{:<18} ", g.group), bold),
                    Span::styled(bar(g.replaced, g.instances), view.tint(Color::Green)),
                    Span::raw(format!(" {}/{} replaced", g.replaced, g.instances)),
                ];
                if let Some(b) = &g.batch {
                    spans.push(Span::styled(
                        format!("   batch {} in flight: {}", b.number, b.nodes.join(", ")),
                        view.tint(Color::Cyan),
                    ));
                } else if g.done {
                    spans.push(Span::raw("   done"));
                }
                Line::from(spans)
            })
            .collect(),
        _ => vec![Line::from(
            "No progress recorded (the run records it at each batch).",
        )],
    };

    let mut nodes: Vec<Line> = Vec::new();
    for n in scene.node_lines() {
        let mut spans = vec![
            Span::styled(format!("{:<24} ", n.name), bold),
            Span::raw(format!("{:<10}", n.state)),
        ];
        if let Some(pods) = &n.pods_left {
            let shown: Vec<&str> = pods.iter().take(3).map(String::as_str).collect();
            let more = match pods.len() > 3 {
                true => format!(", … {} more", pods.len() - 3),
                false => String::new(),
            };
            let named = match pods.is_empty() {
                true => String::new(),
                false => format!(": {}{more}", shown.join(", ")),
            };
            spans.push(Span::raw(format!("  {} pods left{named}", pods.len())));
        }
        nodes.push(Line::from(spans));
        if let Some(blocked) = &n.blocked {
            nodes.push(Line::styled(
                format!("    waits: {blocked}"),
                view.tint(Color::Yellow),
            ));
        }
    }
    if nodes.is_empty() {
        nodes.push(Line::from("No node is in flight."));
    }

    let footer = footer_lines(view.footer, "the rotation");

    // Boxes as high as their lines take, wrapped inside the borders.
    let width = frame.area().width;
    let height = |lines: &[Line]| Constraint::Length(rows_of(lines, width.saturating_sub(2)) + 2);
    let areas = Layout::vertical([
        Constraint::Length(1),
        height(&summary),
        height(&groups),
        height(&nodes),
        Constraint::Min(4),
        Constraint::Length(rows_of(&footer, width)),
    ])
    .split(frame.area());

    let header = format!(
        " kubectl rollout-ext status --watch · {} · {} UTC",
        view.cluster,
        clock(view.now)
    );
    frame.render_widget(Paragraph::new(Line::styled(header, bold)), areas[0]);
    let boxed = |title: &'static str| Block::bordered().title(Span::styled(title, bold));
    frame.render_widget(
        Paragraph::new(summary)
            .block(boxed(" Run "))
            .wrap(Wrap { trim: false }),
        areas[1],
    );
    frame.render_widget(Paragraph::new(groups).block(boxed(" Groups ")), areas[2]);
    frame.render_widget(
        Paragraph::new(nodes)
            .block(boxed(" Batch in flight "))
            .wrap(Wrap { trim: false }),
        areas[3],
    );
    let shown = areas[4].height.saturating_sub(2) as usize;
    let events: Vec<Line> = (scene.last_events(shown).iter())
        .map(|e| {
            let e = &e.event;
            let when = e.at.map_or_else(|| "--:--:--".to_string(), clock);
            let count = match e.count > 1 {
                true => format!(" (×{})", e.count),
                false => String::new(),
            };
            let style = match e.warning {
                true => view.tint(Color::Yellow),
                false => Style::default(),
            };
            Line::styled(
                format!(
                    "{when}  {:<16} {:<18} {}{count}",
                    e.regarding, e.reason, e.note
                ),
                style,
            )
        })
        .collect();
    frame.render_widget(Paragraph::new(events).block(boxed(" Events ")), areas[4]);
    frame.render_widget(Paragraph::new(footer).wrap(Wrap { trim: false }), areas[5]);
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::super::keys::Prompt;
    use super::*;
    use crate::cluster::follow::{Followed, NodeMarks, RunEvent};
    use crate::cluster::lock::LockStatus;
    use crate::rotate::progress::{BatchInFlight, GroupProgress, RunProgress};

    /// The text of every row of the frame `view` draws on a 110 × 32 terminal.
    fn rows(view: &View) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(110, 32)).unwrap();
        terminal.draw(|frame| draw(frame, view)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect()
    }

    fn running_scene() -> Scene {
        let now = jiff::Timestamp::now();
        let holding = serde_json::json!({
            "what": "draining node web-2: eviction of pod shop/web-7 refused by budget shop/web",
            "since": now.to_string(),
        });
        let progress = RunProgress {
            groups: vec![GroupProgress {
                group: "web".into(),
                instances: 4,
                replaced: 2,
                batch: Some(BatchInFlight {
                    number: 3,
                    nodes: vec!["web-2".into()],
                }),
                done: false,
            }],
        };
        let pause =
            serde_json::json!({"by": "alice@laptop", "reason": "zone b maintenance", "at": ""});
        let mut scene = Scene::default();
        scene.apply(Followed::Lease(Some(LockStatus {
            holder: "bob@ci/77".into(),
            renewed_seconds_ago: Some(3),
            state: [
                (crate::keys::HOLDING, holding.to_string()),
                (crate::keys::PROGRESS, progress.record()),
                (crate::keys::PAUSE, pause.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        })));
        scene.apply(Followed::Nodes(vec![NodeMarks {
            name: "web-2".into(),
            phase: Some("cordoned".into()),
            ..Default::default()
        }]));
        scene.apply(Followed::PodsLeft {
            node: "web-2".into(),
            pods: vec!["shop/web-7".into(), "shop/cache-1".into()],
        });
        scene.apply(Followed::Event(RunEvent {
            name: "e1".into(),
            at: Some(now),
            reason: "BatchStarted".into(),
            regarding: "run".into(),
            note: "group web: batch 3 of 4: web-2".into(),
            warning: false,
            count: 1,
        }));
        scene
    }

    #[test]
    fn the_view_shows_the_batch_in_flight_its_drain_and_what_holds_the_run() {
        let scene = running_scene();
        let footer = Footer {
            prompt: &Prompt::None,
            notice: None,
            colour: true,
        };
        let view = View {
            scene: &scene,
            footer: &footer,
            cluster: "prod-eu",
            now: jiff::Timestamp::now(),
        };
        let rows = rows(&view);
        let screen = rows.join("\n");
        let row = |needle: &str| {
            (rows.iter())
                .find(|r| r.contains(needle))
                .unwrap_or_else(|| panic!("no row has {needle:?}:\n{screen}"))
                .clone()
        };
        assert!(row("Rotation running: bob@ci/77").contains("lock renewed 3s ago"));
        assert!(row("Now: draining node web-2").contains("refused by budget shop/web"));
        assert!(row("Paused by alice@laptop: zone b maintenance").contains("next safe point"));
        let group = row("2/4 replaced");
        assert!(
            group.contains("web") && group.contains("batch 3 in flight: web-2"),
            "{group}"
        );
        // Half the bar is filled.
        assert_eq!(group.matches('█').count(), BAR / 2, "{group}");
        let node = row("pods left");
        assert!(
            node.contains("web-2") && node.contains("draining"),
            "{node}"
        );
        assert!(
            node.contains("2 pods left: shop/web-7, shop/cache-1"),
            "{node}"
        );
        assert!(row("waits: eviction of pod shop/web-7").contains("budget shop/web"));
        assert!(row("BatchStarted").contains("group web: batch 3 of 4"));
        assert_eq!(rows.last().unwrap().trim_end(), KEYS_HELP);
    }

    #[test]
    fn a_long_line_takes_the_rows_its_words_wrap_into() {
        assert_eq!(wrapped_rows("", 10), 1);
        assert_eq!(wrapped_rows("short", 10), 1);
        assert_eq!(wrapped_rows("twelve chars", 10), 2);
        assert_eq!(wrapped_rows("aaaa bbbb cccc dddd", 10), 2);
        assert_eq!(wrapped_rows("aaaaaaaaaaaaaaaaaaaaaaaaa", 10), 3);
    }

    #[test]
    fn the_footer_asks_for_an_abort_reason_then_confirmation() {
        let scene = running_scene();
        let mut prompt = Prompt::None;
        for c in "abad".chars() {
            prompt.key(super::super::keys::Key::Char(c));
        }
        let rows_with = |prompt: &Prompt, notice: Option<&str>| {
            let footer = Footer {
                prompt,
                notice,
                colour: false,
            };
            let view = View {
                scene: &scene,
                footer: &footer,
                cluster: "prod-eu",
                now: jiff::Timestamp::now(),
            };
            rows(&view)
        };
        let last = rows_with(&prompt, None).last().unwrap().clone();
        assert!(
            last.starts_with("Abort the rotation after its current step. Reason: bad_"),
            "{last}"
        );
        let last = rows_with(&Prompt::ConfirmAbort("bad".into()), None);
        assert!(last.last().unwrap().contains("(bad)? y aborts"), "{last:?}");
        // What a command said is shown a line each, above the keys.
        let shown = rows_with(
            &Prompt::None,
            Some("cluster a: resumed\ncluster b: resumed"),
        );
        let n = shown.len();
        assert!(shown[n - 3].starts_with("cluster a: resumed"), "{shown:?}");
        assert!(shown[n - 2].starts_with("cluster b: resumed"), "{shown:?}");
        assert_eq!(shown[n - 1].trim_end(), KEYS_HELP);
    }
}
