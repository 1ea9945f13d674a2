//! What a command could have changed in a test cluster, taken before and after it ran: the tests
//! that prove a refused or failed run "changed nothing" compare two of these.
//!
//! - Nodes: uid, labels, annotations, spec (taints, unschedulable) and deletion. Not their
//!   resourceVersion: the simulated kubelets renew heartbeats every few seconds, which is a
//!   status write nobody else makes.
//! - Pods: uid, resourceVersion, node and deletion (a patch, an eviction or a delete changes one).
//! - ReplicationControllers and ReplicaSets: uid, generation (spec changes), labels, annotations.
//! - Cluster API MachineDeployments, MachineSets and Machines: uid, generation (spec changes:
//!   replicas), labels, annotations, deletion.
//! - The rotation lock (`kube-system/rollout-ext`): its resourceVersion, or absent.
//! - The simulated cloud's recorded calls (terminations and detaches), and the Machine
//!   deletions the Cluster API stand-in acted on.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, ReplicationController};
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta};
use kube::runtime::wait::await_condition;
use serde_json::json;

use crate::cluster::{CapiKind, TestCluster};

/// Waits until the control plane is done with freshly registered `nodes`: the TTL controller has
/// annotated them and the node lifecycle controller has lifted the not-ready taint. Before that,
/// those controllers change the nodes on their own, and a fingerprint would see it.
pub async fn wait_settled(cluster: &TestCluster, nodes: &[&str]) {
    let api: Api<Node> = Api::all(cluster.client().await);
    let settled = |node: Option<&Node>| {
        node.is_some_and(|n| {
            let ttl = n
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("node.alpha.kubernetes.io/ttl"));
            let tainted = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"));
            ttl && !tainted
        })
    };
    for name in nodes {
        let wait = await_condition(api.clone(), name, settled);
        tokio::time::timeout(Duration::from_secs(120), wait)
            .await
            .unwrap_or_else(|_| panic!("node {name} did not settle within 2 minutes"))
            .unwrap();
    }
}

/// One line of state per object, keyed by kind and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(BTreeMap<String, String>);

fn meta_of(meta: &ObjectMeta) -> serde_json::Value {
    json!({
        "uid": meta.uid,
        "labels": meta.labels,
        "annotations": meta.annotations,
        "deletionTimestamp": meta.deletion_timestamp,
        "finalizers": meta.finalizers,
    })
}

fn key(kind: &str, meta: &ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{kind} {ns}/{}", meta.name.as_deref().unwrap_or_default()),
        None => format!("{kind} {}", meta.name.as_deref().unwrap_or_default()),
    }
}

impl Fingerprint {
    /// Reads the cluster now.
    pub async fn take(cluster: &TestCluster) -> Fingerprint {
        let client = cluster.client().await;
        let all = ListParams::default();
        let mut lines = BTreeMap::new();
        for node in Api::<Node>::all(client.clone()).list(&all).await.unwrap() {
            let value = json!({"meta": meta_of(&node.metadata), "spec": node.spec});
            lines.insert(key("node", &node.metadata), value.to_string());
        }
        for pod in Api::<Pod>::all(client.clone()).list(&all).await.unwrap() {
            let value = json!({
                "meta": meta_of(&pod.metadata),
                "resourceVersion": pod.metadata.resource_version,
                "node": pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            });
            lines.insert(key("pod", &pod.metadata), value.to_string());
        }
        let rcs = Api::<ReplicationController>::all(client.clone());
        for rc in rcs.list(&all).await.unwrap() {
            let value =
                json!({"meta": meta_of(&rc.metadata), "generation": rc.metadata.generation});
            lines.insert(key("rc", &rc.metadata), value.to_string());
        }
        for rs in Api::<ReplicaSet>::all(client.clone())
            .list(&all)
            .await
            .unwrap()
        {
            let value =
                json!({"meta": meta_of(&rs.metadata), "generation": rs.metadata.generation});
            lines.insert(key("rs", &rs.metadata), value.to_string());
        }
        for kind in CapiKind::ALL {
            let objects = Api::<DynamicObject>::all_with(client.clone(), &kind.resource());
            for object in objects.list(&all).await.unwrap() {
                let value = json!({"meta": meta_of(&object.metadata), "generation": object.metadata.generation});
                lines.insert(
                    key(&format!("{kind:?}"), &object.metadata),
                    value.to_string(),
                );
            }
        }
        let lease = Api::<Lease>::namespaced(client, "kube-system")
            .get_opt("rollout-ext")
            .await
            .unwrap();
        lines.insert(
            "lock kube-system/rollout-ext".into(),
            match lease {
                Some(l) => format!("resourceVersion {:?}", l.metadata.resource_version),
                None => "absent".into(),
            },
        );
        let calls: Vec<String> = cluster
            .cloud
            .calls()
            .into_iter()
            .map(|c| format!("{} {}", c.verb, c.target))
            .collect();
        lines.insert("cloud calls".into(), calls.join(", "));
        let deletions: Vec<String> = cluster
            .capi
            .deletions()
            .into_iter()
            .map(|d| format!("{}/{}", d.namespace, d.machine))
            .collect();
        lines.insert("Machine deletions".into(), deletions.join(", "));
        Fingerprint(lines)
    }

    /// What differs between `self` (before) and `after`, one line per object; empty when
    /// nothing changed.
    pub fn changes(&self, after: &Fingerprint) -> Vec<String> {
        let mut changes = Vec::new();
        for (k, before) in &self.0 {
            match after.0.get(k) {
                None => changes.push(format!("{k}: gone (was {before})")),
                Some(now) if now != before => changes.push(format!("{k}: was {before}, now {now}")),
                Some(_) => {}
            }
        }
        for (k, now) in &after.0 {
            if !self.0.contains_key(k) {
                changes.push(format!("{k}: new ({now})"));
            }
        }
        changes
    }

    /// Panics, listing the changes, unless the cluster still matches `self`.
    pub async fn assert_unchanged(&self, cluster: &TestCluster, what: &str) {
        let changes = self.changes(&Fingerprint::take(cluster).await);
        assert!(
            changes.is_empty(),
            "{what} changed the cluster:\n{}",
            changes.join("\n")
        );
    }
}
