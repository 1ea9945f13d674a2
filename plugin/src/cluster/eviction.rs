//! Evicting a pod through the Eviction subresource, with the policy API version the server serves
//! (`policy/v1`, or `policy/v1beta1` on servers before 1.22).
//!
//! Evictions of pods a PodDisruptionBudget covers go one request at a time per namespace
//! (budgets are namespaced). The API server checks a budget and records the disruption per
//! request, but two requests it handles at once can both pass a budget that allows one:
//! evicting a node's pods, or a batch's, all at once would then take down more pods than the
//! budget allows. Only the requests wait their turn; the pods' terminations still run in
//! parallel, and pods no budget covers are evicted all at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Cluster, ClusterError, Request};

/// Whose turn it is to send an eviction, per namespace; shared by every clone of a [`Cluster`].
#[derive(Clone, Default)]
pub(super) struct Turns(Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>);

impl Turns {
    fn of(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.0.lock().unwrap_or_else(|e| e.into_inner());
        turns.entry(namespace.to_string()).or_default().clone()
    }
}

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

    /// [`Cluster::evict`] for a pod a PodDisruptionBudget covers: the request waits its turn
    /// among the namespace's others.
    pub async fn evict_guarded(
        &self,
        policy_version: &str,
        namespace: &str,
        name: &str,
        grace_period: Option<i64>,
    ) -> Result<Eviction, ClusterError> {
        let turn = self.evictions.of(namespace);
        let _turn = turn.lock().await;
        self.evict(policy_version, namespace, name, grace_period, false)
            .await
    }
}
