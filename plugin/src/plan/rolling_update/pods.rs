//! The pods of a controller as the rolling update counts them: owned (by controller reference,
//! not just by selector, because a ReplicaSet's old selector may still match the new pods),
//! available, and offered to the selection hook as candidates.

use serde_json::Value;

use crate::labels::Labels;
use crate::plan::Role;
use crate::plan::hook::{Candidate, InstanceKind};
use crate::snapshot::parse_timestamp;

#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub name: String,
    /// Tells this pod from a later one of the same name (a StatefulSet's pods come back so).
    pub uid: String,
    pub labels: Labels,
    pub annotations: Labels,
    /// The uid of the controller that owns it.
    pub owner_uid: Option<String>,
    /// The node it is bound to.
    pub node: Option<String>,
    pub ready: bool,
    /// When the Ready condition last changed, seconds since the epoch.
    pub ready_since: Option<i64>,
    pub terminating: bool,
    pub created: Option<i64>,
}

fn labels(value: &Value) -> Labels {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// One pod object to act on: its name and the uid of that very object, so that a write meant
/// for it never reaches the pod a controller started again under the same name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub name: String,
    pub uid: String,
}

impl PodInfo {
    pub fn pod_ref(&self) -> PodRef {
        PodRef {
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }

    pub fn from_value(pod: &Value) -> PodInfo {
        let meta = &pod["metadata"];
        let owner_uid = meta["ownerReferences"].as_array().and_then(|owners| {
            owners
                .iter()
                .find(|o| o["controller"].as_bool() == Some(true))
                .and_then(|o| o["uid"].as_str().map(String::from))
        });
        let ready_condition = pod["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        PodInfo {
            name: meta["name"].as_str().unwrap_or("").to_string(),
            uid: meta["uid"].as_str().unwrap_or("").to_string(),
            labels: labels(&meta["labels"]),
            annotations: labels(&meta["annotations"]),
            owner_uid,
            node: pod["spec"]["nodeName"].as_str().map(String::from),
            ready: ready_condition.is_some_and(|c| c["status"] == "True"),
            ready_since: ready_condition
                .and_then(|c| c["lastTransitionTime"].as_str())
                .and_then(parse_timestamp),
            terminating: !meta["deletionTimestamp"].is_null(),
            created: meta["creationTimestamp"].as_str().and_then(parse_timestamp),
        }
    }

    /// Ready for at least `min_ready_seconds` and not on its way out.
    pub fn available(&self, min_ready_seconds: i64, now: i64) -> bool {
        self.ready
            && !self.terminating
            && (min_ready_seconds <= 0
                || self
                    .ready_since
                    .is_some_and(|t| t + min_ready_seconds <= now))
    }

    /// The pod as a candidate of the selection hook.
    pub fn candidate(&self, controller: &str) -> Candidate {
        Candidate {
            kind: InstanceKind::Pod,
            name: self.name.clone(),
            group: controller.to_string(),
            role: Role::Node,
            zone: None,
            labels: self.labels.clone(),
            annotations: self.annotations.clone(),
            taints: Vec::new(),
            ready: self.ready,
            unschedulable: false,
            created: self.created,
            kubelet_version: None,
            pods: 1,
            pods_not_ready: u32::from(!self.ready),
            up_to_date: false,
            reason: Some("runs the old pod template".into()),
        }
    }
}

/// The pods owned by the controller with `uid`, oldest first (then by name).
pub fn owned_by<'a>(pods: &'a [PodInfo], uid: &str) -> Vec<&'a PodInfo> {
    let mut owned: Vec<&PodInfo> = pods
        .iter()
        .filter(|p| p.owner_uid.as_deref() == Some(uid) && !p.terminating)
        .collect();
    owned.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    owned
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ready_at: &str, deleting: bool) -> PodInfo {
        let mut meta = json!({"name": "p", "ownerReferences": [{"uid": "u", "controller": true}]});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
        }
        PodInfo::from_value(&json!({
            "metadata": meta,
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}
        }))
    }

    #[test]
    fn available_means_ready_long_enough_and_not_terminating() {
        let t0 = parse_timestamp("2026-01-01T00:00:00Z").unwrap();
        let p = pod("2026-01-01T00:00:00Z", false);
        assert_eq!(p.owner_uid.as_deref(), Some("u"));
        assert!(p.available(0, t0));
        assert!(!p.available(10, t0 + 5));
        assert!(p.available(10, t0 + 10));
        assert!(!pod("2026-01-01T00:00:00Z", true).available(0, t0));
    }
}
