//! PodDisruptionBudgets, read from policy/v1 or policy/v1beta1: the two versions read an empty
//! selector differently.

use serde::Deserialize;

use super::{FromParts, Meta, Pdb, UnhealthyPodEvictionPolicy};
use crate::labels::LabelSelector;

/// A PodDisruptionBudget before its version says how to read an empty selector.
#[derive(Debug, Clone)]
pub struct PdbBody {
    namespace: String,
    name: String,
    selector: Option<LabelSelector>,
    status: PdbStatus,
    unhealthy_pod_eviction_policy: Option<UnhealthyPodEvictionPolicy>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PdbSpec {
    selector: Option<LabelSelector>,
    unhealthy_pod_eviction_policy: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PdbStatus {
    #[serde(default)]
    disruptions_allowed: i32,
    #[serde(default)]
    current_healthy: i32,
    #[serde(default)]
    desired_healthy: i32,
}

impl FromParts for PdbBody {
    type Spec = PdbSpec;
    type Status = PdbStatus;
    fn from_parts(meta: Meta, spec: PdbSpec, status: PdbStatus) -> Self {
        PdbBody {
            namespace: meta.namespace,
            name: meta.name,
            selector: spec.selector,
            status,
            // A value this build does not know is judged as the default, the stricter one.
            unhealthy_pod_eviction_policy: spec.unhealthy_pod_eviction_policy.map(|p| {
                match p.as_str() {
                    "AlwaysAllow" => UnhealthyPodEvictionPolicy::AlwaysAllow,
                    _ => UnhealthyPodEvictionPolicy::IfHealthyBudget,
                }
            }),
        }
    }
}

impl PdbBody {
    /// policy/v1beta1 treats an empty selector as matching no pod; policy/v1 as matching every
    /// pod of the namespace.
    pub fn into_pdb(self, v1beta1: bool) -> Pdb {
        let selector = match (self.selector, v1beta1) {
            (Some(s), true) if s.is_empty() => LabelSelector::nothing(),
            (None, true) => LabelSelector::nothing(),
            (Some(s), _) => s,
            (None, false) => LabelSelector::default(),
        };
        Pdb {
            namespace: self.namespace,
            name: self.name,
            selector,
            disruptions_allowed: self.status.disruptions_allowed,
            current_healthy: self.status.current_healthy,
            desired_healthy: self.status.desired_healthy,
            unhealthy_pod_eviction_policy: self.unhealthy_pod_eviction_policy,
        }
    }
}
