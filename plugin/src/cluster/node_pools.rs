//! Karpenter's own disruptions of a NodePool, paused while a batch of it is out. Karpenter counts
//! a node against its budgets only once its NodeClaim is being deleted, not while another tool
//! cordons and drains it, so between a run's read of what Karpenter disrupts and its cordons
//! Karpenter could start consolidating or replacing a drifted node of the same pool. A budget of
//! `nodes: "0"` stops those voluntary disruptions (never the termination of a NodeClaim the run
//! deletes). The pool's own budgets are kept in an annotation meanwhile and put back after the
//! batch; a killed run's pause is put back by the next run.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use super::{Cluster, ClusterError, Request};
use crate::keys;

const RESOURCE: &str = "nodepools.karpenter.sh";

/// How many times a write that lost a race with another writer reads again.
const CONFLICTS: usize = 5;

impl Cluster {
    fn node_pools(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
        Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk))
    }

    /// Pauses Karpenter's voluntary disruptions of NodePool `pool` (its budgets kept aside).
    /// A pool already paused (by a killed run) stays paused with its own budgets kept.
    pub async fn pause_node_pool(&self, pool: &str) -> Result<(), ClusterError> {
        self.rewrite_pool(pool, |object| {
            let kept = object.metadata.annotations.as_ref();
            if kept.is_some_and(|a| a.contains_key(keys::PAUSED_BUDGETS)) {
                return None;
            }
            let own = object.data["spec"]["disruption"]["budgets"].clone();
            Some(json!({
                "metadata": {"annotations": {keys::PAUSED_BUDGETS: own.to_string()}},
                "spec": {"disruption": {"budgets": [{"nodes": "0"}]}},
            }))
        })
        .await
    }

    /// Puts back NodePool `pool`'s own budgets, if a run paused it.
    pub async fn resume_node_pool(&self, pool: &str) -> Result<(), ClusterError> {
        self.rewrite_pool(pool, |object| {
            let kept = object
                .metadata
                .annotations
                .as_ref()?
                .get(keys::PAUSED_BUDGETS)?;
            let own: Value = serde_json::from_str(kept).unwrap_or(Value::Null);
            Some(json!({
                "metadata": {"annotations": {keys::PAUSED_BUDGETS: null}},
                "spec": {"disruption": {"budgets": own}},
            }))
        })
        .await
    }

    /// Reads NodePool `pool` and writes the merge patch `change` makes of it (none: nothing to
    /// do), conditional on what was read. A pool that is gone has nothing to pause.
    async fn rewrite_pool(
        &self,
        pool: &str,
        change: impl Fn(&DynamicObject) -> Option<Value>,
    ) -> Result<(), ClusterError> {
        let api = self.node_pools();
        let request = |verb| Request {
            verb,
            resource: RESOURCE,
            namespace: None,
        };
        let mut conflicts = 0;
        loop {
            let read = api.get_opt(pool).await;
            let Some(object) = read.map_err(|e| request("get").error(&self.server, e))? else {
                return Ok(());
            };
            let Some(mut patch) = change(&object) else {
                return Ok(());
            };
            patch["metadata"]["resourceVersion"] = json!(object.metadata.resource_version);
            match api
                .patch(pool, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && conflicts < CONFLICTS => {
                    conflicts += 1
                }
                Err(e) => return Err(request("patch").error(&self.server, e)),
            }
        }
    }
}
