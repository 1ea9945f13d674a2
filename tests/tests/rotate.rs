//! `nodes --yes` on the real test bed, driving the simulated cloud through the exec provider:
//! every outdated node replaced exactly once within the unavailability budget, pods moved by the
//! real scheduler, the lock respected, a gate's abort obeyed, and a SIGKILLed run resumed.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::{plugin_binary, wasm_module};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Nodes of `group` running an old kubelet, and new instances that come with the new one.
async fn outdated_group(cluster: &TestCluster, group: &str, n: usize) -> Vec<String> {
    cluster.outdated_group(group, n).await.unwrap()
}

fn rotate_args(cluster: &TestCluster, policy: &Path, group: &str) -> Vec<String> {
    cluster.rotate_args(policy, group)
}

/// Rotates a fresh two-node `group` with the hostile test hook configured by `hook` (a YAML flow
/// mapping of one hooks entry).
async fn rotate_with_hostile_hook(cluster: &TestCluster, group: &str, hook: &str) -> Output {
    outdated_group(cluster, group, 2).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(wasm_module("hostile-hook"), dir.path().join("hostile.wasm")).unwrap();
    let policy = cluster.exec_policy(dir.path(), &format!("  hooks:\n  - {hook}\n"));
    let args = rotate_args(cluster, &policy, group);
    tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap()
}

fn run(args: &[String]) -> Output {
    Command::new(plugin_binary()).args(args).output().unwrap()
}

/// Runs the plugin off the async workers and asserts that it succeeded.
async fn run_to_success(args: Vec<String>) -> Output {
    let out = tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn terminated(cluster: &TestCluster, group: &str) -> Vec<String> {
    cluster.cloud.terminated(group)
}

async fn nodes_of(client: &Client, group: &str) -> Vec<Node> {
    let api: Api<Node> = Api::all(client.clone());
    api.list(&ListParams::default().labels(&format!("kops.k8s.io/instancegroup={group}")))
        .await
        .unwrap()
        .items
}

fn available(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let schedulable = !node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    ready && schedulable
}

/// Watches a group's nodes and records the fewest available (Ready and schedulable) at once.
fn watch_availability(
    client: Client,
    group: &str,
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let fewest = Arc::new(Mutex::new(usize::MAX));
    let record = fewest.clone();
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().labels(&format!("kops.k8s.io/instancegroup={group}"));
    let task = tokio::spawn(async move {
        let mut state: HashMap<String, bool> = HashMap::new();
        let mut listed = false;
        let mut events = watcher(api, config).boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    state.insert(n.name_any(), available(&n));
                }
                watcher::Event::Delete(n) => {
                    state.remove(&n.name_any());
                }
                watcher::Event::Init => {}
                watcher::Event::InitDone => listed = true,
            }
            // Count only once the initial listing is complete.
            if listed {
                let now = state.values().filter(|a| **a).count();
                let mut f = record.lock().unwrap();
                *f = (*f).min(now);
            }
        }
    });
    (fewest, task)
}

#[tokio::test]
async fn a_group_is_replaced_once_within_the_budget() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let originals = outdated_group(cluster, "rot", 6).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "rot"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "rot");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {"kops.k8s.io/instancegroup": "rot"},
                                       "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &rs).await.unwrap();
    let ready4 = |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(4)
    };
    tokio::time::timeout(WAIT, await_condition(rss.clone(), "web", ready4))
        .await
        .unwrap()
        .unwrap();

    let (fewest, watch) = watch_availability(client.clone(), "rot");
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = rotate_args(cluster, &policy, "rot");
    args.extend(["--max-unavailable".to_string(), "1".into()]);
    let out = tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap();
    watch.abort();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every original node terminated exactly once.
    let mut gone = terminated(cluster, "rot");
    gone.sort();
    assert_eq!(gone, originals);
    // Never more than one node unavailable.
    assert_eq!(
        *fewest.lock().unwrap(),
        5,
        "at most maxUnavailable=1 node unavailable at once"
    );
    // Six Ready replacements with the new kubelet, and the workload whole again.
    let nodes = nodes_of(&client, "rot").await;
    assert_eq!(nodes.len(), 6);
    for n in &nodes {
        assert!(available(n), "{} is Ready and schedulable", n.name_any());
        assert_eq!(
            n.status
                .as_ref()
                .unwrap()
                .node_info
                .as_ref()
                .unwrap()
                .kubelet_version,
            "v1.20.2"
        );
    }
    tokio::time::timeout(WAIT, await_condition(rss, "web", ready4))
        .await
        .unwrap()
        .unwrap();
    // The JSON events tell the story: a canary batch first, then batches of one.
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let batches: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "batch-started")
        .collect();
    assert_eq!(batches.len(), 6);
    assert_eq!(batches[0]["canary"], true);
    assert!(
        batches
            .iter()
            .all(|b| b["nodes"].as_array().unwrap().len() == 1)
    );
    assert_eq!(events.last().unwrap()["event"], "done");
    // The lock was given back.
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    assert!(leases.get_opt("rollout-ext").await.unwrap().is_none());
}

#[tokio::test]
async fn a_termination_a_stopped_run_began_is_finished_by_the_next_run() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = outdated_group(cluster, "halfway", 2).await;
    let client = cluster.client().await;
    let live = cluster.live().await;
    // Given a run that stopped between deleting halfway-1's Node and terminating its instance:
    // the record of the termination on the lock it let go of, the Node gone, the instance up.
    let stopped = live.lock("someone@here/pid-1", false).await.unwrap();
    let record =
        json!({"node": "halfway-1", "providerID": "sim:///halfway/halfway-1", "group": "halfway"});
    stopped
        .set_state(
            "rollout-ext.io/terminating.halfway",
            Some(&record.to_string()),
        )
        .await
        .unwrap();
    stopped
        .set_state("rollout-ext.io/expected.halfway", Some("2"))
        .await
        .unwrap();
    stopped.abandon().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .delete("halfway-1", &Default::default())
        .await
        .unwrap();
    assert!(terminated(cluster, "halfway").is_empty());

    // When the same command runs, then it terminates that instance first, once, and finishes.
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, "halfway");
    let out = run_to_success(args).await;
    let events = String::from_utf8_lossy(&out.stdout);
    let first_termination = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "terminated" || e["event"] == "warning")
        .unwrap();
    assert_eq!(
        first_termination["message"],
        "finishing the termination of halfway-1, which a stopped run began",
        "{events}"
    );
    assert_eq!(terminated(cluster, "halfway"), originals);
    assert!(
        cluster
            .cloud
            .calls()
            .iter()
            .filter(|c| c.target.starts_with("halfway-"))
            .all(|c| c.effective),
        "no call for an instance already gone"
    );
    let leases: Api<Lease> = Api::namespaced(client, "kube-system");
    assert!(leases.get_opt("rollout-ext").await.unwrap().is_none());
}

#[tokio::test]
async fn a_surge_a_stopped_run_began_is_finished_without_a_second_replacement() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = outdated_group(cluster, "halfsurge", 3).await;
    let live = cluster.live().await;
    // Given a run that recorded its surge of halfsurge-3 (the group then expecting 4 Ready
    // nodes), had the cloud detach it, and stopped before marking the node detached.
    let stopped = live.lock("someone@here/pid-1", false).await.unwrap();
    let record = json!([{"node": "halfsurge-3", "providerID": "sim:///halfsurge/halfsurge-3", "group": "halfsurge"}]);
    stopped
        .set_states(&[
            ("rollout-ext.io/expected.halfsurge", Some("4")),
            (
                "rollout-ext.io/surging.halfsurge",
                Some(&record.to_string()),
            ),
        ])
        .await
        .unwrap();
    stopped.abandon().await.unwrap();
    let detached = Command::new(rollout_ext_e2e::helper_binary("sim-cloud"))
        .args(["--socket", cluster.cloud.socket.to_str().unwrap()])
        .args(["detach", "halfsurge-3"])
        .output()
        .unwrap();
    assert!(detached.status.success());

    // When the same command runs, then it marks the surge done (the cloud's detach answering
    // that the instance is already detached), surges nothing more, and replaces the group.
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = rotate_args(cluster, &policy, "halfsurge");
    args.extend(["--max-surge".to_string(), "1".into()]);
    let out = run_to_success(args).await;
    let events = events_of(&out);
    assert_eq!(
        events
            .iter()
            .find(|e| e["event"] == "warning")
            .map(|e| e["message"].clone()),
        Some(json!(
            "finishing the surge of halfsurge-3, which a stopped run began"
        ))
    );
    assert!(!events.iter().any(|e| e["event"] == "surging"));
    assert_eq!(terminated(cluster, "halfsurge"), originals);
    let calls = cluster.cloud.calls();
    let detaches: Vec<&str> = calls
        .iter()
        .filter(|c| c.verb == "detach" && c.target.starts_with("halfsurge-"))
        .map(|c| c.target.as_str())
        .collect();
    assert_eq!(detaches, ["halfsurge-3", "halfsurge-3"]);
    let instances = cluster.nodes.nodes_of("halfsurge");
    assert_eq!(
        instances.len(),
        3,
        "one replacement for the surge, none for the detached instance: {instances:?}"
    );
}

#[tokio::test]
async fn a_held_lock_refuses_a_second_rotation_and_changes_nothing() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    outdated_group(cluster, "locked", 2).await;
    let live = cluster.live().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, "locked");
    let held = live.lock("someone@elsewhere/pid-1", false).await.unwrap();
    let out = tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap();
    held.release().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("someone@elsewhere/pid-1"));
    assert!(terminated(cluster, "locked").is_empty());
    let client = cluster.client().await;
    assert!(
        nodes_of(&client, "locked").await.iter().all(available),
        "nothing was cordoned"
    );
}

#[tokio::test]
async fn a_gate_abort_stops_before_anything_is_terminated() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let out = rotate_with_hostile_hook(
        cluster,
        "gated",
        "{name: stopper, module: hostile.wasm, points: [gate], config: {gate: abort}}",
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hostile gate says stop") && stderr.contains("run the same command again"),
        "{stderr}"
    );
    assert!(terminated(cluster, "gated").is_empty());
}

#[tokio::test]
async fn a_killed_rotation_resumes_without_doing_anything_twice() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = outdated_group(cluster, "resume", 4).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, "resume");

    // First run: killed right after its first termination.
    signal_at_first_termination(args.clone(), libc::SIGKILL).await;
    assert_eq!(
        terminated(cluster, "resume").len(),
        1,
        "killed after one termination"
    );
    // `status` shows the interrupted run: its holder and what it still expects.
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let status = |kubeconfig: String| {
        let out = run(&[
            "status".to_string(),
            "--kubeconfig".into(),
            kubeconfig,
            "-o".into(),
            "json".into(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let interrupted = status(kubeconfig.clone());
    assert!(
        interrupted["lock"]["holder"]
            .as_str()
            .unwrap()
            .contains("/pid-"),
        "{interrupted}"
    );
    assert_eq!(
        interrupted["lock"]["state"]["rollout-ext.io/expected.resume"],
        "4"
    );

    // The same command again finishes the job (taking over the dead run's lock).
    rerun_finishes(cluster, args, "resume", &originals).await;
    let client = cluster.client().await;
    let versions: BTreeMap<String, String> = nodes_of(&client, "resume")
        .await
        .into_iter()
        .map(|n| {
            (
                n.name_any(),
                n.status.unwrap().node_info.unwrap().kubelet_version,
            )
        })
        .collect();
    assert_eq!(versions.len(), 4);
    assert!(versions.values().all(|v| v == "v1.20.2"), "{versions:?}");
    let finished = status(kubeconfig);
    assert!(
        finished["lock"].is_null(),
        "the finished run removed its state: {finished}"
    );
}

fn events_of(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test]
async fn surge_creates_capacity_first_and_never_goes_below_it() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let originals = outdated_group(cluster, "surge", 4).await;
    let (fewest, watch) = watch_availability(client.clone(), "surge");
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = rotate_args(cluster, &policy, "surge");
    args.extend(["--max-surge".to_string(), "2".into()]);
    let out = tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap();
    watch.abort();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let events = events_of(&out);
    let surging: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "surging").collect();
    assert_eq!(surging.len(), 2, "a canary surge alone, then the other");
    assert_eq!(surging[0]["canary"], true);
    assert_eq!(surging[0]["detached"], json!(["surge-4"]));
    assert_eq!(surging[1]["detached"], json!(["surge-3"]));
    let first_batch = events
        .iter()
        .position(|e| e["event"] == "batch-started")
        .unwrap();
    let last_surge = events
        .iter()
        .rposition(|e| e["event"] == "surging")
        .unwrap();
    assert!(last_surge < first_batch, "surges come before any drain");

    let calls: Vec<(String, String)> = cluster
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.target.starts_with("surge-"))
        .map(|c| (c.verb, c.target))
        .collect();
    let detached: Vec<&str> = calls
        .iter()
        .filter(|c| c.0 == "detach")
        .map(|c| c.1.as_str())
        .collect();
    assert_eq!(detached, ["surge-4", "surge-3"]);
    let mut gone = terminated(cluster, "surge");
    gone.sort();
    assert_eq!(gone, originals);
    // maxUnavailable is 0 with a surge: never fewer than the original four available.
    assert!(
        *fewest.lock().unwrap() >= 4,
        "fewest available: {}",
        fewest.lock().unwrap()
    );
    // Detached instances are not replaced: the group is back to four.
    let nodes = nodes_of(&client, "surge").await;
    assert_eq!(nodes.len(), 4);
    assert!(nodes.iter().all(available));
}

#[tokio::test]
async fn a_failing_hook_stops_the_rotation_before_anything_changes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let out = rotate_with_hostile_hook(
        cluster,
        "hooked",
        "{name: spinner, module: hostile.wasm, points: [select], timeout: 200ms, config: {select: loop}}",
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hook spinner failed at the select point: timed out"),
        "{stderr}"
    );
    assert!(terminated(cluster, "hooked").is_empty());
    let client = cluster.client().await;
    assert!(
        nodes_of(&client, "hooked").await.iter().all(available),
        "nothing was cordoned"
    );
}

#[tokio::test]
async fn a_refused_drain_stops_unless_told_to_go_on_and_cloudonly_skips_it() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let names = outdated_group(cluster, "stubborn", 1).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "stubborn"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let bare: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "pet"},
        "spec": {"nodeName": names[0], "containers": [{"name": "main", "image": "registry.invalid/pet:1"}]}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "stubborn")
        .create(&PostParams::default(), &bare)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");

    // By default the unmanaged pod stops the rotation, and nothing is terminated.
    let args = rotate_args(cluster, &policy, "stubborn");
    let out = tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stubborn/pet declares no controller"),
        "{stderr}"
    );
    assert!(terminated(cluster, "stubborn").is_empty());

    // --cloudonly neither cordons nor drains: it terminates.
    let mut args = rotate_args(cluster, &policy, "stubborn");
    args.push("--cloudonly".into());
    let out = run_to_success(args).await;
    let events = events_of(&out);
    assert!(
        events
            .iter()
            .all(|e| e["event"] != "cordoned" && e["event"] != "evicted")
    );
    assert_eq!(terminated(cluster, "stubborn"), names);
}

#[tokio::test]
async fn a_usage_error_changes_nothing_and_exits_2() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, "no-such-group");
    let out = tokio::task::spawn_blocking(move || run(&args))
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"no-such-group\" not found"));
    let leases: Api<Lease> = Api::namespaced(cluster.client().await, "kube-system");
    let lease = leases.get_opt("rollout-ext").await.unwrap();
    assert!(
        lease.is_none(),
        "nothing to resume, so no lock is left behind"
    );
}

#[tokio::test]
async fn interactive_asks_before_each_batch_and_a_no_stops_resumably() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    outdated_group(cluster, "asked", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = rotate_args(cluster, &policy, "asked");
    args.push("-i".into());
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(plugin_binary())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Yes to the first batch, no to the second.
        child.stdin.take().unwrap().write_all(b"y\nn\n").unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(
        stderr.matches("? [y/N]").count(),
        2,
        "asked once per batch: {stderr}"
    );
    assert!(
        stderr.contains("stopped at the operator's request before batch 2"),
        "{stderr}"
    );
    assert_eq!(
        terminated(cluster, "asked"),
        ["asked-1"],
        "only the accepted batch"
    );
}

#[tokio::test]
async fn ctrl_c_stops_between_calls_and_the_same_command_finishes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = outdated_group(cluster, "interrupt", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, "interrupt");

    // What Ctrl-C sends.
    let (code, stderr) = signal_at_first_termination(args.clone(), libc::SIGINT).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("interrupted") && stderr.contains("run the same command again"),
        "{stderr}"
    );
    let after_interrupt = terminated(cluster, "interrupt");
    assert!(
        !after_interrupt.is_empty() && after_interrupt.len() < originals.len(),
        "{after_interrupt:?}"
    );

    rerun_finishes(cluster, args, "interrupt", &originals).await;
}

#[tokio::test]
async fn ctrl_c_during_a_provider_call_lets_it_finish_and_the_next_run_does_not_repeat_it() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = outdated_group(cluster, "patient", 2).await;
    // A provider whose terminate takes a while after the cloud has acted on it.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    let cloud = rollout_ext_e2e::helper_binary("sim-cloud");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  provider:\n    exec:\n      terminate: [sh, -c, '\"$0\" --socket \"$1\" terminate \"$2\" && sleep 2', \"{}\", \"{}\", \"{{node}}\"]\n",
            cloud.display(),
            cluster.cloud.socket.display()
        ),
    )
    .unwrap();
    let args = rotate_args(cluster, &policy, "patient");

    let mut calls = cluster.cloud.subscribe();
    let child = Command::new(plugin_binary())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        let call = tokio::time::timeout(WAIT, calls.recv())
            .await
            .unwrap()
            .unwrap();
        if call.verb == "terminate" && call.target.starts_with("patient-") {
            break;
        }
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our live child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("finishing the provider call in progress")
            && stderr.contains("interrupted; run the same command again"),
        "{stderr}"
    );
    let events = events_of(&out);
    assert_eq!(
        events.iter().filter(|e| e["event"] == "terminated").count(),
        1,
        "the call in progress finished and was reported"
    );
    assert_eq!(terminated(cluster, "patient").len(), 1);

    rerun_finishes(cluster, args, "patient", &originals).await;
}

/// Runs a rotation (`-o json`) and sends it `signal` right after its first termination; returns
/// its exit code and stderr.
async fn signal_at_first_termination(args: Vec<String>, signal: i32) -> (Option<i32>, String) {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(plugin_binary())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        for line in stdout.lines() {
            let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if event["event"] == "terminated" {
                // SAFETY: kill has no memory-safety preconditions; the pid is our live child's.
                unsafe { libc::kill(child.id() as i32, signal) };
                break;
            }
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// Runs the same command again: it succeeds, and each of `originals` was terminated exactly once
/// over both runs.
async fn rerun_finishes(
    cluster: &TestCluster,
    args: Vec<String>,
    group: &str,
    originals: &[String],
) {
    run_to_success(args).await;
    let mut gone = terminated(cluster, group);
    gone.sort();
    assert_eq!(
        gone, originals,
        "each original node terminated exactly once"
    );
}

/// The exclusion label of each node of `group` when it was first seen cordoned, and every value
/// the label took on a node, as a watch of the group's nodes saw them.
#[derive(Default)]
struct LabelsSeen {
    at_cordon: BTreeMap<String, Option<String>>,
    values: BTreeMap<String, Vec<String>>,
}

fn watch_exclusion_labels(
    client: Client,
    group: &str,
) -> (Arc<Mutex<LabelsSeen>>, tokio::task::JoinHandle<()>) {
    const LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
    let seen = Arc::new(Mutex::new(LabelsSeen::default()));
    let record = seen.clone();
    let api: Api<Node> = Api::all(client);
    let config = watcher::Config::default().labels(&format!("kops.k8s.io/instancegroup={group}"));
    let task = tokio::spawn(async move {
        use kube::runtime::WatchStreamExt;
        let mut events = watcher(api, config).applied_objects().boxed();
        while let Some(Ok(node)) = events.next().await {
            let label = node.labels().get(LABEL).cloned();
            let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
            let mut seen = record.lock().unwrap();
            if cordoned {
                seen.at_cordon
                    .entry(node.name_any())
                    .or_insert(label.clone());
            }
            let values = seen.values.entry(node.name_any()).or_default();
            if let Some(value) = label
                && values.last() != Some(&value)
            {
                values.push(value);
            }
        }
    });
    (seen, task)
}

/// Every node the rotation cordons leaves external load balancers in the same write, so before
/// any of its pods is evicted (a cordon alone no longer takes a node out of them); a node that
/// carries the label already keeps it as it is; a policy can turn the label off.
#[tokio::test]
async fn cordoned_nodes_leave_external_load_balancers_before_their_pods_are_evicted() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let originals = outdated_group(cluster, "lbx", 3).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let theirs = &originals[0];
    let label = json!({"metadata": {"labels": {
        "node.kubernetes.io/exclude-from-external-load-balancers": "ops"}}});
    nodes
        .patch(
            theirs,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .unwrap();

    let (seen, watch) = watch_exclusion_labels(client.clone(), "lbx");
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let out = run_to_success(rotate_args(cluster, &policy, "lbx")).await;
    let events = events_of(&out);
    let mut cordoned: Vec<(String, bool)> = events
        .iter()
        .filter(|e| e["event"] == "cordoned")
        .map(|e| {
            let node = e["node"].as_str().unwrap().to_string();
            (node, e["excluded_from_load_balancers"] == true)
        })
        .collect();
    cordoned.sort();
    let expected: Vec<(String, bool)> =
        originals.iter().map(|n| (n.clone(), n != theirs)).collect();
    assert_eq!(cordoned, expected);

    // The first sighting of each cordon shows the label: it came in the cordon's own write.
    let mut off_cluster = run_with_labels_off(cluster).await;
    watch.abort();
    let seen = seen.lock().unwrap();
    for node in &originals {
        let want = if node == theirs { "ops" } else { "rollout-ext" };
        assert_eq!(
            seen.at_cordon.get(node).cloned().flatten().as_deref(),
            Some(want),
            "{node} when first seen cordoned"
        );
    }
    assert_eq!(
        seen.values[theirs],
        ["ops"],
        "someone else's label is left as it is"
    );
    off_cluster.sort();
    assert!(
        off_cluster.iter().all(|(_, label)| label.is_none()),
        "with drain.excludeFromLoadBalancers: false no node is labelled: {off_cluster:?}"
    );
}

/// Rotates a one-node group under a policy with `drain.excludeFromLoadBalancers: false`; each
/// node's exclusion label when first seen cordoned.
async fn run_with_labels_off(cluster: &TestCluster) -> Vec<(String, Option<String>)> {
    let client = cluster.client().await;
    outdated_group(cluster, "lbx-off", 1).await;
    let (seen, watch) = watch_exclusion_labels(client, "lbx-off");
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(
        dir.path(),
        "  drain:\n    excludeFromLoadBalancers: false\n",
    );
    let out = run_to_success(rotate_args(cluster, &policy, "lbx-off")).await;
    watch.abort();
    let cordons = events_of(&out)
        .iter()
        .filter(|e| e["event"] == "cordoned")
        .count();
    assert_eq!(cordons, 1);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.at_cordon.len(), 1, "the node was seen cordoned");
    seen.at_cordon
        .iter()
        .map(|(n, l)| (n.clone(), l.clone()))
        .collect()
}

/// With `drain.loadBalancerDrainDelay`, each batch's nodes are cordoned (and labelled out of
/// load balancers) first, the delay is held once, and only then does any drain start.
#[tokio::test]
async fn a_load_balancer_drain_delay_comes_between_the_cordons_and_the_drains() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let nodes = outdated_group(cluster, "lbd", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "  drain:\n    loadBalancerDrainDelay: 1s\n");
    let mut args = rotate_args(cluster, &policy, "lbd");
    args.extend(["--max-unavailable".to_string(), "2".into()]);
    let out = run_to_success(args).await;
    let events = events_of(&out);
    let kinds: Vec<String> = events
        .iter()
        .filter_map(|e| {
            let kind = e["event"].as_str()?;
            match kind {
                "batch-started" | "cordoned" | "drain-started" => Some(kind.to_string()),
                "waiting"
                    if e["reason"]
                        .as_str()?
                        .starts_with("load-balancer drain delay") =>
                {
                    Some("delay".into())
                }
                _ => None,
            }
        })
        .collect();
    // A canary of one, then the other two at once.
    assert_eq!(
        kinds,
        [
            "batch-started",
            "cordoned",
            "delay",
            "drain-started",
            "batch-started",
            "cordoned",
            "cordoned",
            "delay",
            "drain-started",
            "drain-started",
        ],
        "{events:?}"
    );
    let mut replaced = terminated(cluster, "lbd");
    replaced.sort();
    assert_eq!(replaced, nodes);
}

/// An out-of-date node that asks not to be disrupted is left alone (the plan says why); one an
/// earlier run had cordoned is given back: uncordoned, without our phase and our label.
#[tokio::test]
async fn a_node_that_asks_not_to_be_disrupted_is_left_alone_and_given_back() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let names = outdated_group(cluster, "keep", 2).await;
    let nodes: Api<Node> = Api::all(client.clone());
    const LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
    // As a stopped run left it, and then asked to be left alone.
    let left = json!({
        "metadata": {
            "labels": {LB: "rollout-ext"},
            "annotations": {"rollout-ext.io/phase": "cordoned", "karpenter.sh/do-not-disrupt": "true"},
        },
        "spec": {"unschedulable": true},
    });
    nodes
        .patch(
            &names[0],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&left),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, "keep");

    let planned = run_to_success(rollout_ext_e2e::plan_of(&args)).await;
    let plan: serde_json::Value = serde_json::from_slice(&planned.stdout).unwrap();
    let instance = (plan["groups"][0]["instances"].as_array().unwrap().iter())
        .find(|i| i["name"] == names[0].as_str())
        .unwrap();
    assert_eq!(instance["update"], false, "{plan}");
    assert!(
        instance["reason"]
            .as_str()
            .unwrap()
            .contains("asks not to be disrupted (karpenter.sh/do-not-disrupt: \"true\")"),
        "{plan}"
    );

    let out = run_to_success(args).await;
    assert_eq!(terminated(cluster, "keep"), [names[1].clone()]);
    assert!(
        events_of(&out)
            .iter()
            .any(|e| e["event"] == "uncordoned" && e["node"] == names[0].as_str()),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let node = nodes.get(&names[0]).await.unwrap();
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true));
    assert!(!node.metadata.labels.unwrap_or_default().contains_key(LB));
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("rollout-ext.io/phase"),
        "{annotations:?}"
    );
    assert_eq!(
        annotations
            .get("karpenter.sh/do-not-disrupt")
            .map(String::as_str),
        Some("true")
    );
}

/// The simulated cloud's boot delay, set for a test and back to its default after it (even
/// when the test fails).
struct BootDelay<'a>(&'a rollout_ext_e2e::cluster::SimCloud);

impl<'a> BootDelay<'a> {
    fn set(cloud: &'a rollout_ext_e2e::cluster::SimCloud, delay: Duration) -> BootDelay<'a> {
        cloud.set_boot_delay(delay);
        BootDelay(cloud)
    }

    fn to(&self, delay: Duration) {
        self.0.set_boot_delay(delay);
    }
}

impl Drop for BootDelay<'_> {
    fn drop(&mut self) {
        self.0.set_boot_delay(Duration::from_millis(500));
    }
}

/// A rotation records what it measured on the cluster; the plan of the next rotation of the
/// group estimates from it, and comes within 0.67–1.5 times the run's actual wall time.
#[tokio::test]
async fn the_next_plan_estimates_from_what_a_run_measured() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "estimated";
    // Replacements that take a while to join, as real ones do: the estimate's precision (whole
    // seconds) is small beside them.
    let boot = BootDelay::set(&cluster.cloud, Duration::from_secs(2));
    outdated_group(cluster, group, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = rotate_args(cluster, &policy, group);
    let plan_args: Vec<String> = args.iter().filter(|a| *a != "--yes").cloned().collect();
    let estimate = |plan: &Output| -> serde_json::Value {
        let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
        plan["estimate"].clone()
    };

    // Other groups' history may stand in (this cluster rotated others), not this group's own.
    let first = estimate(&run_to_success(plan_args.clone()).await);
    let basis = first["basis"].as_str().unwrap();
    assert!(!basis.starts_with("history of"), "{first}");
    run_to_success(args.clone()).await;

    // The group's nodes are outdated again: the same rotation, planned from its history.
    outdated_group(cluster, group, 3).await;
    let planned = estimate(&run_to_success(plan_args).await);
    assert_eq!(planned["basis"], "history of 1 run", "{planned}");
    let seconds = planned["seconds"].as_f64().unwrap();
    assert!(planned["p90Seconds"].as_f64().unwrap() >= seconds);
    let started = std::time::Instant::now();
    run_to_success(args).await;
    let actual = started.elapsed().as_secs_f64();
    let ratio = seconds / actual;
    println!("estimated {seconds}s, took {actual:.1}s: ratio {ratio:.2} ({planned})");
    assert!(
        (0.67..=1.5).contains(&ratio),
        "estimated {seconds}s, took {actual:.1}s (ratio {ratio:.2}): {planned}"
    );

    // A replacement held back well past the group's history is said while it joins, in the
    // run's events and in `status`.
    outdated_group(cluster, group, 1).await;
    boot.to(Duration::from_secs(10));
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let status_seen = Arc::new(Mutex::new(None::<String>));
    let estimates = Arc::new(Mutex::new(0));
    let (code, stderr) = rollout_ext_e2e::run_watching(rotate_args(cluster, &policy, group), {
        let (seen, estimates) = (status_seen.clone(), estimates.clone());
        move |event| {
            if event["event"] == "estimate" {
                *estimates.lock().unwrap() += 1;
                assert!(event["remaining_seconds"].is_u64(), "{event}");
            }
            let slow = event["event"] == "warning"
                && event["message"].as_str().is_some_and(|m| {
                    m.contains("slower than this cluster's history: replacement joining")
                });
            if slow && seen.lock().unwrap().is_none() {
                let status = Command::new(plugin_binary())
                    .args(["status", "--kubeconfig", &kubeconfig])
                    .output()
                    .unwrap();
                *seen.lock().unwrap() = Some(String::from_utf8_lossy(&status.stdout).into_owned());
            }
        }
    })
    .await;
    drop(boot);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        *estimates.lock().unwrap(),
        2,
        "said at the start and after the batch"
    );
    let status = status_seen.lock().unwrap().clone().expect("a slow warning");
    assert!(
        status.contains(
            "Slow: group estimated: slower than this cluster's history: replacement joining"
        ),
        "{status}"
    );
    assert!(status.contains("Estimate: "), "{status}");
}

/// Someone else (another tool, a person) removes nodes of the group while it rotates: one
/// before its batch, one while the run awaits a batch's replacements, one cordoned, and one
/// while its drain waits for a pod. Each is said once and dropped, never a stop; the run
/// replaces the rest, and terminates none of the removed ones again.
#[tokio::test]
async fn nodes_removed_by_someone_else_at_any_phase_are_dropped_and_the_rest_replaced() {
    use k8s_openapi::api::core::v1::Pod;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let group = "removed";
    let originals = outdated_group(cluster, group, 5).await;
    // A pod that asks not to be disrupted holds the drain of its node (ordered last).
    rollout_ext_e2e::workloads::create_namespace(&client, group).await;
    let held_node = originals[0].clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), group);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "held", "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
        "spec": {"nodeName": held_node, "containers": [{"name": "main", "image": "app:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The load-balancer delay holds the run between a batch's cordons and its drains.
    let policy = cluster.exec_policy(dir.path(), "  drain:\n    loadBalancerDrainDelay: 2s\n");
    let args = rotate_args(cluster, &policy, group);
    let socket = cluster.cloud.socket.clone();
    // What another tool does: terminate the instance, which takes its node with it.
    let remove = move |node: &str| {
        let out = Command::new(rollout_ext_e2e::helper_binary("sim-cloud"))
            .args(["--socket", socket.to_str().unwrap(), "terminate", node])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    let handle = tokio::runtime::Handle::current();
    // The phase each victim was removed in, and the nodes the run said were gone.
    let removed: Arc<Mutex<BTreeMap<&str, String>>> = Arc::default();
    let said: Arc<Mutex<Vec<String>>> = Arc::default();
    let (mut touched, victims, gone) = (Vec::<String>::new(), removed.clone(), said.clone());
    let originals_seen = originals.clone();
    let on_event = move |event: &serde_json::Value| {
        let mut removed = victims.lock().unwrap();
        let node = event["node"].as_str().unwrap_or_default().to_string();
        let untouched = |touched: &[String], removed: &BTreeMap<&str, String>| {
            (originals_seen.iter())
                .find(|o| {
                    **o != held_node && !touched.contains(o) && !removed.values().any(|r| r == *o)
                })
                .cloned()
                .unwrap()
        };
        match event["event"].as_str().unwrap_or_default() {
            "batch-started" => {
                let nodes = event["nodes"].as_array().unwrap();
                touched.extend(nodes.iter().map(|n| n.as_str().unwrap().to_string()));
                if removed.is_empty() {
                    let victim = untouched(&touched, &removed);
                    remove(&victim);
                    removed.insert("before its batch", victim);
                }
            }
            "terminated" if removed.len() == 1 => {
                let victim = untouched(&touched, &removed);
                remove(&victim);
                removed.insert("while replacements are awaited", victim);
            }
            "cordoned" if removed.len() == 2 && node != held_node => {
                remove(&node);
                removed.insert("cordoned", node);
            }
            "pod-held" if removed.len() == 3 && node == held_node => {
                // The node goes while its drain waits; then its pod, as the pod garbage
                // collector would take it.
                remove(&node);
                let now = kube::api::DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                handle.block_on(pods.delete("held", &now)).unwrap();
                removed.insert("draining", node);
            }
            "node-gone" if event["group"] == group => gone.lock().unwrap().push(node),
            _ => {}
        }
    };
    let (code, stderr) = rollout_ext_e2e::run_watching(args, on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let removed = removed.lock().unwrap().clone();
    assert_eq!(removed.len(), 4, "every phase was reached: {removed:?}");
    let mut said = said.lock().unwrap().clone();
    said.sort();
    let mut victims: Vec<String> = removed.values().cloned().collect();
    victims.sort();
    assert_eq!(said, victims, "each removed node said once: {removed:?}");
    // One termination per original: the other tool's, or the run's; none repeated.
    let calls = terminated(cluster, group);
    for original in &originals {
        let times = calls.iter().filter(|c| *c == original).count();
        assert_eq!(times, 1, "{original} terminated {times} times: {calls:?}");
    }
    let after = nodes_of(&client, group).await;
    assert_eq!(
        after.len(),
        originals.len(),
        "the group is back to its size"
    );
    assert!(
        after.iter().all(|n| !originals.contains(&n.name_any())),
        "every node is a new one"
    );
}

/// With `-vvv` each API request of the run is said with when it was answered, how and how
/// long it took (as kubectl's `-v=6`); the pods of a node the run follows are read no older
/// than where its watch of pods started, which the API server answers from its cache at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_vvv_each_request_is_said_and_pods_are_read_no_older_than_the_watch() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let nodes = outdated_group(cluster, "trace", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = rotate_args(cluster, &policy, "trace");
    args.push("-vvv".into());
    let out = run_to_success(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // trace: <answered at> <METHOD> <path?query> <status> in <milliseconds> ms
    let requests: Vec<Vec<&str>> = (stderr.lines())
        .filter_map(|l| l.strip_prefix("trace: "))
        .map(|l| l.split(' ').collect())
        .collect();
    assert!(requests.len() > 10, "{stderr}");
    for r in &requests {
        assert_eq!(r.len(), 7, "{r:?}");
        assert!(r[0].parse::<jiff::Timestamp>().is_ok(), "{r:?}");
        assert!(
            ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&r[1]),
            "{r:?}"
        );
        assert!(r[2].starts_with("/api"), "{r:?}");
        assert!(r[3].parse::<u16>().is_ok(), "{r:?}");
        assert_eq!((r[4], r[6]), ("in", "ms"), "{r:?}");
        assert!(r[5].parse::<f64>().is_ok_and(|ms| ms >= 0.0), "{r:?}");
    }
    let node = &nodes[0];
    let said = |method: &str, path: &str, status: &str| {
        requests
            .iter()
            .any(|r| r[1] == method && r[2].starts_with(path) && r[3] == status)
    };
    assert!(
        said("PATCH", &format!("/api/v1/nodes/{node}?"), "200"),
        "{stderr}"
    );
    assert!(
        said("DELETE", &format!("/api/v1/nodes/{node}?"), "200"),
        "{stderr}"
    );
    let followed = (requests.iter()).find(|r| {
        r[1] == "GET"
            && r[2].starts_with("/api/v1/pods?")
            && r[2].contains(&format!("fieldSelector=spec.nodeName%3D{node}&"))
            && !r[2].contains("watch=true")
    });
    let followed = followed.unwrap_or_else(|| panic!("no list of {node}'s pods: {stderr}"));
    assert!(
        followed[2].contains("&resourceVersionMatch=NotOlderThan"),
        "{followed:?}"
    );
}
