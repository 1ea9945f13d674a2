//! Node objects: annotating, deleting, and watching them change. Cordons, taints and drains
//! are in [`super::drain`].

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;

use super::{Cluster, ClusterError, Request};

const NODES: Request = Request {
    verb: "patch",
    resource: "nodes",
    namespace: None,
};

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
        self.nodes_api()
            .patch(node, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| NODES.error(&self.server, e))?;
        Ok(())
    }

    /// Deletes a Node object; one already gone is fine.
    pub async fn delete_node(&self, node: &str) -> Result<(), ClusterError> {
        match self
            .nodes_api()
            .delete(node, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
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

    /// Yields whenever the watch of nodes delivers something (a change, or a re-list): a
    /// wake-up to read the nodes again, instead of polling.
    pub fn node_changes(&self) -> impl Stream<Item = ()> + Send + use<> {
        watcher(self.nodes_api(), watcher::Config::default()).map(|_| ())
    }
}
