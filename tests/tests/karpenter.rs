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
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use rollout_ext_e2e::cluster::{BOOT, Karpenter, NODEPOOL_LABEL, TestCluster, new_kubelet};
use rollout_ext_e2e::observer::pod_ready;
use rollout_ext_e2e::{events, provider_rotation_args, run_plugin};
use serde_json::json;
use tokio::task::JoinHandle;

/// One rotation at a time: they share the cluster's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `nodes --provider karpenter` of NodePool `pool` (a plan unless `--yes` is in `flags`).
fn args(cluster: &TestCluster, pool: &str, flags: &[&str]) -> Vec<String> {
    provider_rotation_args(cluster, "karpenter", pool, &new_kubelet(), flags)
}

/// Watches `api`'s objects (those `config` selects) from now on, each marked by `mark`; the
/// returned cell holds the most `tally` ever said of the marks at once, counted once the first
/// listing is complete.
async fn most_at_once<K>(
    api: Api<K>,
    config: watcher::Config,
    mark: impl Fn(&K) -> bool + Send + 'static,
    tally: impl Fn(&BTreeMap<String, bool>) -> usize + Send + 'static,
) -> (Arc<Mutex<usize>>, JoinHandle<()>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let most = Arc::new(Mutex::new(0));
    let seen = most.clone();
    let (synced_tx, synced) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut marks: BTreeMap<String, bool> = BTreeMap::new();
        let mut synced_tx = Some(synced_tx);
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    marks.insert(o.name_any(), mark(&o));
                }
                watcher::Event::Delete(o) => {
                    marks.remove(&o.name_any());
                }
                watcher::Event::Init => continue,
                watcher::Event::InitDone => {
                    if let Some(tx) = synced_tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
            if synced_tx.is_none() {
                let now = tally(&marks);
                let mut most = seen.lock().unwrap();
                *most = (*most).max(now);
            }
        }
    });
    synced.await.expect("the watch lists what it watches");
    (most, task)
}

/// Watches the pods of `namespace` from now on; the returned cell holds the most that were
/// ever missing or not Ready at once (of `want`), counted once the first listing is complete.
async fn most_unavailable(
    cluster: &TestCluster,
    namespace: &str,
    want: usize,
) -> (Arc<Mutex<usize>>, JoinHandle<()>) {
    let api: Api<Pod> = Api::namespaced(cluster.client().await, namespace);
    let up = |p: &Pod| pod_ready(p) && p.metadata.deletion_timestamp.is_none();
    let missing =
        move |up: &BTreeMap<String, bool>| want.saturating_sub(up.values().filter(|r| **r).count());
    most_at_once(api, watcher::Config::default(), up, missing).await
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

/// A node of `pool` is out when it is initialized by Karpenter and cordoned, tainted by
/// Karpenter's disruption, being deleted or not Ready: out of service for either tool.
fn out_of_service(node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if labels.get("karpenter.sh/initialized").map(String::as_str) != Some("true") {
        return false;
    }
    let spec = node.spec.clone().unwrap_or_default();
    let disrupted = (spec.taints.unwrap_or_default().iter()).any(|t| t.key == DISRUPTED_TAINT);
    let ready = (node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter())
    .flatten()
    .any(|c| c.type_ == "Ready" && c.status == "True");
    spec.unschedulable == Some(true)
        || disrupted
        || node.metadata.deletion_timestamp.is_some()
        || !ready
}

const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// Watches the nodes of `pool` from now on; the returned cell holds the most that were ever out
/// of service at once (see [`out_of_service`]), counted once the first listing is complete.
async fn most_out(cluster: &TestCluster, pool: &str) -> (Arc<Mutex<usize>>, JoinHandle<()>) {
    let api: Api<Node> = Api::all(cluster.client().await);
    let config = watcher::Config::default().labels(&format!("{NODEPOOL_LABEL}={pool}"));
    let out = |marks: &BTreeMap<String, bool>| marks.values().filter(|o| **o).count();
    most_at_once(api, config, out_of_service, out).await
}

/// Empties `node` of `pool`'s pods (ReplicaSet `web` scaled down by as many, those pods the
/// cheapest to delete) and holds its deletion with a finalizer of the test's, which
/// [`let_go`] removes.
async fn empty_and_hold(client: &kube::Client, pool: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), pool);
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let doomed = pods.list(&on_node).await.unwrap().items;
    let cheap = json!({"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1000"}}});
    for pod in &doomed {
        (pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&cheap),
        ))
        .await
        .unwrap();
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let hold = json!([{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}]);
    let patch = Patch::Json::<()>(serde_json::from_value(hold).unwrap());
    nodes
        .patch(node, &PatchParams::default(), &patch)
        .await
        .unwrap();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), pool);
    let replicas = sets
        .get("web")
        .await
        .unwrap()
        .spec
        .unwrap()
        .replicas
        .unwrap();
    let fewer = json!({"spec": {"replicas": replicas - doomed.len() as i32}});
    (sets.patch("web", &PatchParams::default(), &Patch::Merge(&fewer)))
        .await
        .unwrap();
}

const HOLD: &str = "rollout-ext.test/hold";

/// Removes the test's finalizer from `node` (once: a node let go already is left alone).
async fn let_go(client: &kube::Client, node: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let Some(now) = nodes.get_opt(node).await.unwrap() else {
        return;
    };
    let finalizers = now.metadata.finalizers.unwrap_or_default();
    let Some(at) = finalizers.iter().position(|f| f == HOLD) else {
        return;
    };
    let remove = json!([
        {"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": HOLD},
        {"op": "remove", "path": format!("/metadata/finalizers/{at}")},
    ]);
    let patch = Patch::Json::<()>(serde_json::from_value(remove).unwrap());
    nodes
        .patch(node, &PatchParams::default(), &patch)
        .await
        .unwrap();
}

/// Runs `rollout-ext ARGS` (a control: pause, resume) against `cluster`; asserts it succeeded.
fn control(cluster: &TestCluster) -> impl Fn(&[&str]) + Send + 'static {
    let kubeconfig = cluster.kubeconfig.clone();
    move |args: &[&str]| {
        let out = std::process::Command::new(rollout_ext_e2e::plugin_binary())
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
}

/// The nodes of `old` the run has yet to rotate, once those it cordoned are gone.
async fn left_to_rotate(nodes: &Api<Node>, old: &BTreeSet<String>) -> Vec<String> {
    let mut left = Vec::new();
    for name in old {
        let Some(n) = nodes.get_opt(name).await.unwrap() else {
            continue;
        };
        if n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true) {
            left.push(name.clone());
            continue;
        }
        let gone = await_condition(nodes.clone(), name, |n: Option<&Node>| n.is_none());
        (tokio::time::timeout(Duration::from_secs(60), gone))
            .await
            .expect("a rotated node goes")
            .unwrap();
    }
    left
}

/// Waits until Karpenter taints one of `candidates` (nodes of `pool`) as disrupted; returns it.
async fn karpenter_disrupts(nodes: &Api<Node>, pool: &str, candidates: &[String]) -> String {
    let config = watcher::Config::default().labels(&format!("{NODEPOOL_LABEL}={pool}"));
    let mut changes = watcher(nodes.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let tainted = async {
        while let Some(Ok(node)) = changes.next().await {
            let taints = node.spec.as_ref().and_then(|s| s.taints.clone());
            let disrupted = (taints.unwrap_or_default().iter()).any(|t| t.key == DISRUPTED_TAINT);
            if disrupted && candidates.contains(&node.name_any()) {
                return node.name_any();
            }
        }
        panic!("the watch of {pool}'s nodes ended");
    };
    (tokio::time::timeout(Duration::from_secs(120), tainted))
        .await
        .unwrap_or_else(|_| panic!("Karpenter disrupted none of {candidates:?}"))
}

/// What a test does beside a rotation paused for Karpenter (see [`paused_for_karpenter`]).
struct Beside<F, M, H> {
    /// As the first batch starts, before the pause is asked.
    first_batch: F,
    /// While the run is paused, given the nodes left to rotate: returns the node Karpenter
    /// disrupts.
    meanwhile: M,
    /// When the run says others disrupt the pool, given that node.
    on_hold: H,
}

/// Runs a rotation of `pool` (budget one) that is paused after its first batch and resumed
/// once Karpenter disrupts a node, as `beside` says. Returns the run's events and that node.
async fn paused_for_karpenter<F, M, H>(
    cluster: &TestCluster,
    pool: &str,
    old: &BTreeSet<String>,
    beside: Beside<F, M, H>,
) -> (Vec<serde_json::Value>, String)
where
    F: Fn() + Send + 'static,
    M: Fn(Vec<String>) -> String + Send + 'static,
    H: Fn(&str) + Send + 'static,
{
    let Beside {
        first_batch,
        meanwhile,
        on_hold,
    } = beside;
    let control = control(cluster);
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let all: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let disrupted: Arc<Mutex<Option<String>>> = Arc::default();
    let (every, chosen, handle) = (
        all.clone(),
        disrupted.clone(),
        tokio::runtime::Handle::current(),
    );
    let old = old.clone();
    let on_event = move |event: &serde_json::Value| {
        every.lock().unwrap().push(event.clone());
        match event["event"].as_str().unwrap_or_default() {
            "batch-started" if chosen.lock().unwrap().is_none() => {
                first_batch();
                control(&["pause", "--reason", "Karpenter's turn"]);
            }
            "paused" => {
                let left = handle.block_on(left_to_rotate(&nodes, &old));
                assert_eq!(left.len(), old.len() - 1, "one batch done: {left:?}");
                *chosen.lock().unwrap() = Some(meanwhile(left));
                control(&["resume"]);
            }
            "others-disrupting" => {
                on_hold(chosen.lock().unwrap().as_deref().expect("Karpenter's node"));
            }
            _ => {}
        }
    };
    let run = args(cluster, pool, &["--yes", "--max-unavailable", "1"]);
    let (code, stderr) = rollout_ext_e2e::run_watching(run, on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let events = all.lock().unwrap().clone();
    let node = disrupted.lock().unwrap().clone().expect("the run paused");
    (events, node)
}

/// Karpenter's consolidation (WhenEmpty, consolidateAfter 1s, a budget of one node) beside a
/// rotation of the same pool, with the rotation's budget of one: the run is paused after its
/// first batch, a node it has yet to rotate is emptied, and Karpenter consolidates it (its
/// deletion held by a finalizer of the test's). Once resumed, the run holds before its next
/// batch, saying Karpenter disrupts that node, and goes on once the node is gone, dropping it.
/// At no moment are more than one of the pool's nodes out of service, counting both tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_karpenters_consolidation_the_pool_is_never_below_its_budget() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "kp-cons";
    let karpenter = cluster.karpenter().await;
    let consolidating = json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1s",
                               "budgets": [{"nodes": "1"}]});
    let old = (karpenter.busy_pool_with(pool, 3, Some(consolidating)))
        .await
        .unwrap();
    let client = cluster.client().await;
    let (most, watch) = most_out(cluster, pool).await;
    let handle = tokio::runtime::Handle::current();
    let (emptying, releasing) = (client.clone(), client.clone());
    let (nodes, name, on_hold_handle) =
        (Api::all(client.clone()), pool.to_string(), handle.clone());
    let meanwhile = move |left: Vec<String>| {
        handle.block_on(async {
            empty_and_hold(&emptying, &name, &left[0]).await;
            karpenter_disrupts(&nodes, &name, &left[..1]).await
        })
    };
    let on_hold = move |node: &str| on_hold_handle.block_on(let_go(&releasing, node));
    let beside = Beside {
        first_batch: || {},
        meanwhile,
        on_hold,
    };
    let (events, node) = paused_for_karpenter(cluster, pool, &old, beside).await;
    watch.abort();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let told = (events.iter())
        .find(|e| e["event"] == "others-disrupting")
        .unwrap_or_else(|| panic!("the run never held for Karpenter: {kinds:?}"));
    assert_eq!(
        told["disrupting"],
        format!("1 node of group {pool} is being disrupted by karpenter: {node}"),
        "{told}"
    );
    assert_eq!(
        (told["room"].as_u64(), told["budget"].as_u64()),
        (Some(0), Some(1))
    );
    let gone = (events.iter()).any(|e| e["event"] == "node-gone" && e["node"] == node.as_str());
    assert!(gone, "the consolidated node is dropped: {kinds:?}");
    let batches = kinds.iter().filter(|k| **k == "batch-started").count();
    assert_eq!(batches, 2, "{kinds:?}");
    assert_eq!(
        *most.lock().unwrap(),
        1,
        "one node of the pool out at a time, counting both tools"
    );
    let nodes: Api<Node> = Api::all(cluster.client().await);
    for name in &old {
        assert!(
            nodes.get_opt(name).await.unwrap().is_none(),
            "{name} is gone"
        );
    }
}

/// Karpenter's drift (the NodePool's template changed as the run's first batch starts; the
/// pool's budget one node, its disruptions paused during each batch of the run's, the run
/// paused after its first) beside a rotation of the same nodes: each old node is
/// disrupted once, by one tool or the other: its NodeClaim deleted once, one replacement each
/// (the pool ends at its size, every node new), and the node Karpenter replaces is never in a
/// batch of the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_karpenters_drift_no_node_is_disrupted_twice() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pool = "kp-drift";
    let karpenter = cluster.karpenter().await;
    let budget = json!({"budgets": [{"nodes": "1"}]});
    let old = karpenter
        .busy_pool_with(pool, 3, Some(budget))
        .await
        .unwrap();
    let client = cluster.client().await;
    let handle = tokio::runtime::Handle::current();
    let (nodes, name) = (Api::<Node>::all(client.clone()), pool.to_string());
    // Before the first batch's replacement is launched: only the old nodes drift.
    let (drifting, pool_name, drift_handle) = (client.clone(), name.clone(), handle.clone());
    let first_batch = move || {
        let pools = rollout_ext_e2e::cluster::nodepools(&drifting);
        let drift = json!({"spec": {"template": {"metadata": {"labels": {"rollout-ext.test/drift": "1"}}}}});
        let (params, patch) = (PatchParams::default(), Patch::Merge(&drift));
        drift_handle
            .block_on(pools.patch(&pool_name, &params, &patch))
            .unwrap();
    };
    let meanwhile =
        move |left: Vec<String>| handle.block_on(karpenter_disrupts(&nodes, &name, &left));
    let beside = Beside {
        first_batch,
        meanwhile,
        on_hold: |_: &str| {},
    };
    let (events, node) = paused_for_karpenter(cluster, pool, &old, beside).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let batched: Vec<&str> = (events.iter())
        .filter(|e| e["event"] == "batch-started")
        .flat_map(|e| e["nodes"].as_array().unwrap().iter())
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        !batched.contains(&node.as_str()),
        "{node}, drifted by Karpenter, is not in a batch of the run's: {kinds:?}"
    );
    let deleted: Vec<String> = (karpenter.deletions().into_iter())
        .filter(|d| d.nodeclaim.starts_with(&format!("{pool}-")))
        .filter_map(|d| d.node)
        .collect();
    let mut sorted = deleted.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        old.iter().cloned().collect::<Vec<_>>(),
        "each old node's NodeClaim deleted once, no new one: {deleted:?}"
    );
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let selector = format!("{NODEPOOL_LABEL}={pool}");
    let now = nodes
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let names: Vec<String> = now.items.iter().map(|n| n.name_any()).collect();
    assert_eq!(names.len(), 3, "one replacement per old node: {names:?}");
    assert!(names.iter().all(|n| !old.contains(n)), "{names:?}");
}
