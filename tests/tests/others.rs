//! Other disruptors on the real test cluster: a node of the group that another tool is taking
//! out (its taint, a cordon the run did not find, a Node lifecycle condition, kured's reboot lock
//! on its DaemonSet, a NodeMaintenance) counts against the group's budget. A batch takes only what is left; with nothing left the run holds, saying who
//! holds it, and goes on once the other tool is done. The plan says the same.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::kured::KURED;
use rollout_ext_e2e::plugin_binary;
use serde_json::{Value, json};

/// One rotation at a time: they share the cluster's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How another tool marks the node it disrupts, and how it unmarks it when done.
#[derive(Clone, Copy, Debug)]
enum Marker {
    /// A taint of another disruptor (its key).
    Taint(&'static str),
    /// A cordon put on after the run started.
    Cordon,
    /// A Node lifecycle condition True (its type).
    Condition(&'static str),
    /// kured's reboot lock naming the node, on a DaemonSet running kured's image.
    KuredLock,
    /// A NodeMaintenance naming the node (medik8s' node-maintenance-operator).
    Maintenance,
}

/// The NodeMaintenance a test creates.
const MAINTENANCE: &str = "other-tool-maintenance";

impl Marker {
    /// The patch that puts the mark on (`on`) or takes it off, and whether it is a status patch.
    fn patch(self, on: bool) -> (Value, bool) {
        match self {
            Marker::Taint(key) => {
                let taints = match on {
                    true => json!([{"key": key, "effect": "NoSchedule"}]),
                    false => json!([]),
                };
                (json!({"spec": {"taints": taints}}), false)
            }
            Marker::Cordon => (json!({"spec": {"unschedulable": on}}), false),
            Marker::KuredLock | Marker::Maintenance => unreachable!("not a Node patch"),
            Marker::Condition(type_) => {
                let status = if on { "True" } else { "False" };
                let condition = json!({"type": type_, "status": status, "reason": "Upgrade",
                    "message": "another tool", "lastTransitionTime": jiff::Timestamp::now().to_string(),
                    "lastHeartbeatTime": jiff::Timestamp::now().to_string()});
                (json!({"status": {"conditions": [condition]}}), true)
            }
        }
    }

    /// Who the run says disrupts the node.
    fn who(self) -> String {
        match self {
            Marker::Taint("karpenter.sh/disrupted") => "karpenter".into(),
            Marker::Taint("ToBeDeletedByClusterAutoscaler") => "cluster-autoscaler".into(),
            Marker::Taint(_) => "medik8s".into(),
            Marker::Cordon => "someone who cordoned it".into(),
            Marker::Condition(type_) => format!("whoever set its {type_} (reason Upgrade)"),
            Marker::KuredLock => {
                format!("kured (its reboot lock on DaemonSet kube-system/{KURED})")
            }
            Marker::Maintenance => {
                format!("node-maintenance-operator (NodeMaintenance {MAINTENANCE}: Upgrade)")
            }
        }
    }
}

/// Takes kured's lock for `node` as kured does; `on: false` lets it go.
async fn kured_lock(client: kube::Client, node: &str, on: bool) {
    rollout_ext_e2e::kured::hold_for(client, on.then_some(node)).await;
}

/// Puts `node` under maintenance as node-maintenance-operator's users do (a NodeMaintenance
/// naming it); `on: false` deletes it.
async fn maintenance(client: kube::Client, node: &str, on: bool) {
    use kube::api::{DeleteParams, DynamicObject, PostParams};
    let api = rollout_ext_e2e::cluster::node_maintenances(&client);
    if !on {
        api.delete(MAINTENANCE, &DeleteParams::default())
            .await
            .unwrap();
        return;
    }
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": MAINTENANCE},
        "spec": {"nodeName": node, "reason": "Upgrade"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();
}

/// Marks (or unmarks) `node` as another tool would.
async fn mark(nodes: &Api<Node>, node: &str, marker: Marker, on: bool) {
    let client = nodes.clone().into_client();
    match marker {
        Marker::KuredLock => return kured_lock(client, node, on).await,
        Marker::Maintenance => return maintenance(client, node, on).await,
        _ => {}
    }
    let (patch, status) = marker.patch(on);
    let params = PatchParams::default();
    let patched = match status {
        true => {
            nodes
                .patch_status(node, &params, &Patch::Strategic(&patch))
                .await
        }
        false => nodes.patch(node, &params, &Patch::Strategic(&patch)).await,
    };
    patched.unwrap();
}

/// `group`: `outdated` out-of-date nodes and one up to date, `<group>-other`, which another tool
/// disrupts.
async fn group_beside_another_tool(cluster: &TestCluster, group: &str, outdated: usize) -> String {
    cluster.outdated_group(group, outdated).await.unwrap();
    let other = format!("{group}-other");
    cluster
        .nodes
        .add(NodeSpec::new(&other, group))
        .await
        .unwrap();
    other
}

/// `nodes` of `group` against the cluster, `--max-unavailable budget`, with `flags`.
fn args(cluster: &TestCluster, dir: &std::path::Path, group: &str, budget: u32) -> Vec<String> {
    let policy = cluster.exec_policy(dir, "");
    let mut args = cluster.rotate_args(&policy, group);
    args.extend(["--max-unavailable".to_string(), budget.to_string()]);
    args
}

/// The batches a run's events started, as node lists.
fn batches(events: &[Value]) -> Vec<Vec<String>> {
    (events.iter())
        .filter(|e| e["event"] == "batch-started")
        .map(|e| {
            (e["nodes"].as_array().unwrap().iter())
                .map(|n| n.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// With one node of a budget of two taken out by Karpenter, the plan's and the run's first
/// batch take one; once Karpenter is done, the next batches take two again.
#[tokio::test]
async fn a_batch_takes_what_another_disruptor_leaves_of_the_budget() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "others-shrink";
    let other = group_beside_another_tool(cluster, group, 5).await;
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let marker = Marker::Taint("karpenter.sh/disrupted");
    mark(&nodes, &other, marker, true).await;
    let dir = tempfile::tempdir().unwrap();
    let run_args = args(cluster, dir.path(), group, 2);

    let plan_args: Vec<String> = (run_args.iter())
        .filter(|a| *a != "--yes")
        .cloned()
        .collect();
    let plan = std::process::Command::new(plugin_binary())
        .args(&plan_args)
        .output()
        .unwrap();
    assert!(plan.status.success(), "{plan:?}");
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let planned = &plan["groups"][0];
    assert_eq!(
        planned["othersDisrupting"],
        json!([{"node": other, "by": "karpenter"}]),
        "{planned}"
    );
    assert_eq!(
        planned["batches"][0]["instances"].as_array().unwrap().len(),
        1
    );
    assert_eq!(
        planned["batches"][1]["instances"].as_array().unwrap().len(),
        2
    );
    let said = format!(
        "1 node of group {group} is being disrupted by karpenter: {other}: the group's first batch takes 1 of its budget of 2"
    );
    assert!(
        plan["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with(&said)),
        "{plan}"
    );

    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let (events, handle) = (seen.clone(), tokio::runtime::Handle::current());
    let (unmark_nodes, unmarked) = (nodes.clone(), other.clone());
    let on_event = move |event: &Value| {
        let mut events = events.lock().unwrap();
        events.push(event.clone());
        // Karpenter is done with its node once the first batch began.
        if event["event"] == "batch-started" && batches(&events).len() == 1 {
            handle.block_on(mark(&unmark_nodes, &unmarked, marker, false));
        }
    };
    let (code, stderr) = rollout_ext_e2e::run_watching(run_args, on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let events = seen.lock().unwrap().clone();
    let sizes: Vec<usize> = batches(&events).iter().map(Vec::len).collect();
    assert_eq!(sizes, [1, 2, 2], "{events:?}");
    let told: Vec<&Value> = (events.iter())
        .filter(|e| e["event"] == "others-disrupting")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(
        (told[0]["room"].as_u64(), told[0]["budget"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(told[0]["nodes"], json!([other]));
}

/// With a budget of one and another tool's mark on a node of the group once the run started,
/// the run holds before its next batch, saying who holds it (and `status` shows it), and goes
/// on once the mark is gone.
async fn holds_while_marked(group: &str, marker: Marker) {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let other = group_beside_another_tool(cluster, group, 2).await;
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let dir = tempfile::tempdir().unwrap();
    let run_args = args(cluster, dir.path(), group, 1);
    let kubeconfig = cluster.kubeconfig.clone();

    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let status: Arc<Mutex<String>> = Arc::default();
    let (events, shown, handle) = (
        seen.clone(),
        status.clone(),
        tokio::runtime::Handle::current(),
    );
    let (marked_nodes, marked) = (nodes.clone(), other.clone());
    let mut started = false;
    let on_event = move |event: &Value| {
        events.lock().unwrap().push(event.clone());
        match event["event"].as_str().unwrap_or_default() {
            // The other tool starts once the first batch is on its way.
            "terminated" if !started => {
                started = true;
                handle.block_on(mark(&marked_nodes, &marked, marker, true));
            }
            "others-disrupting" => {
                let out = std::process::Command::new(plugin_binary())
                    .args(["status", "--kubeconfig", kubeconfig.to_str().unwrap()])
                    .output()
                    .unwrap();
                *shown.lock().unwrap() = String::from_utf8_lossy(&out.stdout).into_owned();
                handle.block_on(mark(&marked_nodes, &marked, marker, false));
            }
            _ => {}
        }
    };
    let (code, stderr) = rollout_ext_e2e::run_watching(run_args, on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let events = seen.lock().unwrap().clone();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    let held = (kinds.iter())
        .position(|k| *k == "others-disrupting")
        .unwrap_or_else(|| panic!("the run never held: {kinds:?}"));
    let told = &events[held];
    let who = format!(
        "1 node of group {group} is being disrupted by {}: {other}",
        marker.who()
    );
    assert_eq!(told["disrupting"], who, "{told}");
    assert_eq!(
        (told["room"].as_u64(), told["budget"].as_u64()),
        (Some(0), Some(1))
    );
    let started: Vec<usize> = (kinds.iter().enumerate())
        .filter(|(_, k)| **k == "batch-started")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(started.len(), 2, "{kinds:?}");
    assert!(
        started[0] < held && held < started[1],
        "held between the batches: {kinds:?}"
    );
    let status = status.lock().unwrap().clone();
    assert!(
        status.contains(&who),
        "status shows who holds the run: {status}"
    );
    let told = (events.iter()).filter(|e| e["event"] == "others-disrupting");
    assert_eq!(told.count(), 1, "said once: {kinds:?}");
}

#[tokio::test]
async fn the_run_holds_while_a_cordon_it_did_not_find_leaves_no_room() {
    holds_while_marked("others-cordon", Marker::Cordon).await;
}

#[tokio::test]
async fn the_run_holds_while_the_cluster_autoscaler_takes_a_node_out() {
    holds_while_marked("others-ca", Marker::Taint("ToBeDeletedByClusterAutoscaler")).await;
}

#[tokio::test]
async fn the_run_holds_while_medik8s_drains_a_node() {
    holds_while_marked("others-medik8s", Marker::Taint("medik8s.io/drain")).await;
}

#[tokio::test]
async fn the_run_holds_while_a_node_lifecycle_condition_says_a_drain_is_in_progress() {
    holds_while_marked("others-lifecycle", Marker::Condition("DrainInProgress")).await;
}

#[tokio::test]
async fn the_run_holds_while_kured_holds_its_reboot_lock_for_a_node() {
    holds_while_marked("others-kured", Marker::KuredLock).await;
}

#[tokio::test]
async fn the_run_holds_while_a_node_maintenance_names_a_node() {
    holds_while_marked("others-maintenance", Marker::Maintenance).await;
}

/// The plan counts kured's lock and a NodeMaintenance as it counts a taint: with both on two
/// nodes of a budget of three, its first batch takes one.
#[tokio::test]
async fn the_plan_counts_kureds_lock_and_a_node_maintenance() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "others-plan";
    let locked = group_beside_another_tool(cluster, group, 3).await;
    let maintained = format!("{group}-maintained");
    (cluster.nodes)
        .add(NodeSpec::new(&maintained, group))
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(cluster.client().await);
    mark(&nodes, &locked, Marker::KuredLock, true).await;
    mark(&nodes, &maintained, Marker::Maintenance, true).await;
    let dir = tempfile::tempdir().unwrap();
    let plan_args: Vec<String> = (args(cluster, dir.path(), group, 3).into_iter())
        .filter(|a| a != "--yes")
        .collect();
    let plan = std::process::Command::new(plugin_binary())
        .args(&plan_args)
        .output()
        .unwrap();
    mark(&nodes, &locked, Marker::KuredLock, false).await;
    mark(&nodes, &maintained, Marker::Maintenance, false).await;
    assert!(plan.status.success(), "{plan:?}");
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let planned = &plan["groups"][0];
    let mut others: Vec<Value> = planned["othersDisrupting"].as_array().unwrap().clone();
    others.sort_by_key(|o| o["node"].to_string());
    assert_eq!(
        others,
        [
            json!({"node": maintained, "by": Marker::Maintenance.who()}),
            json!({"node": locked, "by": Marker::KuredLock.who()}),
        ],
        "{planned}"
    );
    assert_eq!(
        planned["batches"][0]["instances"].as_array().unwrap().len(),
        1,
        "{planned}"
    );
}

/// `othersDisruptions: Ignore` keeps the budget the run's own, as with kops: nothing is
/// counted, said or held for.
#[tokio::test]
async fn a_policy_that_ignores_other_disruptors_keeps_its_whole_budget() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "others-ignored";
    let other = group_beside_another_tool(cluster, group, 2).await;
    let nodes: Api<Node> = Api::all(cluster.client().await);
    mark(
        &nodes,
        &other,
        Marker::Taint("karpenter.sh/disrupted"),
        true,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "  othersDisruptions: Ignore\n");
    let mut run_args = cluster.rotate_args(&policy, group);
    run_args.extend(["--max-unavailable".into(), "2".into()]);
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let events = seen.clone();
    let on_event = move |event: &Value| events.lock().unwrap().push(event.clone());
    let (code, stderr) = rollout_ext_e2e::run_watching(run_args, on_event).await;
    assert_eq!(code, Some(0), "{stderr}");
    let events = seen.lock().unwrap().clone();
    let sizes: Vec<usize> = batches(&events).iter().map(Vec::len).collect();
    assert_eq!(sizes, [2], "{events:?}");
    assert!(events.iter().all(|e| e["event"] != "others-disrupting"));
}

/// What other tools see of a run: each node it drains says so in its Node lifecycle conditions
/// (`DrainInProgress` True, reason `RolloutExt`, then `Drained` True once the drain is over),
/// watched from outside until the node goes.
#[tokio::test]
async fn each_node_the_run_drains_says_so_in_its_lifecycle_conditions() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "others-told";
    let originals = cluster.outdated_group(group, 2).await.unwrap();
    let nodes: Api<Node> = Api::all(cluster.client().await);
    // Each original's (DrainInProgress, Drained) statuses, in the order they were seen.
    let seen: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let record = seen.clone();
    let selector = format!("{}={group}", rollout_ext_e2e::cluster::GROUP_LABEL);
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(async move {
        let config = watcher::Config::default().labels(&selector);
        let mut events = watcher(nodes, config).default_backoff().boxed();
        let mut listed_tx = Some(listed_tx);
        while let Some(event) = events.next().await {
            let node = match event.expect("the watch of the group's nodes") {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => n,
                watcher::Event::InitDone => {
                    let _ = listed_tx.take().map(|tx| tx.send(()));
                    continue;
                }
                _ => continue,
            };
            let conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
            let status = |type_: &str| {
                (conditions.iter())
                    .find(|c| c.type_ == type_)
                    .map(|c| format!("{}/{}", c.status, c.reason.clone().unwrap_or_default()))
                    .unwrap_or_default()
            };
            let state = (
                node.metadata.name.unwrap_or_default(),
                status("DrainInProgress"),
                status("Drained"),
            );
            // Each node's states as they change (a node's other changes, its phase or its
            // deletion, repeat its conditions; other nodes' events come between).
            let mut seen = record.lock().unwrap();
            let last = seen.iter().rev().find(|(n, _, _)| *n == state.0);
            if last != Some(&state) {
                seen.push(state);
            }
        }
    });
    listed.await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run_args = args(cluster, dir.path(), group, 1);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(plugin_binary())
            .args(run_args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    watch.abort();
    assert!(out.status.success(), "{out:?}");
    let seen = seen.lock().unwrap().clone();
    for node in &originals {
        let states: Vec<(&str, &str)> = (seen.iter())
            .filter(|(n, _, _)| n == node)
            .map(|(_, draining, drained)| (draining.as_str(), drained.as_str()))
            .filter(|s| *s != ("", ""))
            .collect();
        assert_eq!(
            states,
            [
                ("True/RolloutExt", ""),
                ("False/RolloutExt", "True/RolloutExt")
            ],
            "{node}: {seen:?}"
        );
    }
}

/// The cluster-autoscaler's scale-down mark: the nodes a run will rotate carry it from their
/// group's start, and an aborted run removes the ones it put (one someone else put stays).
#[tokio::test]
async fn the_nodes_a_run_rotates_are_kept_from_scale_down_until_it_ends() {
    const MARK: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "others-scale-down";
    let other = group_beside_another_tool(cluster, group, 3).await;
    let (second, third) = (format!("{group}-2"), format!("{group}-3"));
    let nodes: Api<Node> = Api::all(cluster.client().await);
    // Someone else keeps the third from scale-down already.
    let theirs = json!({"metadata": {"annotations": {MARK: "true"}}});
    (nodes.patch(&third, &PatchParams::default(), &Patch::Merge(&theirs)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let run_args = args(cluster, dir.path(), group, 1);
    let kubeconfig = cluster.kubeconfig.clone();
    let annotations = |node: &Node| node.metadata.annotations.clone().unwrap_or_default();
    // Each node's scale-down mark while the run held.
    type Marks = Vec<(String, Option<String>)>;
    let during: Arc<Mutex<Marks>> = Arc::default();
    let (seen, handle, marked_nodes) = (
        during.clone(),
        tokio::runtime::Handle::current(),
        nodes.clone(),
    );
    let (marked, mut started) = (other.clone(), false);
    let on_event = move |event: &Value| match event["event"].as_str().unwrap_or_default() {
        "terminated" if !started => {
            started = true;
            handle.block_on(mark(&marked_nodes, &marked, Marker::Cordon, true));
        }
        // Held for the cordon: what the nodes carry now, then the operator aborts.
        "others-disrupting" => {
            for node in [&second, &third] {
                let n = handle.block_on(marked_nodes.get(node)).unwrap();
                let a = annotations(&n);
                seen.lock()
                    .unwrap()
                    .push((node.clone(), a.get(MARK).cloned()));
            }
            let out = std::process::Command::new(plugin_binary())
                .args([
                    "abort",
                    "--kubeconfig",
                    kubeconfig.to_str().unwrap(),
                    "--reason",
                    "test",
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
        }
        _ => {}
    };
    let (code, stderr) = rollout_ext_e2e::run_watching(run_args, on_event).await;
    mark(&nodes, &other, Marker::Cordon, false).await;
    assert_eq!(code, Some(3), "aborted: {stderr}");
    let during = during.lock().unwrap().clone();
    let kept = Some("true".to_string());
    assert_eq!(
        during,
        [
            (format!("{group}-2"), kept.clone()),
            (format!("{group}-3"), kept.clone())
        ]
    );
    let after = |node: &str| {
        let nodes = nodes.clone();
        let node = node.to_string();
        async move { annotations(&nodes.get(&node).await.unwrap()) }
    };
    let second_after = after(&format!("{group}-2")).await;
    assert!(
        !second_after.contains_key(MARK),
        "ours went: {second_after:?}"
    );
    assert!(!second_after.contains_key("rollout-ext.io/scale-down-disabled"));
    let third_after = after(&format!("{group}-3")).await;
    assert_eq!(third_after.get(MARK), kept.as_ref(), "theirs stays");
}
