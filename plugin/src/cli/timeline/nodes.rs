//! A node rotation's plan as a timeline: a row per group, a bar per batch.

use super::{Bar, Fact, Row, Stretch, Timeline};
use crate::cli::output::{batch_credit, batch_kind, gate_text};
use crate::duration::human_duration;
use crate::plan::forecast::Forecast;
use crate::plan::health::listed;
use crate::plan::{BatchPlan, GateStep, GroupPlan, Plan};

/// The timeline of `plan`, made for `now`, its header saying `facts`.
pub fn of_node_plan(plan: &Plan, now: i64, facts: Vec<Fact>) -> Timeline {
    let rows: Vec<Row> = (plan.groups.iter())
        .filter(|g| !g.batches.is_empty() || g.aborted.is_some())
        .map(group_row)
        .collect();
    let run = plan.estimate.as_ref();
    let end = (run.and_then(|e| e.ends_at.as_deref()))
        .and_then(super::parse_instant)
        .unwrap_or(now);
    let start = end - run.map_or(0, |e| super::secs(e.seconds));
    let mut facts = facts;
    if let Some(e) = run {
        let said = crate::cli::output::run_estimate(e);
        let said = said.strip_prefix("Estimate: ").unwrap_or(&said).to_string();
        facts.push(Fact::new("Estimate", said));
    }
    Timeline {
        title: "Node rotation plan".into(),
        now,
        end,
        end_p90: start + run.map_or(0, |e| super::secs(e.p90_seconds.max(e.seconds))),
        basis: run.map(|e| e.basis.clone()).unwrap_or_default(),
        rows,
        facts,
        warnings: plan.warnings.clone(),
        stopped: plan.stopped.clone(),
    }
}

fn group_row(g: &GroupPlan) -> Row {
    let bars: Vec<Bar> = (g.batches.iter().enumerate())
        .filter_map(|(i, b)| batch_bar(g, i, b))
        .collect();
    let lead = (g.gate.as_ref()).and_then(|gate| {
        let seconds = i64::from(gate.seconds?);
        let first = bars.first()?.from;
        Some(Stretch {
            from: first - seconds,
            to: first,
            reason: format!("before the group: {}", gate_text(gate)),
        })
    });
    Row {
        label: g.group.name.clone(),
        lead,
        bars,
        stops: g.aborted.clone(),
    }
}

fn batch_bar(g: &GroupPlan, index: usize, b: &BatchPlan) -> Option<Bar> {
    let mut waits = Vec::new();
    if let Some(p) = &b.pause {
        let why = format!("pause: {} [{}]", p.reason, p.decided_by);
        waits.push((p.seconds, why));
    }
    for gate in [&b.gate, &b.after_gate].into_iter().flatten() {
        let seconds = u64::from(gate.seconds.unwrap_or(0));
        waits.push((
            seconds,
            format!("gate {}: {}", gate.phase.as_str(), gate_text(gate)),
        ));
    }
    let mut bar = Bar::timed(b.estimate.as_ref()?, waits, b.soak_seconds)?;
    bar.label = match (b.canary, b.surge) {
        (_, true) => format!("{} {}", batch_kind(b), index + 1),
        (true, false) => format!("canary {}", index + 1),
        (false, false) => format!("batch {}", index + 1),
    };
    bar.canary = b.canary;
    bar.drain = Forecast::word(b.forecast.as_ref());
    bar.details = details(g, b);
    Some(bar)
}

/// What the page says of a batch: its nodes, who sized and ordered it, the gates' answers, its
/// estimate and what the forecast sees in its drain's way.
fn details(g: &GroupPlan, b: &BatchPlan) -> Vec<Fact> {
    let mut facts = vec![
        Fact::new("nodes", b.instances.join(", ")),
        Fact::new("decided", batch_credit(g, b, true)),
    ];
    if let Some(e) = &b.estimate {
        let mut about = format!("about {}", human_duration(super::secs(e.seconds)));
        if e.p90_seconds > e.seconds {
            about += &format!(
                ", up to {} at p90",
                human_duration(super::secs(e.p90_seconds))
            );
        }
        if let Some(ends) = &e.ends_at {
            about += &format!(", ends about {ends}");
        }
        facts.push(Fact::new("estimate", format!("{about} [{}]", e.basis)));
    }
    let gates: Vec<&GateStep> = [&b.gate, &b.after_gate].into_iter().flatten().collect();
    for gate in gates {
        facts.push(Fact::new(
            format!("gate {}", gate.phase.as_str()),
            gate_text(gate),
        ));
    }
    if let Some(s) = b.soak_seconds {
        facts.push(Fact::new("soak", human_duration(i64::from(s))));
    }
    facts.push(Fact::new("drain", Forecast::word(b.forecast.as_ref())));
    if let Some(f) = &b.forecast {
        let stalls = (f.blocks.iter().map(|s| ("blocks on", s)))
            .chain(f.waits.iter().map(|s| ("waits on", s)));
        for (word, s) in stalls {
            let text = format!(
                "PodDisruptionBudget {}: {} ({})",
                s.pdb,
                s.reason,
                listed(&s.pods)
            );
            facts.push(Fact::new(word, text));
        }
        for p in &f.pending {
            facts.push(Fact::new(
                "pending",
                format!("{}: {}", listed(&p.pods), p.reason),
            ));
        }
        if !f.do_not_disrupt.is_empty() {
            facts.push(Fact::new("do-not-disrupt", listed(&f.do_not_disrupt)));
        }
        if !f.wait_for_completion.is_empty() {
            facts.push(Fact::new(
                "waits for completion",
                listed(&f.wait_for_completion),
            ));
        }
    }
    if !b.likely_set_aside.is_empty() {
        facts.push(Fact::new("likely set aside", b.likely_set_aside.join(", ")));
    }
    facts
}
