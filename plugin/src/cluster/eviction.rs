//! Evicting a pod through the Eviction subresource, with the policy API version the server serves
//! (`policy/v1`, or `policy/v1beta1` on servers before 1.22).

use super::{Cluster, ClusterError, Request};

/// What the API server said to an eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// Accepted: the pod is being deleted.
    Evicted,
    /// Refused for now (429), usually by a PodDisruptionBudget; the server's message says which.
    Blocked { message: String },
    /// The pod is already gone.
    Gone,
}

impl Cluster {
    /// Asks the server to evict one pod. `dry_run` sends `dryRun=All`: the server checks
    /// budgets and permissions but changes nothing.
    pub async fn evict(
        &self,
        policy_version: &str,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Eviction, ClusterError> {
        let mut body = serde_json::json!({
            "apiVersion": format!("policy/{policy_version}"),
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        });
        if dry_run {
            body["deleteOptions"] = serde_json::json!({"dryRun": ["All"]});
        }
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/eviction");
        let req = http::Request::post(path)
            .header("content-type", "application/json")
            .body(body.to_string().into_bytes())
            .expect("a POST request with a valid path");
        match self.client.request_text(req).await {
            Ok(_) => Ok(Eviction::Evicted),
            Err(kube::Error::Api(status)) if status.code == 429 => Ok(Eviction::Blocked {
                message: status.message,
            }),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Eviction::Gone),
            Err(e) => Err(Request {
                verb: "create",
                resource: "pods/eviction",
                namespace: Some(namespace),
            }
            .error(&self.server, e)),
        }
    }
}
