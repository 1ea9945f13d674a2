//! Crash anywhere, resume: the plugin is SIGKILLed at random moments of a rotation (kops-style,
//! and through Cluster API; and of a controller rolling update, and of a StatefulSet's
//! partitioned update) and the same command is run again until it finishes, while an
//! independent observer checks the safety invariants the whole time (`rollout_ext_e2e::invariants`).
//! The moments come from a seeded generator; the seed is printed, and `ROLLOUT_EXT_CHAOS_SEED`
//! replays it.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use rollout_ext_e2e::chaos::*;
use rollout_ext_e2e::cluster::{Karpenter, NodeSpec, TestCluster};
use rollout_ext_e2e::invariants::{Budget, Pdb, SplitMix64};
use rollout_ext_e2e::observer::{InstanceCall, Observer, Verb, cloud_calls};
use rollout_ext_e2e::plugin_binary;
use rollout_ext_e2e::workloads::create_namespace;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);
/// Kills of the rotation under chaos, at least (the bar for a CI run).
const MIN_KILLS: usize = 20;
/// Kills of the controller rolling update under chaos, at least (on top of the rotation's).
const MIN_UPDATE_KILLS: usize = 10;

/// One cluster-changing scenario at a time: rotations share the cluster's lock, and the fault
/// tests restart the API server everyone uses.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_killed_anywhere_resumes_and_stays_safe() {
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("rotation chaos");
    let cluster = TestCluster::shared();
    let group = "chaos";
    let (outdated, observer, _dir, args) = observed_rotation(cluster, group, 8).await;
    let started = Instant::now();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: ROTATION_EVENTS,
            longest: Duration::from_millis(1200),
            kills: (MIN_KILLS, 3),
            finale: None,
            finished_with: 0,
        },
        // A step per termination.
        || (terminated(cluster, group).len(), outdated.len()),
    )
    .await;
    let fewest_available = judge(
        "rotation chaos",
        started,
        outcome,
        observer
            .finish(
                cluster,
                cloud_calls_made(cluster, group),
                cluster.nodes.nodes_of(group),
            )
            .await,
        (MIN_KILLS, 3),
    );
    assert_eq!(
        fewest_available,
        Some(outdated.len() - 1),
        "the budget was used (one node unavailable at the worst moment), never exceeded"
    );
}

/// The rotation's events, and the setting aside of a node.
const QUARANTINE_EVENTS: &[&str] = &[
    "group-started",
    "batch-started",
    "cordoned",
    "drain-started",
    "evicted",
    "quarantined",
    "terminated",
    "replaced",
    "validated",
];

/// The rotation under chaos with a node whose drain cannot finish (its pod's budget never
/// allows a disruption) and `drain.undrainable: Quarantine`: killed anywhere and resumed, each
/// run tries that node again first and sets it aside again; it is never terminated, no other
/// node is terminated undrained, the budget holds with it cordoned, and at the end it carries
/// the quarantine label (and not our load-balancer label) while no other node carries either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_that_sets_a_node_aside_killed_anywhere_stays_safe() {
    use k8s_openapi::api::core::v1::Node;
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("quarantine chaos");
    let cluster = TestCluster::shared();
    let group = "chaosq";
    let client = cluster.client().await;
    let outdated = outdated_group(cluster, group, 6).await;
    workload(&client, group, group, 4, 2).await;
    let stuck = outdated.iter().nth(1).unwrap().clone();
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), group);
    let db: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"nodeSelector": {"kubernetes.io/hostname": stuck},
                                       "containers": [{"name": "main", "image": "registry.invalid/db:1"}]}}}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &db).await.unwrap();
    let ready = |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(1)
    };
    tokio::time::timeout(WAIT, await_condition(rss, "db", ready))
        .await
        .unwrap()
        .unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    let pdbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), group, &resource);
    let closed: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &closed).await.unwrap();
    let computed =
        |p: Option<&DynamicObject>| p.is_some_and(|p| p.data["status"]["expectedPods"] == 1);
    tokio::time::timeout(WAIT, await_condition(pdbs, "db", computed))
        .await
        .unwrap()
        .unwrap();
    let budget = Budget {
        outdated: outdated.clone(),
        max_unavailable: 2,
        max_surge: 0,
        cloud_only: false,
        set_aside: [stuck.clone()].into(),
    };
    let pdb = Pdb {
        name: format!("{group}/web"),
        match_labels: [("app".to_string(), "web".to_string())].into(),
        min_available: 2,
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
    let policy = cluster.exec_policy(
        dir.path(),
        "  drain:\n    undrainable: {action: Quarantine}\n",
    );
    let mut args = cluster.rotate_args(&policy, group);
    // Long enough for a web pod's drain (its eviction may wait a turn on the budget, then its
    // pod takes its second of grace), short for the db pod's, which can never go.
    let at = args.iter().position(|a| a == "--drain-timeout").unwrap();
    args[at + 1] = "5s".into();
    args.extend(["--max-surge", "0", "--max-unavailable", "2"].map(String::from));
    let started = Instant::now();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: QUARANTINE_EVENTS,
            longest: Duration::from_millis(4000),
            kills: (MIN_UPDATE_KILLS, 3),
            finale: None,
            finished_with: 6,
        },
        // A step per termination; the node set aside is never one.
        || (terminated(cluster, group).len(), outdated.len() - 1),
    )
    .await;
    judge(
        "quarantine chaos",
        started,
        outcome,
        observer
            .finish(
                cluster,
                cloud_calls_made(cluster, group),
                cluster.nodes.nodes_of(group),
            )
            .await,
        (MIN_UPDATE_KILLS, 3),
    );
    let nodes: Api<Node> = Api::all(client);
    let listed = nodes
        .list(&ListParams::default().labels(&group_nodes(group)))
        .await
        .unwrap();
    for node in listed.items {
        let name = node.name_any();
        let labels = node.metadata.labels.unwrap_or_default();
        let quarantined = labels.get("rollout-ext.io/quarantined").map(String::as_str);
        let excluded = labels.get("node.kubernetes.io/exclude-from-external-load-balancers");
        assert_eq!(excluded, None, "{name}: {labels:?}");
        match name == stuck {
            true => assert_eq!(quarantined, Some("true"), "{name}: {labels:?}"),
            false => assert_eq!(quarantined, None, "{name}: {labels:?}"),
        }
    }
}

/// Kills of the Cluster API rotation under chaos, at least: as many as of the other updates,
/// its steps (a Machine each) being fewer and slower than the kops rotation's.
const MIN_CAPI_KILLS: usize = MIN_UPDATE_KILLS;

/// The rotation under chaos through Cluster API (one surge, one unavailable, as the kops
/// rotation's): the provider's own records (what is scaled and owed, on the MachineDeployment)
/// and the Machines a stopped run leaves booting must not make the next run remove or replace
/// anything twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_api_rotation_killed_anywhere_resumes_and_stays_safe() {
    use rollout_ext_e2e::capi_rotation::{self as capi, assert_back_at_size};
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("cluster-api chaos");
    let cluster = TestCluster::shared();
    let (ns, md) = ("capi-chaos", "chaotic");
    let outdated = capi::outdated_deployment(cluster, ns, md, 6).await;
    let observer = capi::observed(cluster, ns, md, &outdated, 1, 1).await;
    let args = capi::rotate_args(cluster, md, &["--max-surge", "1", "--max-unavailable", "1"]);
    let started = Instant::now();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: ROTATION_EVENTS,
            longest: Duration::from_millis(1200),
            kills: (MIN_CAPI_KILLS, 3),
            finale: None,
            finished_with: 0,
        },
        // A step per Machine removed.
        || (capi::removed(cluster, ns).len(), outdated.len()),
    )
    .await;
    // Once a run finished, the group is the new Machines (none are waited for otherwise: the
    // failure is judged below).
    let now = match &outcome {
        Ok(_) => assert_back_at_size(cluster, ns, md, outdated.len()).await,
        Err(_) => Vec::new(),
    };
    let calls = cluster.capi.calls_made(ns);
    let fewest_available = judge(
        "cluster-api chaos",
        started,
        outcome,
        observer.finish(cluster, calls, now).await,
        (MIN_CAPI_KILLS, 3),
    );
    assert_eq!(
        fewest_available,
        Some(outdated.len() - 1),
        "the budget was used (one node unavailable at the worst moment), never exceeded"
    );
    capi::assert_each_replaced_once(cluster, ns, md, &outdated);
}

/// What an operator does to a running rotation in [`a_rotation_paused_and_aborted_anywhere_stays_safe`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Control {
    Pause,
    Abort,
}

/// Runs `pause`, `resume` or `abort` against `cluster` from a process of its own, as another
/// terminal would. It must succeed, or be refused with `refusal` (a request that came after the
/// run let go of its lock); returns whether it succeeded.
fn operator_says(cluster: &TestCluster, args: &[&str], refusal: Option<&str>) -> bool {
    let out = Command::new(plugin_binary())
        .args(args)
        .args(["--kubeconfig", cluster.kubeconfig.to_str().unwrap()])
        .output()
        .unwrap();
    let refused = refusal.is_some_and(|r| String::from_utf8_lossy(&out.stderr).contains(r));
    assert!(out.status.success() || refused, "{args:?}: {out:?}");
    out.status.success()
}

/// One run of `args` under an operator who, after the number of events `next` says, pauses it
/// (and resumes it as soon as it holds) or aborts it, then asks `next` again. Returns the exit
/// code, stderr, and the controls that took effect.
fn run_controlled(
    cluster: &TestCluster,
    args: &[String],
    mut next: impl FnMut() -> Option<(Control, u64)>,
) -> (Option<i32>, String, Vec<Control>) {
    let stderr = tempfile::tempfile().unwrap();
    let mut child = Command::new(plugin_binary())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr.try_clone().unwrap())
        .spawn()
        .unwrap();
    let mut armed = next();
    let mut took_effect = Vec::new();
    let mut pausing = false;
    let mut late_abort = false;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["event"] == "paused" && pausing {
            // It holds: no step moves until resume (the observer would see one).
            operator_says(cluster, &["resume"], None);
            took_effect.push(Control::Pause);
            pausing = false;
            armed = next();
            continue;
        }
        match &mut armed {
            Some((_, left)) if *left > 1 => *left -= 1,
            Some((Control::Pause, _)) if !pausing => {
                operator_says(cluster, &["pause", "--reason", "chaos"], None);
                pausing = true;
            }
            Some((Control::Abort, _)) => {
                late_abort = !operator_says(
                    cluster,
                    &["abort", "--reason", "chaos"],
                    Some("no rotation is running"),
                );
                armed = None;
            }
            _ => {}
        }
    }
    let code = child.wait().unwrap().code();
    let mut text = String::new();
    let mut stderr = stderr;
    use std::io::Seek;
    stderr.rewind().unwrap();
    stderr.read_to_string(&mut text).unwrap();
    if code == Some(3) {
        took_effect.push(Control::Abort);
    }
    // A request that came after the run's last safe point: it finished without heeding it (a
    // pause recorded once the lock was gone waits for the next run, and is withdrawn here).
    if late_abort {
        assert_eq!(code, Some(0), "{text}");
    }
    if pausing {
        operator_says(cluster, &["resume"], Some("not paused"));
    }
    (code, text, took_effect)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_paused_and_aborted_anywhere_stays_safe() {
    const MIN_EACH: usize = 3;
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("control chaos");
    let cluster = TestCluster::shared();
    let group = "controlled";
    let (outdated, observer, _dir, args) = observed_rotation(cluster, group, 10).await;

    let (mut pauses, mut aborts) = (0, 0);
    let total = outdated.len();
    let mut finished = false;
    for round in 1..=MIN_EACH * 4 {
        let args = args.clone();
        // Each control lands a few events after the last: pauses anywhere in a batch, aborts
        // early, so that enough of the work is left for all of them.
        let seed = rng.range(0, u64::MAX);
        let enough = pauses >= MIN_EACH && aborts >= MIN_EACH;
        let mut asked = (pauses, aborts);
        let (code, stderr, took) = tokio::task::spawn_blocking(move || {
            let mut rng = SplitMix64::new(seed);
            run_controlled(cluster, &args, move || {
                if enough {
                    return None;
                }
                // Whichever control is behind comes next, a random number of events on (at once
                // near the end of the work).
                let near_end = terminated(cluster, group).len() + 3 >= total;
                let pick = if asked.0 <= asked.1 {
                    asked.0 += 1;
                    (Control::Pause, rng.range(1, 5))
                } else {
                    asked.1 += 1;
                    (Control::Abort, rng.range(1, 3))
                };
                Some(if near_end { (pick.0, 1) } else { pick })
            })
        })
        .await
        .unwrap();
        let done = terminated(cluster, group).len();
        println!("round {round}: exit {code:?}, controls {took:?}, {done} of {total} replaced");
        pauses += took.iter().filter(|c| **c == Control::Pause).count();
        aborts += took.iter().filter(|c| **c == Control::Abort).count();
        match code {
            Some(0) => {
                finished = true;
                break;
            }
            Some(3) => assert!(
                stderr.contains("aborted by ") && stderr.contains(": chaos; stopped "),
                "{stderr}"
            ),
            other => panic!("round {round}: the run exited with {other:?}\n{stderr}"),
        }
    }
    let (report, _) = observer
        .finish(
            cluster,
            cloud_calls_made(cluster, group),
            cluster.nodes.nodes_of(group),
        )
        .await;
    assert!(report.is_none(), "{}", report.unwrap_or_default());
    assert!(finished, "no run finished");
    assert!(
        pauses >= MIN_EACH && aborts >= MIN_EACH,
        "{pauses} pauses and {aborts} aborts took effect"
    );
    assert_eq!(terminated(cluster, group).len(), outdated.len());
}

// ---------------------------------------------------------------------------------------------
// API server faults.

/// Runs the plugin with `args`; at the first event of kind `on` it prints, calls `fault` once.
/// Returns the finished run.
fn run_with_fault(args: &[String], on: &str, fault: impl FnOnce()) -> Run {
    let mut child = Command::new(plugin_binary())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let mut fault = Some(fault);
    let mut out = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        if serde_json::from_str::<serde_json::Value>(&line).is_ok_and(|e| e["event"] == on)
            && let Some(fault) = fault.take()
        {
            fault();
        }
        out.push(line);
    }
    let status = child.wait().unwrap();
    Run {
        killed: None,
        printed: BTreeSet::new(),
        code: status.code(),
        stdout: out.join("\n"),
        stderr: stderr_reader.join().unwrap_or_default(),
    }
}

/// An outdated group of `n` nodes carrying a workload of `n` pods (namespace `group`, a budget
/// keeping `n - 2` of them), and its observer: a drain that moved nothing would show in the
/// pods left on a terminated node, whatever the watches missed while the server was away.
async fn observed_group(cluster: &'static TestCluster, group: &str, n: usize) -> Observer {
    let outdated = outdated_group(cluster, group, n).await;
    let client = cluster.client().await;
    let keep = n.saturating_sub(2);
    workload(&client, group, group, n as i32, keep as i32).await;
    let budget = Budget {
        outdated,
        max_unavailable: 1,
        max_surge: 1,
        cloud_only: false,
        set_aside: Default::default(),
    };
    let pdb = Pdb {
        name: format!("{group}/web"),
        match_labels: [("app".to_string(), "web".to_string())].into(),
        min_available: keep,
    };
    Observer::start(
        cluster,
        &group_nodes(group),
        group,
        budget,
        vec![pdb],
        cloud_calls(cluster, group),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_rides_out_an_api_server_restart() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "restart";
    let observer = observed_group(cluster, group, 4).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, group);

    // At the first termination, the API server is killed and started again (it takes seconds
    // to serve again): every request meanwhile is refused or cut.
    let run = tokio::task::spawn_blocking(move || {
        run_with_fault(&args, "terminated", || {
            cluster.processes.restart("kube-apiserver").unwrap();
        })
    })
    .await
    .unwrap();
    cluster.ready().await.unwrap();
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("; retrying in ") && run.stderr.contains("(attempt 2, giving up in"),
        "every retry is said: {}",
        run.stderr
    );
    let (report, _) = observer
        .finish(
            cluster,
            cloud_calls_made(cluster, group),
            cluster.nodes.nodes_of(group),
        )
        .await;
    assert_eq!(report, None, "each node terminated once, within the budget");
    assert_eq!(terminated(cluster, group).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_stops_resumably_when_the_api_server_fails_for_too_long() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "stall";
    let observer = observed_group(cluster, group, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = rotate_args(cluster, &policy, group);
    // Requests to a server whose etcd hangs hang too: each is cut after 2s, and retried for at
    // most 5s.
    args.extend([
        "--request-timeout=2s".to_string(),
        "--retry-timeout=5s".into(),
    ]);

    // At the first cordon, etcd stops answering, for longer than the retries last.
    let stopped = args.clone();
    let run = tokio::task::spawn_blocking(move || {
        run_with_fault(&stopped, "cordoned", || {
            cluster.processes.pause("etcd").unwrap();
        })
    })
    .await
    .unwrap();
    cluster.processes.resume("etcd").unwrap();
    cluster.ready().await.unwrap();
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("; retrying in ") && run.stderr.contains("still failing after"),
        "the retries are said, then the giving up: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("run the same command again to resume"),
        "{}",
        run.stderr
    );
    let before = terminated(cluster, group).len();
    assert!(before < 3, "it stopped before the end: {before} terminated");

    // The same command finishes the rotation.
    let out = tokio::task::spawn_blocking(move || {
        run_until(
            &args,
            &Moment {
                deadline: WAIT,
                on_event: None,
            },
        )
    })
    .await
    .unwrap();
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let (report, _) = observer
        .finish(
            cluster,
            cloud_calls_made(cluster, group),
            cluster.nodes.nodes_of(group),
        )
        .await;
    assert_eq!(report, None, "each node terminated once, within the budget");
}

// ---------------------------------------------------------------------------------------------
// The controller rolling update under chaos.

/// Events of `rolling-update` a kill can be tied to: the start, creating the next controller,
/// each scale step, the rename, the deletion of the old controller.
const UPDATE_LINES: &[&str] = &[
    "update-started",
    "controller-created",
    "update-continued",
    "step-started",
    "renaming",
    "deleting",
];

const V1: &str = "registry.invalid/app:1";
const V2: &str = "registry.invalid/app:2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_killed_anywhere_resumes_within_its_budget() {
    use k8s_openapi::api::core::v1::ReplicationController;
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("rolling-update chaos");
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = "ru-chaos";
    // Enough steps for the kills: a random kill moment is only drawn while more than
    // `LAST_STEPS` steps are left.
    let replicas = 12;
    for i in 1..=2 {
        cluster
            .nodes
            .add(NodeSpec::new(&format!("{ns}-{i}"), ns))
            .await
            .unwrap();
    }
    create_namespace(&client, ns).await;
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {"replicas": replicas, "selector": {"app": "app"},
                 "template": {"metadata": {"labels": {"app": "app"}},
                              "spec": {"terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "main", "image": V1}]}}}
    }))
    .unwrap();
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    let ready = move |rc: Option<&ReplicationController>| {
        rc.and_then(|r| r.status.as_ref())
            .is_some_and(|s| s.ready_replicas == Some(replicas) && s.replicas == replicas)
    };
    tokio::time::timeout(WAIT, await_condition(rcs.clone(), "app", ready))
        .await
        .unwrap()
        .unwrap();

    // The budget: maxUnavailable 0, so all pods of the app stay available throughout (a new one
    // is Ready before an old one goes).
    let budget = Budget {
        outdated: BTreeSet::new(),
        max_unavailable: 0,
        max_surge: 0,
        cloud_only: false,
        set_aside: Default::default(),
    };
    let pdb = Pdb {
        name: "rolling-update budget (replicas - maxUnavailable)".into(),
        match_labels: [("app".to_string(), "app".to_string())].into(),
        min_available: replicas as usize,
    };
    let observer = Observer::start(
        cluster,
        &group_nodes("no-nodes"),
        ns,
        budget,
        vec![pdb],
        cloud_calls(cluster, "no-nodes"),
    )
    .await;

    let args: Vec<String> = [
        "rolling-update",
        "app",
        &format!("--image={V2}"),
        "--max-surge=1",
        "--max-unavailable=0",
        "--update-period=300ms",
        "--poll-interval=200ms",
        "--timeout=60s",
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "-n",
        ns,
        "-o",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let handle = tokio::runtime::Handle::current();
    let started = Instant::now();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: UPDATE_LINES,
            longest: Duration::from_millis(1000),
            kills: (MIN_UPDATE_KILLS, 0),
            finale: Some("renaming"),
            finished_with: 0,
        },
        // A step per new pod, one for deleting the old controller, one for the rename.
        || {
            let (pods, rcs) = (pods.clone(), rcs.clone());
            let (list, old) = tokio::task::block_in_place(|| {
                handle.block_on(async move {
                    (
                        pods.list(&ListParams::default()).await,
                        rcs.get_opt("app").await,
                    )
                })
            });
            let new = list
                .map(|l| l.items)
                .unwrap_or_default()
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(V2)
                })
                .count();
            let image = |rc: &ReplicationController| {
                rc.spec
                    .as_ref()?
                    .template
                    .as_ref()?
                    .spec
                    .as_ref()?
                    .containers[0]
                    .image
                    .clone()
            };
            let old_gone = matches!(old, Ok(None))
                || matches!(&old, Ok(Some(rc)) if image(rc).as_deref() == Some(V2));
            (
                new.min(replicas as usize) + usize::from(old_gone),
                replicas as usize + 2,
            )
        },
    )
    .await;
    judge(
        "rolling-update chaos",
        started,
        outcome,
        observer
            .finish(
                cluster,
                cloud_calls_made(cluster, "no-nodes"),
                cluster.nodes.nodes_of("no-nodes"),
            )
            .await,
        (MIN_UPDATE_KILLS, 0),
    );

    // The update ended under the old name, with the new template and all replicas, and left
    // no next controller, no update annotation and no rename record behind.
    tokio::time::timeout(WAIT, await_condition(rcs.clone(), "app", ready))
        .await
        .unwrap()
        .unwrap();
    let names: Vec<String> = rcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names, ["app"], "no orphaned next controller");
    let app = rcs.get("app").await.unwrap();
    assert!(
        !app.annotations()
            .keys()
            .any(|k| k.starts_with("kubectl.kubernetes.io/")),
        "{:?}",
        app.annotations()
    );
    let template = app.spec.as_ref().unwrap().template.as_ref().unwrap();
    assert_eq!(
        template.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some(V2)
    );
    let live: Vec<Pod> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(live.len(), replicas as usize, "{live:?}");
    for pod in &live {
        assert_eq!(
            pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
            Some(V2)
        );
        assert!(
            !pod.annotations().contains_key("rollout-ext.io/rename"),
            "the rename record is removed from {}",
            pod.name_any()
        );
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        assert_eq!(owner, app.metadata.uid, "{} is adopted", pod.name_any());
    }
}

/// `rolling-update TARGET` to V2, two pods at a time, with short waits and JSON events.
fn in_place_args(cluster: &TestCluster, ns: &str, target: &str) -> Vec<String> {
    let kubeconfig = cluster.kubeconfig.to_str().unwrap();
    let image = format!("--image={V2}");
    [
        "rolling-update",
        target,
        &image,
        "--max-unavailable=2",
        "--poll-interval=200ms",
        "--timeout=60s",
        "--kubeconfig",
        kubeconfig,
        "-n",
        ns,
        "-o",
        "json",
    ]
    .map(String::from)
    .to_vec()
}

const PARTITION_LINES: &[&str] = &[
    "partition-update-started",
    "partition-set",
    "pods-updated",
    "update-continued",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_update_killed_anywhere_updates_each_pod_once_within_its_budget() {
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
    stateful_set_chaos("sts-chaos", original).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_delete_stateful_set_update_killed_anywhere_deletes_each_pod_once() {
    stateful_set_chaos("sts-chaos-ondelete", json!({"type": "OnDelete"})).await;
}

/// Kills runs updating a 10-replica StatefulSet of update strategy `original`, two pods at a
/// time, until one finishes; each pod updated once, the budget kept, the strategy restored.
async fn stateful_set_chaos(ns: &'static str, original: serde_json::Value) {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use rollout_ext_e2e::stateful::{create_sts, image_of, wait_all_on, watch_pods};
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner(ns);
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let replicas = 10;
    cluster
        .nodes
        .add(NodeSpec::new(&format!("{ns}-1"), ns))
        .await
        .unwrap();
    create_namespace(&client, ns).await;
    let on_delete = original["type"] == "OnDelete";
    let original = create_sts(&client, ns, "db", replicas, V1, original).await;
    let history = watch_pods(&client, ns, "db", replicas as usize, V2);
    let args = in_place_args(cluster, ns, "sts/db");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let handle = tokio::runtime::Handle::current();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: PARTITION_LINES,
            longest: Duration::from_millis(1500),
            kills: (MIN_UPDATE_KILLS, 0),
            finale: None,
            finished_with: 0,
        },
        // A step per updated pod; with a partition, per ordinal it has let go (the controller
        // goes on updating those while no run is alive, so updated pods run ahead of the runs).
        || {
            let (sets, pods) = (sets.clone(), pods.clone());
            let (set, list) = tokio::task::block_in_place(|| {
                handle.block_on(async move {
                    (
                        sets.get_opt("db").await,
                        pods.list(&ListParams::default()).await,
                    )
                })
            });
            let set = serde_json::to_value(set.ok().flatten()).unwrap_or_default();
            let started = set["spec"]["template"]["spec"]["containers"][0]["image"] == V2;
            let done = if on_delete {
                list.map(|l| l.items)
                    .unwrap_or_default()
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none() && image_of(p) == V2)
                    .count()
            } else if started {
                let partition = set["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
                    .as_u64()
                    .unwrap_or(0) as usize;
                (replicas as usize).saturating_sub(partition)
            } else {
                0
            };
            (done, replicas as usize)
        },
    )
    .await;
    let (kills, _, last) = outcome.unwrap_or_else(|e| panic!("{e}"));
    assert!(kills >= MIN_UPDATE_KILLS, "{kills} kills");
    assert_eq!(last.code, Some(0), "the last run finishes: {}", last.stderr);
    wait_all_on(&sets, "db", replicas).await;
    let seen = history.lock().unwrap().clone();
    assert!(!seen.updated_twice(), "no pod updated twice: {seen:?}");
    assert!(seen.most_unavailable <= 2, "within the budget: {seen:?}");
    assert_eq!(seen.updated.len(), replicas as usize, "{seen:?}");
    if !on_delete {
        // (An OnDelete step's deleted pods are started again in the controller's order.)
        let order: Vec<String> = (0..replicas).rev().map(|o| format!("db-{o}")).collect();
        assert_eq!(seen.updated, order, "highest ordinals first");
    }
    let after = serde_json::to_value(sets.get("db").await.unwrap()).unwrap();
    assert_eq!(after["spec"]["updateStrategy"], original);
    assert!(
        after["metadata"]["annotations"]["rollout-ext.io/original-update-strategy"].is_null(),
        "{after}"
    );
}

const NODE_LINES: &[&str] = &[
    "node-update-started",
    "nodes-replacing",
    "nodes-replaced",
    "update-continued",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_update_killed_anywhere_replaces_each_pod_once_within_its_budget() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use rollout_ext_e2e::daemon::{create_ds, wait_ds, watch_nodes};
    use rollout_ext_e2e::stateful::image_of;
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("daemonset chaos");
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let ns = "ds-chaos";
    let nodes = 10;
    for i in 0..nodes {
        let zone = if i % 2 == 0 { "zone-a" } else { "zone-b" };
        let spec = NodeSpec::new(&format!("{ns}-{i}"), ns).zone(zone);
        cluster.nodes.add(spec).await.unwrap();
    }
    create_namespace(&client, ns).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}});
    let original = create_ds(&client, ns, "agent", ns, nodes, V1, original).await;
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let history = watch_nodes(&client, ns, "agent", nodes as usize, V2);
    let args = in_place_args(cluster, ns, "ds/agent");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let handle = tokio::runtime::Handle::current();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: NODE_LINES,
            longest: Duration::from_millis(1500),
            kills: (MIN_UPDATE_KILLS, 0),
            finale: None,
            finished_with: 0,
        },
        // A step per new pod (OnDelete: only the runs replace pods).
        || {
            let pods = pods.clone();
            let list = tokio::task::block_in_place(|| {
                handle.block_on(async move { pods.list(&ListParams::default()).await })
            });
            let new = list
                .map(|l| l.items)
                .unwrap_or_default()
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && image_of(p) == V2)
                .count();
            (new, nodes as usize)
        },
    )
    .await;
    let (kills, _, last) = outcome.unwrap_or_else(|e| panic!("{e}"));
    assert!(kills >= MIN_UPDATE_KILLS, "{kills} kills");
    assert_eq!(last.code, Some(0), "the last run finishes: {}", last.stderr);
    wait_ds(&sets, "agent", nodes).await;
    let seen = history.lock().unwrap().clone();
    assert!(!seen.updated_twice(), "no pod replaced twice: {seen:?}");
    assert!(seen.most_unavailable <= 2, "within the budget: {seen:?}");
    assert_eq!(seen.updated.len(), nodes as usize, "{seen:?}");
    let after = serde_json::to_value(sets.get("agent").await.unwrap()).unwrap();
    assert_eq!(after["spec"]["updateStrategy"], original);
    assert!(
        after["metadata"]["annotations"]["rollout-ext.io/original-update-strategy"].is_null(),
        "{after}"
    );
}

// ---------------------------------------------------------------------------------------------
// A Karpenter NodePool's rotation under chaos.

/// Kills of the Karpenter rotation under chaos, at least.
const MIN_KARPENTER_KILLS: usize = 10;

/// Events of a `--provider karpenter` rotation a kill can be tied to: it never surges, and
/// after each termination it waits for the batch's evicted pods to be Ready again.
const KARPENTER_EVENTS: &[&str] = &[
    "group-started",
    "batch-started",
    "cordoned",
    "drain-started",
    "evicted",
    "drained",
    "terminated",
    "pods-back",
    "replaced",
    "validated",
];

/// Whether a NodeClaim deletion seen is of `pool`'s, and the node it names
/// (the NodeClaim's own name when it never registered one, which no old node has).
fn pool_deletion(
    pool: &str,
    deletion: &rollout_ext_e2e::cluster::NodeClaimDeletion,
) -> Option<String> {
    let ours = deletion.nodeclaim.starts_with(&format!("{pool}-"));
    ours.then(|| deletion.node.clone().unwrap_or(deletion.nodeclaim.clone()))
}

/// The deletions of `pool`'s NodeClaims, as they are seen, as terminations: a NodeClaim's
/// deletion is what ends its instance (Karpenter's finalizer does the rest).
fn nodeclaim_deletions(
    karpenter: &Karpenter,
    pool: &str,
) -> impl futures::Stream<Item = InstanceCall> + Send + 'static {
    let pool = pool.to_string();
    futures::stream::unfold(karpenter.subscribe(), move |mut feed| {
        let pool = pool.clone();
        async move {
            loop {
                let deletion = match feed.recv().await {
                    Ok(deletion) => deletion,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        panic!("observer: missed {n} NodeClaim deletions")
                    }
                    Err(_) => return None,
                };
                if let Some(node) = pool_deletion(&pool, &deletion) {
                    let heard = InstanceCall {
                        verb: Verb::Terminate,
                        node,
                    };
                    return Some((heard, feed));
                }
            }
        }
    })
}

/// The nodes whose NodeClaims of `pool` were deleted so far, in order (each NodeClaim's
/// deletion is seen once, however often it is asked for: a repeated delete is not a second
/// replacement, a new node's is).
fn pool_deletions(karpenter: &Karpenter, pool: &str) -> Vec<String> {
    (karpenter.deletions().iter())
        .filter_map(|d| pool_deletion(pool, d))
        .collect()
}

/// `pool`'s instances once the rotation is over: its NodeClaims, after those deleted are gone
/// (their finalizer is Karpenter's business, and it is quick), each named by its node.
async fn pool_instances(cluster: &TestCluster, pool: &str) -> Vec<String> {
    use rollout_ext_e2e::cluster::{NODEPOOL_LABEL, nodeclaims};
    let claims = nodeclaims(&cluster.client().await);
    for deletion in cluster.karpenter().await.deletions() {
        if pool_deletion(pool, &deletion).is_some() {
            let gone = await_condition(claims.clone(), &deletion.nodeclaim, |c: Option<&_>| {
                c.is_none()
            });
            tokio::time::timeout(WAIT, gone)
                .await
                .expect("a deleted NodeClaim goes once its node is drained")
                .unwrap();
        }
    }
    let selector = format!("{NODEPOOL_LABEL}={pool}");
    (claims.list(&ListParams::default().labels(&selector)).await)
        .unwrap()
        .items
        .iter()
        .map(|c| {
            let node = c.data["status"]["nodeName"].as_str();
            node.map_or_else(|| c.name_any(), str::to_string)
        })
        .collect()
}

/// The rotation chaos loop over a busy NodePool with `--provider karpenter`, Karpenter's
/// consolidation on beside it: whatever moment a run is killed at (mid-drain, between a NodeClaim's deletion and the wait for the pods it
/// evicted), the next finishes it with each old node's NodeClaim deleted once and no new
/// node's, drained first, the nodes budget kept, one node's pods unavailable at a time, and
/// the lock released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_karpenter_rotation_killed_anywhere_resumes_and_stays_safe() {
    use rollout_ext_e2e::cluster::{NODEPOOL_LABEL, new_kubelet};
    let _serial = SERIAL.lock().await;
    let mut rng = seed_banner("karpenter rotation chaos");
    let cluster = TestCluster::shared();
    let pool = "kp-chaos";
    let nodes = 6;
    let karpenter = cluster.karpenter().await;
    // Karpenter consolidates beside the run (WhenEmptyOrUnderutilized, after 1 s): a node a
    // killed run drained and left is empty, and Karpenter's whenever the pool is not paused.
    let consolidating = json!({"consolidateAfter": "1s"});
    let old = (karpenter.busy_pool_with(pool, nodes, Some(consolidating)))
        .await
        .unwrap();
    // One node at a time, no surge: the pool's nodes never fewer than all but one available.
    let budget = Budget {
        outdated: old.clone(),
        max_unavailable: 1,
        max_surge: 0,
        cloud_only: false,
        set_aside: Default::default(),
    };
    // No PodDisruptionBudget in the cluster: one would hold the next batch's evictions back
    // until the last batch's pods were Ready again, which is what the wait for the evicted pods
    // must do on its own. The observer judges it: never more than one node's two pods
    // unavailable at once.
    let pods_back = Pdb {
        name: "one node's pods at a time (the observer's, not in the cluster)".into(),
        match_labels: [("app".to_string(), "web".to_string())].into(),
        min_available: 2 * nodes - 2,
    };
    let observer = Observer::start(
        cluster,
        &format!("{NODEPOOL_LABEL}={pool}"),
        pool,
        budget,
        vec![pods_back],
        nodeclaim_deletions(karpenter, pool),
    )
    .await;
    let args = rollout_ext_e2e::provider_rotation_args(
        cluster,
        "karpenter",
        pool,
        &new_kubelet(),
        &["--yes", "--max-unavailable", "1"],
    );
    let started = Instant::now();
    let outcome = chaos_loop(
        args,
        &mut rng,
        Chaos {
            events: KARPENTER_EVENTS,
            longest: Duration::from_millis(2500),
            kills: (MIN_KARPENTER_KILLS, 3),
            finale: None,
            finished_with: 0,
        },
        // A step per old node's NodeClaim deleted.
        || {
            let deleted = pool_deletions(karpenter, pool);
            (
                deleted.iter().filter(|n| old.contains(*n)).count(),
                old.len(),
            )
        },
    )
    .await;
    let calls: Vec<String> = (pool_deletions(karpenter, pool).iter())
        .map(|n| format!("delete the NodeClaim of {n}"))
        .collect();
    // Karpenter keeps no pool at a size: the end state's "back to its size" holds because each
    // old node's two pods fill exactly one new node, so a node more or less is a wrong launch
    // or a missing one.
    let instances = pool_instances(cluster, pool).await;
    let fewest_available = judge(
        "karpenter rotation chaos",
        started,
        outcome,
        observer.finish(cluster, calls, instances).await,
        (MIN_KARPENTER_KILLS, 3),
    );
    let mut deleted = pool_deletions(karpenter, pool);
    deleted.sort();
    assert_eq!(
        deleted,
        old.iter().cloned().collect::<Vec<_>>(),
        "each old node's NodeClaim deleted, and no new node's"
    );
    assert_eq!(
        fewest_available,
        Some(old.len() - 1),
        "the budget was used (one node unavailable at the worst moment), never exceeded"
    );
}
