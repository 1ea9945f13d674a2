//! `status`: what the Lease and the nodes say about an ongoing or interrupted rotation, readable
//! from any machine; with `--watch`, followed live (`live`).

pub(super) mod keys;
mod live;
pub(super) mod scene;
pub(super) mod screen;
pub(super) mod terminal;

use super::{Failure, KubeFlags, OutputFormat, output, print_structured, tokio_runtime};
use crate::cluster::controls::Controls;
use crate::cluster::drain::QuarantineRecord;
use crate::rotate::progress::RunProgress;
use scene::{EstimateNote, Holding, LeaseRecords};

pub use live::watch;

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
    /// How far the running rotation is, per group.
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<RunProgress>,
    /// A batch stage running past this cluster's history, while it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    slow: Option<String>,
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
        let records = LeaseRecords(lock.as_ref());
        Ok::<_, Failure>(Status {
            holding: records.holding(),
            controls: records.controls(),
            estimate: records.estimate(),
            progress: records.progress(),
            slow: records.slow(),
            nodes,
            quarantined,
            lock,
        })
    })?;
    match format {
        OutputFormat::Json | OutputFormat::Yaml => print_structured(&status, format),
        _ => {
            let records = LeaseRecords(status.lock.as_ref());
            for line in records.lines(jiff::Timestamp::now()) {
                println!("{line}");
            }
            for (group, expected) in records.expected() {
                println!("  group {group}: {expected} Ready nodes expected");
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
