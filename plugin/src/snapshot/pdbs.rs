//! PodDisruptionBudgets, read from policy/v1 or policy/v1beta1: the two versions read an empty
//! selector differently.

use serde::Deserialize;

use super::{FromParts, Meta, Pdb};
use crate::labels::LabelSelector;

pub(super) struct PdbBody {
    meta: Meta,
    selector: Option<LabelSelector>,
    disruptions_allowed: i32,
}

#[derive(Deserialize, Default)]
pub(super) struct PdbSpec {
    selector: Option<LabelSelector>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct PdbStatus {
    #[serde(default)]
    disruptions_allowed: i32,
}

impl FromParts for PdbBody {
    type Spec = PdbSpec;
    type Status = PdbStatus;
    fn from_parts(meta: Meta, spec: PdbSpec, status: PdbStatus) -> Self {
        PdbBody {
            meta,
            selector: spec.selector,
            disruptions_allowed: status.disruptions_allowed,
        }
    }
}

impl PdbBody {
    /// policy/v1beta1 treats an empty selector as matching no pod; policy/v1 as matching every
    /// pod of the namespace.
    pub(super) fn into_pdb(self, v1beta1: bool) -> Pdb {
        let selector = match (self.selector, v1beta1) {
            (Some(s), true) if s.is_empty() => LabelSelector::nothing(),
            (None, true) => LabelSelector::nothing(),
            (Some(s), _) => s,
            (None, false) => LabelSelector::default(),
        };
        Pdb {
            namespace: self.meta.namespace,
            name: self.meta.name,
            selector,
            disruptions_allowed: self.disruptions_allowed,
        }
    }
}
