//! The one way every rolling update's plan is printed: warnings first, then JSON or YAML as
//! they are, or a table of a heading, a row a step (the flow's own columns and a note of what
//! the hooks decided), what follows the last step, the shadow hooks' lines, and where a gate
//! stops the update.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Failure, OutputFormat, output};
use crate::plan::estimate::Estimate;
use crate::plan::rolling_update::planning::StepDecisions;
use crate::plan::shadow::ShadowDecision;

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

/// Prints `plan`'s `warnings`, then the plan as `format` asks: as it is, or as its `table`.
pub(super) fn print<P: Serialize>(
    plan: &P,
    warnings: &[String],
    format: OutputFormat,
    table: impl FnOnce(&P) -> Table<'_>,
) -> Result<(), Failure> {
    for w in warnings {
        crate::report::log(crate::report::Level::Warn, w);
    }
    match format {
        OutputFormat::Json | OutputFormat::Yaml => super::super::print_structured(plan, format),
        OutputFormat::Table | OutputFormat::Wide => {
            print!("{}", table(plan).render());
            Ok(())
        }
    }
}

impl Table<'_> {
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
