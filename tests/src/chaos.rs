//! The chaos driver of the crash-anywhere tests: runs the plugin, SIGKILLs it at a chosen moment
//! (tied to an event it prints, or a deadline), and reruns until a run finishes; and the
//! observed rotation those tests (and the fleet's) kill: an outdated group under a budget,
//! watched by an [`Observer`] from its start.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::cluster::{GROUP_LABEL, TERMINATION_LABEL, TestCluster};
use crate::invariants::{Budget, Pdb, SplitMix64, chaos_seed};
use crate::observer::{Observer, cloud_calls};
use crate::plugin_binary;
use crate::workloads::create_namespace;

/// How long a run may take to reach an event, or a workload to turn ready.
const WAIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// What the observer hears of the simulated cloud.

/// The nodes of `group`, as a label selector.
pub fn group_nodes(group: &str) -> String {
    format!("{GROUP_LABEL}={group}")
}

/// The calls [`cloud_calls`] yielded for `group` so far, one line each.
pub fn cloud_calls_made(cluster: &TestCluster, group: &str) -> Vec<String> {
    let prefix = format!("{group}-");
    cluster
        .cloud
        .calls()
        .iter()
        .filter(|c| {
            c.target.starts_with(&prefix)
                && c.effective
                && (c.verb == "terminate" || c.verb == "detach")
        })
        .map(|c| format!("{} {}", c.verb, c.target))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The chaos driver: run the plugin, kill it at a chosen moment.

/// When to kill a run: at `deadline` after it started, or earlier, `extra` after it printed an
/// event of kind `on_event` (so that kills land in each phase, not only where time is spent).
#[derive(Debug, Clone)]
pub struct Moment {
    pub deadline: Duration,
    pub on_event: Option<(&'static str, Duration)>,
}

/// Events a kill can be tied to, one per phase of a rotation.
pub const ROTATION_EVENTS: &[&str] = &[
    "group-started",
    "surging",
    "batch-started",
    "cordoned",
    "drain-started",
    "evicted",
    "drained",
    "terminated",
    "replaced",
    "validated",
];

impl Moment {
    fn pick(rng: &mut SplitMix64, events: &[&'static str], longest: Duration) -> Moment {
        let deadline = Duration::from_millis(rng.range(100, longest.as_millis() as u64));
        let on_event = (rng.range(0, 3) > 0).then(|| {
            (
                events[rng.range(0, events.len() as u64) as usize],
                Duration::from_millis(rng.range(0, 250)),
            )
        });
        Moment { deadline, on_event }
    }

    /// A kill right after one of `events` that earlier runs printed (so this flow has it) and
    /// no kill landed after yet, waiting for it as long as a run may take to reach it: a random
    /// deadline often comes first where a phase follows a long wait, such as a resumed run's
    /// wait for the evicted pods. None when every printed event has had its kill.
    fn aim(
        rng: &mut SplitMix64,
        events: &[&'static str],
        printed: &BTreeSet<String>,
        landed: &BTreeMap<String, usize>,
    ) -> Option<Moment> {
        let due: Vec<&'static str> = (events.iter().copied())
            .filter(|event| printed.contains(*event) && !landed.contains_key(*event))
            .collect();
        let event = *due.get(rng.range(0, due.len().max(1) as u64) as usize)?;
        Some(Moment {
            deadline: WAIT,
            on_event: Some((event, Duration::from_millis(rng.range(0, 50)))),
        })
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct Run {
    /// Killed by the test, after the last event it printed (if any).
    pub killed: Option<Option<String>>,
    /// The kinds of event it printed.
    pub printed: BTreeSet<String>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the plugin with `args` and SIGKILLs it at `moment`, unless it exits first.
pub fn run_until(args: &[String], moment: &Moment) -> Run {
    let started = Instant::now();
    let mut child = Command::new(plugin_binary())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let mut out = Vec::new();
    let mut last_event = None;
    let mut printed = BTreeSet::new();
    let mut kill_at = started + moment.deadline;
    let mut killed = false;
    loop {
        let left = kill_at.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                // A JSON event's kind, or a plain line's first word.
                let kind = match serde_json::from_str::<serde_json::Value>(&line) {
                    Ok(event) => event["event"].as_str().unwrap_or_default().to_string(),
                    Err(_) => line
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                };
                if let Some((on, extra)) = moment.on_event
                    && kind == on
                {
                    kill_at = kill_at.min(Instant::now() + extra);
                }
                printed.insert(kind.clone());
                last_event = Some(kind);
                out.push(line);
            }
            Err(RecvTimeoutError::Timeout) => {
                // SAFETY: kill has no memory-safety preconditions; the pid is our live child's
                // (not yet waited for, so not reused).
                unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
                killed = true;
                break;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().unwrap();
    // The pipes close with the process (a provider command it started may hold them a moment
    // longer; it finishes on its own).
    let _ = reader.join();
    out.extend(lines.try_iter());
    let stderr = stderr_reader.join().unwrap_or_default();
    Run {
        killed: (killed && status.code().is_none()).then_some(last_event),
        printed,
        code: status.code(),
        stdout: out.join("\n"),
        stderr,
    }
}

/// How a chaos loop kills: at moments tied to `events` or up to `longest` into a run, at least
/// `kills.0` times and in `kills.1` phases, once right after `finale` when the last step is
/// left; the run that finishes the work exits with `finished_with`.
pub struct Chaos {
    pub events: &'static [&'static str],
    pub longest: Duration,
    pub kills: (usize, usize),
    pub finale: Option<&'static str>,
    pub finished_with: i32,
}

/// Once this few steps are left, runs are killed early in their start until the kills are
/// done: a run killed at a random moment may well finish a few steps, and it must not finish
/// the work while kills are still due.
pub const LAST_STEPS: usize = 3;

/// Kills runs of `args` at random moments and reruns until one finishes, after at least
/// `min_kills` kills (and more while the kills have landed in fewer than `min_phases` phases
/// and steps of the work are left: a run faster in some phases than others gives them fewer
/// kills, and the loop must not end before it tried them: from half the kills on, such a
/// loop aims its kills at phases not landed in yet). `progress` says how many of how many steps of the work are done: while the work runs
/// ahead of the kills, or only its last `LAST_STEPS` steps are left, runs are killed early in their start
/// (connecting, taking the lock over, planning), so that the work cannot finish before the kills
/// are done; with a `finale`, one run is killed right after it prints that event, once only
/// the last step is left. The run that finishes the work exits with `finished_with` (0, or 6
/// when the work sets a node aside). Returns the number of kills, the phases they landed in (the last event each killed
/// run printed) and the finishing run; or, when a run fails instead, what it printed.
/// How long a drain of a chaos round may wait. A run killed while the API server handles its
/// eviction can leave a budget charged for a pod that is never deleted: the server records the
/// disruption on the budget whatever happens to the request, then deletes the pod within the
/// request, which the kill cancels. The budget is short by one until the server forgets the
/// entry, after its DeletionTimeout of two minutes; a resumed run's drain must be able to wait
/// that long (the tests' usual 60 s would stop it, resumably, first).
const CHAOS_DRAIN_TIMEOUT: &str = "150s";

/// `args` with the usual test drain timeout ([`crate::FAST_ROTATION`]) raised to
/// [`CHAOS_DRAIN_TIMEOUT`]; a timeout a test chose itself is kept.
pub fn chaos_timeouts(mut args: Vec<String>) -> Vec<String> {
    let usual = (crate::FAST_ROTATION.iter())
        .position(|a| *a == "--drain-timeout")
        .map(|at| crate::FAST_ROTATION[at + 1]);
    if let Some(at) = args.iter().position(|a| a == "--drain-timeout")
        && args.get(at + 1).map(String::as_str) == usual
    {
        args[at + 1] = CHAOS_DRAIN_TIMEOUT.into();
    }
    args
}

pub async fn chaos_loop(
    args: Vec<String>,
    rng: &mut SplitMix64,
    chaos: Chaos,
    progress: impl Fn() -> (usize, usize),
) -> Result<(usize, BTreeMap<String, usize>, Run), String> {
    let args = chaos_timeouts(args);
    let Chaos {
        events,
        longest,
        kills: (min_kills, min_phases),
        finale,
        finished_with,
    } = chaos;
    let mut kills = 0;
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    let mut printed = BTreeSet::new();
    let mut finale = finale;
    for round in 1..=min_kills * 5 {
        // Until enough kills happened, kill every run; then let one finish.
        let (done, total) = progress();
        let more = kills < min_kills || (phases.len() < min_phases && done + LAST_STEPS < total);
        let moment = if more {
            if done + 1 >= total
                && let Some(event) = finale.take()
            {
                // The last step is short: one kill is aimed right into it.
                Moment {
                    deadline: WAIT,
                    on_event: Some((event, Duration::from_millis(rng.range(0, 5)))),
                }
            } else if done * min_kills > kills * total || done + LAST_STEPS >= total {
                Moment {
                    deadline: Duration::from_millis(rng.range(50, 150)),
                    on_event: None,
                }
            } else if phases.len() < min_phases
                && kills * 2 >= min_kills
                && let Some(aimed) = Moment::aim(rng, events, &printed, &phases)
            {
                aimed
            } else {
                // A run lives at most as long as the share of the work left of the longest, so
                // that one with little left (on nodes that start pods at once) is still killed.
                let left = total.saturating_sub(done) as f64 / total.max(1) as f64;
                Moment::pick(rng, events, longest.mul_f64(left.max(0.2)))
            }
        } else {
            Moment {
                deadline: WAIT,
                on_event: None,
            }
        };
        let args = args.clone();
        let planned = moment.clone();
        let run = tokio::task::spawn_blocking(move || run_until(&args, &planned))
            .await
            .unwrap();
        printed.extend(run.printed.iter().cloned());
        match &run.killed {
            Some(last) => {
                kills += 1;
                let phase = last.clone().unwrap_or_else(|| "(before any event)".into());
                println!("round {round}: {moment:?} -> killed after {phase}");
                *phases.entry(phase).or_default() += 1;
            }
            None if run.code == Some(finished_with) => {
                println!("round {round}: {moment:?} -> finished");
                return Ok((kills, phases, run));
            }
            None => {
                return Err(format!(
                    "round {round}: the run exited with {:?} instead of finishing or being killed\nstdout:\n{}\nstderr:\n{}",
                    run.code, run.stdout, run.stderr
                ));
            }
        }
    }
    Err(format!("no run finished within {} rounds", min_kills * 5))
}

/// Judges a chaos loop by its outcome and the observer's report (violations, fewest nodes
/// available): a failed run or a violation panics with both. Returns the kills, the phases they
/// landed in, and the fewest available.
pub fn judge(
    what: &str,
    started: Instant,
    outcome: Result<(usize, BTreeMap<String, usize>, Run), String>,
    (report, fewest_available): (Option<String>, Option<usize>),
    (min_kills, min_phases): (usize, usize),
) -> Option<usize> {
    let (kills, phases, last) = outcome.unwrap_or_else(|failure| {
        panic!(
            "{failure}\n{}",
            report.as_deref().unwrap_or("the observer saw no violation")
        )
    });
    println!(
        "{what}: {kills} kills in {:?}; phases: {phases:?}",
        started.elapsed()
    );
    if let Some(report) = report {
        panic!("{report}\nlast run:\n{}\n{}", last.stdout, last.stderr);
    }
    assert!(kills >= min_kills, "{kills} kills");
    assert!(
        phases.len() >= min_phases,
        "kills landed in at least {min_phases} phases: {phases:?}"
    );
    fewest_available
}

// ---------------------------------------------------------------------------------------------
// The rotation under chaos.

/// `group`'s nodes run an old kubelet; new instances come with the new one.
pub async fn outdated_group(cluster: &TestCluster, group: &str, n: usize) -> BTreeSet<String> {
    cluster
        .outdated_group(group, n)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

/// A ReplicaSet `web` of `replicas` pods on `group`'s nodes, in its own namespace, under a
/// PodDisruptionBudget `web` with `min_available`; returns once all are Ready and the budget's
/// status is computed.
pub async fn workload(
    client: &Client,
    namespace: &str,
    group: &str,
    replicas: i32,
    min_available: i32,
) {
    create_namespace(client, namespace).await;
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 // Its pods take their grace period (a second) to go, as a slow container does.
                 "template": {"metadata": {"labels": {"app": "web", TERMINATION_LABEL: "after-grace"}},
                              "spec": {"nodeSelector": {GROUP_LABEL: group},
                                       "terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &rs).await.unwrap();
    let ready = move |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(replicas)
    };
    tokio::time::timeout(WAIT, await_condition(rss, "web", ready))
        .await
        .unwrap()
        .unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    let pdbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let computed = move |p: Option<&DynamicObject>| {
        p.is_some_and(|p| {
            p.data["status"]["expectedPods"] == replicas
                && p.data["status"]["observedGeneration"] == p.metadata.generation.unwrap_or(0)
        })
    };
    tokio::time::timeout(WAIT, await_condition(pdbs, "web", computed))
        .await
        .unwrap()
        .unwrap();
}

/// The rotation under test, with a budget of one surge and one unavailable node.
pub fn rotate_args(cluster: &TestCluster, policy: &std::path::Path, group: &str) -> Vec<String> {
    let mut args = cluster.rotate_args(policy, group);
    args.extend(["--max-surge", "1", "--max-unavailable", "1"].map(String::from));
    args
}

/// The nodes of `group` the cloud was asked to terminate, in order.
pub fn terminated(cluster: &TestCluster, group: &str) -> Vec<String> {
    let prefix = format!("{group}-");
    cluster
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.verb == "terminate" && c.effective && c.target.starts_with(&prefix))
        .map(|c| c.target)
        .collect()
}

pub fn seed_banner(test: &str) -> SplitMix64 {
    let seed = chaos_seed();
    println!("{test}: chaos seed {seed} (replay with ROLLOUT_EXT_CHAOS_SEED={seed})");
    eprintln!("{test}: chaos seed {seed} (replay with ROLLOUT_EXT_CHAOS_SEED={seed})");
    SplitMix64::new(seed)
}

/// `nodes` outdated nodes in `group`, running 8 pods `web` (in namespace `group`) under a
/// budget of 6 available, watched by an observer from now on; and the rotation's arguments
/// (one surge, one unavailable), with the directory holding its policy.
pub async fn observed_rotation(
    cluster: &'static TestCluster,
    group: &str,
    nodes: usize,
) -> (BTreeSet<String>, Observer, tempfile::TempDir, Vec<String>) {
    let client = cluster.client().await;
    let outdated = outdated_group(cluster, group, nodes).await;
    workload(&client, group, group, 8, 6).await;
    // kured runs here: the run holds its lock while a batch is out, and never leaves it held.
    crate::kured::daemon_set(client.clone()).await;
    let budget = Budget {
        outdated: outdated.clone(),
        max_unavailable: 1,
        max_surge: 1,
        cloud_only: false,
        set_aside: Default::default(),
    };
    let pdb = Pdb {
        name: format!("{group}/web"),
        match_labels: [("app".to_string(), "web".to_string())].into(),
        min_available: 6,
    };
    let observer = Observer::start(
        cluster,
        &group_nodes(group),
        group,
        budget,
        vec![pdb],
        cloud_calls(cluster, group),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, group);
    (outdated, observer, dir, args)
}
