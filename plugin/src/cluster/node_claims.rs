//! Karpenter NodeClaims, as the `karpenter` provider removes them: the NodeClaim of a node is
//! found by its providerID (or node name), and its deletion lets Karpenter's finalizer
//! terminate the instance.

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};

use super::{Cluster, ClusterError, Request};

const RESOURCE: &str = "nodeclaims.karpenter.sh";

impl Cluster {
    fn node_claims(&self) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
        Api::all_with(self.client.clone(), &ApiResource::from_gvk(&gvk))
    }

    /// The name of the NodeClaim whose instance is `provider_id` (or whose node is `node`);
    /// `None` when there is none (any more).
    pub async fn node_claim_of(
        &self,
        provider_id: &str,
        node: &str,
    ) -> Result<Option<String>, ClusterError> {
        let claims = self
            .node_claims()
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                Request {
                    verb: "list",
                    resource: RESOURCE,
                    namespace: None,
                }
                .error(&self.server, e)
            })?;
        Ok(claims
            .items
            .into_iter()
            .find(|c| {
                let status = &c.data["status"];
                (!provider_id.is_empty() && status["providerID"] == provider_id)
                    || status["nodeName"] == node
            })
            .and_then(|c| c.metadata.name))
    }

    /// Deletes a NodeClaim; one already gone is fine.
    pub async fn delete_node_claim(&self, name: &str) -> Result<(), ClusterError> {
        match self
            .node_claims()
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Request {
                verb: "delete",
                resource: RESOURCE,
                namespace: None,
            }
            .error(&self.server, e)),
        }
    }
}
