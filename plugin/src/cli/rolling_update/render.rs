//! The one way every rolling update's plan is printed: warnings first, then JSON or YAML as
//! they are, or a table of a heading, a row a step (the flow's own columns and a note of what
//! the hooks decided), what follows the last step, the shadow hooks' lines, and where a gate
//! stops the update.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Failure, OutputFormat, RollingUpdateArgs, output};
use crate::cli::KubeFlags;
use crate::cli::timeline::{self, Bar, Fact, Row as TimelineRow, Timeline};
use crate::plan::estimate::Estimate;
use crate::plan::rolling_update::planning::StepDecisions;
use crate::plan::shadow::ShadowDecision;
use crate::policy::Policy;

/// One step of a plan as its row shows it.
pub(super) struct Row<'a> {
    /// The flow's own columns.
    pub cells: Vec<String>,
    pub decisions: &'a StepDecisions,
    pub canary: bool,
}

/// A rolling update's plan as its table shows it.
pub(super) struct Table<'a> {
    pub heading: String,
    /// The titles of the flow's own columns (between STEP and NOTE).
    pub columns: &'static [&'static str],
    pub rows: Vec<Row<'a>>,
    /// Lines that follow the table, before the shadow hooks'.
    pub after: Vec<String>,
    /// What shadow hooks said that is about no one step.
    pub shadow: &'a [ShadowDecision],
    /// Why a gate stops the update, if one does.
    pub stopped: Option<&'a str>,
    /// What follows the last step when no gate stops the update.
    pub then: String,
    /// How long the update likely takes.
    pub estimate: Option<&'a Estimate>,
}

/// Where a plan goes (`-o`, `--output-file`), and what a picture of it says it rests on.
#[derive(Clone, Copy)]
pub(super) struct Destination<'a> {
    pub kube: &'a KubeFlags,
    pub args: &'a RollingUpdateArgs,
    pub policy: &'a Policy,
}

/// Prints `plan`'s `warnings`, then the plan as `-o` asks: as it is, as its `table`, or as the
/// picture of its table's steps.
pub(super) fn print<P: Serialize>(
    plan: &P,
    warnings: &[String],
    to: Destination<'_>,
    table: impl FnOnce(&P) -> Table<'_>,
) -> Result<(), Failure> {
    for w in warnings {
        crate::report::log(crate::report::Level::Warn, w);
    }
    let args = to.args;
    if let Some(picture) = args.output.picture() {
        let snapshot = args.from_snapshot.as_deref();
        let facts = timeline::plan_facts(to.kube, snapshot, to.policy);
        let drawn = table(plan).timeline(args.plan_time(), facts, warnings);
        return timeline::write_out(&drawn.draw(picture), args.output_file.as_deref());
    }
    match args.output.text() {
        format @ (OutputFormat::Json | OutputFormat::Yaml) => {
            super::super::print_structured(plan, format)
        }
        OutputFormat::Table | OutputFormat::Wide => {
            print!("{}", table(plan).render());
            Ok(())
        }
    }
}

impl Table<'_> {
    /// The steps on a time axis: a row each, from where its estimate puts it; `now` when the
    /// plan has no estimate to start from.
    fn timeline(&self, now: i64, facts: Vec<Fact>, warnings: &[String]) -> Timeline {
        let mut header = vec![String::from("STEP")];
        header.extend(self.columns.iter().map(|c| c.to_string()));
        let rows: Vec<TimelineRow> = (self.rows.iter().enumerate())
            .map(|(i, row)| {
                let d = row.decisions;
                let mut waits = Vec::new();
                if let Some(p) = &d.pause {
                    waits.push((p.seconds, format!("pause: {} [{}]", p.reason, p.decided_by)));
                }
                if let Some(g) = &d.gate {
                    let seconds = u64::from(g.seconds.unwrap_or(0));
                    waits.push((seconds, format!("gate: {}", output::gate_text(g))));
                }
                let bar = d.estimate.as_ref().and_then(|e| Bar::timed(e, waits, None));
                let bar = bar.map(|mut bar| {
                    bar.label = format!("step {}", i + 1);
                    bar.canary = row.canary;
                    bar.details = (header[1..].iter().zip(&row.cells))
                        .map(|(column, cell)| Fact::new(column.to_lowercase(), cell.clone()))
                        .collect();
                    let said = note(row.canary, d);
                    if !said.is_empty() {
                        bar.details.push(Fact::new("note", said));
                    }
                    bar
                });
                TimelineRow {
                    label: format!("step {}: {}", i + 1, row.cells.join(" ")),
                    lead: None,
                    bars: bar.into_iter().collect(),
                    stops: None,
                }
            })
            .collect();
        let e = self.estimate;
        let end = e
            .and_then(|e| e.ends_at.as_deref())
            .and_then(timeline::parse_instant);
        let start = match (end, e) {
            (Some(end), Some(e)) => end - i64::try_from(e.seconds).unwrap_or(0),
            _ => now,
        };
        let end = end.unwrap_or(now);
        let mut facts = facts;
        facts.push(Fact::new("Then", self.then.clone()));
        if let Some(e) = e {
            let said = output::run_estimate(e);
            let said = said.strip_prefix("Estimate: ").unwrap_or(&said).to_string();
            facts.push(Fact::new("Estimate", said));
        }
        facts.extend(
            self.after
                .iter()
                .map(|line| Fact::new("Order", line.clone())),
        );
        Timeline {
            title: self.heading.clone(),
            now: start,
            end,
            end_p90: start
                + e.map_or(0, |e| {
                    i64::try_from(e.p90_seconds.max(e.seconds)).unwrap_or(0)
                }),
            basis: e.map(|e| e.basis.clone()).unwrap_or_default(),
            rows,
            facts,
            warnings: warnings.to_vec(),
            stopped: self.stopped.map(str::to_string),
        }
    }

    fn render(&self) -> String {
        let mut out = format!("{}\n", self.heading);
        let mut header = vec!["STEP".to_string()];
        header.extend(self.columns.iter().map(|c| c.to_string()));
        header.push("NOTE".into());
        let mut rows = vec![header];
        for (i, row) in self.rows.iter().enumerate() {
            let mut cells = vec![(i + 1).to_string()];
            cells.extend(row.cells.iter().cloned());
            cells.push(note(row.canary, row.decisions));
            rows.push(cells);
        }
        out.push_str(&output::align(&rows));
        for line in &self.after {
            let _ = writeln!(out, "{line}");
        }
        let mut shadow = String::new();
        output::shadow_lines(&mut shadow, "  ", self.shadow);
        for (i, row) in self.rows.iter().enumerate() {
            if !row.decisions.shadow.is_empty() {
                let _ = writeln!(shadow, "  step {}:", i + 1);
                output::shadow_lines(&mut shadow, "    ", &row.decisions.shadow);
            }
        }
        if !shadow.is_empty() {
            let _ = write!(out, "Shadow hooks (reported, never acted on):\n{shadow}");
        }
        let _ = match self.stopped {
            Some(reason) => writeln!(out, "Stops: {reason}"),
            None => writeln!(out, "Then: {}", self.then),
        };
        if let Some(e) = self.estimate {
            let _ = writeln!(out, "{}", output::run_estimate(e));
        }
        out
    }
}

/// A step's note: canary, the batching hook's reason for its size, the pause before it, the
/// gates' verdict after it.
fn note(canary: bool, decisions: &StepDecisions) -> String {
    let mut note = Vec::new();
    if canary {
        note.push("canary".to_string());
    }
    if let Some(reason) = &decisions.size_reason {
        note.push(format!("size: {reason}"));
    }
    if let Some(p) = &decisions.pause {
        note.push(format!(
            "after a {}s pause ({}): {}",
            p.seconds, p.decided_by, p.reason
        ));
    }
    if let Some(g) = &decisions.gate {
        let reason = g
            .reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        note.push(format!("gate {} ({}){reason}", g.verdict, g.decided_by));
    }
    note.join("; ")
}
