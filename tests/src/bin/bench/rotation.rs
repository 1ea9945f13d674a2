//! The tool's own share of a rotation: a 10-node group on a real test cluster, every configured
//! wait at zero and a fixed simulated boot time, without hooks and with the three demo hooks
//! (runs of the two alternate). An independent watcher records when each node was cordoned and
//! reported drained, and the simulated cloud when each termination came and when its
//! replacement turned Ready; the tool's overhead is the wall time outside those drain and boot
//! intervals.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, TestCluster};
use rollout_ext_e2e::{FAST_ROTATION, plugin_binary, wasm_module};
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
pub struct Seen {
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

/// Records first sightings of cordons, drained phases and Ready nodes of `group`.
pub async fn watch(client: kube::Client, group: String, seen: Arc<Mutex<Seen>>) {
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().labels(&format!("kops.k8s.io/instancegroup={group}"));
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
pub enum Kind {
    Drain,
    Boot,
}

/// A run's wall time split into the drains and boots it waited for and the tool's own time
/// between them, by what came before: the start, a drain's end, a replacement turning Ready,
/// and the end.
#[derive(Debug, Default, Clone, Copy)]
pub struct Split {
    pub covered: Duration,
    pub start: Duration,
    pub after_drain: Duration,
    pub after_boot: Duration,
    pub finish: Duration,
}

pub fn split(
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

/// The three demo hooks as the demo policy configures them, except that the maintenance window
/// is always open (a rotation would otherwise pause until the weekend) and error-budget retries
/// every second instead of every 30.
const DEMO_HOOKS: &str = "  hooks:
  - {name: zone-spread, module: zone_spread.wasm, points: [select, batch], config: {maxPerZone: 1}}
  - name: maintenance-window
    module: maintenance_window.wasm
    points: [batch]
    config: {windows: [{days: [mon, tue, wed, thu, fri, sat, sun], start: \"00:00\", end: \"00:00\"}], initialBatch: 1, maxBatch: 4}
  - {name: error-budget, module: error_budget.wasm, points: [gate], config: {maxPodsNotReady: 2, maxFailedChecks: 10, retrySeconds: 1}}
";

/// A hook that prints one line per call at every point and defers (logged with `-v`).
const TRACER: &str = "  - {name: tracer, module: hostile_hook.wasm, points: [select, batch, gate], config: {select: trace, batch: trace, gate: trace}}
";

/// Writes into `dir` an exec-provider policy for this cluster with the three demo hooks (and the
/// tracer after them), the modules beside it.
pub fn hooks_policy(cluster: &TestCluster, dir: &Path, tracer: bool) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut modules = vec!["zone-spread", "maintenance-window", "error-budget"];
    let mut hooks = DEMO_HOOKS.to_string();
    if tracer {
        modules.push("hostile-hook");
        hooks.push_str(TRACER);
    }
    for name in modules {
        let module = wasm_module(name);
        let file = module
            .file_name()
            .ok_or_else(|| anyhow::anyhow!("{} has no file name", module.display()))?;
        std::fs::copy(&module, dir.join(file))?;
    }
    Ok(cluster.exec_policy(dir, &hooks))
}

/// One rotation's figures.
pub struct Run {
    pub wall: Duration,
    pub split: Split,
    /// Waits and pauses the run reported (a hook's, or an interval's).
    pub waits: usize,
    /// The plugin's peak RSS, in KiB.
    pub max_rss_kib: u64,
}

/// A rotation of a whole group: which, how many at a time, by which plugin binary under which
/// policy, as whom.
pub struct Rotation<'a> {
    pub group: &'a str,
    pub nodes: usize,
    pub max_unavailable: usize,
    pub binary: &'a Path,
    pub policy: &'a Path,
    pub kubeconfig: &'a Path,
}

/// Rotates the whole group once to the revision `revision`.
pub fn rotate(
    cluster: &TestCluster,
    seen: &Mutex<Seen>,
    rotation: &Rotation,
    revision: &str,
    work: &Path,
) -> anyhow::Result<Run> {
    let Rotation {
        group,
        nodes,
        max_unavailable,
        binary,
        policy,
        kubeconfig,
    } = *rotation;
    // Each run wants a new revision of the group: every node is out of date.
    cluster.cloud.set_group_spec(
        group,
        GroupSpec {
            kubelet_version: None,
            labels: BTreeMap::from([("rev".to_string(), revision.to_string())]),
            ..Default::default()
        },
    );
    *seen.lock().unwrap() = Seen::default();
    let calls_before = cluster.cloud.calls().len();
    let started = SystemTime::now();
    let mut cmd = Command::new(binary);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["nodes", "--yes", "--instance-group", group])
        .args(["--expect-label", &format!("rev={revision}")])
        .args(["--max-unavailable", &max_unavailable.to_string()])
        .args(["--max-surge", "0"])
        .arg("--policy")
        .arg(policy)
        .args(FAST_ROTATION)
        .env("XDG_CACHE_HOME", work.join("cache"));
    let trace = std::env::var_os("BENCH_TRACE_DIR");
    if trace.is_some() {
        cmd.arg("-vvv");
    }
    let stderr_file = work.join("rotation-stderr.txt");
    let sample = measure::run(&mut cmd, &stderr_file)?;
    if let Some(dir) = trace {
        std::fs::copy(
            &stderr_file,
            Path::new(&dir).join(format!("trace-{revision}.txt")),
        )?;
    }
    let wall = sample.wall;
    let waits = std::fs::read_to_string(&stderr_file)?
        .lines()
        // `<timestamp> waiting <duration>: <reason>`
        .filter(|l| {
            l.split_once(' ')
                .is_some_and(|(_, e)| e.starts_with("waiting "))
        })
        .count();

    let terminations: Vec<SystemTime> = cluster.cloud.calls()[calls_before..]
        .iter()
        .filter(|c| c.verb == "terminate")
        .map(|c| c.at)
        .collect();
    anyhow::ensure!(
        terminations.len() == nodes,
        "revision {revision}: expected {nodes} terminations, the cloud saw {}",
        terminations.len()
    );
    let seen = seen.lock().unwrap();
    let mut intervals = Vec::new();
    for (node, cordoned) in &seen.cordoned {
        let drained = seen.drained.get(node).ok_or_else(|| {
            anyhow::anyhow!("revision {revision}: {node} was cordoned but never seen drained")
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
                anyhow::anyhow!("revision {revision}: no replacement seen for a termination")
            })?;
        intervals.push((*terminated, fresh.remove(index), Kind::Boot));
    }
    Ok(Run {
        wall,
        split: split(intervals, started, started + wall),
        waits,
        max_rss_kib: sample.max_rss_kib,
    })
}

/// The median run's overhead, by its share of the wall time, and that overhead.
fn overhead_row(what: &str, results: &[Run]) -> (Row, Duration) {
    let mut fractions: Vec<(f64, &Run)> = results
        .iter()
        .map(|r| (1.0 - measure::ratio(r.split.covered, r.wall), r))
        .collect();
    fractions.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (fraction, median_run) = fractions[fractions.len() / 2];
    let overhead = median_run.wall.saturating_sub(median_run.split.covered);
    let parts = median_run.split;
    let waits = results.iter().map(|r| r.waits).sum::<usize>();
    let row = Row {
        figure: format!(
            "Tool overhead, {NODES}-node rotation{what} ({PODS_PER_NODE} pods per node, boot {} s, waits 0)",
            BOOT.as_secs()
        ),
        value: format!(
            "{} ({:.2} %): start {}, drained → terminate {}, Ready → next cordon {}, end {}{}",
            show(overhead),
            fraction * 100.0,
            show(parts.start),
            show(parts.after_drain),
            show(parts.after_boot),
            show(parts.finish),
            match waits {
                0 => String::new(),
                n => format!("; {n} waits reported over all runs"),
            }
        ),
        peer: "the rotation's wall time".into(),
        peer_value: show(median_run.wall),
        ratio: format!("{:.4}", fraction),
        target: String::new(),
        met: None,
    }
    .target("< 2 % of wall time", fraction < 0.02);
    (row, overhead)
}

/// What the executor may read before its hooks' decisions, each timed alone on the same cluster
/// (medians), from a live view of the bench group: a snapshot caught up with the run's writes
/// (nodes, the group's pods, budgets: what a batching hook and the before-batch gate are shown)
/// and a health check (what the after-batch gate is shown).
fn reads(cluster: &TestCluster, samples: usize) -> anyhow::Result<(Duration, Duration)> {
    cluster.block_on(async {
        let live = cluster.live().await;
        let view = rollout_ext::cluster::view::LiveView::start(&live).await?;
        view.follow(|n| {
            n.labels
                .get("kops.k8s.io/instancegroup")
                .map(String::as_str)
                == Some(GROUP)
        });
        let (mut snapshots, mut checks) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            let started = Instant::now();
            view.caught_up().await?;
            snapshots.push(started.elapsed());
            let started = Instant::now();
            view.health(&HashSet::new())?;
            checks.push(started.elapsed());
        }
        Ok((measure::median(&snapshots), measure::median(&checks)))
    })
}

pub fn run(runs: usize, work: &Path, baseline: Option<&Path>) -> anyhow::Result<Vec<Row>> {
    let cluster = TestCluster::shared();
    let client = cluster.block_on(cluster.client());
    cluster.block_on(setup(cluster, &client))?;
    cluster.cloud.set_boot_delay(BOOT);
    let plain_dir = work.join("rotation-plain");
    std::fs::create_dir_all(&plain_dir)?;
    let plain = cluster.exec_policy(&plain_dir, "");
    let hooked = hooks_policy(cluster, &work.join("rotation-hooks"), false)?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watcher_task = cluster.spawn(watch(client.clone(), GROUP.into(), seen.clone()));

    // Without hooks and with the three demo hooks, by this build and by the baseline's.
    let current = plugin_binary();
    let mut variants: Vec<(&str, &Path, &Path, Vec<Run>)> = vec![
        ("", &current, &plain, Vec::new()),
        (" with the three demo hooks", &current, &hooked, Vec::new()),
    ];
    if let Some(base) = baseline {
        variants.push((
            ", previous release (`--baseline-binary`)",
            base,
            &plain,
            Vec::new(),
        ));
        variants.push((
            " with the three demo hooks, previous release (`--baseline-binary`)",
            base,
            &hooked,
            Vec::new(),
        ));
    }

    // One unmeasured plan per binary compiles the hooks into the cache, as an operator's first
    // plan does.
    for binary in [Some(current.as_path()), baseline].into_iter().flatten() {
        let mut warm = Command::new(binary);
        warm.arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args([
                "nodes",
                "--instance-group",
                GROUP,
                "--expect-label",
                "rev=warm-up",
            ])
            .arg("--policy")
            .arg(&hooked)
            .env("XDG_CACHE_HOME", work.join("cache"));
        measure::run(&mut warm, &work.join("rotation-stderr.txt"))?;
    }

    // The variants alternate, so that all see the same machine.
    let mut revision = 0;
    for _ in 0..runs {
        for (what, binary, policy, results) in &mut variants {
            revision += 1;
            let rotation = Rotation {
                group: GROUP,
                nodes: NODES,
                max_unavailable: 1,
                binary,
                policy,
                kubeconfig: &cluster.kubeconfig,
            };
            let run = rotate(cluster, &seen, &rotation, &revision.to_string(), work)?;
            let overhead = run.wall.saturating_sub(run.split.covered);
            eprintln!(
                "bench: rotation{what}: overhead {} of {} ({:.2} %)",
                show(overhead),
                show(run.wall),
                100.0 * measure::ratio(overhead, run.wall)
            );
            results.push(run);
        }
    }
    watcher_task.abort();

    let mut rows = Vec::new();
    let mut overheads = Vec::new();
    for (what, _, _, results) in &variants {
        let (row, overhead) = overhead_row(what, results);
        rows.push(row);
        overheads.push(overhead);
    }
    // What a hook decision may wait for: the cluster read just before it, timed alone.
    let (snapshot, check) = reads(cluster, 25)?;
    let extra = overheads[1].saturating_sub(overheads[0]) / NODES as u32;
    rows.push(Row {
        figure: format!(
            "Cluster reads a hook decision may wait for, each timed alone ({NODES}-node group): snapshot (nodes, pods, budgets); health check"
        ),
        value: format!("{}; {}", show(snapshot), show(check)),
        peer: "extra overhead per batch with the three demo hooks (median runs above)".into(),
        peer_value: show(extra),
        ratio: "—".into(),
        target: "—".into(),
        met: None,
    });
    Ok(rows)
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
