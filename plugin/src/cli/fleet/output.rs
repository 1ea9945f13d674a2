//! What the fleet commands print: the fleet's plan as a table, and a run's events and its
//! clusters' lines.

use crate::duration::human_duration;
use crate::fleet::{FleetEvent, FleetOutput};
use crate::plan::fleet::{ClusterPlan, FleetPlan, FleetStep};
use crate::policy::fleet::Fleet;

pub(super) fn when(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds).map_or_else(|_| seconds.to_string(), |t| t.to_string())
}

pub(super) fn print_plan(fleet: &Fleet, plan: &FleetPlan) {
    let clusters = fleet.clusters().count();
    println!(
        "Fleet {} ({}): {} stage(s), {clusters} cluster(s)",
        fleet.name,
        fleet.source,
        fleet.stages.len()
    );
    if !plan.finished.is_empty() {
        println!("Finished by an earlier run: {}", plan.finished.join(", "));
    }
    println!("{:<12} {:<22} WHAT", "STAGE", "AT");
    for step in &plan.steps {
        let (stage, at, what) = match step {
            FleetStep::Gate {
                stage,
                at,
                verdict,
                by,
            } => (stage, at, format!("gate before-stage: {verdict} ({by})")),
            FleetStep::Cluster {
                stage,
                cluster,
                at,
                plan,
            } => (stage, at, describe_cluster(cluster, plan)),
            FleetStep::Soak { stage, at, until } => (
                stage,
                at,
                format!(
                    "soak {} (until {})",
                    human_duration(until - at),
                    when(*until)
                ),
            ),
        };
        println!("{stage:<12} {:<22} {what}", when(*at));
    }
    for warning in &plan.warnings {
        println!("warning: {warning}");
    }
    match (&plan.stopped, plan.seconds) {
        (Some(why), _) => println!("Stops: {why}"),
        (None, Some(seconds)) => println!(
            "Estimate: about {}, ends about {}",
            human_duration(seconds as i64),
            when(plan.steps.first().map_or(0, FleetStep::at) + seconds as i64)
        ),
        (None, None) => println!("Estimate: none (a cluster's plan gave none)"),
    }
    println!(
        "Each cluster's plan in full: kubectl rollout-ext --context CONTEXT nodes … (or -o json)"
    );
}

/// One line of a cluster's plan: its groups, nodes and batches, and its estimate.
fn describe_cluster(cluster: &str, planned: &ClusterPlan) -> String {
    let groups = planned.plan["groups"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let nodes: usize = (groups.iter())
        .filter_map(|g| g["instances"].as_array())
        .flatten()
        .filter(|i| i["update"].as_bool() == Some(true))
        .count();
    let batches: usize = (groups.iter())
        .filter_map(|g| g["batches"].as_array())
        .map(Vec::len)
        .sum();
    let estimate = match planned.seconds {
        Some(s) => format!(", about {}", human_duration(s as i64)),
        None => String::new(),
    };
    let stops = match &planned.stopped {
        Some(why) => format!("; its plan stops: {why}"),
        None => String::new(),
    };
    format!(
        "cluster {cluster}: {nodes} node(s) to replace in {batches} batch(es) over {} group(s){estimate}{stops}",
        groups.len()
    )
}

/// Prints a fleet run's events and its clusters' lines: tables as `[context] line`, JSON lines
/// with the cluster added.
pub(super) struct Printer {
    pub json: bool,
}

impl FleetOutput for Printer {
    fn event(&self, event: &FleetEvent) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string(event).expect("an event serialises")
            );
            return;
        }
        let line = match event {
            FleetEvent::FleetStarted {
                fleet,
                stages,
                clusters,
            } => format!("fleet {fleet}: {stages} stage(s), {clusters} cluster(s)"),
            FleetEvent::FleetResumed { cluster, state } => {
                format!("cluster {cluster}: an earlier run recorded it {state}")
            }
            FleetEvent::AbortWithdrawn { cluster, by } => {
                format!("cluster {cluster}: withdrew the abort {by} recorded; resuming")
            }
            FleetEvent::StageGate {
                stage,
                attempt,
                verdict,
                decided_by,
            } => format!(
                "stage {stage}: gate before-stage (attempt {attempt}): {verdict} ({decided_by})"
            ),
            FleetEvent::ClusterStarted { stage, cluster } => {
                format!("stage {stage}: cluster {cluster} started")
            }
            FleetEvent::ClusterEnded {
                stage,
                cluster,
                outcome,
                message,
                ..
            } => match message {
                Some(m) => format!("stage {stage}: cluster {cluster} {outcome}: {m}"),
                None => format!("stage {stage}: cluster {cluster} {outcome}"),
            },
            FleetEvent::Soaking { stage, until } => format!("stage {stage}: soaking until {until}"),
            FleetEvent::FleetStopped { message } => format!("fleet stopped: {message}"),
            FleetEvent::FleetFinished { set_aside } if set_aside.is_empty() => {
                "fleet finished: every cluster rotated".into()
            }
            FleetEvent::FleetFinished { set_aside } => format!(
                "fleet finished, with nodes set aside in {}",
                set_aside.join(", ")
            ),
            FleetEvent::Warning { message } => format!("warning: {message}"),
        };
        println!("{line}");
    }

    fn cluster_line(&self, cluster: &str, line: &str, stderr: bool) {
        if stderr {
            eprintln!("[{cluster}] {line}");
            return;
        }
        if !self.json {
            println!("[{cluster}] {line}");
            return;
        }
        // JSON lines stay JSON lines: an event gains the cluster, any other line is wrapped.
        let event = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(serde_json::Value::Object(mut event)) => {
                event.insert("cluster".into(), cluster.into());
                serde_json::Value::Object(event)
            }
            _ => serde_json::json!({"event": "output", "cluster": cluster, "line": line}),
        };
        println!("{event}");
    }
}
