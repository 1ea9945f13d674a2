//! Cluster API Machines: the instances a machine controller keeps, whether or not their Node
//! ever registered.
//!
//! A Machine's group is its MachineDeployment (label `cluster.x-k8s.io/deployment-name`), else
//! its MachineSet. Its Node (`status.nodeRef`, or the Node's `cluster.x-k8s.io/machine`
//! annotation) belongs to that group. A Machine with no Node is an instance of its own, as
//! kops counts an instance "not registered as a node": out of date once past its startup
//! timeout (`plan::groups::booting`), and with nothing to cordon or drain.

use serde::Deserialize;

use super::{FromParts, Meta, Node, Snapshot};
use crate::labels::Labels;
use crate::scheduling::Resources;

/// The API group of Cluster API's objects.
pub const API_GROUP: &str = "cluster.x-k8s.io";
/// The label naming a Machine's MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// The Node annotations naming its Machine and the Machine's namespace.
pub const MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/machine";
pub const NAMESPACE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-namespace";

/// A Machine as rotation needs it.
#[derive(Debug, Clone)]
pub struct Machine {
    pub namespace: String,
    pub name: String,
    /// Its MachineSet (controller owner), if any.
    pub machine_set: Option<String>,
    /// Its MachineDeployment, if any.
    pub deployment: Option<String>,
    /// Its Node's name, once one registered.
    pub node: Option<String>,
    pub provider_id: Option<String>,
    pub version: Option<String>,
    pub failure_domain: Option<String>,
    pub created: Option<i64>,
    /// Being deleted: already on its way out, not an instance to rotate.
    pub deleting: bool,
}

/// What a Node (or an unregistered instance) knows of its Machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineRef {
    pub namespace: String,
    pub name: String,
    /// The MachineDeployment, else the MachineSet: the instance's group.
    pub group: String,
    pub machine_set: Option<String>,
    pub deployment: Option<String>,
}

impl Machine {
    fn reference(&self) -> Option<MachineRef> {
        let group = self.deployment.clone().or(self.machine_set.clone())?;
        Some(MachineRef {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            group,
            machine_set: self.machine_set.clone(),
            deployment: self.deployment.clone(),
        })
    }

    /// The instance of a Machine whose Node never registered: nothing schedulable, nothing
    /// to drain, out of date unless still booting.
    fn unregistered(&self, reference: MachineRef) -> Node {
        let mut labels = Labels::new();
        if let Some(zone) = &self.failure_domain {
            labels.insert(crate::keys::ZONE.into(), zone.clone());
        }
        Node {
            name: self.name.clone(),
            labels,
            annotations: Labels::new(),
            taints: Vec::new(),
            unschedulable: true,
            ready: false,
            created: self.created,
            kubelet_version: self.version.clone(),
            provider_id: self.provider_id.clone(),
            allocatable: Some(Resources::default()),
            machine: Some(reference),
            registered: false,
            deleting: false,
            in_progress: None,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    version: Option<String>,
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
    failure_domain: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    node_ref: Option<NodeRef>,
}

#[derive(Deserialize)]
struct NodeRef {
    name: String,
}

impl FromParts for Machine {
    type Spec = MachineSpec;
    type Status = MachineStatus;
    fn from_parts(meta: Meta, spec: MachineSpec, status: MachineStatus) -> Self {
        let machine_set = meta
            .owner_references
            .iter()
            .find(|o| o.controller && o.kind == "MachineSet")
            .map(|o| o.name.clone());
        Machine {
            namespace: meta.namespace,
            name: meta.name,
            machine_set,
            deployment: meta
                .labels
                .get(DEPLOYMENT_LABEL)
                .filter(|d| !d.is_empty())
                .cloned(),
            node: status.node_ref.map(|r| r.name).filter(|n| !n.is_empty()),
            provider_id: spec.provider_id.filter(|p| !p.is_empty()),
            version: spec.version,
            failure_domain: spec.failure_domain,
            created: meta
                .creation_timestamp
                .as_deref()
                .and_then(super::parse_timestamp),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }
}

impl Snapshot {
    /// Links each Node to its Machine, and adds the Machines no Node registered for as
    /// instances. Idempotent: instances added by an earlier call are replaced.
    pub fn link_machines(&mut self) {
        self.nodes.retain(|n| n.registered);
        if self.machines.is_empty() {
            return;
        }
        for node in &mut self.nodes {
            let by_annotation = node.annotations.get(MACHINE_ANNOTATION).map(|name| {
                let namespace = node.annotations.get(NAMESPACE_ANNOTATION);
                (name, namespace)
            });
            node.machine = self
                .machines
                .iter()
                .find(|m| match (&m.node, by_annotation) {
                    (Some(n), _) if *n == node.name => true,
                    (_, Some((name, namespace))) => {
                        *name == m.name && namespace.is_none_or(|ns| *ns == m.namespace)
                    }
                    _ => false,
                })
                .and_then(Machine::reference);
        }
        let linked: std::collections::HashSet<(String, String)> = self
            .nodes
            .iter()
            .filter_map(|n| n.machine.as_ref())
            .map(|m| (m.namespace.clone(), m.name.clone()))
            .collect();
        let unregistered: Vec<Node> = self
            .machines
            .iter()
            .filter(|m| !m.deleting && !linked.contains(&(m.namespace.clone(), m.name.clone())))
            // A Node of that name that is not this Machine's: the name is taken.
            .filter(|m| !self.nodes.iter().any(|n| n.name == m.name))
            .filter_map(|m| Some(m.unregistered(m.reference()?)))
            .collect();
        self.nodes.extend(unregistered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "Node",
       "metadata": {"name": "md-a-1", "annotations": {"cluster.x-k8s.io/machine": "md-a-1",
                    "cluster.x-k8s.io/cluster-namespace": "capi"}},
       "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
      {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other"}},
      {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
       "metadata": {"name": "md-a-1", "namespace": "capi",
                    "labels": {"cluster.x-k8s.io/deployment-name": "md-a"},
                    "ownerReferences": [{"kind": "MachineSet", "name": "md-a-ms", "controller": true}]},
       "spec": {"version": "v1.19.7"}},
      {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
       "metadata": {"name": "md-a-2", "namespace": "capi", "creationTimestamp": "2026-01-01T00:00:00Z",
                    "labels": {"cluster.x-k8s.io/deployment-name": "md-a"},
                    "ownerReferences": [{"kind": "MachineSet", "name": "md-a-ms", "controller": true}]},
       "spec": {"version": "v1.20.2", "failureDomain": "b", "providerID": "capi:///md-a-2"}},
      {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
       "metadata": {"name": "going", "namespace": "capi", "deletionTimestamp": "2026-01-01T00:00:00Z",
                    "ownerReferences": [{"kind": "MachineSet", "name": "ms-b", "controller": true}]}},
      {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
       "metadata": {"name": "loose", "namespace": "capi"}}
    ]}"#;

    #[test]
    fn nodes_take_their_machines_group_and_unregistered_machines_are_instances() {
        let snapshot = Snapshot::from_json(LIST.as_bytes()).unwrap();
        assert_eq!(snapshot.machines.len(), 4);
        let names: Vec<&str> = snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
        // The deleting Machine and the one without a MachineSet are no instances.
        assert_eq!(names, ["md-a-1", "other", "md-a-2"]);
        let linked = &snapshot.nodes[0];
        assert!(linked.registered);
        assert_eq!(
            linked.machine.as_ref().map(|m| m.group.as_str()),
            Some("md-a")
        );
        assert!(snapshot.nodes[1].machine.is_none());
        let lone = &snapshot.nodes[2];
        assert!(!lone.registered && !lone.ready && lone.unschedulable);
        assert_eq!(lone.provider_id.as_deref(), Some("capi:///md-a-2"));
        assert_eq!(
            lone.labels.get(crate::keys::ZONE).map(String::as_str),
            Some("b")
        );
        assert_eq!(
            lone.machine.as_ref().and_then(|m| m.machine_set.as_deref()),
            Some("md-a-ms")
        );
        assert_eq!(lone.allocatable, Some(Resources::default()));

        let mut again = snapshot.clone();
        again.link_machines();
        assert_eq!(again.nodes.len(), 3);
    }
}
