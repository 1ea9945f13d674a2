//! NodeMaintenance objects of medik8s' node-maintenance-operator
//! (`nodemaintenance.medik8s.io/v1beta1`, cluster-scoped): while one names a node, the operator
//! keeps that node cordoned and drained for maintenance, whatever its phase says.

use serde::Deserialize;

use super::{FromParts, Meta, Snapshot};

/// The API group of NodeMaintenance.
pub const API_GROUP: &str = "nodemaintenance.medik8s.io";

/// One NodeMaintenance as the ledger needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMaintenance {
    pub name: String,
    /// `spec.nodeName`.
    pub node: String,
    /// `spec.reason`, when given.
    pub reason: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceSpec {
    #[serde(default)]
    node_name: String,
    #[serde(default)]
    reason: String,
}

impl FromParts for NodeMaintenance {
    type Spec = NodeMaintenanceSpec;
    type Status = serde::de::IgnoredAny;
    fn from_parts(meta: Meta, spec: NodeMaintenanceSpec, _: serde::de::IgnoredAny) -> Self {
        NodeMaintenance {
            name: meta.name,
            node: spec.node_name,
            reason: spec.reason,
        }
    }
}

impl Snapshot {
    /// The NodeMaintenance that has `node` under maintenance, if any.
    pub fn maintenance_of(&self, node: &str) -> Option<&NodeMaintenance> {
        self.node_maintenances.iter().find(|m| m.node == node)
    }
}
