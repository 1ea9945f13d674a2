//! `nodes --yes --provider karpenter` on the real test cluster, against the Karpenter stand-in
//! (NodeClaims launched for pods that wait, terminated through their finalizer): each old node's
//! NodeClaim goes once, and the pods a batch evicted are Ready again before the next batch
//! begins (watched from outside: never more than one node's pods unavailable); a surge is
//! refused before anything changes; the plan warns of the NodePool's own disruption budgets.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use rollout_ext_e2e::cluster::{NODEPOOL_LABEL, TestCluster};
use rollout_ext_e2e::observer::pod_ready;
use rollout_ext_e2e::workloads::{create_namespace, replica_set_with};
use rollout_ext_e2e::{FAST_ROTATION, events, run_plugin};
use serde_json::json;

/// One rotation at a time: they share the cluster's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const OLD: &str = "v1.19.7";
const NEW: &str = "v1.20.2";

/// `nodes --provider karpenter` of NodePool `pool` (a plan unless `--yes` is in `flags`).
fn args(cluster: &TestCluster, pool: &str, flags: &[&str]) -> Vec<String> {
    [
        "nodes",
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "--provider",
        "karpenter",
        "--instance-group",
        pool,
        "--kubelet-version",
        NEW,
        "-o",
        "json",
    ]
    .iter()
    .chain(FAST_ROTATION)
    .chain(flags)
    .map(|s| s.to_string())
    .collect()
}

/// A NodePool `pool` of `nodes` old nodes whose new ones get the new kubelet, running
/// ReplicaSet `web` (namespace `pool`) with two pods per node: each asks 3 of a node's 8 CPUs,
/// so pods evicted from a node fit nowhere until Karpenter launches one. Returns the old nodes.
async fn busy_pool(cluster: &TestCluster, pool: &str, nodes: usize) -> BTreeSet<String> {
    let karpenter = &cluster.karpenter;
    karpenter
        .create_pool(pool, BTreeMap::new(), None)
        .await
        .unwrap();
    let old = karpenter.add_nodes(pool, nodes, OLD).await.unwrap();
    karpenter.set_version(pool, NEW);
    let client = cluster.client().await;
    create_namespace(&client, pool).await;
    let spec = json!({
        "nodeSelector": {NODEPOOL_LABEL: pool},
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "registry.invalid/app:1",
                        "resources": {"requests": {"cpu": "3"}}}],
    });
    replica_set_with(&client, pool, "web", 2 * nodes as i32, json!({}), spec).await;
    old.into_iter().collect()
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
    let old = busy_pool(cluster, pool, 3).await;

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
    let out = run_plugin(args(cluster, pool, &["--yes"])).await;
    watch.abort();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unavailable = *most.lock().unwrap();
    assert_eq!(
        unavailable, 2,
        "one node's pods at a time were unavailable: a batch began only once the last one's were Ready again"
    );
    let removed: BTreeSet<String> = cluster
        .karpenter
        .deletions()
        .into_iter()
        .filter_map(|d| d.node)
        .filter(|n| n.starts_with(pool))
        .collect();
    assert_eq!(removed, old, "each old node's NodeClaim deleted once");
    let events = events(&out);
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
    busy_pool(cluster, pool, 1).await;
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
        cluster
            .karpenter
            .deletions()
            .iter()
            .all(|d| !d.nodeclaim.starts_with(pool))
    );
}
