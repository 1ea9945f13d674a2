//! A `--provider cluster-api` rotation under test, shared by the tests that run one (plainly,
//! under chaos, as a least-privileged operator): an outdated MachineDeployment, a workload on
//! its nodes under a budget and the observer of the rotation, the rotation's arguments, and the
//! checks of what it left: each old Machine removed once, the MachineDeployment back at its
//! size with nothing owed.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject};

use crate::cluster::{CapiKind, MachineDeletion, POOL_LABEL, TestCluster};
use crate::invariants::{Budget, Pdb};
use crate::observer::Observer;
use crate::provider_rotation_args;
use crate::workloads::{budget, replica_set_with};
use serde_json::json;

/// The kubelet of the Machines a rotation finds.
pub const OLD: &str = "v1.19.7";
/// The kubelet of the Machines that replace them.
pub const NEW: &str = "v1.20.2";

/// `nodes --yes --provider cluster-api` of MachineDeployment `md`, with the test timings,
/// JSON events and `flags`.
pub fn rotate_args(cluster: &TestCluster, md: &str, flags: &[&str]) -> Vec<String> {
    let yes: Vec<&str> = ["--yes"].iter().chain(flags).copied().collect();
    provider_rotation_args(cluster, "cluster-api", md, NEW, &yes)
}

/// A MachineDeployment `md` of `n` Machines on the old kubelet in namespace `ns`, whose new
/// Machines get the new one; returns the old Machines (their Nodes have their names).
pub async fn outdated_deployment(
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

/// A ReplicaSet `web` of one pod per old Machine on `md`'s nodes, under a PodDisruptionBudget
/// allowing as many of them to go as nodes may drain at once (`max_unavailable` + `max_surge`,
/// at least one), and the observer of the rotation from now on, holding it to that budget and
/// to `max_unavailable` nodes.
pub async fn observed(
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
    // A surged node drains too. The headroom matters where runs are killed: one killed while
    // the API server grants an eviction can leave that pod charged to the budget but not
    // deleted (the deletion goes with the request), for the two minutes the disruption
    // controller keeps such a grant.
    let pods_unavailable = (max_unavailable + max_surge).max(1);
    budget(&client, ns, "v1", n, pods_unavailable as i32).await;
    let budget = Budget {
        outdated: outdated.clone(),
        max_unavailable,
        max_surge,
        cloud_only: false,
        set_aside: Default::default(),
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

/// The Machine deletions of namespace `ns` the stand-in acted on so far, in order.
pub fn removed(cluster: &TestCluster, ns: &str) -> Vec<MachineDeletion> {
    cluster
        .capi
        .deletions()
        .into_iter()
        .filter(|d| d.namespace == ns)
        .collect()
}

/// Each old Machine of MachineDeployment `md` (in `ns`) was removed exactly once and got one
/// replacement: no other Machine was removed, and no more were created (a surge or a scale-down
/// given back twice would make one more). Each was marked so that the Machine controller would
/// not drain its Node again (the rotation had).
pub fn assert_each_replaced_once(
    cluster: &TestCluster,
    ns: &str,
    md: &str,
    outdated: &BTreeSet<String>,
) {
    let removed = removed(cluster, ns);
    let mut machines: Vec<&str> = removed.iter().map(|d| d.machine.as_str()).collect();
    machines.sort();
    let old: Vec<&str> = outdated.iter().map(String::as_str).collect();
    assert_eq!(machines, old, "each old Machine removed once, no new one");
    assert!(
        removed.iter().all(|d| d.drain_excluded),
        "the Machine controller was told not to drain again: {removed:?}"
    );
    // The stand-in names a MachineDeployment's Machines `<md>-ms-<n>`.
    let prefix = format!("{md}-ms-");
    let new: Vec<String> = cluster
        .capi
        .created()
        .into_iter()
        .filter(|m| m.starts_with(&prefix) && !outdated.contains(m))
        .collect();
    assert_eq!(new.len(), outdated.len(), "one replacement each: {new:?}");
}

/// Waits for MachineDeployment `md` to have `n` new Machines with Ready Nodes, and checks that
/// it is back at its size with nothing owed to it; returns the Machines.
pub async fn assert_back_at_size(
    cluster: &TestCluster,
    ns: &str,
    md: &str,
    n: usize,
) -> Vec<String> {
    let now = cluster.capi.wait_machines(ns, md, n, NEW).await.unwrap();
    let md = deployment(cluster, ns, md).await;
    assert_eq!(md.data["spec"]["replicas"], n);
    let owed: Vec<String> = md
        .metadata
        .annotations
        .unwrap_or_default()
        .into_keys()
        .filter(|k| k.starts_with("rollout-ext.io/"))
        .collect();
    assert!(
        owed.is_empty(),
        "nothing is owed to the MachineDeployment: {owed:?}"
    );
    now
}

/// The MachineDeployment `md` as the API server has it.
pub async fn deployment(cluster: &TestCluster, ns: &str, md: &str) -> DynamicObject {
    let resource = CapiKind::MachineDeployment.resource();
    Api::<DynamicObject>::namespaced_with(cluster.client().await, ns, &resource)
        .get(md)
        .await
        .unwrap()
}
