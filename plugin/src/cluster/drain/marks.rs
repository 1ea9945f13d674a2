//! What a rotation writes on the nodes it drains, and takes off those it gives back: the cordon
//! (with the load-balancer exclusion label), the phase it reached, and the quarantine of a node
//! set aside.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use super::server_error;
use crate::cluster::writes::Kind;
use crate::cluster::{Cluster, ClusterError};
use crate::events::{Event, Reporter};

/// How a node is cordoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cordon {
    /// The policy's `drain.excludeFromLoadBalancers`.
    pub exclude_from_load_balancers: bool,
    /// The node carries the exclusion label already (ours from an earlier run, or someone
    /// else's): it is not written again.
    pub labelled_already: bool,
}

impl Cordon {
    /// How `node` (as last read; none when it was not) is cordoned under `rules`.
    pub fn of(
        node: Option<&crate::snapshot::Node>,
        rules: &crate::policy::drain::DrainPolicy,
    ) -> Cordon {
        Cordon {
            exclude_from_load_balancers: rules.exclude_from_load_balancers,
            labelled_already: node.is_some_and(|n| {
                n.labels
                    .contains_key(crate::keys::EXCLUDE_FROM_LOAD_BALANCERS)
            }),
        }
    }
}

/// Why and when a node was set aside: its [`crate::keys::QUARANTINED`] annotation (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuarantineRecord {
    #[serde(default)]
    pub reason: String,
    /// RFC 3339.
    #[serde(default)]
    pub at: String,
}

impl QuarantineRecord {
    /// The record of `node` when it is set aside (labelled or annotated; an unreadable record
    /// reads empty).
    pub fn of(node: &crate::snapshot::Node) -> Option<QuarantineRecord> {
        QuarantineRecord::from_marks(
            node.annotations
                .get(crate::keys::QUARANTINED)
                .map(|a| a.as_str()),
            node.labels.contains_key(crate::keys::QUARANTINED),
        )
    }

    /// The record of a node with this quarantine `annotation`, `labelled` or not.
    pub fn from_marks(annotation: Option<&str>, labelled: bool) -> Option<QuarantineRecord> {
        if annotation.is_none() && !labelled {
            return None;
        }
        Some(
            annotation
                .and_then(|r| serde_json::from_str(r).ok())
                .unwrap_or_default(),
        )
    }
}

/// Whether `node` carries the load-balancer exclusion label with this tool's value: only that one
/// is ever removed.
fn ours_excluded(node: &crate::snapshot::Node) -> bool {
    node.labels
        .get(crate::keys::EXCLUDE_FROM_LOAD_BALANCERS)
        .is_some_and(|v| v == crate::keys::EXCLUDED_BY_US)
}

/// A patch that records `phase` on a node.
fn phase_patch(phase: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"annotations": {crate::keys::PHASE: phase}}})
}

pub(super) fn patch_params(dry_run: bool) -> PatchParams {
    PatchParams {
        dry_run,
        ..Default::default()
    }
}

impl Cluster {
    /// Marks a node unschedulable, and ours (the phase annotation); with
    /// `exclude_from_load_balancers`, labels it out of external load balancers in the same
    /// write, unless it carries that label already (someone else's is left as it is).
    pub async fn cordon(
        &self,
        node: &str,
        cordon: Cordon,
        dry_run: bool,
        reporter: &dyn Reporter,
    ) -> Result<(), ClusterError> {
        let mut patch = phase_patch("cordoned");
        patch["spec"] = serde_json::json!({"unschedulable": true});
        let excluded = cordon.exclude_from_load_balancers && !cordon.labelled_already;
        if excluded {
            patch["metadata"]["labels"] = serde_json::json!({
                crate::keys::EXCLUDE_FROM_LOAD_BALANCERS: crate::keys::EXCLUDED_BY_US,
            });
        }
        self.patch_node(node, patch, dry_run).await?;
        reporter.report(Event::Cordoned {
            node: node.into(),
            excluded_from_load_balancers: excluded,
        });
        Ok(())
    }

    /// Sets a cordoned node aside: labelled and annotated [`keys::QUARANTINED`] (why, and
    /// when), its phase `quarantined`, and back in external load balancers when it was ours that
    /// took it out (its pods still serve). It stays cordoned.
    ///
    /// [`keys::QUARANTINED`]: crate::keys::QUARANTINED
    pub async fn set_aside(
        &self,
        node: &crate::snapshot::Node,
        reason: &str,
        reporter: &dyn Reporter,
    ) -> Result<(), ClusterError> {
        use crate::keys;
        let record = QuarantineRecord {
            reason: reason.into(),
            at: jiff::Timestamp::now().to_string(),
        };
        let record = serde_json::to_string(&record).expect("two strings serialize");
        let mut patch = serde_json::json!({
            "metadata": {
                "labels": {keys::QUARANTINED: "true"},
                "annotations": {keys::QUARANTINED: record, keys::PHASE: "quarantined"},
            },
            "spec": {"unschedulable": true},
        });
        if ours_excluded(node) {
            patch["metadata"]["labels"][keys::EXCLUDE_FROM_LOAD_BALANCERS] =
                serde_json::Value::Null;
        }
        self.patch_node(&node.name, patch, false).await?;
        reporter.report(Event::Quarantined {
            node: node.name.clone(),
            reason: reason.into(),
        });
        Ok(())
    }

    /// Releases a node set aside, or one a stopped run left cordoned: uncordoned, and without
    /// this tool's labels and annotations (its phase, the quarantine record, and the
    /// load-balancer label when ours).
    pub async fn release(&self, node: &crate::snapshot::Node) -> Result<(), ClusterError> {
        use crate::keys;
        let mut patch = serde_json::json!({
            "metadata": {
                "labels": {keys::QUARANTINED: null},
                "annotations": {keys::QUARANTINED: null, keys::PHASE: null},
            },
            "spec": {"unschedulable": false},
        });
        if ours_excluded(node) {
            patch["metadata"]["labels"][keys::EXCLUDE_FROM_LOAD_BALANCERS] =
                serde_json::Value::Null;
        }
        self.patch_node(&node.name, patch, false).await
    }

    /// Records how far the rotation got with a node.
    pub async fn set_phase(&self, node: &str, phase: &str) -> Result<(), ClusterError> {
        self.patch_node(node, phase_patch(phase), false).await
    }

    async fn patch_node(
        &self,
        node: &str,
        patch: serde_json::Value,
        dry_run: bool,
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patched = api
            .patch(node, &patch_params(dry_run), &Patch::Merge(patch))
            .await
            .map_err(|e| server_error(self, "patch", "nodes", None, e))?;
        if !dry_run {
            self.writes.now(Kind::Node, &patched.metadata);
        }
        Ok(())
    }
}
