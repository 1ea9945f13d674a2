//! The cluster as the planner sees it: nodes, pods and PodDisruptionBudgets, read from a standard
//! `v1` `List` (what `kubectl get nodes,pods,poddisruptionbudgets -A -o json` prints); what other
//! disruptors mark (kured's DaemonSet, NodeMaintenances) when the list has them.
//!
//! Only the fields planning reads are kept, and each item's body is parsed only when its kind is
//! one we plan with, so a 150,000-pod snapshot costs little more than reading it. This module does
//! no I/O: it turns bytes into a [`Snapshot`].

mod conditions;
mod kinds;
pub mod kured;
mod machines;
mod node_maintenances;
mod node_pools;
mod pdbs;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::keys;
use crate::labels::Labels;
use crate::scheduling::{
    self, Placement, RawAffinity, RawContainer, RawResources, Resources, Toleration,
};
use conditions::{Condition, condition_true, in_progress};

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(
        "not valid JSON: {0} (expected the output of `kubectl get nodes,pods,poddisruptionbudgets -A -o json`)"
    )]
    Json(#[source] serde_json::Error),
    #[error(
        "is a {kind}, not a v1 List (expected the output of `kubectl get nodes,pods,poddisruptionbudgets -A -o json`)"
    )]
    NotAList { kind: String },
    #[error("item {index} ({kind} {name}): {source}")]
    Item {
        index: usize,
        kind: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("item {index}: {source}")]
    Unreadable {
        index: usize,
        #[source]
        source: serde_json::Error,
    },
}

pub use kinds::KindIndex;
pub use kured::KuredDaemonSet;
pub use machines::{DEPLOYMENT_LABEL, Machine, MachineRef};
pub use node_maintenances::NodeMaintenance;
pub use node_pools::NodePool;
pub use pdbs::{Pdb, PdbBody, UnhealthyPodEvictionPolicy};
pub use wire::Decoded;

/// Nodes, pods and PodDisruptionBudgets at one instant; with Cluster API, its Machines too.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The instances: every Node, and every Machine no Node registered for (see
    /// [`Snapshot::link_machines`]).
    pub nodes: Vec<Node>,
    /// Shared, so that a live view hands out its pods without copying them.
    pub pods: Vec<Arc<Pod>>,
    pub pdbs: Vec<Pdb>,
    pub machines: Vec<Machine>,
    /// Karpenter's NodePools, when read.
    pub node_pools: Vec<NodePool>,
    /// kured's DaemonSets, with the nodes its reboot lock names, when read.
    pub kured: Vec<KuredDaemonSet>,
    /// medik8s' NodeMaintenance objects, when read.
    pub node_maintenances: Vec<NodeMaintenance>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub labels: Labels,
    pub annotations: Labels,
    pub taints: Vec<Taint>,
    pub unschedulable: bool,
    pub ready: bool,
    /// Creation time, Unix seconds.
    pub created: Option<i64>,
    pub kubelet_version: Option<String>,
    pub provider_id: Option<String>,
    /// `status.allocatable` (CPU and memory); none when the snapshot does not say, and such a
    /// node counts as unlimited. A resource missing from it is unlimited too.
    pub allocatable: Option<Resources>,
    /// The Cluster API Machine behind it, which also names its group.
    pub machine: Option<MachineRef>,
    /// A Node object exists: false for a Machine whose Node never registered.
    pub registered: bool,
    /// Its deletion was asked for (the Node has a deletion timestamp): it is on its way out,
    /// by an earlier run's hand or another tool's (Karpenter's termination holds a deleted
    /// node while it drains it).
    pub deleting: bool,
    /// A Node lifecycle condition that says someone is disrupting it (`DrainInProgress` or
    /// `MaintenanceInProgress` True), with its reason: `DrainInProgress (reason Upgrade)`.
    pub in_progress: Option<String>,
}

/// The controller that owns a pod, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node_name: Option<String>,
    pub labels: Labels,
    pub controller: Option<Owner>,
    /// A static pod's API mirror (annotation `kubernetes.io/config.mirror`).
    pub mirror: bool,
    pub ready: bool,
    /// Succeeded or Failed: nothing left to disrupt.
    pub finished: bool,
    /// Pending: not running yet, so no budget guards its eviction.
    pub pending: bool,
    pub uses_empty_dir: bool,
    pub terminating: bool,
    /// What the scheduler reserves for it (zero for a pod without requests).
    pub requests: Resources,
    /// Where it may run: nodeSelector, required node affinity, tolerations.
    pub placement: Placement,
    /// The annotation by which it asks not to be disrupted (see `keys::DO_NOT_DISRUPT`).
    pub do_not_disrupt: Option<&'static str>,
    /// Annotated `rollout-ext.io/wait-for-completion: "true"`.
    pub wait_for_completion: bool,
    pub priority_class: Option<String>,
    /// Its annotations, but `kubectl.kubernetes.io/last-applied-configuration` (a copy of the
    /// whole object, and nothing a decision reads).
    pub annotations: Labels,
}

impl Pod {
    /// A Job's pod, or one annotated to be waited for: a drain lets it complete first.
    pub fn runs_to_completion(&self) -> bool {
        let job = self.controller.as_ref().is_some_and(|c| c.kind == "Job");
        !self.is_runner() && (self.wait_for_completion || job)
    }

    /// Whether it runs a run handed to the cluster (perhaps this very one): evicted last, and
    /// resumed by its Job's next pod.
    pub fn is_runner(&self) -> bool {
        self.labels.contains_key(crate::keys::RUNNER)
    }

    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl Snapshot {
    /// Parses a `v1` `List` (or any `*List`). Items of other kinds are ignored.
    pub fn from_json(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        let mut snapshot = Snapshot::default();
        snapshot.extend_from_json(bytes)?;
        snapshot.link_machines();
        Ok(snapshot)
    }

    /// Adds the items of one list (a `v1` `List`, or a page of an API list such as `NodeList`,
    /// whose items carry no kind of their own). Returns the list's `continue` token, if any.
    /// Once every list is in, [`Snapshot::link_machines`] makes Machines instances.
    pub fn extend_from_json(&mut self, bytes: &[u8]) -> Result<Option<String>, SnapshotError> {
        let list: RawList = serde_json::from_slice(bytes).map_err(SnapshotError::Json)?;
        let Some(item_kind) = list.kind.strip_suffix("List") else {
            return Err(SnapshotError::NotAList { kind: list.kind });
        };
        for (index, item) in list.items.iter().enumerate() {
            let kind = if item.kind.is_empty() {
                item_kind
            } else {
                item.kind
            };
            let api_version = if item.api_version.is_empty() {
                list.api_version
            } else {
                item.api_version
            };
            let result = match kind {
                "Node" => item.parse::<Node>().map(|n| self.nodes.push(n)),
                "Pod" => item.parse::<Pod>().map(|p| self.pods.push(Arc::new(p))),
                "Machine" if api_version.starts_with(machines::API_GROUP) => {
                    item.parse::<Machine>().map(|m| self.machines.push(m))
                }
                "NodePool" if api_version.starts_with(node_pools::API_GROUP) => {
                    item.parse::<NodePool>().map(|p| self.node_pools.push(p))
                }
                "NodeMaintenance" if api_version.starts_with(node_maintenances::API_GROUP) => {
                    (item.parse::<NodeMaintenance>()).map(|m| self.node_maintenances.push(m))
                }
                "DaemonSet" => item
                    .parse::<kured::DaemonSet>()
                    .map(|d| self.kured.extend(d.kured)),
                "PodDisruptionBudget" => {
                    let v1beta1 = api_version.ends_with("v1beta1");
                    item.parse::<pdbs::PdbBody>()
                        .map(|b| self.pdbs.push(b.into_pdb(v1beta1)))
                }
                _ => Ok(()),
            };
            result.map_err(|source| SnapshotError::Item {
                index,
                kind: kind.to_string(),
                name: item.name(),
                source,
            })?;
        }
        Ok(list
            .metadata
            .and_then(|m| m.continue_token)
            .filter(|t| !t.is_empty()))
    }

    /// The pods bound to each node, by node name.
    pub fn pods_by_node(&self) -> BTreeMap<&str, Vec<&Pod>> {
        let mut map: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for pod in &self.pods {
            if let Some(node) = pod.node_name.as_deref() {
                map.entry(node).or_default().push(pod);
            }
        }
        map
    }
}

#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(default)]
    kind: String,
    #[serde(rename = "apiVersion", default)]
    api_version: &'a str,
    metadata: Option<ListMeta>,
    #[serde(borrow, default)]
    items: Vec<RawItem<'a>>,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// An item whose body stays unparsed until its kind says whether we need it.
#[derive(Deserialize)]
struct RawItem<'a> {
    #[serde(default)]
    kind: &'a str,
    #[serde(rename = "apiVersion", default)]
    api_version: &'a str,
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    spec: Option<&'a RawValue>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
}

impl RawItem<'_> {
    fn parse<T: FromParts>(&self) -> serde_json::Result<T> {
        fn part<P: for<'de> Deserialize<'de> + Default>(
            raw: Option<&RawValue>,
        ) -> serde_json::Result<P> {
            raw.map_or_else(|| Ok(P::default()), |r| serde_json::from_str(r.get()))
        }
        Ok(T::from_parts(
            part(self.metadata)?,
            part(self.spec)?,
            part(self.status)?,
        ))
    }

    fn name(&self) -> String {
        self.metadata
            .and_then(|m| serde_json::from_str::<Meta>(m.get()).ok())
            .map(|m| m.name)
            .unwrap_or_default()
    }
}

/// A kind read from its metadata, spec and status, each parsed into what we keep of it.
pub trait FromParts {
    type Spec: for<'de> Deserialize<'de> + Default;
    type Status: for<'de> Deserialize<'de> + Default;
    fn from_parts(meta: Meta, spec: Self::Spec, status: Self::Status) -> Self;
}

/// What we read of an object's metadata. `V` is the type its `resourceVersion` is read as:
/// skipped by default (a snapshot has no use for it), kept by a watch ([`Decoded`]).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Meta<V = serde::de::IgnoredAny> {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    labels: Labels,
    #[serde(default)]
    annotations: Labels,
    creation_timestamp: Option<String>,
    deletion_timestamp: Option<String>,
    #[serde(default)]
    owner_references: Vec<OwnerRef>,
    resource_version: Option<V>,
}

#[derive(Deserialize)]
struct OwnerRef {
    kind: String,
    name: String,
    #[serde(default)]
    controller: bool,
}

/// Parses an RFC 3339 timestamp into Unix seconds.
pub fn parse_timestamp(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>().ok().map(|t| t.as_second())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default)]
    unschedulable: bool,
    #[serde(default)]
    taints: Vec<RawTaint>,
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
}

#[derive(Deserialize)]
struct RawTaint {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    #[serde(default)]
    conditions: Vec<Condition>,
    node_info: Option<NodeInfo>,
    allocatable: Option<RawResources>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeInfo {
    kubelet_version: Option<String>,
}

impl FromParts for Node {
    type Spec = NodeSpec;
    type Status = NodeStatus;
    fn from_parts(meta: Meta, spec: NodeSpec, status: NodeStatus) -> Self {
        Node {
            created: meta.creation_timestamp.as_deref().and_then(parse_timestamp),
            name: meta.name,
            labels: meta.labels,
            annotations: meta.annotations,
            taints: spec
                .taints
                .into_iter()
                .map(|t| Taint {
                    key: t.key,
                    value: t.value,
                    effect: t.effect,
                })
                .collect(),
            unschedulable: spec.unschedulable,
            ready: condition_true(&status.conditions, "Ready"),
            kubelet_version: status.node_info.and_then(|i| i.kubelet_version),
            provider_id: spec.provider_id,
            allocatable: status
                .allocatable
                .filter(|a| !a.is_empty())
                .map(|a| a.or(u64::MAX)),
            machine: None,
            registered: true,
            deleting: meta.deletion_timestamp.is_some(),
            in_progress: in_progress(&status.conditions),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    node_name: Option<String>,
    #[serde(default)]
    volumes: Vec<Volume>,
    #[serde(default)]
    containers: Vec<RawContainer>,
    #[serde(default)]
    init_containers: Vec<RawContainer>,
    #[serde(default)]
    overhead: RawResources,
    #[serde(default)]
    node_selector: Labels,
    affinity: Option<RawAffinity>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
    priority_class_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Volume {
    empty_dir: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize, Default)]
pub struct PodStatus {
    #[serde(default)]
    phase: String,
    #[serde(default)]
    conditions: Vec<Condition>,
}

impl FromParts for Pod {
    type Spec = PodSpec;
    type Status = PodStatus;
    fn from_parts(meta: Meta, spec: PodSpec, status: PodStatus) -> Self {
        let controller = meta
            .owner_references
            .into_iter()
            .find(|o| o.controller)
            .map(|o| Owner {
                kind: o.kind,
                name: o.name,
            });
        let mut annotations = meta.annotations;
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        let do_not_disrupt = keys::DO_NOT_DISRUPT
            .iter()
            .find(|(key, value)| annotations.get(*key).map(String::as_str) == Some(*value))
            .map(|(key, _)| *key);
        let wait_for_completion = annotations
            .get(keys::WAIT_FOR_COMPLETION)
            .map(String::as_str)
            == Some("true");
        let mirror = annotations.contains_key("kubernetes.io/config.mirror");
        Pod {
            annotations,
            do_not_disrupt,
            wait_for_completion,
            priority_class: spec.priority_class_name.filter(|p| !p.is_empty()),
            mirror,
            namespace: meta.namespace,
            name: meta.name,
            uid: meta.uid,
            node_name: spec.node_name.filter(|n| !n.is_empty()),
            labels: meta.labels,
            controller,
            ready: condition_true(&status.conditions, "Ready"),
            finished: matches!(status.phase.as_str(), "Succeeded" | "Failed"),
            pending: status.phase == "Pending",
            uses_empty_dir: spec.volumes.iter().any(|v| v.empty_dir.is_some()),
            terminating: meta.deletion_timestamp.is_some(),
            requests: scheduling::pod_requests(
                &spec.containers,
                &spec.init_containers,
                &spec.overhead,
            ),
            placement: scheduling::placement(spec.node_selector, spec.affinity, spec.tolerations),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{
      "apiVersion": "v1", "kind": "List",
      "items": [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "n1", "labels": {"kops.k8s.io/instancegroup": "nodes-a"},
                      "creationTimestamp": "2024-01-01T00:00:00Z"},
         "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
         "status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "nodeInfo": {"kubeletVersion": "v1.20.2"}, "images": [{"names": ["x"]}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
         "spec": {"selector": {"app": "web"}}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                      "ownerReferences": [{"kind": "ReplicaSet", "name": "web-x", "controller": true}]},
         "spec": {"nodeName": "n1", "volumes": [{"name": "tmp", "emptyDir": {}}]},
         "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}},
        {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "web", "namespace": "shop"},
         "spec": {"selector": {"matchLabels": {"app": "web"}}},
         "status": {"disruptionsAllowed": 0}},
        {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
         "metadata": {"name": "empty", "namespace": "shop"}, "spec": {"selector": {}}}
      ]}"#;

    #[test]
    fn reads_the_planned_kinds_and_ignores_the_rest() {
        let s = Snapshot::from_json(LIST.as_bytes()).unwrap();
        assert_eq!(s.nodes.len(), 1);
        let n = &s.nodes[0];
        assert_eq!(n.name, "n1");
        assert!(n.unschedulable && n.ready);
        assert_eq!(n.created, Some(1_704_067_200));
        assert_eq!(n.kubelet_version.as_deref(), Some("v1.20.2"));
        assert_eq!(n.taints[0].effect, "NoSchedule");
        assert_eq!(n.allocatable, None, "no allocatable: unlimited");

        let p = &s.pods[0];
        assert_eq!(p.node_name.as_deref(), Some("n1"));
        assert!(p.uses_empty_dir && !p.ready && !p.finished && !p.mirror);
        assert_eq!(p.controller.as_ref().unwrap().kind, "ReplicaSet");
        assert!(p.requests.is_zero() && p.placement == Placement::default());

        assert_eq!(s.pdbs.len(), 2);
        assert!(s.pdbs[0].selector.matches(&p.labels));
        assert!(
            !s.pdbs[1].selector.matches(&p.labels),
            "empty v1beta1 selector matches nothing"
        );
    }

    #[test]
    fn reads_allocatable_and_leaves_what_is_missing_unlimited() {
        let list = r#"{"kind": "NodeList", "items": [
            {"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "3500m", "memory": "15Gi", "pods": "110"}}},
            {"metadata": {"name": "b"}, "status": {"allocatable": {"cpu": 4}}},
            {"metadata": {"name": "c"}, "status": {"allocatable": {"pods": "110"}}}]}"#;
        let s = Snapshot::from_json(list.as_bytes()).unwrap();
        let allocatable: Vec<Option<Resources>> = s.nodes.iter().map(|n| n.allocatable).collect();
        let r = |cpu, memory| Some(Resources { cpu, memory });
        assert_eq!(allocatable, [r(3500, 15 << 30), r(4000, u64::MAX), None]);
    }

    #[test]
    fn reads_api_list_pages_whose_items_have_no_kind() {
        let page = r#"{"kind": "PodDisruptionBudgetList", "apiVersion": "policy/v1beta1",
            "metadata": {"continue": "abc"},
            "items": [{"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}]}"#;
        let mut s = Snapshot::default();
        assert_eq!(
            s.extend_from_json(page.as_bytes()).unwrap().as_deref(),
            Some("abc")
        );
        assert_eq!(s.pdbs[0].name, "p");
        assert!(
            !s.pdbs[0].selector.matches(&Default::default()),
            "v1beta1 from the list"
        );
    }

    #[test]
    fn rejects_what_is_not_a_list() {
        let err =
            Snapshot::from_json(br#"{"kind": "Pod", "metadata": {"name": "x"}}"#).unwrap_err();
        assert!(err.to_string().contains("is a Pod, not a v1 List"), "{err}");
        let err = Snapshot::from_json(b"nodes:\n - a").unwrap_err();
        assert!(err.to_string().contains("not valid JSON"), "{err}");
    }

    #[test]
    fn names_the_malformed_item() {
        let bad = r#"{"kind": "List", "items": [
            {"kind": "Node", "metadata": {"name": "n1"}, "spec": {"unschedulable": "yes"}}]}"#;
        let err = Snapshot::from_json(bad.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("item 0 (Node n1)"), "{err}");
    }
}
