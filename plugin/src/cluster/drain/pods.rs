//! One pod of a drain: evicted (climbing the policy's escalation ladder while its budget
//! refuses), deleted, or waited for when it asks not to be disrupted or runs to completion.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod as K8sPod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::wait::await_condition;

use super::{DrainError, DrainSettings, EVICTION_RETRY, server_error};
use crate::cluster::eviction::Eviction;
use crate::cluster::writes::Kind;
use crate::cluster::{Cluster, ClusterError};
use crate::events::{Event, Reporter};
use crate::plan::drain::{Hold, PodFate, eviction_fate, ladder_in_words, ladder_length, rung_at};
use crate::policy::drain::{AfterTimeout, RungAction};
use crate::snapshot::Pod;

/// How long a failed watch of a held pod rests before it is started again.
const WATCH_AGAIN: Duration = Duration::from_secs(5);

/// How a held pod's wait ended.
enum HoldEnd {
    Gone,
    /// It completed: nothing left to disrupt, it is removed at once.
    Completed,
    /// It no longer asks not to be disrupted: it is evicted like any other pod.
    Released,
    TimedOut,
}

impl Cluster {
    /// Evicts (or deletes) one pod and waits for it to be gone. `Ok(false)`: the deadline passed.
    /// While a budget refuses the eviction, the policy's escalation ladder says what to do: the
    /// ladder keeps its own time (its last rung stops the drain), and the pod then has the drain
    /// timeout to be gone.
    /// `guarded`: a budget covers the pod, so its eviction waits its turn (see
    /// `cluster::eviction`).
    pub(super) async fn remove_pod(
        &self,
        node: &str,
        pod: &Pod,
        guarded: bool,
        settings: &DrainSettings,
        mut deadline: Instant,
        reporter: &dyn Reporter,
    ) -> Result<bool, DrainError> {
        let id = pod.id();
        let grace = (settings.grace_period >= 0).then_some(settings.grace_period);
        let rules = &settings.options.rules;
        let mut refused_since: Option<Instant> = None;
        let mut delete = settings.options.disable_eviction;
        loop {
            let (version, namespace) = (settings.policy_version, &pod.namespace);
            let outcome = if delete {
                self.delete_pod(pod, grace).await?
            } else if guarded {
                self.evict_guarded(version, pod, grace).await?
            } else {
                self.evict(version, pod, grace, false).await?
            };
            let outcome = match outcome {
                // A 409 from a pod deleted and perhaps started again under its name: the pod
                // meant is gone. Otherwise a lost race of writes, tried again like a refusal.
                Eviction::Conflict { message } => match self.pod_now(pod).await? {
                    Some(now) if now.metadata.uid.as_deref() == Some(pod.uid.as_str()) => {
                        Eviction::Blocked { message }
                    }
                    _ => Eviction::Gone,
                },
                outcome => outcome,
            };
            let message = match outcome {
                Eviction::Evicted => {
                    reporter.report(Event::Evicted {
                        node: node.into(),
                        pod: id.clone(),
                    });
                    break;
                }
                Eviction::Gone => {
                    self.writes
                        .gone(Kind::Pod, &pod.namespace, &pod.name, Some(pod.uid.clone()));
                    return Ok(true);
                }
                Eviction::Blocked { message } | Eviction::Conflict { message } => message,
                Eviction::MultipleBudgets { message } => {
                    return Err(DrainError::MultipleBudgets {
                        node: node.into(),
                        pod: id,
                        budgets: self.budgets_named(pod, version, &message).await,
                    });
                }
                // As kubectl does: a pod the namespace's deletion already reached is waited
                // for (or gone already); one it has not is a stop that says why.
                Eviction::NamespaceTerminating { message } => {
                    let now = self.pod_now(pod).await?;
                    let same = now
                        .as_ref()
                        .filter(|p| p.metadata.uid.as_deref() == Some(pod.uid.as_str()));
                    let Some(now) = same else {
                        self.writes.gone(
                            Kind::Pod,
                            &pod.namespace,
                            &pod.name,
                            Some(pod.uid.clone()),
                        );
                        return Ok(true);
                    };
                    if now.metadata.deletion_timestamp.is_some() {
                        reporter.report(Event::Warning {
                            message: format!(
                                "draining node {node}: namespace {namespace} is being deleted and pod {id} with it; waiting for it to go"
                            ),
                        });
                        break;
                    }
                    return Err(DrainError::NamespaceTerminating {
                        node: node.into(),
                        pod: id,
                        namespace: namespace.clone(),
                        message,
                    });
                }
            };
            let since = *refused_since.get_or_insert_with(Instant::now);
            let left = match ladder_length(rules) {
                Some(length) => {
                    deadline = deadline.max(Instant::now() + settings.timeout);
                    length.saturating_sub(since.elapsed())
                }
                None => deadline.saturating_duration_since(Instant::now()),
            };
            if left.is_zero() && rules.escalation.is_empty() {
                return Ok(false);
            }
            let reason = self
                .why_blocked(pod, settings.policy_version, &message)
                .await;
            match rung_at(rules, since.elapsed()) {
                // A refusal of a pod no budget covers is the API server's load shedding, not a
                // budget: it is retried, never escalated.
                RungAction::Retry | RungAction::DeleteUnready | RungAction::Delete if !guarded => {}
                RungAction::Retry => {}
                RungAction::DeleteUnready if self.pod_ready(pod).await? => {}
                rung @ (RungAction::DeleteUnready | RungAction::Delete) => {
                    let why = match rung {
                        RungAction::DeleteUnready => {
                            "it is not Ready and its budget refuses its eviction: deleting it"
                        }
                        _ => "its budget still refuses its eviction: deleting it instead",
                    };
                    reporter.report(Event::DrainEscalated {
                        node: node.into(),
                        pod: id.clone(),
                        rung: rung.as_str().into(),
                        reason: format!("{why} ({reason})"),
                    });
                    delete = true;
                    continue;
                }
                RungAction::Stop => {
                    return Err(DrainError::LadderEnded {
                        node: node.into(),
                        pod: id,
                        ladder: ladder_in_words(rules).unwrap_or_default(),
                        reason,
                    });
                }
            }
            reporter.report(Event::EvictionBlocked {
                node: node.into(),
                pod: id.clone(),
                reason,
                retry_seconds: EVICTION_RETRY.as_secs(),
                seconds_left: left.as_secs(),
            });
            tokio::time::sleep(EVICTION_RETRY.min(left.max(Duration::from_millis(100)))).await;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.pod_gone(pod, left).await? {
            true => {
                self.writes
                    .gone(Kind::Pod, &pod.namespace, &pod.name, Some(pod.uid.clone()));
                reporter.report(Event::PodGone {
                    node: node.into(),
                    pod: id,
                });
                Ok(true)
            }
            false => Ok(false),
        }
    }

    /// Waits for a held pod to go away (or complete) up to its timeout, then evicts what is left
    /// of it, or stops when the policy says so.
    pub(super) async fn hold_pod(
        &self,
        node: &str,
        pod: &Pod,
        hold: Hold,
        settings: &DrainSettings,
        reporter: &dyn Reporter,
    ) -> Result<(), DrainError> {
        let rules = &settings.options.rules;
        let timeout = hold.timeout(rules);
        reporter.report(Event::PodHeld {
            node: node.into(),
            pod: pod.id(),
            reason: hold.describe(),
            timeout_seconds: timeout.as_secs(),
        });
        match self.held_until(node, pod, hold, timeout, reporter).await? {
            HoldEnd::Gone => {
                reporter.report(Event::PodGone {
                    node: node.into(),
                    pod: pod.id(),
                });
                return Ok(());
            }
            HoldEnd::Completed => {}
            HoldEnd::Released => self.may_evict(node, pod, settings)?,
            HoldEnd::TimedOut => {
                if matches!(hold, Hold::DoNotDisrupt { .. })
                    && rules.after_timeout == AfterTimeout::Stop
                {
                    return Err(DrainError::Held {
                        node: node.into(),
                        pod: pod.id(),
                        why: hold.why(),
                        waited: timeout,
                    });
                }
                self.may_evict(node, pod, settings)?;
                reporter.report(Event::HoldExpired {
                    node: node.into(),
                    pod: pod.id(),
                    then: "evicting it".into(),
                });
            }
        }
        let deadline = Instant::now() + settings.timeout;
        let pods = std::slice::from_ref(pod);
        let guarded = !settings.options.disable_eviction
            && !self
                .guarded(pods, settings.policy_version)
                .await?
                .is_empty();
        if self
            .remove_pod(node, pod, guarded, settings, deadline, reporter)
            .await?
        {
            return Ok(());
        }
        Err(DrainError::Timeout {
            node: node.into(),
            timeout: settings.timeout,
            remaining: vec![pod.id()],
        })
    }

    /// Whether a held pod that is still running may be evicted now that its wait ended:
    /// kubectl's local-storage and unreplicated rules still apply.
    fn may_evict(&self, node: &str, pod: &Pod, settings: &DrainSettings) -> Result<(), DrainError> {
        match eviction_fate(pod, &settings.options) {
            PodFate::Refuse(reason) => Err(DrainError::Refused {
                node: node.into(),
                pods: vec![format!("pod {} {reason}", pod.id())],
            }),
            _ => Ok(()),
        }
    }

    /// Watches a held pod until it is gone, completes (or, for a do-not-disrupt pod, no longer
    /// asks), or `timeout` passes. A watch that fails (the server restarted, the watch expired)
    /// is said and started again for the time left: a hold lasts hours.
    async fn held_until(
        &self,
        node: &str,
        pod: &Pod,
        hold: Hold,
        timeout: Duration,
        reporter: &dyn Reporter,
    ) -> Result<HoldEnd, ClusterError> {
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let uid = pod.uid.clone();
        let ended = move |p: Option<&K8sPod>| match p {
            None => true,
            Some(p) if p.metadata.uid.as_deref() != Some(uid.as_str()) => true,
            Some(p) => released(p, hold),
        };
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let watch = await_condition(api.clone(), &pod.name, ended.clone());
            let seen = match tokio::time::timeout(left, watch).await {
                Err(_) => return Ok(HoldEnd::TimedOut),
                Ok(Ok(seen)) => seen,
                Ok(Err(e)) => {
                    reporter.report(Event::Warning {
                        message: format!(
                            "draining node {node}: watching held pod {} failed ({e}); watching it again in {}s",
                            pod.id(),
                            WATCH_AGAIN.as_secs()
                        ),
                    });
                    tokio::time::sleep(WATCH_AGAIN.min(left)).await;
                    continue;
                }
            };
            return Ok(match seen {
                Some(p) if p.metadata.uid.as_deref() == Some(pod.uid.as_str()) => {
                    if finished(&p) {
                        HoldEnd::Completed
                    } else {
                        HoldEnd::Released
                    }
                }
                _ => HoldEnd::Gone,
            });
        }
    }

    /// `pod` as the server has it now; none when it is gone.
    async fn pod_now(&self, pod: &Pod) -> Result<Option<K8sPod>, ClusterError> {
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        api.get_opt(&pod.name)
            .await
            .map_err(|e| server_error(self, "get", "pods", Some(&pod.namespace), e))
    }

    /// Whether `pod` (as the server has it now) is Ready; a pod already gone is not.
    async fn pod_ready(&self, pod: &Pod) -> Result<bool, DrainError> {
        Ok(self.pod_now(pod).await?.is_some_and(|p| {
            p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        }))
    }

    /// Waits up to `left` for `pod` to be gone; `false` when it is still there.
    async fn pod_gone(&self, pod: &Pod, left: Duration) -> Result<bool, ClusterError> {
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let gone = kube::runtime::wait::conditions::is_deleted(&pod.uid);
        match tokio::time::timeout(left, await_condition(api, &pod.name, gone)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) => Err(ClusterError::Unreachable {
                server: self.server.clone(),
                message: format!("watching pod {}: {e}", pod.id()),
            }),
            Err(_) => Ok(false),
        }
    }

    pub(super) async fn delete_pod(
        &self,
        pod: &Pod,
        grace: Option<i64>,
    ) -> Result<Eviction, ClusterError> {
        let api: Api<K8sPod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: grace.map(|g| g as u32),
            preconditions: (!pod.uid.is_empty()).then(|| Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&pod.name, &params).await {
            Ok(_) => Ok(Eviction::Evicted),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Eviction::Gone),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Eviction::Conflict {
                message: status.message,
            }),
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

/// Whether a held pod may go now: it completed, or (do-not-disrupt) no longer asks.
fn released(pod: &K8sPod, hold: Hold) -> bool {
    if finished(pod) {
        return true;
    }
    match hold {
        Hold::Completion => false,
        // Released once no annotation asks any more (a pod may carry several).
        Hold::DoNotDisrupt { .. } => {
            let annotations = pod.metadata.annotations.as_ref();
            !crate::keys::DO_NOT_DISRUPT.iter().any(|(key, value)| {
                annotations.and_then(|a| a.get(*key)).map(String::as_str) == Some(*value)
            })
        }
    }
}

fn finished(pod: &K8sPod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}
