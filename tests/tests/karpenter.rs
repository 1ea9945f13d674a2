//! `nodes --yes --provider karpenter` on the real test cluster, against Karpenter itself (its
//! kwok cloud provider: NodeClaims launched for pods that wait, terminated through its own
//! finalizer and drain): each old node's
//! NodeClaim goes once, and the pods a batch evicted are Ready again before the next batch
//! begins (watched from outside: never more than one node's pods unavailable), also when a run
//! stopped in its last wait for them and the pool has no node left to rotate; a surge is
//! refused before anything changes; the plan warns of the NodePool's own disruption budgets.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use rollout_ext_e2e::cluster::{BOOT, Karpenter, NODEPOOL_LABEL, TestCluster, new_kubelet};
use rollout_ext_e2e::observer::pod_ready;
use rollout_ext_e2e::{events, provider_rotation_args, run_plugin};
use serde_json::json;

/// One rotation at a time: they share the cluster's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `nodes --provider karpenter` of NodePool `pool` (a plan unless `--yes` is in `flags`).
fn args(cluster: &TestCluster, pool: &str, flags: &[&str]) -> Vec<String> {
    provider_rotation_args(cluster, "karpenter", pool, &new_kubelet(), flags)
}

/// Watches the pods of `namespace` from now on; the returned cell holds the most that were
/// ever missing or not Ready at once (of `want`), counted once the first listing is complete.
async fn most_unavailable(
    cluster: &TestCluster,
    namespace: &str,
    want: usize,
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let api: Api<Pod> = Api::namespaced(cluster.client().await, namespace);
    let most = Arc::new(Mutex::new(0));
    let seen = most.clone();
    let (synced_tx, synced) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready: BTreeMap<String, bool> = BTreeMap::new();
        let mut synced_tx = Some(synced_tx);
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    let up = pod_ready(&p) && p.metadata.deletion_timestamp.is_none();
                    ready.insert(p.metadata.name.unwrap_or_default(), up);
                }
                watcher::Event::Delete(p) => {
                    ready.remove(&p.metadata.name.unwrap_or_default());
                }
                watcher::Event::Init => continue,
                watcher::Event::InitDone => {
                    if let Some(tx) = synced_tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
            if synced_tx.is_none() {
                let up = ready.values().filter(|r| **r).count();
                let mut most = seen.lock().unwrap();
                *most = (*most).max(want.saturating_sub(up));
            }
        }
    });
    synced.await.expect("the pod watch lists the namespace");
    (most, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_pool_rotates_with_each_batchs_pods_ready_again_before_the_next() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "kp-roll";
    let karpenter = cluster.karpenter().await;
    let old = karpenter.busy_pool(pool, 3).await.unwrap();

    // The plan warns that Karpenter's default budget (10%) lets it disrupt nodes meanwhile.
    let plan = run_plugin(args(cluster, pool, &[])).await;
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let warned = plan["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| {
            w.as_str().unwrap().contains(&format!(
                "NodePool {pool} lets Karpenter disrupt nodes of its own while the rotation runs (budgets: 10%)"
            ))
        });
    assert!(warned, "{plan}");

    let (most, watch) = most_unavailable(cluster, pool, 6).await;
    // The pool's budgets as each node is cordoned: Karpenter's own disruptions paused.
    let during: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let (seen, handle, client) = (
        during.clone(),
        tokio::runtime::Handle::current(),
        cluster.client().await,
    );
    let all: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let every = all.clone();
    let on_event = move |event: &serde_json::Value| {
        every.lock().unwrap().push(event.clone());
        if event["event"] == "cordoned" {
            let pools = rollout_ext_e2e::cluster::nodepools(&client);
            let object = handle.block_on(pools.get(pool)).unwrap();
            seen.lock()
                .unwrap()
                .push(object.data["spec"]["disruption"]["budgets"].clone());
        }
    };
    let run = args(cluster, pool, &["--yes"]);
    let (code, stderr) = rollout_ext_e2e::run_watching(run, on_event).await;
    watch.abort();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(*during.lock().unwrap(), vec![json!([{"nodes": "0"}]); 3]);
    assert_eq!(
        pool_budgets(cluster, pool).await,
        (json!([{"nodes": "10%"}]), None),
        "the pool's own budgets are back"
    );
    let unavailable = *most.lock().unwrap();
    assert_eq!(
        unavailable, 2,
        "one node's pods at a time were unavailable: a batch began only once the last one's were Ready again"
    );
    let removed: BTreeSet<String> = (karpenter.deletions().into_iter())
        .filter(|d| d.nodeclaim.starts_with(&format!("{pool}-")))
        .filter_map(|d| d.node)
        .collect();
    assert_eq!(removed, old, "each old node's NodeClaim deleted once");
    let events = all.lock().unwrap().clone();
    let back = events.iter().filter(|e| e["event"] == "pods-back").count();
    let batches = events
        .iter()
        .filter(|e| e["event"] == "batch-started")
        .count();
    assert_eq!((batches, back), (3, 3), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surge_is_refused_before_anything_changes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "kp-surge";
    let karpenter = cluster.karpenter().await;
    karpenter.busy_pool(pool, 1).await.unwrap();
    let out = run_plugin(args(cluster, pool, &["--yes", "--max-surge", "1"])).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "group {pool} has maxSurge > 0, but the karpenter provider cannot surge: Karpenter launches nodes for pods that wait"
        )),
        "{stderr}"
    );
    assert!(
        cluster
            .cordoned_by_label(NODEPOOL_LABEL, pool)
            .await
            .is_empty()
    );
    assert!(
        (karpenter.deletions().iter()).all(|d| !d.nodeclaim.starts_with(pool)),
        "no NodeClaim deleted"
    );
}

/// Runs the plugin with `args` (a `-o json` run) and SIGKILLs it right after its first event of
/// kind `at`; returns the events it printed.
async fn run_until_event(args: Vec<String>, at: &'static str) -> Vec<serde_json::Value> {
    use std::io::BufRead;
    tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(rollout_ext_e2e::plugin_binary())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
            let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            let stop = event["event"] == at;
            seen.push(event);
            if stop {
                child.kill().unwrap();
                break;
            }
        }
        child.wait().unwrap();
        seen
    })
    .await
    .unwrap()
}

/// New nodes boot in 5 s while this lives (in [`BOOT`] again after): pods a stopped run evicted
/// still wait for a node when the next run starts.
struct SlowBoots<'a>(&'a Karpenter);

impl<'a> SlowBoots<'a> {
    async fn new(cluster: &'a TestCluster) -> Self {
        let karpenter = cluster.karpenter().await;
        karpenter.set_boot_delay(Duration::from_secs(5));
        SlowBoots(karpenter)
    }
}

impl Drop for SlowBoots<'_> {
    fn drop(&mut self) {
        self.0.set_boot_delay(BOOT);
    }
}

/// Ready pods of `pool`'s ReplicaSet `web` now.
async fn ready_pods(cluster: &TestCluster, pool: &str) -> i32 {
    let sets: Api<ReplicaSet> = Api::namespaced(cluster.client().await, pool);
    let web = sets.get("web").await.unwrap();
    web.status.and_then(|s| s.ready_replicas).unwrap_or(0)
}

/// Runs a rotation of `pool` and stops it right after its first termination; asserts it
/// terminated one of `old` and that the pods it evicted still wait for a node.
async fn stopped_after_first_termination(
    cluster: &TestCluster,
    pool: &str,
    old: &BTreeSet<String>,
) {
    let stopped = run_until_event(args(cluster, pool, &["--yes"]), "terminated").await;
    let last = stopped.last().unwrap();
    assert_eq!(last["event"], "terminated", "{stopped:?}");
    assert!(old.contains(last["node"].as_str().unwrap()), "{stopped:?}");
    let all = 2 * old.len() as i32;
    assert!(
        ready_pods(cluster, pool).await < all,
        "the evicted pods still wait for a node"
    );
}

/// A run stopped right after its last termination, while the pods it evicted wait for a node:
/// the next run has no node left to rotate (the pool has none at all), yet waits for them (the
/// debt recorded on the lock) before it says the pool is up to date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_before_its_last_pods_are_back_leaves_the_next_waiting_for_them() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "kp-last";
    let old = cluster.karpenter().await.busy_pool(pool, 1).await.unwrap();
    let _slow = SlowBoots::new(cluster).await;
    stopped_after_first_termination(cluster, pool, &old).await;
    // Killed with its batch out: Karpenter's own disruptions of the pool are still paused, its
    // budgets kept aside.
    let (budgets, kept) = pool_budgets(cluster, pool).await;
    assert_eq!(budgets, json!([{"nodes": "0"}]));
    assert_eq!(kept.as_deref(), Some(r#"[{"nodes":"10%"}]"#));

    let out = run_plugin(args(cluster, pool, &["--yes"])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        ready_pods(cluster, pool).await,
        2,
        "the run ended once the evicted pods were Ready again"
    );
    let events = events(&out);
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(
        !kinds.contains(&"batch-started"),
        "no node left to rotate: {kinds:?}"
    );
    let back: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "pods-back")
        .collect();
    assert_eq!(back.len(), 1, "{kinds:?}");
    assert_eq!(back[0]["pods"], 2, "{back:?}");
    assert!(kinds.ends_with(&["group-done", "done"]), "{kinds:?}");
    assert_eq!(
        pool_budgets(cluster, pool).await,
        (json!([{"nodes": "10%"}]), None),
        "the next run put the pool's own budgets back"
    );
}

/// NodePool `pool`'s `spec.disruption.budgets`, and the budgets a run kept aside, if any.
async fn pool_budgets(cluster: &TestCluster, pool: &str) -> (serde_json::Value, Option<String>) {
    let pools = rollout_ext_e2e::cluster::nodepools(&cluster.client().await);
    let object = pools.get(pool).await.unwrap();
    let kept = (object.metadata.annotations.unwrap_or_default())
        .get("rollout-ext.io/paused-disruption-budgets")
        .cloned();
    (object.data["spec"]["disruption"]["budgets"].clone(), kept)
}

/// A run stopped right after its first termination, while the pods it evicted wait for a node:
/// the next run waits for them, then counts what its own batch owes from the pods as they are
/// by then, not as it read them on starting (two fewer: its batch would be paid for before its
/// own pods were back, and the next batch would begin with four pods unavailable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_counts_what_its_batch_owes_once_the_last_pods_are_back() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "kp-resume";
    let old = cluster.karpenter().await.busy_pool(pool, 3).await.unwrap();
    let _slow = SlowBoots::new(cluster).await;
    let (most, watch) = most_unavailable(cluster, pool, 6).await;
    stopped_after_first_termination(cluster, pool, &old).await;

    let out = run_plugin(args(cluster, pool, &["--yes"])).await;
    watch.abort();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        *most.lock().unwrap(),
        2,
        "one node's pods unavailable at a time, across both runs"
    );
    let removed: Vec<String> = (cluster.karpenter().await.deletions().into_iter())
        .filter(|d| d.nodeclaim.starts_with(&format!("{pool}-")))
        .filter_map(|d| d.node)
        .collect();
    let mut sorted = removed.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        old.iter().cloned().collect::<Vec<_>>(),
        "each old node's NodeClaim deleted once: {removed:?}"
    );
}
