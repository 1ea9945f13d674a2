//! PodDisruptionBudgets, read from policy/v1 or policy/v1beta1 (the two versions read an empty
//! selector differently), and how the API server judges an eviction against one.

use serde::Deserialize;

use super::{FromParts, Meta, Pod};
use crate::labels::LabelSelector;

#[derive(Debug, Clone)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    pub selector: LabelSelector,
    pub disruptions_allowed: i32,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    /// `spec.unhealthyPodEvictionPolicy` (policy/v1 only; none on servers that do not serve
    /// it, which judge as `IfHealthyBudget`).
    pub unhealthy_pod_eviction_policy: Option<UnhealthyPodEvictionPolicy>,
}

/// When a budget lets a Running pod that is not Ready be evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnhealthyPodEvictionPolicy {
    /// Only while the budget is met (`currentHealthy >= desiredHealthy`): the default.
    IfHealthyBudget,
    /// Whatever the budget says.
    AlwaysAllow,
}

impl Pdb {
    /// Whether evicting `pod`, which this budget selects, takes one of the disruptions it
    /// allows, as the API server judges it: a Pending pod goes freely, a Ready one needs
    /// `disruptionsAllowed`; a Running pod that is not Ready goes freely under `AlwaysAllow`,
    /// and under `IfHealthyBudget` (also when the field is absent) while the budget is met.
    pub fn guards(&self, pod: &Pod) -> bool {
        if pod.pending || pod.ready {
            return !pod.pending;
        }
        match self.unhealthy_pod_eviction_policy {
            Some(UnhealthyPodEvictionPolicy::AlwaysAllow) => false,
            _ => !(self.desired_healthy > 0 && self.current_healthy >= self.desired_healthy),
        }
    }
}

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
