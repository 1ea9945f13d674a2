//! What a run does with kured's reboot lock on the real test cluster (kured played by a
//! DaemonSet that runs its image and carries its lock): it holds the lock while each batch is out
//! and lets go of it after; it waits while kured holds it, or until kured's hold runs out of its
//! TTL; and the lock is let go after an
//! abort, and by the next run after a run killed while it held it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::{kured, plugin_binary};
use serde_json::Value;

/// One rotation at a time: they share the cluster's lock and kured's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `nodes` of a fresh `group` of `outdated` nodes, a budget of one, with a post-drain delay of
/// `delay`.
async fn rotation(cluster: &TestCluster, group: &str, outdated: usize, delay: &str) -> Args {
    cluster.outdated_group(group, outdated).await.unwrap();
    kured::daemon_set(cluster.client().await).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = cluster.rotate_args(&policy, group);
    args.extend(["--max-unavailable", "1"].map(String::from));
    let at = args.iter().position(|a| a == "--post-drain-delay").unwrap();
    args[at + 1] = delay.to_string();
    Args { args, _dir: dir }
}

struct Args {
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

/// The holder a run wrote: its `nodeID` and the nodes it names.
fn run_holder(lock: &Value) -> (String, Vec<String>) {
    let id = lock["nodeID"].as_str().unwrap_or_default().to_string();
    let nodes = (lock["metadata"]["nodes"].as_array().into_iter().flatten())
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    (id, nodes)
}

/// Where the run was (a node cordoned, or `done`) and kured's lock then.
type Seen = (String, Option<Value>);

#[tokio::test]
async fn the_run_holds_kureds_lock_while_each_batch_is_out_and_lets_go_after() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let group = "kured-held";
    let run = rotation(cluster, group, 2, "0s").await;
    // The lock as each node is cordoned, and right after each batch's replacements are Ready.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let (record, handle, reader) = (
        seen.clone(),
        tokio::runtime::Handle::current(),
        client.clone(),
    );
    let on_event = move |event: &Value| {
        let at = match event["event"].as_str().unwrap_or_default() {
            "cordoned" => event["node"].as_str().unwrap().to_string(),
            "group-done" => "done".to_string(),
            _ => return,
        };
        let lock = handle.block_on(kured::lock(reader.clone()));
        record.lock().unwrap().push((at, lock));
    };
    let (code, stderr) = rollout_ext_e2e::run_watching(run.args.clone(), on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (node, lock) in &seen[..2] {
        let lock = lock
            .as_ref()
            .unwrap_or_else(|| panic!("no lock while {node} was cordoned"));
        let (id, nodes) = run_holder(lock);
        assert!(id.starts_with("rollout-ext/"), "{lock}");
        assert_eq!(
            nodes,
            std::slice::from_ref(node),
            "the lock names the batch: {lock}"
        );
    }
    assert_eq!(
        seen[2],
        ("done".to_string(), None),
        "let go after the last batch"
    );
    assert_eq!(kured::lock(client).await, None);
}

#[tokio::test]
async fn the_run_waits_while_kured_holds_its_lock_then_takes_it() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let group = "kured-wait";
    let run = rotation(cluster, group, 1, "0s").await;
    // kured reboots a node elsewhere in the cluster: its lock has no room for the run.
    kured::hold_for(client.clone(), Some("elsewhere-1")).await;
    let kubeconfig = cluster.kubeconfig.clone();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let status: Arc<Mutex<String>> = Arc::default();
    let (events, shown, handle, writer) = (
        seen.clone(),
        status.clone(),
        tokio::runtime::Handle::current(),
        client.clone(),
    );
    let on_event = move |event: &Value| {
        events.lock().unwrap().push(event.clone());
        if event["event"] == "kured-lock-held" {
            let out = Command::new(plugin_binary())
                .args(["status", "--kubeconfig", kubeconfig.to_str().unwrap()])
                .output()
                .unwrap();
            *shown.lock().unwrap() = String::from_utf8_lossy(&out.stdout).into_owned();
            // kured's node is back: it lets go of the lock.
            handle.block_on(kured::hold_for(writer.clone(), None));
        }
    };
    let (code, stderr) = rollout_ext_e2e::run_watching(run.args.clone(), on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let events = seen.lock().unwrap().clone();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let held = (kinds.iter())
        .position(|k| *k == "kured-lock-held")
        .unwrap_or_else(|| panic!("the run never waited for kured: {kinds:?}"));
    let cordoned = kinds.iter().position(|k| *k == "cordoned").unwrap();
    assert!(held < cordoned, "waited before any cordon: {kinds:?}");
    assert_eq!(events[held]["holders"], serde_json::json!(["elsewhere-1"]));
    assert_eq!(events[held]["daemon_set"], "kube-system/kured");
    let status = status.lock().unwrap().clone();
    assert!(
        status
            .contains("kured's reboot lock on DaemonSet kube-system/kured is held by elsewhere-1"),
        "status says what the run waits for: {status}"
    );
    assert_eq!(kured::lock(client).await, None, "let go after the run");
}

/// kured's lock taken with a TTL (kured's `--lock-ttl`) by a node elsewhere, which then never
/// lets go: the run waits while it holds, and goes on once its TTL runs out, with nothing in the
/// cluster changing meanwhile.
#[tokio::test]
async fn the_run_goes_on_once_kureds_lock_runs_out_of_its_ttl() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let group = "kured-ttl";
    let run = rotation(cluster, group, 1, "0s").await;
    let ttl = std::time::Duration::from_secs(3);
    kured::hold_with_ttl(client.clone(), Some("elsewhere-2"), ttl).await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let events = seen.clone();
    let on_event = move |event: &Value| events.lock().unwrap().push(event.clone());
    // A hold that missed the TTL running out would last for ever: nothing else changes.
    let (code, stderr) = rollout_ext_e2e::run_watching(run.args.clone(), on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let events = seen.lock().unwrap().clone();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let held = (kinds.iter())
        .position(|k| *k == "kured-lock-held")
        .unwrap_or_else(|| panic!("the run never waited for kured: {kinds:?}"));
    let cordoned = kinds.iter().position(|k| *k == "cordoned").unwrap();
    assert!(held < cordoned, "{kinds:?}");
    assert_eq!(events[held]["holders"], serde_json::json!(["elsewhere-2"]));
    assert_eq!(kured::lock(client).await, None, "let go after the run");
}

/// The lock as a run holding it in its post-drain delay leaves it when it is aborted there, or
/// killed there; the killed run's is let go by the same command run again.
async fn stopped_in_its_batch(group: &str, stop: impl Fn(u32, &str) + Send + 'static) -> Args {
    let cluster = TestCluster::shared();
    let run = rotation(cluster, group, 1, "30s").await;
    let args = run.args.clone();
    let client = cluster.client().await;
    let handle = tokio::runtime::Handle::current();
    let held = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(plugin_binary())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut held = None;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if event["event"] == "waiting" && held.is_none() {
                held = handle.block_on(kured::lock(client.clone()));
                stop(child.id(), &event.to_string());
            }
        }
        child.wait().unwrap();
        held
    })
    .await
    .unwrap();
    let (id, _) = run_holder(&held.expect("the lock was held in the delay"));
    assert!(id.starts_with("rollout-ext/"), "{id}");
    run
}

#[tokio::test]
async fn an_aborted_run_lets_go_of_kureds_lock() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let kubeconfig = cluster.kubeconfig.clone();
    stopped_in_its_batch("kured-abort", move |_, _| {
        let out = Command::new(plugin_binary())
            .args(["abort", "--kubeconfig", kubeconfig.to_str().unwrap()])
            .args(["--reason", "test"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    })
    .await;
    assert_eq!(kured::lock(cluster.client().await).await, None);
}

#[tokio::test]
async fn a_killed_runs_hold_on_kureds_lock_is_let_go_by_the_next_run() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let run = stopped_in_its_batch("kured-killed", |pid, _| {
        // SAFETY: kill has no memory-safety preconditions; the pid is our live child's.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    })
    .await;
    let client = cluster.client().await;
    let left = kured::lock(client.clone())
        .await
        .expect("a killed run leaves its hold");
    assert!(run_holder(&left).0.starts_with("rollout-ext/"), "{left}");
    let again = Command::new(plugin_binary())
        .args(&run.args)
        .output()
        .unwrap();
    assert!(again.status.success(), "{again:?}");
    assert_eq!(kured::lock(client).await, None, "the next run let it go");
}
