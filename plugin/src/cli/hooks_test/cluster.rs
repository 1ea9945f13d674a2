//! A fixture's cluster declared inline (`cluster:`), so that an author writes the few nodes,
//! pods, Deployments, StatefulSets and PodDisruptionBudgets a case is about instead of building a snapshot:
//! made into the v1 List a snapshot is.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

/// Labels as written: a map, as the API serves them.
type Labels = BTreeMap<String, String>;

/// The label that names a node's group, as kops sets it (the policy's default group label).
const GROUP_LABEL: &str = "kops.k8s.io/instancegroup";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct InlineCluster {
    #[serde(default)]
    nodes: Vec<NodeIn>,
    #[serde(default)]
    pods: Vec<PodIn>,
    #[serde(default)]
    deployments: Vec<ReplicatedIn>,
    #[serde(default)]
    stateful_sets: Vec<ReplicatedIn>,
    #[serde(default)]
    pod_disruption_budgets: Vec<BudgetIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeIn {
    name: String,
    /// Its group, as the kops group label.
    #[serde(default = "nodes")]
    group: String,
    zone: Option<String>,
    /// RFC 3339.
    created: Option<String>,
    kubelet_version: Option<String>,
    #[serde(default)]
    labels: Labels,
    #[serde(default)]
    annotations: Labels,
    #[serde(default = "yes")]
    ready: bool,
    #[serde(default)]
    unschedulable: bool,
    #[serde(default)]
    taints: Vec<TaintIn>,
}

/// A node's taint, as the API writes it.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TaintIn {
    key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    value: String,
    effect: TaintEffect,
}

#[derive(Debug, Deserialize, serde::Serialize)]
enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodIn {
    #[serde(default = "default_namespace")]
    namespace: String,
    name: String,
    /// The node it runs on.
    node: Option<String>,
    #[serde(default)]
    labels: Labels,
    #[serde(default = "yes")]
    ready: bool,
    /// `KIND/NAME` of its controller (`ReplicaSet/web-6b9c`, `DaemonSet/agent`).
    owner: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
/// A Deployment or a StatefulSet: the pods it wants and has.
struct ReplicatedIn {
    #[serde(default = "default_namespace")]
    namespace: String,
    name: String,
    #[serde(default = "one")]
    replicas: u32,
    /// Its available replicas (all of them unless told).
    available: Option<u32>,
    #[serde(default)]
    labels: Labels,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BudgetIn {
    #[serde(default = "default_namespace")]
    namespace: String,
    name: String,
    /// matchLabels of the pods it covers.
    #[serde(default)]
    selector: Labels,
    min_available: Option<Value>,
    max_unavailable: Option<Value>,
    #[serde(default)]
    disruptions_allowed: i32,
}

fn nodes() -> String {
    "nodes".into()
}

fn default_namespace() -> String {
    "default".into()
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

fn condition(ready: bool) -> Value {
    json!([{"type": "Ready", "status": if ready { "True" } else { "False" }}])
}

impl InlineCluster {
    /// The cluster as the v1 List a snapshot holds.
    pub(super) fn to_list(&self) -> Value {
        let nodes = self.nodes.iter().map(|n| {
            let mut labels = n.labels.clone();
            labels.insert(GROUP_LABEL.into(), n.group.clone());
            if let Some(zone) = &n.zone {
                labels.insert("topology.kubernetes.io/zone".into(), zone.clone());
            }
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": n.name, "labels": labels, "annotations": n.annotations,
                                "creationTimestamp": n.created},
                   "spec": {"unschedulable": n.unschedulable, "taints": n.taints},
                   "status": {"conditions": condition(n.ready),
                              "nodeInfo": {"kubeletVersion": n.kubelet_version}}})
        });
        let pods = self.pods.iter().map(|p| {
            let owner = (p.owner.as_deref()).and_then(|o| o.split_once('/')).map(|(kind, name)| {
                json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "controller": true}])
            });
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"namespace": p.namespace, "name": p.name, "labels": p.labels,
                                "ownerReferences": owner},
                   "spec": {"nodeName": p.node},
                   "status": {"phase": "Running", "conditions": condition(p.ready)}})
        });
        let deployments = (self.deployments.iter().map(|d| ("Deployment", d)))
            .chain(self.stateful_sets.iter().map(|s| ("StatefulSet", s)));
        let workloads = deployments.map(|(kind, d)| {
            json!({"apiVersion": "apps/v1", "kind": kind,
                   "metadata": {"namespace": d.namespace, "name": d.name, "labels": d.labels},
                   "spec": {"replicas": d.replicas},
                   "status": {"replicas": d.replicas, "readyReplicas": d.available.unwrap_or(d.replicas),
                              "availableReplicas": d.available.unwrap_or(d.replicas)}})
        });
        let budgets = self.pod_disruption_budgets.iter().map(|b| {
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"namespace": b.namespace, "name": b.name},
                   "spec": {"selector": {"matchLabels": b.selector},
                            "minAvailable": b.min_available, "maxUnavailable": b.max_unavailable},
                   "status": {"disruptionsAllowed": b.disruptions_allowed}})
        });
        let items: Vec<Value> = (nodes.chain(pods).chain(workloads).chain(budgets))
            .map(without_nulls)
            .collect();
        json!({"apiVersion": "v1", "kind": "List", "items": items})
    }
}

/// `value` without the fields left out (null), as the API server writes objects.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            (map.into_iter())
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inline_cluster_is_the_list_a_snapshot_holds() {
        let cluster: InlineCluster = serde_json::from_value(json!({
            "nodes": [{"name": "n1", "zone": "a", "created": "2026-01-01T00:00:00Z",
                       "kubeletVersion": "v1.20.1", "labels": {"tier": "web"},
                       "taints": [{"key": "retiring", "effect": "NoSchedule"}]}],
            "pods": [{"namespace": "shop", "name": "web-0", "node": "n1", "ready": false,
                      "owner": "ReplicaSet/web-6b9c", "labels": {"app": "web"}}],
            "podDisruptionBudgets": [{"namespace": "shop", "name": "web",
                                      "selector": {"app": "web"}, "minAvailable": 1}],
            "statefulSets": [{"namespace": "db", "name": "pg", "replicas": 3, "available": 2}]
        }))
        .unwrap();
        let list = cluster.to_list().to_string();
        let snapshot = crate::snapshot::Snapshot::from_json(list.as_bytes()).unwrap();
        assert_eq!(snapshot.nodes.len(), 1);
        let node = &snapshot.nodes[0];
        assert_eq!(
            node.labels.get(GROUP_LABEL).map(String::as_str),
            Some("nodes")
        );
        assert_eq!(node.kubelet_version.as_deref(), Some("v1.20.1"));
        assert!(node.created.is_some() && node.ready);
        let taints: Vec<(&str, &str)> = (node.taints.iter())
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(taints, [("retiring", "NoSchedule")]);
        let pod = &snapshot.pods[0];
        assert_eq!((pod.namespace.as_str(), pod.ready), ("shop", false));
        assert_eq!(snapshot.pdbs.len(), 1);
        let list: Value = serde_json::from_str(&list).unwrap();
        let sts = (list["items"].as_array().unwrap().iter())
            .find(|o| o["kind"] == "StatefulSet")
            .unwrap();
        assert_eq!(sts["metadata"]["namespace"], "db");
        assert_eq!(sts["spec"]["replicas"], 3);
        assert_eq!(sts["status"]["availableReplicas"], 2);
        let unknown = serde_json::from_value::<InlineCluster>(json!({"nodes": [{"nam": "x"}]}));
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown field `nam`")
        );
    }
}
