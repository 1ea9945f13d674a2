//! Cordon and drain with kubectl's semantics, as a small library.
//!
//! A drain lists the node's pods, runs each through the filter chain of `plan::drain` (the same
//! one the plan's warnings come from), refuses before evicting anything if a pod cannot go, then
//! evicts the rest in parallel (the eviction requests of pods a budget covers take turns per
//! namespace, see `eviction`). An eviction refused with 429 (a PodDisruptionBudget) is retried
//! every 5 seconds and every retry is reported with the budget's name. Pods are waited for by
//! watching until they are gone. Everything stops at the drain timeout with the pods still left.

use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch};

use super::writes::Kind;
use super::{Cluster, ClusterError, Request, urlencode};
use crate::events::{Event, Reporter};
use crate::plan::drain::{DrainOptions, PodFate, classify, in_turns};
use crate::snapshot::{Pdb, Pod, Snapshot};

mod marks;
mod pods;

use marks::patch_params;
pub use marks::{Cordon, QuarantineRecord};

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
    /// The evictions and the waits for evicted pods to go must finish within this (a turn of
    /// `drain.order` after a ladder, and the pods that come after held ones, get their own);
    /// held pods have their own timeouts, and the escalation ladder its own time.
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
    /// A pod that asks not to be disrupted was still there when its wait ran out.
    #[error(
        "draining node {node}: pod {pod} {why} and was still there after {waited:?}; stopping (the same command resumes; drain.afterTimeout: Evict evicts it instead)"
    )]
    Held {
        node: String,
        pod: String,
        why: String,
        waited: Duration,
    },
    /// An eviction stayed refused through every rung of the policy's escalation ladder.
    #[error(
        "draining node {node}: the eviction of pod {pod} stayed refused through the escalation ladder ({ladder}): {reason}"
    )]
    LadderEnded {
        node: String,
        pod: String,
        ladder: String,
        reason: String,
    },
    /// The eviction API refuses a pod that more than one budget selects (500), for good.
    #[error(
        "draining node {node}: pod {pod} is selected by more than one PodDisruptionBudget ({budgets}), and the eviction API refuses to evict such a pod; change the budgets so that one selects it, then run the same command again"
    )]
    MultipleBudgets {
        node: String,
        pod: String,
        budgets: String,
    },
    /// The pod's namespace is being deleted and the pod is not (yet) going with it.
    #[error(
        "draining node {node}: namespace {namespace} is being deleted, so the API server refuses to evict pod {pod}, which is not being deleted yet; run the same command again once the namespace's deletion has reached it ({message})"
    )]
    NamespaceTerminating {
        node: String,
        pod: String,
        namespace: String,
        message: String,
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

impl Cluster {
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
                Ok(patched) => {
                    if !dry_run {
                        self.writes.now(Kind::Node, &patched.metadata);
                    }
                    break;
                }
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
        Ok(snapshot
            .pods
            .into_iter()
            .map(std::sync::Arc::unwrap_or_clone)
            .collect())
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

    /// The ids of those of `pods` a PodDisruptionBudget covers (their namespaces' budgets
    /// listed once each).
    async fn guarded(
        &self,
        pods: &[Pod],
        version: &str,
    ) -> Result<std::collections::HashSet<String>, ClusterError> {
        let mut guarded = std::collections::HashSet::new();
        let namespaces: std::collections::BTreeSet<&str> =
            pods.iter().map(|p| p.namespace.as_str()).collect();
        for namespace in namespaces {
            let budgets = self.budgets_in(namespace, version).await?;
            guarded.extend(
                pods.iter()
                    .filter(|p| p.namespace == namespace)
                    .filter(|p| budgets.iter().any(|b| b.selector.matches(&p.labels)))
                    .map(Pod::id),
            );
        }
        Ok(guarded)
    }

    /// The budgets of `pod`'s namespace that select it.
    async fn budgets_of(&self, pod: &Pod, version: &str) -> Result<Vec<Pdb>, ClusterError> {
        let budgets = self.budgets_in(&pod.namespace, version).await?;
        Ok(budgets
            .into_iter()
            .filter(|b| b.selector.matches(&pod.labels))
            .collect())
    }

    /// Names the budgets covering `pod` and what they allow, for a refused eviction.
    pub async fn why_blocked(&self, pod: &Pod, version: &str, server_message: &str) -> String {
        let names: Vec<String> = (self.budgets_of(pod, version).await)
            .unwrap_or_default()
            .iter()
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

    /// Names the budgets that select `pod`, for an eviction the server refuses because there is
    /// more than one; its own message when they cannot be read.
    pub async fn budgets_named(&self, pod: &Pod, version: &str, server_message: &str) -> String {
        match self.budgets_of(pod, version).await {
            Ok(budgets) if !budgets.is_empty() => budgets
                .iter()
                .map(|b| format!("{}/{}", b.namespace, b.name))
                .collect::<Vec<_>>()
                .join(", "),
            _ => server_message.to_string(),
        }
    }

    /// Drains a node that is already cordoned: held pods are waited for while the others are
    /// evicted, turn by turn. Once the pods it found are gone the node is listed again: a pod
    /// bound while the cordon was reaching the scheduler (its cache lags) is drained too, so
    /// that the node is empty when this returns.
    pub async fn drain(
        &self,
        node: &str,
        settings: &DrainSettings,
        reporter: &dyn Reporter,
    ) -> Result<(), DrainError> {
        self.drain_ordered(node, settings, None, reporter).await
    }

    /// [`Cluster::drain`], with the pods it finds first evicted in `turns` (`namespace/name`,
    /// a `drain-order` hook's answer) and the others after, in the policy's order.
    pub async fn drain_ordered(
        &self,
        node: &str,
        settings: &DrainSettings,
        mut turns: Option<&[Vec<String>]>,
        reporter: &dyn Reporter,
    ) -> Result<(), DrainError> {
        let mut deadline = Instant::now() + settings.timeout;
        let mut first = true;
        loop {
            let pods = self.pods_on(node).await?;
            let mut evict = Vec::new();
            let mut held = Vec::new();
            let mut skipped = Vec::new();
            let mut refused = Vec::new();
            for pod in pods {
                let id = pod.id();
                match classify(&pod, &settings.options) {
                    PodFate::Evict { warning } => {
                        if let Some(w) = warning {
                            reporter.report(Event::Warning {
                                message: format!("{w}: {id}"),
                            });
                        }
                        evict.push(pod);
                    }
                    PodFate::Hold(hold) => held.push((pod, hold)),
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
                .chain(held.iter().map(|(p, _)| p))
                .map(Pod::id)
                .collect();
            if first {
                reporter.report(Event::DrainStarted {
                    node: node.into(),
                    pods: evict.len(),
                    skipped,
                    held: held.iter().map(|(p, _)| p.id()).collect(),
                });
            } else if ids.is_empty() {
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
                        "{} pod(s) came to node {node} while it drained: {}; draining them too",
                        ids.len(),
                        ids.join(", ")
                    ),
                });
            }
            // The first failure ends the drain: the other waits and evictions are dropped.
            let waits = futures::future::try_join_all(
                held.iter()
                    .map(|(pod, hold)| self.hold_pod(node, pod, *hold, settings, reporter)),
            );
            let ordered = ordered_turns(evict, turns.take(), &settings.options.rules.order);
            let evictions = self.evict_in_turns(node, ordered, settings, deadline, reporter);
            futures::future::try_join(waits, evictions).await?;
            if !held.is_empty() {
                // Held pods may have taken far longer than the drain timeout; whoever came
                // meanwhile gets a drain timeout of its own.
                deadline = deadline.max(Instant::now() + settings.timeout);
            }
            if first && ids.is_empty() {
                break;
            }
            first = false;
        }
        reporter.report(Event::Drained { node: node.into() });
        Ok(())
    }

    /// Evicts pods turn by turn: a turn's pods in parallel, and all of them gone before the next
    /// turn starts.
    async fn evict_in_turns(
        &self,
        node: &str,
        turns: Vec<Vec<Pod>>,
        settings: &DrainSettings,
        deadline: Instant,
        reporter: &dyn Reporter,
    ) -> Result<(), DrainError> {
        // Deleting pods (`--disable-eviction`) consults no budget.
        let guarded = match settings.options.disable_eviction {
            true => Default::default(),
            false => {
                let all: Vec<Pod> = turns.iter().flatten().cloned().collect();
                self.guarded(&all, settings.policy_version).await?
            }
        };
        let ladder = !settings.options.rules.escalation.is_empty();
        let mut deadline = deadline;
        for (i, turn) in turns.iter().enumerate() {
            if i > 0 && ladder {
                // A ladder may have kept the turn before past the drain timeout: each turn
                // then gets a drain timeout of its own.
                deadline = deadline.max(Instant::now() + settings.timeout);
            } else if i > 0 && Instant::now() >= deadline {
                return Err(DrainError::Timeout {
                    node: node.into(),
                    timeout: settings.timeout,
                    remaining: turns[i..].iter().flatten().map(Pod::id).collect(),
                });
            }
            let results = join_all(turn.iter().map(|pod| {
                let covered = guarded.contains(&pod.id());
                self.remove_pod(node, pod, covered, settings, deadline, reporter)
            }))
            .await;
            let mut remaining = Vec::new();
            for (pod, result) in turn.iter().zip(results) {
                if !result? {
                    remaining.push(pod.id());
                }
            }
            if !remaining.is_empty() {
                return Err(DrainError::Timeout {
                    node: node.into(),
                    timeout: settings.timeout,
                    remaining,
                });
            }
        }
        Ok(())
    }
}

/// `pods` in turns: first those `given` names (in its turns; names of pods not there are
/// passed over), then the rest in the turns of the policy's `drain.order`.
fn ordered_turns(
    mut pods: Vec<Pod>,
    given: Option<&[Vec<String>]>,
    rules: &[crate::policy::drain::OrderRule],
) -> Vec<Vec<Pod>> {
    let mut turns = Vec::new();
    for names in given.unwrap_or_default() {
        let (turn, rest): (Vec<Pod>, Vec<Pod>) =
            pods.into_iter().partition(|p| names.contains(&p.id()));
        pods = rest;
        if !turn.is_empty() {
            turns.push(turn);
        }
    }
    turns.extend(in_turns(pods, rules));
    turns
}
