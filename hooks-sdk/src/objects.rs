//! Typed views of the Kubernetes objects policies read most through
//! [`host::list_objects`](crate::host::list_objects): Pods, PodDisruptionBudgets, ConfigMaps and
//! Nodes. List them with [`host::pods`](crate::host::pods), … or any serde type with
//! [`host::list`](crate::host::list).
//!
//! Each type holds only the fields policies need, so a hook stays small (no `k8s-openapi`) and
//! parsing does not depend on the cluster's version. Every field defaults when it is missing or
//! `null`: the API server omits empty fields, and a hand-written object in a unit test may leave
//! out whatever the test does not look at.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// A missing field and an explicit `null` both read as the field's default.
fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// `metadata` of every object: what identifies it and what selects it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// Empty for cluster-scoped objects (Nodes).
    #[serde(deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(deserialize_with = "nullable")]
    pub labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub annotations: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub owner_references: Vec<OwnerReference>,
}

impl ObjectMeta {
    /// `namespace/name`, or `name` for a cluster-scoped object: how `kubectl` and the plugin's
    /// messages name it.
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// The value of annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// The first owner of kind `kind` (`"ReplicaSet"`, `"DaemonSet"`, …): tells a DaemonSet pod,
    /// which a drain leaves in place, from one a drain moves.
    pub fn owner(&self, kind: &str) -> Option<&OwnerReference> {
        self.owner_references.iter().find(|o| o.kind == kind)
    }
}

/// One entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OwnerReference {
    #[serde(deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
}

/// One entry of `status.conditions` (of a Pod or a Node).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Condition {
    /// `Ready`, `MemoryPressure`, …
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(deserialize_with = "nullable")]
    pub status: String,
}

/// Whether `conditions` hold condition `type_` with status `True`. A missing condition is not
/// true: a kubelet that never reported is not Ready.
fn condition_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// A Pod (`v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pod {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: PodSpec,
    #[serde(deserialize_with = "nullable")]
    pub status: PodStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    /// The node it is scheduled to; none while it is pending.
    pub node_name: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(deserialize_with = "nullable")]
    pub phase: String,
    #[serde(deserialize_with = "nullable")]
    pub conditions: Vec<Condition>,
}

impl Pod {
    pub const API_VERSION: &'static str = "v1";
    pub const KIND: &'static str = "Pod";

    /// Its `Ready` condition is `True`: it passes its readiness probes and receives traffic.
    pub fn is_ready(&self) -> bool {
        condition_true(&self.status.conditions, "Ready")
    }

    /// It ran to completion (`Succeeded` or `Failed`): a finished Job pod is never Ready, and a
    /// gate that counts unready pods should leave it out.
    pub fn is_finished(&self) -> bool {
        matches!(self.status.phase.as_str(), "Succeeded" | "Failed")
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        self.metadata.key()
    }
}

/// An integer or a percentage such as `"25%"`: `minAvailable` and `maxUnavailable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl IntOrString {
    /// The number it stands for out of `total`: an integer as is (negative reads as 0), a
    /// percentage of `total` rounded up or down (Kubernetes rounds `minAvailable` up and
    /// `maxUnavailable` down). None for a string that is not `N%`.
    pub fn resolve(&self, total: u32, round_up: bool) -> Option<u32> {
        match self {
            IntOrString::Int(n) => Some(u32::try_from(*n).unwrap_or(0)),
            IntOrString::String(s) => {
                let percent = s.trim().strip_suffix('%')?.trim().parse::<u32>().ok()?;
                Some(crate::percent_of(percent, total, round_up))
            }
        }
    }
}

/// A structured label selector, as PodDisruptionBudgets (and controllers) carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    #[serde(deserialize_with = "nullable")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(deserialize_with = "nullable")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One of `matchExpressions`: `key` `In`/`NotIn` `values`, or `Exists`/`DoesNotExist`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LabelSelectorRequirement {
    #[serde(deserialize_with = "nullable")]
    pub key: String,
    #[serde(deserialize_with = "nullable")]
    pub operator: String,
    #[serde(deserialize_with = "nullable")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy every term, as the API server decides. An empty selector
    /// matches everything; an unknown operator matches nothing (fail closed).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// A PodDisruptionBudget (`policy/v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDisruptionBudget {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: PodDisruptionBudgetSpec,
    #[serde(deserialize_with = "nullable")]
    pub status: PodDisruptionBudgetStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodDisruptionBudgetSpec {
    pub min_available: Option<IntOrString>,
    pub max_unavailable: Option<IntOrString>,
    /// None (null) selects no pod; an empty selector every pod of the namespace.
    pub selector: Option<LabelSelector>,
}

/// What the disruption controller last computed. All zero until it has (a new budget allows no
/// disruption).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodDisruptionBudgetStatus {
    #[serde(deserialize_with = "nullable")]
    pub current_healthy: i32,
    #[serde(deserialize_with = "nullable")]
    pub desired_healthy: i32,
    #[serde(deserialize_with = "nullable")]
    pub disruptions_allowed: i32,
    #[serde(deserialize_with = "nullable")]
    pub expected_pods: i32,
}

impl PodDisruptionBudget {
    pub const API_VERSION: &'static str = "policy/v1";
    pub const KIND: &'static str = "PodDisruptionBudget";

    /// How many of its pods may be evicted now (`status.disruptionsAllowed`); 0 or less means a
    /// drain of one of them waits.
    pub fn disruptions_allowed(&self) -> i32 {
        self.status.disruptions_allowed
    }

    /// It allows no eviction now: a drain of one of its pods waits.
    pub fn blocks(&self) -> bool {
        self.disruptions_allowed() <= 0
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        self.metadata.key()
    }

    /// Whether it covers `pod`: same namespace, and the selector matches the pod's labels.
    pub fn covers(&self, pod: &Pod) -> bool {
        self.metadata.namespace == pod.metadata.namespace
            && self
                .spec
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.metadata.labels))
    }
}

/// A ConfigMap (`v1`): a common place for a site to keep what a policy reads at run time, such
/// as a freeze flag, without a new policy file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigMap {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub data: BTreeMap<String, String>,
}

impl ConfigMap {
    pub const API_VERSION: &'static str = "v1";
    pub const KIND: &'static str = "ConfigMap";

    /// The value of data key `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.data.get(key).map(String::as_str)
    }
}

/// A Node (`v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Node {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub spec: NodeSpec,
    #[serde(deserialize_with = "nullable")]
    pub status: NodeStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeSpec {
    /// Cordoned.
    #[serde(deserialize_with = "nullable")]
    pub unschedulable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeStatus {
    #[serde(deserialize_with = "nullable")]
    pub conditions: Vec<Condition>,
}

impl Node {
    pub const API_VERSION: &'static str = "v1";
    pub const KIND: &'static str = "Node";

    /// Its `Ready` condition is `True`: the kubelet reports healthy.
    pub fn is_ready(&self) -> bool {
        condition_true(&self.status.conditions, "Ready")
    }
}

/// What every controller of pods says of itself, as its readiness helpers read it.
pub trait Workload {
    /// The pods it wants.
    fn desired(&self) -> u32;
    /// Its pods Ready (for `minReadySeconds` where the kind has it: available).
    fn available(&self) -> u32;
    /// `namespace/name`.
    fn key(&self) -> String;
    /// It has fewer available pods than it wants: a gate after a batch may hold for it.
    fn is_short(&self) -> bool {
        self.available() < self.desired()
    }
    /// How many of its pods are missing from the available ones.
    fn unavailable(&self) -> u32 {
        self.desired().saturating_sub(self.available())
    }
}

/// `spec.replicas` of a Deployment, ReplicaSet or StatefulSet: absent means 1, as the API
/// server defaults it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplicatedSpec {
    pub replicas: Option<i32>,
}

impl Default for ReplicatedSpec {
    fn default() -> Self {
        ReplicatedSpec { replicas: Some(1) }
    }
}

/// `status` of a Deployment, ReplicaSet or StatefulSet (counts the server omits read as 0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicatedStatus {
    #[serde(deserialize_with = "nullable")]
    pub replicas: i32,
    #[serde(deserialize_with = "nullable")]
    pub ready_replicas: i32,
    /// Absent on StatefulSets of servers before 1.22, where `ready_replicas` stands for it.
    pub available_replicas: Option<i32>,
    #[serde(deserialize_with = "nullable")]
    pub updated_replicas: i32,
}

/// Types a controller that keeps `spec.replicas` pods: a Deployment, ReplicaSet or StatefulSet.
macro_rules! replicated {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct $name {
            #[serde(deserialize_with = "nullable")]
            pub metadata: ObjectMeta,
            #[serde(deserialize_with = "nullable")]
            pub spec: ReplicatedSpec,
            #[serde(deserialize_with = "nullable")]
            pub status: ReplicatedStatus,
        }

        impl $name {
            pub const API_VERSION: &'static str = "apps/v1";
            pub const KIND: &'static str = $kind;
        }

        impl Workload for $name {
            fn desired(&self) -> u32 {
                u32::try_from(self.spec.replicas.unwrap_or(1)).unwrap_or(0)
            }
            fn available(&self) -> u32 {
                let s = &self.status;
                u32::try_from(s.available_replicas.unwrap_or(s.ready_replicas)).unwrap_or(0)
            }
            fn key(&self) -> String {
                self.metadata.key()
            }
        }
    };
}

replicated!(
    /// A Deployment (`apps/v1`).
    Deployment,
    "Deployment"
);
replicated!(
    /// A ReplicaSet (`apps/v1`).
    ReplicaSet,
    "ReplicaSet"
);
replicated!(
    /// A StatefulSet (`apps/v1`).
    StatefulSet,
    "StatefulSet"
);

/// A DaemonSet (`apps/v1`): it wants a pod on each node it schedules to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonSet {
    #[serde(deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    #[serde(deserialize_with = "nullable")]
    pub status: DaemonSetStatus,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DaemonSetStatus {
    #[serde(deserialize_with = "nullable")]
    pub desired_number_scheduled: i32,
    #[serde(deserialize_with = "nullable")]
    pub number_ready: i32,
    #[serde(deserialize_with = "nullable")]
    pub number_available: i32,
    #[serde(deserialize_with = "nullable")]
    pub updated_number_scheduled: i32,
}

impl DaemonSet {
    pub const API_VERSION: &'static str = "apps/v1";
    pub const KIND: &'static str = "DaemonSet";
}

impl Workload for DaemonSet {
    fn desired(&self) -> u32 {
        u32::try_from(self.status.desired_number_scheduled).unwrap_or(0)
    }
    fn available(&self) -> u32 {
        u32::try_from(self.status.number_available).unwrap_or(0)
    }
    fn key(&self) -> String {
        self.metadata.key()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn workloads_read_with_the_apis_defaults_and_say_when_they_are_short() {
        // replicas absent: 1, as the server defaults it; counts absent: 0.
        let fresh: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {}, "status": {}
        }))
        .unwrap();
        assert_eq!((fresh.desired(), fresh.available()), (1, 0));
        assert!(fresh.is_short());
        assert_eq!(fresh.unavailable(), 1);
        assert_eq!(fresh.key(), "shop/web");
        let whole: Deployment = serde_json::from_value(json!({
            "spec": {"replicas": 3}, "status": {"readyReplicas": 3, "availableReplicas": 3}
        }))
        .unwrap();
        assert!(!whole.is_short());
        // Scaled to zero wants nothing, and is never short.
        let zero: ReplicaSet =
            serde_json::from_value(json!({"spec": {"replicas": 0}, "status": {}})).unwrap();
        assert!(!zero.is_short());
        // A StatefulSet of a server before 1.22 reports no availableReplicas: ready stands in.
        let old: StatefulSet = serde_json::from_value(json!({
            "spec": {"replicas": 2}, "status": {"readyReplicas": 1}
        }))
        .unwrap();
        assert_eq!(old.available(), 1);
        assert!(old.is_short());
        let agents: DaemonSet = serde_json::from_value(json!({
            "status": {"desiredNumberScheduled": 4, "numberReady": 4, "numberAvailable": 3}
        }))
        .unwrap();
        assert_eq!(agents.unavailable(), 1);
        // An object with nothing but nulls reads as its defaults.
        let nulls: Deployment = serde_json::from_value(
            json!({"metadata": null, "spec": {"replicas": null}, "status": null}),
        )
        .unwrap();
        assert_eq!(nulls.desired(), 1);
        let no_spec: Deployment = serde_json::from_value(json!({"spec": null})).unwrap();
        assert_eq!(no_spec.desired(), 1);
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_empty_object_parses_to_defaults() {
        assert_eq!(pod(json!({})), Pod::default());
        let node: Node = serde_json::from_value(json!({})).unwrap();
        assert!(!node.is_ready());
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({})).unwrap();
        assert_eq!(pdb.disruptions_allowed(), 0);
        let cm: ConfigMap = serde_json::from_value(json!({})).unwrap();
        assert!(cm.data.is_empty());
    }

    #[test]
    fn nulls_read_as_defaults() {
        let p = pod(json!({
            "metadata": {"name": "a", "namespace": null, "labels": null, "ownerReferences": null},
            "spec": null,
            "status": {"phase": null, "conditions": null},
        }));
        assert_eq!(p.metadata.name, "a");
        assert_eq!(p.key(), "a");
        assert!(!p.is_ready() && !p.is_finished());
    }

    #[test]
    fn a_real_pod_keeps_what_policies_need() {
        let p = pod(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "uid": "ignored",
                "labels": {"app": "web"},
                "annotations": {"note": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7f", "controller": true}],
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                ],
            },
        }));
        assert_eq!(p.key(), "shop/web-1");
        assert_eq!(p.metadata.label("app"), Some("web"));
        assert_eq!(p.metadata.annotation("note"), Some("x"));
        assert_eq!(
            p.metadata.owner("ReplicaSet").map(|o| o.name.as_str()),
            Some("web-7f")
        );
        assert!(p.metadata.owner("DaemonSet").is_none());
        assert_eq!(p.spec.node_name.as_deref(), Some("n1"));
        assert!(p.is_ready());
        assert!(!p.is_finished());
    }

    #[test]
    fn readiness_and_completion() {
        let with = |phase: &str, ready: &str| {
            pod(
                json!({"status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}}),
            )
        };
        assert!(!with("Running", "False").is_ready());
        assert!(!with("Running", "Unknown").is_ready());
        assert!(with("Succeeded", "False").is_finished());
        assert!(with("Failed", "False").is_finished());
        assert!(!with("Pending", "False").is_finished());
    }

    #[test]
    fn budgets() {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"minAvailable": "50%", "maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1, "expectedPods": 3},
        }))
        .unwrap();
        assert_eq!(pdb.disruptions_allowed(), 1);
        assert_eq!(pdb.status.expected_pods, 3);
        assert_eq!(
            pdb.spec.min_available,
            Some(IntOrString::String("50%".into()))
        );
        assert_eq!(
            pdb.spec.min_available.as_ref().unwrap().resolve(3, true),
            Some(2)
        );
        assert_eq!(pdb.spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(
            pdb.spec.max_unavailable.as_ref().unwrap().resolve(3, false),
            Some(1)
        );

        let web =
            pod(json!({"metadata": {"name": "w", "namespace": "shop", "labels": {"app": "web"}}}));
        let db =
            pod(json!({"metadata": {"name": "d", "namespace": "shop", "labels": {"app": "db"}}}));
        let elsewhere =
            pod(json!({"metadata": {"name": "w", "namespace": "other", "labels": {"app": "web"}}}));
        assert!(pdb.covers(&web));
        assert!(!pdb.covers(&db));
        assert!(!pdb.covers(&elsewhere));

        // policy/v1: a null selector covers nothing, an empty one the whole namespace.
        let mut open = pdb.clone();
        open.spec.selector = None;
        assert!(!open.covers(&web));
        open.spec.selector = Some(LabelSelector::default());
        assert!(open.covers(&db));
    }

    #[test]
    fn int_or_string() {
        assert_eq!(IntOrString::Int(-1).resolve(10, true), Some(0));
        assert_eq!(IntOrString::String("25%".into()).resolve(10, true), Some(3));
        assert_eq!(
            IntOrString::String("25%".into()).resolve(10, false),
            Some(2)
        );
        assert_eq!(IntOrString::String("three".into()).resolve(10, false), None);
    }

    #[test]
    fn selector_expressions() {
        let s: LabelSelector = serde_json::from_value(json!({
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["web", "api"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ]
        }))
        .unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(s.matches(&labels(&[("tier", "api")])));
        assert!(!s.matches(&labels(&[("tier", "db")])));
        assert!(!s.matches(&labels(&[("tier", "web"), ("legacy", "1")])));
        let odd = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(!odd.matches(&labels(&[("a", "1")])));
    }

    #[test]
    fn config_maps_and_nodes() {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "freeze", "namespace": "ops"},
            "data": {"frozen": "true"},
        }))
        .unwrap();
        assert_eq!(cm.get("frozen"), Some("true"));
        assert_eq!(cm.get("other"), None);

        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "a"}},
            "spec": {"unschedulable": true, "taints": []},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        assert!(node.is_ready());
        assert!(node.spec.unschedulable);
        assert_eq!(node.metadata.key(), "n1");
    }
}
