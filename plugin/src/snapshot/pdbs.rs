//! PodDisruptionBudgets, read from policy/v1 or policy/v1beta1: the two versions read an empty
//! selector differently.

use serde::Deserialize;

use super::{FromParts, Meta, Pdb};
use crate::labels::LabelSelector;

/// A PodDisruptionBudget before its version says how to read an empty selector.
#[derive(Debug, Clone)]
pub struct PdbBody {
    namespace: String,
    name: String,
    selector: Option<LabelSelector>,
    disruptions_allowed: i32,
}

#[derive(Deserialize, Default)]
pub struct PdbSpec {
    selector: Option<LabelSelector>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PdbStatus {
    #[serde(default)]
    disruptions_allowed: i32,
}

impl FromParts for PdbBody {
    type Spec = PdbSpec;
    type Status = PdbStatus;
    fn from_parts(meta: Meta, spec: PdbSpec, status: PdbStatus) -> Self {
        PdbBody {
            namespace: meta.namespace,
            name: meta.name,
            selector: spec.selector,
            disruptions_allowed: status.disruptions_allowed,
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
            disruptions_allowed: self.disruptions_allowed,
        }
    }
}
