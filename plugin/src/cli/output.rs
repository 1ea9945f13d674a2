//! Renders a plan: an aligned table for people (`-o table|wide`), JSON or YAML for programs.

use std::fmt::Write;

use super::{Failure, OutputFormat, print_structured};
use crate::duration::human_duration;
use crate::plan::estimate::Estimate;
use crate::plan::forecast::Forecast;
use crate::plan::health::listed;
use crate::plan::hook::DecidedBy;
use crate::plan::shadow::ShadowDecision;
use crate::plan::{BatchPlan, GateStep, GroupPlan, Plan};

pub fn print_plan(plan: &Plan, format: OutputFormat) -> Result<(), Failure> {
    match format {
        OutputFormat::Json | OutputFormat::Yaml => print_structured(plan, format),
        OutputFormat::Table | OutputFormat::Wide => {
            print!("{}", render_table(plan, format == OutputFormat::Wide));
            Ok(())
        }
    }
}

/// Aligns rows into columns separated by two spaces; the last column is not padded.
pub fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn render_table(plan: &Plan, wide: bool) -> String {
    let mut out = String::new();
    let mut rows = vec![
        [
            "GROUP",
            "ROLE",
            "SIZE",
            "UP-TO-DATE",
            "SELECTED",
            "MAX-SURGE",
            "MAX-UNAVAILABLE",
            "ESTIMATE",
            "BATCHES",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for g in &plan.groups {
        rows.push(vec![
            g.group.name.clone(),
            g.group.role.as_str().into(),
            g.group.size.to_string(),
            g.group.up_to_date.to_string(),
            g.group.selected.to_string(),
            g.group.max_surge.to_string(),
            g.group.max_unavailable.to_string(),
            (g.estimate.as_ref())
                .filter(|_| !g.batches.is_empty())
                .map_or_else(|| "-".into(), about),
            batches_summary(g),
        ]);
    }
    if plan.groups.is_empty() {
        out.push_str("No instance groups matched.\n");
    } else {
        out.push_str(&align(&rows));
    }
    if let Some(e) = &plan.estimate {
        let _ = writeln!(out, "{}", run_estimate(e));
    }

    for g in plan.groups.iter().filter(|g| {
        !g.batches.is_empty() || g.gate.is_some() || g.aborted.is_some() || !g.shadow.is_empty()
    }) {
        group_steps(&mut out, g, wide);
    }

    if wide {
        let mut rows = vec![
            [
                "GROUP",
                "INSTANCE",
                "ZONE",
                "UPDATE",
                "PODS",
                "DECIDED-BY",
                "REASON",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for g in &plan.groups {
            for i in &g.instances {
                rows.push(vec![
                    g.group.name.clone(),
                    i.name.clone(),
                    i.zone.clone().unwrap_or_else(|| "-".into()),
                    if i.update { "yes".into() } else { "no".into() },
                    i.pods.to_string(),
                    i.decided_by.to_string(),
                    i.reason.clone(),
                ]);
            }
        }
        out.push('\n');
        out.push_str(&align(&rows));
    }

    if let Some(u) = &plan.undrainable {
        let _ = writeln!(
            out,
            "\nA node whose drain cannot finish is set aside (drain.undrainable: {}, at most {} node(s); then the run stops): it stays cordoned with its pods, is not terminated, and the run ends with exit code 6.",
            u.action, u.max_quarantined
        );
    }
    if !plan.modules.is_empty() {
        out.push_str("\nHook modules from registries:\n");
        for m in &plan.modules {
            let _ = writeln!(out, "  - {}: {} is {}", m.hook, m.reference, m.digest);
        }
    }
    if let Some(stopped) = &plan.stopped {
        let _ = writeln!(out, "\nThe run would stop: {stopped}");
    }
    if !plan.warnings.is_empty() {
        out.push_str("\nWarnings:\n");
        for w in &plan.warnings {
            let _ = writeln!(out, "  - {w}");
        }
    }
    out
}

/// A group's steps: the before-group gate, then each batch with the pause before it and the
/// gate on it, and under each what shadow hooks would have decided.
fn group_steps(out: &mut String, g: &GroupPlan, wide: bool) {
    let _ = writeln!(
        out,
        "\n{} ({}), concurrency {}:",
        g.group.name,
        g.group.role.as_str(),
        g.concurrency
    );
    if let Some(gate) = &g.gate {
        let _ = writeln!(out, "  before the group: {}", gate_text(gate));
    }
    shadow_lines(out, "  ", &g.shadow);
    // Batch rows are aligned; pauses and gates hang under their batch.
    let rows: Vec<Vec<String>> = g
        .batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            vec![
                format!("  {}", i + 1),
                batch_kind(b),
                b.instances.join(", "),
                format!("drain: {}", Forecast::word(b.forecast.as_ref())),
                match (&b.estimate, wide) {
                    (Some(e), true) => about(e),
                    _ => String::new(),
                },
                format!("[{}]", batch_credit(g, b, wide)),
            ]
        })
        .collect();
    for (b, line) in g.batches.iter().zip(align(&rows).lines()) {
        if let Some(p) = &b.pause {
            let _ = writeln!(
                out,
                "     pause {}: {} [{}]",
                human_duration(p.seconds as i64),
                p.reason,
                p.decided_by
            );
        }
        let _ = writeln!(out, "{line}");
        if let (true, Some(f)) = (wide, &b.forecast) {
            forecast_lines(out, f);
        }
        if !b.moves_runner.is_empty() {
            let _ = writeln!(
                out,
                "     moves the runner of a run handed to the cluster (its Job's next pod resumes it): {}",
                b.moves_runner.join(", ")
            );
        }
        if !b.likely_set_aside.is_empty() {
            let _ = writeln!(
                out,
                "     likely set aside (drain blocked; cordoned, not terminated): {}",
                b.likely_set_aside.join(", ")
            );
        }
        for gate in b.gate.iter().chain(&b.after_gate) {
            let _ = writeln!(
                out,
                "     gate {}: {}",
                gate.phase.as_str(),
                gate_text(gate)
            );
        }
        if let Some(s) = b.soak_seconds {
            let soak = human_duration(i64::from(s));
            let _ = writeln!(out, "     soak {soak}, then validate again");
        }
        shadow_lines(out, "     ", &b.shadow);
    }
    if let Some(reason) = &g.aborted {
        let _ = writeln!(out, "  stops here: {reason}");
    }
}

/// Each budget in a batch's way, with the pods it covers, then the pods that find no room and
/// the pods the drain waits for (`-o wide`).
fn forecast_lines(out: &mut String, f: &Forecast) {
    let stalls = f.blocks.iter().map(|s| ("blocks", s));
    for (word, s) in stalls.chain(f.waits.iter().map(|s| ("waits", s))) {
        let _ = writeln!(
            out,
            "     drain {word} on PodDisruptionBudget {}: {} ({})",
            s.pdb,
            s.reason,
            listed(&s.pods)
        );
    }
    for p in &f.pending {
        let _ = writeln!(out, "     pending {}: {}", listed(&p.pods), p.reason);
    }
    if !f.do_not_disrupt.is_empty() {
        let _ = writeln!(
            out,
            "     drain holds for pods that ask not to be disrupted, until they go away: {}",
            listed(&f.do_not_disrupt)
        );
    }
    if !f.wait_for_completion.is_empty() {
        let _ = writeln!(
            out,
            "     drain holds for pods that run to completion, until they complete: {}",
            listed(&f.wait_for_completion)
        );
    }
}

/// `select: hook/x (shadow) would …; agrees`, one line each.
pub fn shadow_lines(out: &mut String, indent: &str, said: &[ShadowDecision]) {
    for s in said {
        let phase = s
            .phase
            .map(|p| format!(" {}", p.as_str()))
            .unwrap_or_default();
        let _ = writeln!(out, "{indent}{}{phase}: {}", s.point, s.describe());
    }
}

fn batches_summary(g: &GroupPlan) -> String {
    if g.disabled {
        return "disabled".into();
    }
    if g.batches.is_empty() {
        return "0".into();
    }
    let sizes: Vec<String> = g
        .batches
        .iter()
        .map(|b| {
            let mark = match (b.surge, b.canary) {
                (true, true) => "+c",
                (true, false) => "+",
                (false, true) => "c",
                (false, false) => "",
            };
            format!("{}{mark}", b.instances.len())
        })
        .collect();
    format!("{} ({})", g.batches.len(), sizes.join(","))
}

pub fn batch_kind(b: &BatchPlan) -> String {
    match (b.surge, b.canary) {
        (true, true) => "surge (canary)".into(),
        (true, false) => "surge".into(),
        (false, true) => "canary".into(),
        (false, false) => "replace".into(),
    }
}

/// Who sized the batch and why (the built-in's reason in wide output only), and who ordered its
/// instances when a hook did.
pub fn batch_credit(g: &GroupPlan, b: &BatchPlan, wide: bool) -> String {
    let mut order: Vec<&DecidedBy> = b
        .instances
        .iter()
        .filter_map(|name| g.instances.iter().find(|i| &i.name == name))
        .map(|i| &i.decided_by)
        .filter(|by| **by != DecidedBy::BuiltIn)
        .collect();
    order.dedup();
    let mut credit = format!("size: {}", b.decided_by);
    if (wide || b.decided_by != DecidedBy::BuiltIn) && !b.size_reason.is_empty() {
        let _ = write!(credit, " ({})", b.size_reason);
    }
    if !order.is_empty() {
        let names: Vec<String> = order.iter().map(ToString::to_string).collect();
        let _ = write!(credit, ", order: {}", names.join(", "));
    }
    credit
}

pub fn gate_text(gate: &GateStep) -> String {
    let mut text = gate.verdict.to_string();
    if let Some(s) = gate.seconds {
        let _ = write!(text, " {}", human_duration(i64::from(s)));
    }
    if let Some(r) = &gate.reason {
        let _ = write!(text, ": {r}");
    }
    let _ = write!(text, " [{}]", gate.decided_by);
    text
}

/// An estimate in a few characters: `~6m40s`, or `~6m40s-9m` when its 90th percentile is later.
fn about(e: &Estimate) -> String {
    let likely = human_duration(e.seconds as i64);
    match e.p90_seconds > e.seconds {
        true => format!("~{likely}-{}", human_duration(e.p90_seconds as i64)),
        false => format!("~{likely}"),
    }
}

/// The run's estimate under the table: how long, until when, what of it is foreseen waiting,
/// and what it rests on.
pub fn run_estimate(e: &Estimate) -> String {
    let mut text = format!("Estimate: about {}", human_duration(e.seconds as i64));
    if e.p90_seconds > e.seconds {
        let _ = write!(
            text,
            " (up to {} at p90)",
            human_duration(e.p90_seconds as i64)
        );
    }
    if let Some(ends) = &e.ends_at {
        let _ = write!(text, ", ends about {ends}");
    }
    if e.foreseen_wait_seconds > 0 {
        let _ = write!(
            text,
            "; {} of it is waiting the plan foresees (windows' pauses, gates' waits, soaks)",
            human_duration(e.foreseen_wait_seconds as i64)
        );
    }
    let _ = write!(text, " [{}]", e.basis);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let rows = vec![
            vec!["A".to_string(), "BB".into(), "C".into()],
            vec!["long".to_string(), "x".into(), "last column free".into()],
        ];
        assert_eq!(align(&rows), "A     BB  C\nlong  x   last column free\n");
    }
}
