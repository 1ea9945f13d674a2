//! `nodes --yes --provider cluster-api` on the real test cluster, against the Cluster API
//! stand-in (MachineDeployment, MachineSet and Machine controllers): each old Machine is
//! removed once, through its MachineDeployment, never more nodes unavailable than the budget
//! (watched by the independent observer), with and without a surge; a Machine whose Node never
//! registered is replaced too; plans read the Machines.

use std::collections::BTreeSet;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use rollout_ext_e2e::cluster::{POOL_LABEL, TestCluster};
use rollout_ext_e2e::invariants::{Budget, Pdb};
use rollout_ext_e2e::observer::Observer;
use rollout_ext_e2e::workloads::{budget, replica_set_with};
use rollout_ext_e2e::{FAST_ROTATION, events, run_plugin};
use serde_json::json;

/// One rotation at a time: they share the cluster's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const OLD: &str = "v1.19.7";
const NEW: &str = "v1.20.2";

/// `nodes --yes --provider cluster-api` of MachineDeployment `md`, with the test timings.
fn rotate_args(cluster: &TestCluster, md: &str, flags: &[&str]) -> Vec<String> {
    [
        "nodes",
        "--yes",
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "--provider",
        "cluster-api",
        "--instance-group",
        md,
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

/// A MachineDeployment `md` of `n` Machines on the old kubelet in namespace `ns`, whose new
/// Machines get the new one; returns the old Machines (their Nodes have their names).
async fn outdated_deployment(
    cluster: &TestCluster,
    ns: &str,
    md: &str,
    n: usize,
) -> BTreeSet<String> {
    let capi = &cluster.capi;
    capi.create_deployment(ns, md, n as i32, OLD).await.unwrap();
    let old = capi.wait_machines(ns, md, n, OLD).await.unwrap();
    capi.set_version(ns, md, NEW).await.unwrap();
    old.into_iter().collect()
}

/// A ReplicaSet `web` of `n` pods on `md`'s nodes, under a PodDisruptionBudget allowing
/// `max_unavailable` of them (at least one), and the observer of the rotation from now on.
async fn observed(
    cluster: &TestCluster,
    ns: &str,
    md: &str,
    outdated: &BTreeSet<String>,
    max_unavailable: usize,
    max_surge: usize,
) -> Observer {
    let client = cluster.client().await;
    let n = outdated.len() as i32;
    let spec = json!({"nodeSelector": {POOL_LABEL: md}, "terminationGracePeriodSeconds": 1});
    replica_set_with(&client, ns, "web", n, json!({}), spec).await;
    // One pod at a time may go, whatever the node budget: a surge still drains.
    let pods_unavailable = max_unavailable.max(1);
    budget(&client, ns, "v1beta1", n, pods_unavailable as i32).await;
    let budget = Budget {
        outdated: outdated.clone(),
        max_unavailable,
        max_surge,
        cloud_only: false,
    };
    let pdb = Pdb {
        name: format!("{ns}/web"),
        match_labels: [("app".to_string(), "web".to_string())].into(),
        min_available: outdated.len() - pods_unavailable,
    };
    Observer::start(
        cluster,
        &format!("{POOL_LABEL}={md}"),
        ns,
        budget,
        vec![pdb],
        cluster.capi.calls(ns),
    )
    .await
}

/// The MachineDeployment `md` as the API server has it.
async fn deployment(cluster: &TestCluster, ns: &str, md: &str) -> DynamicObject {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta1",
        "MachineDeployment",
    ));
    Api::<DynamicObject>::namespaced_with(cluster.client().await, ns, &resource)
        .get(md)
        .await
        .unwrap()
}

/// Rotates `md` (`n` Machines) with `flags`, watched, and checks the run: every old Machine
/// removed once with its drain left to us, the budget used and never passed, the
/// MachineDeployment back at its size with nothing owed. Returns the run's events.
async fn rotate_watched(
    cluster: &TestCluster,
    ns: &str,
    md: &str,
    n: usize,
    (max_unavailable, max_surge): (usize, usize),
    flags: &[&str],
) -> Vec<serde_json::Value> {
    let outdated = outdated_deployment(cluster, ns, md, n).await;
    let observer = observed(cluster, ns, md, &outdated, max_unavailable, max_surge).await;
    let out = run_plugin(rotate_args(cluster, md, flags)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = cluster.capi.wait_machines(ns, md, n, NEW).await.unwrap();
    let (report, fewest_available) = observer
        .finish(cluster, cluster.capi.calls_made(ns), now)
        .await;
    assert!(report.is_none(), "{}", report.unwrap());
    assert_eq!(
        fewest_available,
        Some(n - max_unavailable),
        "the budget was used and never passed"
    );
    let removed: Vec<(String, bool)> = cluster
        .capi
        .deletions()
        .into_iter()
        .filter(|d| d.namespace == ns)
        .map(|d| (d.machine, d.drain_excluded))
        .collect();
    let mut machines: Vec<String> = removed.iter().map(|(m, _)| m.clone()).collect();
    machines.sort();
    assert_eq!(
        machines,
        outdated.iter().cloned().collect::<Vec<_>>(),
        "each old Machine removed once, no new one"
    );
    assert!(
        removed.iter().all(|(_, excluded)| *excluded),
        "the Machine controller was told not to drain again: {removed:?}"
    );
    let md = deployment(cluster, ns, md).await;
    assert_eq!(md.data["spec"]["replicas"], n);
    assert!(
        md.metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.starts_with("rollout-ext.io/")),
        "nothing is owed to the MachineDeployment"
    );
    events(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_rotates_each_machine_once_within_its_budget() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let events = rotate_watched(
        cluster,
        "capi-roll",
        "workers",
        6,
        (2, 0),
        &["--max-unavailable", "2"],
    )
    .await;
    let batches: Vec<usize> = events
        .iter()
        .filter(|e| e["event"] == "batch-started")
        .map(|e| e["nodes"].as_array().unwrap().len())
        .collect();
    // A canary of one, then waves of two.
    assert_eq!(batches, [1, 2, 2, 1], "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_surges_before_it_drains() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let events = rotate_watched(
        cluster,
        "capi-surge",
        "surgers",
        6,
        (0, 1),
        &["--max-surge", "1", "--max-unavailable", "0"],
    )
    .await;
    let surged: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "surging").collect();
    assert!(!surged.is_empty(), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_node_never_registered_is_replaced_without_a_drain() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let (ns, md) = ("capi-lost", "lost");
    let capi = &cluster.capi;
    capi.create_deployment(ns, md, 2, NEW).await.unwrap();
    let healthy = capi.wait_machines(ns, md, 2, NEW).await.unwrap();
    capi.set_never_joins(ns, md, true);
    capi.scale(ns, md, 3).await.unwrap();
    let stuck = capi
        .wait_for(ns, md, "a third Machine, without a Node", |machines| {
            machines.len() == 3
        })
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.metadata.name.unwrap())
        .find(|m| !healthy.contains(m))
        .unwrap();
    capi.set_never_joins(ns, md, false);

    // The plan shows it, and says why.
    let plan_args: Vec<String> = rotate_args(cluster, md, &[])
        .into_iter()
        .filter(|a| a != "--yes")
        .collect();
    let plan = run_plugin(plan_args).await;
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let instances = &plan["groups"][0]["instances"];
    let updated: Vec<(&str, &str)> = instances
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["update"] == true)
        .map(|i| (i["name"].as_str().unwrap(), i["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(updated, [(stuck.as_str(), "not registered as a node")]);

    let out = run_plugin(rotate_args(cluster, md, &[])).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = capi.wait_machines(ns, md, 3, NEW).await.unwrap();
    assert!(healthy.iter().all(|m| now.contains(m)), "{now:?}");
    assert!(!now.contains(&stuck));
    let removed: Vec<String> = capi
        .deletions()
        .into_iter()
        .filter(|d| d.namespace == ns)
        .map(|d| d.machine)
        .collect();
    assert_eq!(removed, [stuck.as_str()]);
    let drained: Vec<serde_json::Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "cordoned" || e["event"] == "drained")
        .collect();
    assert!(drained.is_empty(), "nothing to drain: {drained:?}");
}
