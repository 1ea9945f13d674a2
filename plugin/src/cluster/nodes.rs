//! Node objects: annotating and deleting them. Cordons, taints and drains are in
//! [`super::drain`].

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
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
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

    /// The node's uid, which Events about it carry; `None` when it cannot be read (gone).
    pub async fn node_uid(&self, node: &str) -> Option<String> {
        let node = self.nodes_api().get_opt(node).await.ok()??;
        node.metadata.uid
    }
}
