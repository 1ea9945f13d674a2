//! The tool's own share of a rotation: a 10-node group on a real test cluster, every configured
//! wait at zero and a fixed simulated boot time. An independent watcher records when each node
//! was cordoned and reported drained, and the simulated cloud when each termination came and
//! when its replacement turned Ready; the tool's overhead is the wall time outside those drain
//! and boot intervals.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, TestCluster};
use rollout_ext_e2e::{FAST_ROTATION, plugin_binary};
use serde_json::json;

use crate::Row;
use crate::measure::{self, show};

const GROUP: &str = "bench-rot";
const NODES: usize = 10;
const PODS_PER_NODE: i32 = 3;
const BOOT: Duration = Duration::from_secs(2);
const PHASE: &str = "rollout-ext.io/phase";

/// What the watcher saw of each node, by name.
#[derive(Default)]
struct Seen {
    cordoned: HashMap<String, SystemTime>,
    drained: HashMap<String, SystemTime>,
    ready: BTreeMap<String, SystemTime>,
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Records first sightings of cordons, drained phases and Ready nodes of the group.
async fn watch(client: kube::Client, seen: Arc<Mutex<Seen>>) {
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().labels(&format!("kops.k8s.io/instancegroup={GROUP}"));
    let mut events = watcher(api, config).applied_objects().boxed();
    while let Some(Ok(node)) = events.next().await {
        let at = SystemTime::now();
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut seen = seen.lock().unwrap();
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            seen.cordoned.entry(name.clone()).or_insert(at);
        }
        if node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PHASE))
            .map(String::as_str)
            == Some("drained")
        {
            seen.drained.entry(name.clone()).or_insert(at);
        }
        if is_ready(&node) {
            seen.ready.entry(name).or_insert(at);
        }
    }
}

/// What an observed interval was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Drain,
    Boot,
}

/// A run's wall time split into the drains and boots it waited for and the tool's own time
/// between them, by what came before: the start, a drain's end, a replacement turning Ready,
/// and the end.
#[derive(Debug, Default, Clone, Copy)]
struct Split {
    covered: Duration,
    start: Duration,
    after_drain: Duration,
    after_boot: Duration,
    finish: Duration,
}

fn split(
    mut intervals: Vec<(SystemTime, SystemTime, Kind)>,
    begin: SystemTime,
    end: SystemTime,
) -> Split {
    intervals.sort();
    let since =
        |later: SystemTime, earlier: SystemTime| later.duration_since(earlier).unwrap_or_default();
    let mut out = Split::default();
    // The merged block in progress: its start, its end and what ended it.
    let mut block: Option<(SystemTime, SystemTime, Kind)> = None;
    for (s, e, kind) in intervals {
        match &mut block {
            Some((_, be, bk)) if s <= *be => {
                if e > *be {
                    (*be, *bk) = (e, kind);
                }
            }
            _ => {
                match block.take() {
                    Some((bs, be, bk)) => {
                        out.covered += since(be, bs);
                        let gap = since(s, be);
                        match bk {
                            Kind::Drain => out.after_drain += gap,
                            Kind::Boot => out.after_boot += gap,
                        }
                    }
                    None => out.start = since(s, begin),
                }
                block = Some((s, e, kind));
            }
        }
    }
    if let Some((bs, be, _)) = block {
        out.covered += since(be, bs);
        out.finish = since(end, be);
    }
    out
}

async fn setup(cluster: &TestCluster, client: &kube::Client) -> anyhow::Result<()> {
    for i in 0..NODES {
        let zone = if i % 2 == 0 { "a" } else { "b" };
        cluster
            .nodes
            .add(
                NodeSpec::new(&format!("{GROUP}-{i}"), GROUP)
                    .zone(zone)
                    .label("rev", "0"),
            )
            .await?;
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": GROUP}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let replicas = PODS_PER_NODE * NODES as i32;
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {"kops.k8s.io/instancegroup": GROUP},
                                       "containers": [{"name": "main", "image": "registry.invalid/web:1"}]}}}
    }))?;
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), GROUP);
    api.create(&PostParams::default(), &rs).await?;
    let ready = move |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(replicas)
    };
    tokio::time::timeout(Duration::from_secs(120), await_condition(api, "web", ready)).await??;
    Ok(())
}

/// One rotation's figures.
struct Run {
    wall: Duration,
    split: Split,
}

pub fn run(runs: usize, work: &Path) -> anyhow::Result<Vec<Row>> {
    let cluster = TestCluster::shared();
    let client = cluster.block_on(cluster.client());
    cluster.block_on(setup(cluster, &client))?;
    cluster.cloud.set_boot_delay(BOOT);
    let policy = cluster.exec_policy(work, "");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher_task = cluster.spawn(watch(client.clone(), seen.clone()));

    let mut results = Vec::new();
    for rep in 1..=runs {
        // Each run wants a new revision of the group: every node is out of date.
        let revision = rep.to_string();
        cluster.cloud.set_group_spec(
            GROUP,
            GroupSpec {
                kubelet_version: None,
                labels: BTreeMap::from([("rev".to_string(), revision.clone())]),
            },
        );
        *seen.lock().unwrap() = Seen::default();
        let calls_before = cluster.cloud.calls().len();
        let started = SystemTime::now();
        let mut cmd = Command::new(plugin_binary());
        cmd.arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["nodes", "--yes", "--instance-group", GROUP])
            .args(["--expect-label", &format!("rev={revision}")])
            .args(["--max-unavailable", "1", "--max-surge", "0"])
            .arg("--policy")
            .arg(&policy)
            .args(FAST_ROTATION);
        let wall = measure::run(&mut cmd, &work.join("rotation-stderr.txt"))?.wall;

        let terminations: Vec<SystemTime> = cluster.cloud.calls()[calls_before..]
            .iter()
            .filter(|c| c.verb == "terminate")
            .map(|c| c.at)
            .collect();
        anyhow::ensure!(
            terminations.len() == NODES,
            "run {rep}: expected {NODES} terminations, the cloud saw {}",
            terminations.len()
        );
        let seen = seen.lock().unwrap();
        let mut intervals = Vec::new();
        for (node, cordoned) in &seen.cordoned {
            let drained = seen.drained.get(node).ok_or_else(|| {
                anyhow::anyhow!("run {rep}: {node} was cordoned but never seen drained")
            })?;
            intervals.push((*cordoned, *drained, Kind::Drain));
        }
        // Each termination's boot ends when the first not yet matched new node turns Ready.
        let mut fresh: Vec<SystemTime> = seen
            .ready
            .values()
            .copied()
            .filter(|at| *at >= started)
            .collect();
        fresh.sort();
        for terminated in &terminations {
            let index = fresh
                .iter()
                .position(|ready| ready >= terminated)
                .ok_or_else(|| {
                    anyhow::anyhow!("run {rep}: no replacement seen for a termination")
                })?;
            intervals.push((*terminated, fresh.remove(index), Kind::Boot));
        }
        results.push(Run {
            wall,
            split: split(intervals, started, started + wall),
        });
    }
    watcher_task.abort();

    let mut fractions: Vec<(f64, &Run)> = results
        .iter()
        .map(|r| (1.0 - measure::ratio(r.split.covered, r.wall), r))
        .collect();
    fractions.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (fraction, median_run) = fractions[fractions.len() / 2];
    let overhead = median_run.wall.saturating_sub(median_run.split.covered);
    let parts = median_run.split;
    Ok(vec![Row {
        figure: format!(
            "Tool overhead, {NODES}-node rotation ({PODS_PER_NODE} pods per node, boot {} s, waits 0)",
            BOOT.as_secs()
        ),
        value: format!(
            "{} ({:.1} %): start {}, drained → terminate {}, Ready → next cordon {}, end {}",
            show(overhead),
            fraction * 100.0,
            show(parts.start),
            show(parts.after_drain),
            show(parts.after_boot),
            show(parts.finish)
        ),
        peer: "the rotation's wall time".into(),
        peer_value: show(median_run.wall),
        ratio: format!("{:.3}", fraction),
        target: String::new(),
        met: None,
    }
    .target("< 2 % of wall time", fraction < 0.02)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_splits_into_waits_and_the_gaps_after_each() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        // Drain 1–3, boot 4–8 overlapping a drain 7–9, boot 11–12; the run is 0–14.
        let parts = split(
            vec![
                (at(4), at(8), Kind::Boot),
                (at(1), at(3), Kind::Drain),
                (at(7), at(9), Kind::Drain),
                (at(11), at(12), Kind::Boot),
            ],
            at(0),
            at(14),
        );
        let s = Duration::from_secs;
        assert_eq!(parts.covered, s(2 + 5 + 1));
        assert_eq!(parts.start, s(1));
        assert_eq!(parts.after_drain, s(1 + 2));
        assert_eq!(parts.after_boot, s(0));
        assert_eq!(parts.finish, s(2));
    }
}
