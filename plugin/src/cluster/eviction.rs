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
    /// Asks the server to evict one pod. `grace_period` overrides the pod's own; `dry_run` sends
    /// `dryRun=All`: the server checks budgets and permissions but changes nothing.
    pub async fn evict(
        &self,
        policy_version: &str,
        namespace: &str,
        name: &str,
        grace_period: Option<i64>,
        dry_run: bool,
    ) -> Result<Eviction, ClusterError> {
        let mut delete_options = serde_json::Map::new();
        if let Some(g) = grace_period {
            delete_options.insert("gracePeriodSeconds".into(), g.into());
        }
        if dry_run {
            delete_options.insert("dryRun".into(), serde_json::json!(["All"]));
        }
        let body = serde_json::json!({
            "apiVersion": format!("policy/{policy_version}"),
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        });
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
