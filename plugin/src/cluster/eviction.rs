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
use crate::snapshot::Pod;

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
    /// Refused (409): the uid the request named is not the uid of the pod of that name now
    /// (deleted and started again under its name), or the server lost a race of writes on it.
    /// The caller looks at the pod to tell which.
    Conflict { message: String },
    /// Refused for good (500): more than one PodDisruptionBudget selects the pod, which the
    /// eviction API does not support.
    MultipleBudgets { message: String },
    /// Refused (403, cause `NamespaceTerminating`): the pod's namespace is being deleted.
    NamespaceTerminating { message: String },
}

impl Eviction {
    /// The answer an eviction's error status is, when it is one rather than a failure.
    pub fn from_status(status: &kube::core::Status) -> Option<Eviction> {
        let message = status.message.clone();
        match status.code {
            429 => Some(Eviction::Blocked { message }),
            404 => Some(Eviction::Gone),
            409 => Some(Eviction::Conflict { message }),
            500 if message.contains(super::retry::MULTIPLE_BUDGETS) => {
                Some(Eviction::MultipleBudgets { message })
            }
            403 if status
                .details
                .as_ref()
                .is_some_and(|d| (d.causes.iter()).any(|c| c.reason == "NamespaceTerminating")) =>
            {
                Some(Eviction::NamespaceTerminating { message })
            }
            _ => None,
        }
    }
}

impl Cluster {
    /// Asks the server to evict one pod: that object, by its uid, never another started since
    /// under its name. (The server counts a budget's disruption before it checks the uid, so a
    /// refusal holds one disruption until the disruption controller lets it go: the price of a
    /// pod replaced meanwhile, rather than the eviction of its successor.) `grace_period`
    /// overrides the pod's own; `dry_run` sends `dryRun=All`: the server checks budgets and
    /// permissions but changes nothing.
    pub async fn evict(
        &self,
        policy_version: &str,
        pod: &Pod,
        grace_period: Option<i64>,
        dry_run: bool,
    ) -> Result<Eviction, ClusterError> {
        let (namespace, name) = (pod.namespace.as_str(), pod.name.as_str());
        let mut delete_options = serde_json::Map::new();
        if !pod.uid.is_empty() {
            delete_options.insert("preconditions".into(), serde_json::json!({"uid": pod.uid}));
        }
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
        let e = match self.client.request_text(req).await {
            Ok(_) => return Ok(Eviction::Evicted),
            Err(e) => e,
        };
        if let kube::Error::Api(status) = &e
            && let Some(answer) = Eviction::from_status(status)
        {
            return Ok(answer);
        }
        Err(Request {
            verb: "create",
            resource: "pods/eviction",
            namespace: Some(namespace),
        }
        .error(&self.server, e))
    }

    /// [`Cluster::evict`] for a pod a PodDisruptionBudget covers: the request waits its turn
    /// among the namespace's others.
    pub async fn evict_guarded(
        &self,
        policy_version: &str,
        pod: &Pod,
        grace_period: Option<i64>,
    ) -> Result<Eviction, ClusterError> {
        let turn = self.evictions.of(&pod.namespace);
        let _turn = turn.lock().await;
        self.evict(policy_version, pod, grace_period, false).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(json: serde_json::Value) -> kube::core::Status {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_servers_answers_to_an_eviction_are_told_from_its_failures() {
        let budget = status(
            serde_json::json!({"code": 429, "message": "Cannot evict pod as it would violate the pod's disruption budget.", "reason": "TooManyRequests"}),
        );
        assert!(
            matches!(Eviction::from_status(&budget), Some(Eviction::Blocked { message }) if message.contains("disruption budget"))
        );
        let gone = status(serde_json::json!({"code": 404, "message": "pods \"web-1\" not found"}));
        assert_eq!(Eviction::from_status(&gone), Some(Eviction::Gone));
        let two = status(
            serde_json::json!({"code": 500, "reason": "InternalError", "message": "Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}),
        );
        assert!(matches!(
            Eviction::from_status(&two),
            Some(Eviction::MultipleBudgets { .. })
        ));
        let terminating = status(serde_json::json!({
            "code": 403, "reason": "Forbidden",
            "message": "pods \"web-1\" is forbidden: unable to create new content in namespace shop because it is being terminated",
            "details": {"name": "web-1", "kind": "pods", "causes": [{"reason": "NamespaceTerminating", "message": "namespace shop is being terminated", "field": "metadata.namespace"}]}
        }));
        assert!(
            matches!(Eviction::from_status(&terminating), Some(Eviction::NamespaceTerminating { message }) if message.contains("being terminated"))
        );
        let replaced = status(serde_json::json!({
            "code": 409, "reason": "Conflict",
            "message": "Operation cannot be fulfilled on Pod \"web-1\": the UID in the precondition (a) does not match the UID in record (b). The object might have been deleted and then recreated"
        }));
        assert!(matches!(
            Eviction::from_status(&replaced),
            Some(Eviction::Conflict { .. })
        ));
        // Failures stay failures: another 500, a 403 of permissions.
        for failure in [
            serde_json::json!({"code": 500, "message": "etcdserver: request timed out"}),
            serde_json::json!({"code": 403, "message": "pods \"web-1\" is forbidden: User \"x\" cannot create resource \"pods/eviction\""}),
        ] {
            assert_eq!(Eviction::from_status(&status(failure)), None);
        }
    }
}
