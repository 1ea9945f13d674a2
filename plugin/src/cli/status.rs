//! `status`: what the Lease and the nodes say about an ongoing or interrupted rotation, readable
//! from any machine.

use super::{Failure, KubeFlags, OutputFormat, output, print_structured, tokio_runtime};
use crate::cluster::controls::Controls;
use crate::cluster::drain::QuarantineRecord;

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    lock: Option<crate::cluster::lock::LockStatus>,
    /// What holds the running rotation now (or held it when it stopped), and since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    holding: Option<Holding>,
    /// Standing pause and abort requests.
    controls: Controls,
    /// Nodes carrying the rotation's annotations: name → phase (or "detached").
    nodes: std::collections::BTreeMap<String, String>,
    /// Nodes a run set aside (their drain could not finish): name → why and since when.
    quarantined: std::collections::BTreeMap<String, QuarantineRecord>,
    /// The run's estimate of what is left, as it last said it (its `estimate` event).
    #[serde(skip_serializing_if = "Option::is_none")]
    estimate: Option<EstimateNote>,
    /// A batch stage running past this cluster's history, while it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    slow: Option<String>,
}

/// The run's last `estimate` event, as it recorded it on the lock.
#[derive(serde::Serialize, serde::Deserialize)]
struct EstimateNote {
    elapsed_seconds: u64,
    remaining_seconds: u64,
    remaining_p90_seconds: u64,
    ends_at: Option<String>,
    basis: String,
}

impl EstimateNote {
    fn describe(&self) -> String {
        crate::events::Event::Estimate {
            elapsed_seconds: self.elapsed_seconds,
            remaining_seconds: self.remaining_seconds,
            remaining_p90_seconds: self.remaining_p90_seconds,
            ends_at: self.ends_at.clone(),
            basis: self.basis.clone(),
        }
        .describe()
    }
}

/// What holds a rotation, as the executor recorded it on the lock.
#[derive(serde::Serialize, serde::Deserialize)]
struct Holding {
    what: String,
    /// RFC 3339.
    since: String,
}

pub fn run(kube: &KubeFlags, format: OutputFormat) -> Result<(), Failure> {
    let runtime = tokio_runtime()?;
    let status = runtime.block_on(async {
        let cluster = crate::cluster::Cluster::connect(&kube.connect_options()?).await?;
        let lock = cluster.lock_status().await?;
        let snapshot = cluster.snapshot_nodes().await?;
        let nodes = snapshot
            .nodes
            .iter()
            .filter_map(|n| {
                let phase = n.annotations.get(crate::keys::PHASE).cloned();
                let detached = n.annotations.contains_key(crate::keys::DETACHED);
                match (phase, detached) {
                    (_, true) => Some((n.name.clone(), "detached".to_string())),
                    (Some(p), false) => Some((n.name.clone(), p)),
                    (None, false) => None,
                }
            })
            .collect();
        let quarantined = (snapshot.nodes.iter())
            .filter_map(|n| Some((n.name.clone(), QuarantineRecord::of(n)?)))
            .collect();
        let holding = lock
            .as_ref()
            .and_then(|l| l.state.get(crate::keys::HOLDING))
            .and_then(|h| serde_json::from_str(h).ok());
        let controls = lock
            .as_ref()
            .map(|l| Controls::from_annotations(&l.state))
            .unwrap_or_default();
        let state = |key: &str| lock.as_ref().and_then(|l| l.state.get(key)).cloned();
        let estimate = state(crate::keys::ESTIMATE).and_then(|e| serde_json::from_str(&e).ok());
        let slow = state(crate::keys::SLOW);
        Ok::<_, Failure>(Status {
            lock,
            holding,
            controls,
            nodes,
            quarantined,
            estimate,
            slow,
        })
    })?;
    match format {
        OutputFormat::Json | OutputFormat::Yaml => print_structured(&status, format),
        _ => {
            let left_state = status.lock.as_ref().is_some_and(|l| {
                l.state
                    .keys()
                    .any(|k| k != crate::keys::PAUSE && k != crate::keys::ABORT)
            });
            // A Lease that carries only an operator's request is no rotation.
            let run = status
                .lock
                .as_ref()
                .filter(|l| !l.holder.is_empty() || left_state);
            match run {
                None => println!("No rotation is running, and none was left unfinished."),
                Some(l) if l.holder.is_empty() => println!(
                    "No rotation is running; an unfinished one left its state (run the same command again to resume)."
                ),
                Some(l) => println!(
                    "Rotation running: {} (lock renewed {} ago)",
                    l.holder,
                    l.renewed_seconds_ago
                        .map(crate::duration::human_duration)
                        .unwrap_or_else(|| "never".into())
                ),
            }
            if let (Some(h), Some(l)) = (&status.holding, &status.lock) {
                let ago = h
                    .since
                    .parse::<jiff::Timestamp>()
                    .map(|t| jiff::Timestamp::now().duration_since(t).as_secs())
                    .map_or_else(|_| h.since.clone(), crate::duration::human_duration);
                let when = if l.holder.is_empty() {
                    "It stopped while"
                } else {
                    "Now"
                };
                println!("  {when}: {} (for {ago})", h.what);
            }
            let running = status.lock.as_ref().is_some_and(|l| !l.holder.is_empty());
            if let (Some(e), true) = (&status.estimate, running) {
                println!("  Estimate: {}", e.describe());
            }
            if let Some(slow) = &status.slow {
                println!("  Slow: {slow}");
            }
            if let Some(pause) = &status.controls.pause {
                let who = if status.lock.as_ref().is_some_and(|l| !l.holder.is_empty()) {
                    "the run holds at its next safe point"
                } else {
                    "the next run waits before it changes anything"
                };
                println!(
                    "  Paused {} ({who}; `kubectl rollout-ext resume` continues)",
                    pause.describe()
                );
            }
            if let Some(abort) = &status.controls.abort {
                println!(
                    "  Abort requested {} (the run stops after its current step)",
                    abort.describe()
                );
            }
            if let Some(l) = &status.lock {
                for (key, value) in &l.state {
                    if let Some(group) = key.strip_prefix("rollout-ext.io/expected.") {
                        println!("  group {group}: {value} Ready nodes expected");
                    }
                }
            }
            if !status.nodes.is_empty() {
                let mut rows = vec![vec!["NODE".to_string(), "PHASE".to_string()]];
                rows.extend(status.nodes.iter().map(|(n, p)| vec![n.clone(), p.clone()]));
                print!("{}", output::align(&rows));
            }
            if !status.quarantined.is_empty() {
                println!(
                    "Set aside, cordoned with their pods (the same command tries them again first; `kubectl rollout-ext nodes --release-quarantined --yes` uncordons them):"
                );
                for (node, r) in &status.quarantined {
                    println!("  {node} since {}: {}", r.at, r.reason);
                }
            }
            Ok(())
        }
    }
}
