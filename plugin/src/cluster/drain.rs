//! Cordon and drain with kubectl's semantics, as a small library.
//!
//! A drain lists the node's pods, runs each through the filter chain of `plan::drain` (the same
//! one the plan's warnings come from), refuses before evicting anything if a pod cannot go, then
//! evicts the rest in parallel (their eviction requests take turns per namespace, see
//! `eviction`). An eviction refused with 429 (a PodDisruptionBudget) is retried
//! every 5 seconds and every retry is reported with the budget's name. Pods are waited for by
//! watching until they are gone. Everything stops at the drain timeout with the pods still left.

use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Node, Pod as K8sPod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use super::eviction::Eviction;
use super::{Cluster, ClusterError, Request, urlencode};
use crate::events::{Event, Reporter};
use crate::plan::drain::{DrainOptions, PodFate, classify};
use crate::snapshot::{Pdb, Pod, Snapshot};

/// How many times a compare-and-swap of a node is tried when others keep changing it.
const CONFLICT_ATTEMPTS: u32 = 5;

/// How often a refused eviction is tried again (kubectl's interval).
pub const EVICTION_RETRY: Duration = Duration::from_secs(5);

/// How one drain behaves.
#[derive(Debug, Clone)]
pub struct DrainSettings {
    pub options: DrainOptions,
    /// Overrides each pod's terminationGracePeriodSeconds; negative keeps the pod's own.
    pub grace_period: i64,
    /// The whole drain, evictions and waits, must finish within this.
    pub timeout: Duration,
    /// `policy/v1` or `policy/v1beta1`, as the server serves it.
    pub policy_version: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("cannot drain node {node}: {}", list(.pods))]
    Refused { node: String, pods: Vec<String> },
    #[error("draining node {node} did not finish within {timeout:?}; still there: {}", list(.remaining))]
    Timeout {
        node: String,
        timeout: Duration,
        remaining: Vec<String>,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

fn list(items: &[String]) -> String {
    items.join("; ")
}

fn server_error(
    cluster: &Cluster,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    e: kube::Error,
) -> ClusterError {
    Request {
        verb,
        resource,
        namespace,
    }
    .error(&cluster.server, e)
}

fn patch_params(dry_run: bool) -> PatchParams {
    PatchParams {
        dry_run,
        ..Default::default()
    }
}

impl Cluster {
    /// Marks a node unschedulable, and ours (the phase annotation).
    pub async fn cordon(
        &self,
        node: &str,
        dry_run: bool,
        reporter: &dyn Reporter,
    ) -> Result<(), ClusterError> {
        self.set_phase(node, "cordoned", true, dry_run).await?;
        reporter.report(Event::Cordoned { node: node.into() });
        Ok(())
    }

    /// Records how far the rotation got with a node, cordoning it in the same patch if asked.
    pub async fn set_phase(
        &self,
        node: &str,
        phase: &str,
        cordon: bool,
        dry_run: bool,
    ) -> Result<(), ClusterError> {
        let mut patch =
            serde_json::json!({"metadata": {"annotations": {crate::keys::PHASE: phase}}});
        if cordon {
            patch["spec"] = serde_json::json!({"unschedulable": true});
        }
        let api: Api<Node> = Api::all(self.client.clone());
        api.patch(node, &patch_params(dry_run), &Patch::Merge(patch))
            .await
            .map_err(|e| server_error(self, "patch", "nodes", None, e))?;
        Ok(())
    }

    /// Adds a PreferNoSchedule taint with `key` (kept if already there).
    pub async fn taint_prefer_no_schedule(
        &self,
        node: &str,
        key: &str,
        dry_run: bool,
        reporter: &dyn Reporter,
    ) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut attempt = 1;
        loop {
            let current = api
                .get(node)
                .await
                .map_err(|e| server_error(self, "get", "nodes", None, e))?;
            let mut taints = current.spec.and_then(|s| s.taints).unwrap_or_default();
            if taints
                .iter()
                .any(|t| t.key == key && t.effect == "PreferNoSchedule")
            {
                return Ok(());
            }
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: key.into(),
                effect: "PreferNoSchedule".into(),
                ..Default::default()
            });
            // The resourceVersion makes this a compare-and-swap: a concurrent taint change fails
            // it instead of being overwritten. Kubelets write their node's status every few
            // seconds, which also changes the resourceVersion: a conflict is read again and
            // retried.
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": taints},
            });
            match api
                .patch(node, &patch_params(dry_run), &Patch::Merge(patch))
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) => return Err(server_error(self, "patch", "nodes", None, e)),
            }
        }
        reporter.report(Event::Tainted {
            node: node.into(),
            key: key.into(),
        });
        Ok(())
    }

    /// Deletes a Node object as a server dry-run: is it allowed now?
    pub async fn delete_node_dry_run(&self, node: &str) -> Result<(), ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let params = DeleteParams {
            dry_run: true,
            ..Default::default()
        };
        api.delete(node, &params)
            .await
            .map(|_| ())
            .map_err(|e| server_error(self, "delete", "nodes", None, e))
    }

    /// The pods bound to a node.
    pub async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let path = format!(
            "/api/v1/pods?fieldSelector={}",
            urlencode(&format!("spec.nodeName={node}"))
        );
        let body = self
            .get(
                &path,
                &Request {
                    verb: "list",
                    resource: "pods",
                    namespace: None,
                },
            )
            .await?;
        let mut snapshot = Snapshot::default();
        snapshot
            .extend_from_json(body.as_bytes())
            .map_err(|source| ClusterError::Decode {
                resource: "pods".into(),
                source,
            })?;
        Ok(snapshot.pods)
    }

    /// The PodDisruptionBudgets of a namespace.
    async fn budgets_in(&self, namespace: &str, version: &str) -> Result<Vec<Pdb>, ClusterError> {
        let body = self
            .get(
                &format!("/apis/policy/{version}/namespaces/{namespace}/poddisruptionbudgets"),
                &Request {
                    verb: "list",
                    resource: "poddisruptionbudgets.policy",
                    namespace: Some(namespace),
                },
            )
            .await?;
        let mut snapshot = Snapshot::default();
        snapshot
            .extend_from_json(body.as_bytes())
            .map_err(|source| ClusterError::Decode {
                resource: "poddisruptionbudgets".into(),
                source,
            })?;
        Ok(snapshot.pdbs)
    }

    /// Names the budgets covering `pod` and what they allow, for a refused eviction.
    pub async fn why_blocked(&self, pod: &Pod, version: &str, server_message: &str) -> String {
        let budgets = match self.budgets_in(&pod.namespace, version).await {
            Ok(b) => b,
            Err(_) => return server_message.to_string(),
        };
        let names: Vec<String> = budgets
            .iter()
            .filter(|b| b.selector.matches(&pod.labels))
            .map(|b| {
                format!(
                    "PodDisruptionBudget {}/{} ({} disruptions allowed)",
                    b.namespace, b.name, b.disruptions_allowed
                )
            })
            .collect();
        if names.is_empty() {
            server_message.to_string()
        } else {
            format!("blocked by {}", names.join(", "))
        }
    }

    /// Drains a node that is already cordoned. Once the pods it found are gone the node is
    /// listed again: a pod bound while the cordon was reaching the scheduler (its cache lags)
    /// is drained too, so that the node is empty when this returns.
    pub async fn drain(
        &self,
        node: &str,
        settings: &DrainSettings,
        reporter: &dyn Reporter,
    ) -> Result<(), DrainError> {
        let deadline = Instant::now() + settings.timeout;
        let mut first = true;
        loop {
            let pods = self.pods_on(node).await?;
            let mut evict = Vec::new();
            let mut skipped = Vec::new();
            let mut refused = Vec::new();
            for pod in pods {
                let id = format!("{}/{}", pod.namespace, pod.name);
                match classify(&pod, &settings.options) {
                    PodFate::Evict { warning } => {
                        if let Some(w) = warning {
                            reporter.report(Event::Warning {
                                message: format!("{w}: {id}"),
                            });
                        }
                        evict.push(pod);
                    }
                    PodFate::Skip(reason) => skipped.push(format!("{id} ({reason})")),
                    PodFate::Refuse(reason) => refused.push(format!("pod {id} {reason}")),
                }
            }
            if !refused.is_empty() {
                return Err(DrainError::Refused {
                    node: node.into(),
                    pods: refused,
                });
            }
            let ids: Vec<String> = evict
                .iter()
                .map(|p| format!("{}/{}", p.namespace, p.name))
                .collect();
            if first {
                reporter.report(Event::DrainStarted {
                    node: node.into(),
                    pods: evict.len(),
                    skipped,
                });
            } else if evict.is_empty() {
                break;
            } else if Instant::now() >= deadline {
                return Err(DrainError::Timeout {
                    node: node.into(),
                    timeout: settings.timeout,
                    remaining: ids,
                });
            } else {
                reporter.report(Event::Warning {
                    message: format!(
                        "{} pod(s) came to node {node} while it drained: {}; evicting them too",
                        ids.len(),
                        ids.join(", ")
                    ),
                });
            }
            let results = join_all(
                evict
                    .iter()
                    .map(|pod| self.remove_pod(node, pod, settings, deadline, reporter)),
            )
            .await;
            let mut remaining = Vec::new();
            for (id, result) in ids.into_iter().zip(results) {
                match result {
                    Ok(true) => {}
                    Ok(false) => remaining.push(id),
                    Err(e) => return Err(e.into()),
                }
            }
            if !remaining.is_empty() {
                return Err(DrainError::Timeout {
                    node: node.into(),
                    timeout: settings.timeout,
                    remaining,
                });
            }
            if first && evict.is_empty() {
                break;
            }
            first = false;
        }
        reporter.report(Event::Drained { node: node.into() });
        Ok(())
    }

    /// Evicts (or deletes) one pod and waits for it to be gone. `Ok(false)`: the deadline passed.
    async fn remove_pod(
        &self,
        node: &str,
        pod: &Pod,
        settings: &DrainSettings,
        deadline: Instant,
        reporter: &dyn Reporter,
    ) -> Result<bool, ClusterError> {
        let id = format!("{}/{}", pod.namespace, pod.name);
        let grace = (settings.grace_period >= 0).then_some(settings.grace_period);
        loop {
            let outcome = if settings.options.disable_eviction {
                self.delete_pod(pod, grace).await?
            } else {
                self.evict(
                    settings.policy_version,
                    &pod.namespace,
                    &pod.name,
                    grace,
                    false,
                )
                .await?
            };
            match outcome {
                Eviction::Evicted => {
                    reporter.report(Event::Evicted {
                        node: node.into(),
                        pod: id.clone(),
                    });
                    break;
                }
                Eviction::Gone => return Ok(true),
                Eviction::Blocked { message } => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    reporter.report(Event::EvictionBlocked {
                        node: node.into(),
                        pod: id.clone(),
                        reason: self
                            .why_blocked(pod, settings.policy_version, &message)
                            .await,
                        retry_seconds: EVICTION_RETRY.as_secs(),
                        seconds_left: left.as_secs(),
                    });
                    tokio::time::sleep(EVICTION_RETRY.min(left)).await;
                }
            }
        }
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(
            left,
            await_condition(api, &pod.name, conditions::is_deleted(&pod.uid)),
        )
        .await
        {
            Ok(Ok(_)) => {
                reporter.report(Event::PodGone {
                    node: node.into(),
                    pod: id,
                });
                Ok(true)
            }
            Ok(Err(e)) => Err(ClusterError::Unreachable {
                server: self.server.clone(),
                message: format!("watching pod {id}: {e}"),
            }),
            Err(_) => Ok(false),
        }
    }

    async fn delete_pod(&self, pod: &Pod, grace: Option<i64>) -> Result<Eviction, ClusterError> {
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: grace.map(|g| g as u32),
            ..Default::default()
        };
        match api.delete(&pod.name, &params).await {
            Ok(_) => Ok(Eviction::Evicted),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Eviction::Gone),
            Err(e) => Err(server_error(
                self,
                "delete",
                "pods",
                Some(&pod.namespace),
                e,
            )),
        }
    }
}
