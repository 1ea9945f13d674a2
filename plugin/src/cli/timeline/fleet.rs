//! A fleet's plan as a timeline: a row per cluster, its rotation a bar from when it would start
//! for its plan's estimate; a stage's soak shaded before the clusters of the next stage.

use super::{Bar, Fact, Row, Stretch, Timeline};
use crate::duration::human_duration;
use crate::plan::fleet::{FleetPlan, FleetStep};

/// The timeline of `plan` for fleet `name`, its header saying `facts`.
pub fn of_fleet_plan(name: &str, plan: &FleetPlan, facts: Vec<Fact>) -> Timeline {
    let start = plan.steps.first().map_or(0, FleetStep::at);
    let mut facts = facts;
    if !plan.finished.is_empty() {
        facts.push(Fact::new(
            "Finished by an earlier run",
            plan.finished.join(", "),
        ));
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut soak: Option<Stretch> = None;
    for step in &plan.steps {
        match step {
            FleetStep::Gate {
                stage, verdict, by, ..
            } => facts.push(Fact::new(
                format!("Gate before {stage}"),
                format!("{verdict} ({by})"),
            )),
            FleetStep::Soak { stage, at, until } => {
                soak = Some(Stretch {
                    from: *at,
                    to: *until,
                    reason: format!("soak after stage {stage}"),
                });
            }
            FleetStep::Cluster {
                stage,
                cluster,
                at,
                plan: planned,
            } => {
                let e = &planned.plan["estimate"];
                let seconds = planned.seconds.map_or(0, |s| i64::try_from(s).unwrap_or(0));
                let p90 = e["p90Seconds"].as_i64().unwrap_or(seconds).max(seconds);
                let groups = planned.plan["groups"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice);
                let batches: usize = (groups.iter())
                    .map(|g| g["batches"].as_array().map_or(0, Vec::len))
                    .sum();
                let mut details = vec![
                    Fact::new("stage", stage.clone()),
                    Fact::new("groups", groups.len().to_string()),
                    Fact::new("batches", batches.to_string()),
                ];
                details.push(Fact::new(
                    "estimate",
                    match planned.seconds {
                        Some(s) => {
                            format!("about {}", human_duration(i64::try_from(s).unwrap_or(0)))
                        }
                        None => "none: its plan gave none".into(),
                    },
                ));
                if let Some(basis) = e["basis"].as_str() {
                    details.push(Fact::new("basis", basis));
                }
                let bar = Bar {
                    label: cluster.clone(),
                    from: *at,
                    to: at + seconds,
                    to_p90: at + p90,
                    waits: Vec::new(),
                    soak: None,
                    drain: worst_drain(groups),
                    canary: false,
                    details,
                };
                rows.push(Row {
                    label: format!("{stage}/{cluster}"),
                    lead: soak.take().filter(|s| s.to <= *at),
                    bars: vec![bar],
                    stops: planned.stopped.clone(),
                });
            }
        }
    }
    let end = start + plan.seconds.map_or(0, |s| i64::try_from(s).unwrap_or(0));
    let end_p90 = (rows.iter().flat_map(|r| &r.bars))
        .map(|b| b.to_p90)
        .chain([end])
        .max()
        .unwrap_or(end);
    if plan.seconds.is_none() {
        facts.push(Fact::new("Estimate", "none (a cluster's plan gave none)"));
    }
    Timeline {
        title: format!("Fleet {name} plan"),
        now: start,
        end,
        end_p90,
        basis: "the clusters' plans".into(),
        rows,
        facts,
        warnings: plan.warnings.clone(),
        stopped: plan.stopped.clone(),
    }
}

/// The worst of its batches' drains, as the forecast words them.
fn worst_drain(groups: &[serde_json::Value]) -> &'static str {
    let forecasts = (groups.iter())
        .flat_map(|g| g["batches"].as_array().map_or(&[][..], Vec::as_slice))
        .map(|b| &b["forecast"]);
    let mut worst = "ok";
    for f in forecasts {
        let some = |key: &str| f[key].as_array().is_some_and(|a| !a.is_empty());
        if some("blocks") {
            return "blocks";
        }
        if some("waits") {
            worst = "waits";
        }
    }
    worst
}
