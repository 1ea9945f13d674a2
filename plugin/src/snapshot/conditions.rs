//! Object conditions as a snapshot reads them: whether one is True, and the Node lifecycle
//! conditions that say someone is disrupting a node. Also a bare node for tests to build on.

use serde::Deserialize;

#[cfg(test)]
use super::Node;
use crate::keys;

#[derive(Deserialize)]
pub(super) struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
}

pub(super) fn condition_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The first lifecycle condition of [`keys::IN_PROGRESS_CONDITIONS`] that is
/// True, with its reason.
pub(super) fn in_progress(conditions: &[Condition]) -> Option<String> {
    let found = conditions
        .iter()
        .find(|c| c.status == "True" && keys::IN_PROGRESS_CONDITIONS.contains(&c.type_.as_str()))?;
    Some(match found.reason.as_deref().filter(|r| !r.is_empty()) {
        Some(reason) => format!("{} (reason {reason})", found.type_),
        None => found.type_.clone(),
    })
}

#[cfg(test)]
impl Node {
    /// A registered, Ready node with nothing else to it, for tests to build on.
    pub fn ready(name: &str) -> Node {
        Node {
            name: name.into(),
            labels: Default::default(),
            annotations: Default::default(),
            taints: vec![],
            unschedulable: false,
            ready: true,
            created: None,
            kubelet_version: None,
            provider_id: None,
            allocatable: None,
            machine: None,
            registered: true,
            deleting: false,
            in_progress: None,
        }
    }
}
