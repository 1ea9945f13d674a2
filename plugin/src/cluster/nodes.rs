//! Node objects: annotating and deleting them, and the lifecycle conditions of a drain.
//! Cordons, taints and drains are in [`super::drain`].

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use super::writes::Kind;
use super::{Cluster, ClusterError, Request};

const NODES: Request = Request {
    verb: "patch",
    resource: "nodes",
    namespace: None,
};

/// What a deletion of a Node found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    Now,
    /// Someone else had removed it.
    AlreadyGone,
}

/// The Node lifecycle conditions (KEP-5683, Kubernetes 1.37) a drain by this tool sets, so that
/// other disruptors count the node as taken out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainCondition {
    /// `DrainInProgress` True: the run is draining the node.
    Draining,
    /// `DrainInProgress` False and `Drained` True: its drain is over.
    Drained,
    /// Both gone: the node is back in service (uncordoned).
    Cleared,
}

/// The reason this tool's conditions carry.
pub const CONDITION_REASON: &str = "RolloutExt";

impl DrainCondition {
    /// The status patch (strategic merge, keyed by type: the kubelet's conditions stay).
    fn patch(self, run: &str) -> serde_json::Value {
        let now = jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_default()
            .to_string();
        let condition = |type_: &str, status: &str, message: String| {
            serde_json::json!({"type": type_, "status": status, "reason": CONDITION_REASON,
                "message": message, "lastTransitionTime": now, "lastHeartbeatTime": now})
        };
        let conditions = match self {
            DrainCondition::Draining => vec![condition(
                "DrainInProgress",
                "True",
                format!("drained by kubectl rollout-ext, run {run}"),
            )],
            DrainCondition::Drained => vec![
                condition(
                    "DrainInProgress",
                    "False",
                    format!("drain by kubectl rollout-ext run {run} is over"),
                ),
                condition(
                    "Drained",
                    "True",
                    format!("drained by kubectl rollout-ext, run {run}"),
                ),
            ],
            DrainCondition::Cleared => ["DrainInProgress", "Drained"]
                .iter()
                .map(|t| serde_json::json!({"type": t, "$patch": "delete"}))
                .collect(),
        };
        serde_json::json!({"status": {"conditions": conditions}})
    }
}

impl Cluster {
    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Sets one annotation on a node.
    pub async fn annotate_node(
        &self,
        node: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ClusterError> {
        self.set_node_annotations(node, &[(key, Some(value))]).await
    }

    /// Sets (`Some`) or removes (`None`) annotations of a node in one patch.
    pub async fn set_node_annotations(
        &self,
        node: &str,
        annotations: &[(&str, Option<&str>)],
    ) -> Result<(), ClusterError> {
        let values: serde_json::Map<String, serde_json::Value> = (annotations.iter())
            .map(|(key, value)| (key.to_string(), serde_json::json!(value)))
            .collect();
        let patch = serde_json::json!({"metadata": {"annotations": values}});
        let patched = self
            .nodes_api()
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| NODES.error(&self.server, e))?;
        self.writes.now(Kind::Node, &patched.metadata);
        Ok(())
    }

    /// Deletes a Node object; one already gone is fine, and said.
    pub async fn delete_node(&self, node: &str) -> Result<Deleted, ClusterError> {
        match self
            .nodes_api()
            .delete(node, &DeleteParams::default())
            .await
        {
            Ok(deleted) => {
                let uid = deleted.either(|n| n.metadata.uid, |s| s.details.map(|d| d.uid));
                self.writes.gone(Kind::Node, "", node, uid);
                Ok(Deleted::Now)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.writes.gone(Kind::Node, "", node, None);
                Ok(Deleted::AlreadyGone)
            }
            Err(e) => Err(Request {
                verb: "delete",
                ..NODES
            }
            .error(&self.server, e)),
        }
    }

    /// Sets (or clears) the lifecycle conditions of `node`'s drain by run `run`; a node gone is
    /// fine.
    pub async fn set_drain_condition(
        &self,
        node: &str,
        condition: DrainCondition,
        run: &str,
    ) -> Result<(), ClusterError> {
        let patch = condition.patch(run);
        match (self.nodes_api())
            .patch_status(node, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Request {
                resource: "nodes/status",
                ..NODES
            }
            .error(&self.server, e)),
        }
    }

    /// The node's uid, which Events about it carry; `None` when it cannot be read (gone).
    pub async fn node_uid(&self, node: &str) -> Option<String> {
        let node = self.nodes_api().get_opt(node).await.ok()??;
        node.metadata.uid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_conditions_are_patched_by_type_and_cleared_with_a_delete_directive() {
        let draining = DrainCondition::Draining.patch("run-1");
        let conditions = &draining["status"]["conditions"];
        assert_eq!(conditions[0]["type"], "DrainInProgress");
        assert_eq!(conditions[0]["status"], "True");
        assert_eq!(conditions[0]["reason"], CONDITION_REASON);
        assert!(conditions[0]["message"].as_str().unwrap().contains("run-1"));
        let drained = DrainCondition::Drained.patch("run-1");
        let types: Vec<(&str, &str)> = (drained["status"]["conditions"].as_array().unwrap())
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
            .collect();
        assert_eq!(types, [("DrainInProgress", "False"), ("Drained", "True")]);
        assert_eq!(
            DrainCondition::Cleared.patch("run-1")["status"]["conditions"],
            serde_json::json!([{"type": "DrainInProgress", "$patch": "delete"},
                               {"type": "Drained", "$patch": "delete"}])
        );
    }
}
