//! The executor of a DaemonSet's node-by-node update: drives [`NodeLoop`] against the cluster.
//! The new template goes in with the DaemonSet switched to `OnDelete` (nothing moves by
//! itself) and its strategy recorded, in one write; each step deletes the old pods on the
//! nodes the hooks chose, awaits the new pods Ready there, then asks the gates; the strategy is
//! restored at the end. The pods' revisions are the state: the same command, run again, goes
//! on with the nodes still running an old pod. An abort leaves the DaemonSet `OnDelete`, so
//! nothing moves until the update resumes or is rolled back.

use std::collections::HashMap;

use super::driving::{self, Live, rolled_back};
use super::execute::{UpdateError, Updater};
use super::pods::PodWait;
use crate::cluster::controllers::Write;
use crate::cluster::controls::Workload;
use crate::cluster::view::Deadline;
use crate::cluster::workloads::AppsKind;
use crate::events::Event;
use crate::kernel::{At, ControlsAt};
use crate::plan::decide::{BatchDecision, GateDecision};
use crate::plan::hook::{Candidate, DecidedBy, Phase};
use crate::plan::rolling_update::asks::{
    NodesAt, ask_gate, ask_node_size, ask_order, in_order, node_batch, pods_at_a_time,
};
use crate::plan::rolling_update::daemon_set::{
    self, DaemonPod, DaemonSet, Revision, Start, UpdateAction, node_candidate,
};
use crate::plan::rolling_update::flow::{Gating, Sizing};
use crate::plan::rolling_update::in_place::InPlaceWorkload;
use crate::plan::rolling_update::node_loop::{Action, Input, NodeLoop, Ordered, Question};
use crate::policy::{HookPoint, IntOrPercent};
use crate::snapshot::Node;

#[derive(Debug, Clone)]
pub struct NodeRequest {
    pub namespace: String,
    pub name: String,
    pub action: UpdateAction,
    /// Nodes per step at most; `None`: the DaemonSet's own maxUnavailable.
    pub max_unavailable: Option<IntOrPercent>,
}

/// A DaemonSet as one look sees it: the object, and its pods as the update's watch has them.
pub struct Observed {
    pub set: DaemonSet,
    pub pods: Vec<DaemonPod>,
}

/// The hash of the revision the template is.
fn newest(revisions: &[Revision]) -> String {
    daemon_set::newest(revisions).map_or_else(String::new, |r| r.hash.clone())
}

impl Observed {
    /// Nodes counted against the budget, but those of `step`: without a Ready pod (none yet,
    /// one not Ready, one on its way out).
    fn unavailable_besides(&self, step: &[String]) -> usize {
        let desired = self.set.object["status"]["desiredNumberScheduled"]
            .as_u64()
            .unwrap_or(0) as usize;
        let up = self
            .pods
            .iter()
            .filter(|p| p.ready && !p.terminating && !step.contains(&p.node))
            .count();
        desired.saturating_sub(step.len()).saturating_sub(up)
    }
}

/// How a DaemonSet's node steps are taken.
struct NodeSteps {
    /// False for a rollback after an abort, whose every answer is the built-in one.
    with_hooks: bool,
    /// An update under way: the nodes it replaced are awaited and gated first.
    resumed: bool,
    /// Back to the previous revision.
    rollback: bool,
    /// `--max-unavailable`, else the DaemonSet's own.
    max: Option<IntOrPercent>,
}

impl Updater<'_> {
    /// Runs the request: start (or find) the update, replace node by node, restore.
    pub async fn run_node_by_node(&mut self, request: &NodeRequest) -> Result<(), UpdateError> {
        let ns = request.namespace.as_str();
        let set = self.daemon_set(ns, &request.name).await?;
        let (set, resumed) = self.start_nodes(ns, set, &request.action).await?;
        let steps = NodeSteps {
            with_hooks: true,
            resumed,
            rollback: matches!(request.action, UpdateAction::Rollback),
            max: request.max_unavailable,
        };
        let outcome = self.node_steps(ns, set, steps).await;
        let Some(reason) = self.rolls_back(&outcome) else {
            return outcome;
        };
        let set = self.daemon_set(ns, &request.name).await?;
        let (set, resumed) = self.start_nodes(ns, set, &UpdateAction::Rollback).await?;
        let steps = NodeSteps {
            with_hooks: false,
            resumed,
            rollback: true,
            max: request.max_unavailable,
        };
        self.node_steps(ns, set, steps).await?;
        Err(rolled_back(reason))
    }

    async fn daemon_set(&self, ns: &str, name: &str) -> Result<DaemonSet, UpdateError> {
        self.kernel
            .cluster
            .get_daemon_set(ns, name)
            .await?
            .ok_or_else(|| {
                UpdateError::Invalid(format!("daemonset {name:?} not found in namespace {ns:?}"))
            })
    }

    /// The DaemonSet once its controller has seen its spec, with its pods.
    pub async fn observe_daemon_set(
        &self,
        ns: &str,
        set: DaemonSet,
    ) -> Result<Observed, UpdateError> {
        let set = if set.observed() {
            set
        } else {
            self.kernel
                .cluster
                .wait_daemon_set(ns, set.name(), self.settings.timeout, DaemonSet::observed)
                .await?
        };
        let pods = self.pods_now(ns, &set.selector_string()).await?;
        let pods = pods.iter().filter_map(|p| DaemonPod::owned(p, set.uid()));
        Ok(Observed {
            pods: pods.collect(),
            set,
        })
    }

    /// Starts the update `action` asks for, or finds it under way (then true).
    async fn start_nodes(
        &self,
        ns: &str,
        set: DaemonSet,
        action: &UpdateAction,
    ) -> Result<(DaemonSet, bool), UpdateError> {
        let seen = self.observe_daemon_set(ns, set).await?;
        let revisions = self
            .kernel
            .cluster
            .daemon_set_revisions(ns, &seen.set)
            .await?;
        let start = daemon_set::start(&seen.set, &seen.pods, &revisions, action)
            .map_err(UpdateError::Invalid)?;
        let set = seen.set;
        let (template, rollback) = match start {
            Start::Resume => {
                self.kernel.reporter.report(Event::UpdateContinued {
                    controller: set.display(),
                });
                return Ok((set, true));
            }
            Start::Write(template) => (template, false),
            Start::Revert(revision) => {
                self.kernel.reporter.report(Event::RollbackStarted {
                    controller: set.display(),
                    replicas: seen.pods.len() as i32,
                });
                (Some(revision.template), true)
            }
        };
        let begun = |s: &DaemonSet| s.begun(template.clone(), rollback);
        let changed = (self.kernel.cluster)
            .change_daemon_set(ns, &set, begun, Write::Apply)
            .await?;
        if changed.rewritten {
            self.kernel.warn(super::status_moved(&set.display()));
        }
        Ok((changed.object, false))
    }

    /// Replaces the old pods node by node, then restores the strategy.
    async fn node_steps(
        &mut self,
        ns: &str,
        set: DaemonSet,
        steps: NodeSteps,
    ) -> Result<(), UpdateError> {
        let NodeSteps {
            with_hooks,
            resumed,
            rollback,
            max,
        } = steps;
        let seen = self.observe_daemon_set(ns, set).await?;
        let revisions = self
            .kernel
            .cluster
            .daemon_set_revisions(ns, &seen.set)
            .await?;
        let hash = newest(&revisions);
        let pending = daemon_set::pending_nodes(&seen.pods, &hash);
        let candidates = self.candidates(&seen, &pending, with_hooks).await?;
        let name = seen.set.name().to_string();
        let desired = seen.set.object["status"]["desiredNumberScheduled"]
            .as_i64()
            .unwrap_or(pending.len() as i64) as i32;
        let budget = seen.set.budget(max).map_err(UpdateError::Invalid)?;
        let max_unavailable = pods_at_a_time(budget, desired);
        self.kernel.reporter.report(Event::NodeUpdateStarted {
            workload: seen.set.display(),
            nodes: pending.len(),
            revision: hash.clone(),
            max_unavailable,
        });
        let updated = if resumed {
            daemon_set::updated_nodes(&seen.pods, &hash)
        } else {
            Vec::new()
        };
        self.kernel.control_at(ControlsAt::Workload {
            workload: Workload::DaemonSet(name.clone()),
            namespace: ns.to_string(),
        });
        let machine = NodeLoop::new(pending, updated, max_unavailable);
        let mut live = NodeByNode {
            daemon: Daemon {
                ns: ns.to_string(),
                selector: seen.set.selector_string(),
                display: seen.set.display(),
                name,
            },
            candidates,
            hash,
            max_unavailable,
            steps_done: 0,
            sized_by: DecidedBy::BuiltIn,
            rollback,
        };
        driving::drive(self, &mut live, machine, with_hooks).await
    }

    /// The nodes running an old pod (`pending`) as the hooks see them: with their labels, zone
    /// and taints when a hook that is shown them is loaded (the cluster's nodes are listed
    /// once for it), else by name alone.
    async fn candidates(
        &self,
        seen: &Observed,
        pending: &[String],
        with_hooks: bool,
    ) -> Result<Vec<Candidate>, UpdateError> {
        let shown = [HookPoint::Select, HookPoint::Batch];
        let nodes: HashMap<String, Node> =
            if with_hooks && shown.iter().any(|p| self.kernel.serves(*p)) {
                let nodes = self.kernel.cluster.snapshot_nodes().await?.nodes;
                nodes.into_iter().map(|n| (n.name.clone(), n)).collect()
            } else {
                HashMap::new()
            };
        let name = seen.set.name();
        let candidates = pending.iter().map(|n| {
            let ready = seen.pods.iter().any(|p| &p.node == n && p.ready);
            node_candidate(nodes.get(n), n, name, ready)
        });
        Ok(candidates.collect())
    }

    /// Waits until replacing the pods on `nodes` keeps the unavailable ones within `max`
    /// (those nodes' own pods count once, whether they are up or not).
    async fn within_budget(
        &self,
        daemon: &Daemon,
        nodes: &[String],
        max: u32,
    ) -> Result<(), UpdateError> {
        let count = nodes.len();
        let wait = PodWait {
            ns: &daemon.ns,
            selector: &daemon.selector,
            what: format!("waiting for the unavailable pods of {}", daemon.display),
            deadline: Deadline::Within(self.settings.timeout),
        };
        self.wait_on_pods(wait, async || {
            let seen = self.observe(daemon).await?;
            let unavailable = seen.unavailable_besides(nodes);
            if unavailable + count <= max as usize {
                return Ok(Ok(()));
            }
            self.kernel.reporter.report(Event::Waiting {
                seconds: self.settings.poll_interval.as_secs(),
                reason: format!(
                    "{unavailable} pods of {} are unavailable: replacing {count} more would pass maxUnavailable {max}",
                    daemon.display
                ),
            });
            Ok(Err(unavailable))
        })
        .await
    }

    /// The DaemonSet as it is now (once its controller has seen its spec), with its pods.
    async fn observe(&self, daemon: &Daemon) -> Result<Observed, UpdateError> {
        let set = self.daemon_set(&daemon.ns, &daemon.name).await?;
        self.observe_daemon_set(&daemon.ns, set).await
    }

    /// Deletes the pods on `nodes` not on revision `hash`; the controller starts new ones there.
    async fn replace_pods(
        &self,
        daemon: &Daemon,
        nodes: &[String],
        hash: &str,
    ) -> Result<(), UpdateError> {
        let seen = self.observe(daemon).await?;
        for pod in seen
            .pods
            .iter()
            .filter(|p| nodes.contains(&p.node) && p.hash != hash && !p.terminating)
        {
            (self.kernel.cluster)
                .delete_pod_object(&daemon.ns, &pod.pod_ref())
                .await?;
        }
        Ok(())
    }

    /// Waits until each of `nodes` runs a pod of revision `hash`, available; gives up when
    /// nothing moved for the timeout.
    async fn await_replaced(
        &self,
        daemon: &Daemon,
        nodes: &[String],
        hash: &str,
    ) -> Result<(), UpdateError> {
        let wait = PodWait {
            ns: &daemon.ns,
            selector: &daemon.selector,
            what: format!(
                "waiting for new pods of {} on {}",
                daemon.display,
                nodes.join(", ")
            ),
            deadline: Deadline::Moving(self.settings.timeout),
        };
        self.wait_on_pods(wait, async || {
            let seen = self.observe(daemon).await?;
            let now = jiff::Timestamp::now().as_second();
            let min_ready = seen.set.min_ready_seconds();
            let left = daemon_set::waiting_for(&seen.pods, nodes, hash, min_ready, now);
            Ok(if left.is_empty() { Ok(()) } else { Err(left) })
        })
        .await
    }
}

/// The DaemonSet an update steps through: where it is, and whose pods are its.
struct Daemon {
    ns: String,
    name: String,
    selector: String,
    display: String,
}

/// A DaemonSet's node-by-node update as the executor carries it out.
struct NodeByNode {
    daemon: Daemon,
    /// The nodes running an old pod when the update started, as hooks see them.
    candidates: Vec<Candidate>,
    /// The hash of the revision the nodes are updated to.
    hash: String,
    max_unavailable: u32,
    steps_done: u32,
    sized_by: DecidedBy,
    rollback: bool,
}

impl NodeByNode {
    fn at(&self) -> NodesAt<'_> {
        NodesAt {
            name: &self.daemon.name,
            total: self.candidates.len(),
            max_unavailable: self.max_unavailable,
            steps_done: self.steps_done,
        }
    }
}

impl Live for NodeByNode {
    type Flow = NodeLoop;

    async fn size(
        &mut self,
        u: &mut Updater<'_>,
        sizing: &Sizing<Vec<String>>,
    ) -> Result<BatchDecision, UpdateError> {
        let pending = in_order(&self.candidates, &sizing.about);
        let at = self.at();
        let decision =
            u.kernel
                .ask_size(self.steps_done, sizing.attempt, |hooks, ctx, warnings| {
                    ask_node_size(hooks, ctx, &at, &pending, sizing.max, warnings)
                })?;
        self.sized_by = decision.by().clone();
        Ok(decision)
    }

    async fn gate(
        &mut self,
        u: &mut Updater<'_>,
        gating: &Gating<Vec<String>>,
    ) -> Result<GateDecision, UpdateError> {
        let batch = node_batch(gating);
        let seen = u.observe(&self.daemon).await?;
        let not_ready = (seen.pods.iter())
            .filter(|p| !p.ready && !p.terminating)
            .count() as u32;
        let total = seen.pods.len() as i32;
        let (index, attempt) = (batch.index, batch.attempt);
        Ok(u.kernel
            .ask_gate(Phase::AfterBatch, index, attempt, |hooks, ctx, warnings| {
                ask_gate(hooks, ctx, &batch, total, not_ready, warnings)
            })?)
    }

    fn passed(&mut self, _: &mut Updater<'_>, gating: &Gating<Vec<String>>) {
        self.steps_done = gating.step + 1;
    }

    async fn answer(
        &mut self,
        u: &mut Updater<'_>,
        ask: Question,
        with_hooks: bool,
    ) -> Result<Input, UpdateError> {
        let Question::Order { pending } = ask;
        if !with_hooks {
            return Ok(Input::Own(Ordered(pending, DecidedBy::BuiltIn)));
        }
        let candidates = in_order(&self.candidates, &pending);
        let asked = At {
            point: HookPoint::Select,
            phase: None,
            batch: self.steps_done,
            attempt: 0,
        };
        let at = self.at();
        let ordered = u.kernel.ask(
            asked,
            |hooks, ctx, warnings| ask_order(hooks, ctx, &at, &candidates, warnings),
            |Ordered(order, by)| (by.clone(), format!("order {}", order.join(", "))),
        )?;
        Ok(Input::Own(ordered))
    }

    fn safe_point(&self, act: &Action) -> Option<String> {
        match act {
            Action::Replace { step, .. } => Some(driving::before_step(*step, &self.daemon.display)),
            Action::AwaitReplaced { .. } => None,
        }
    }

    async fn act(&mut self, u: &mut Updater<'_>, act: Action) -> Result<Input, UpdateError> {
        match act {
            Action::Replace {
                step,
                nodes,
                ordered_by,
                ..
            } => {
                (u.within_budget(&self.daemon, &nodes, self.max_unavailable)).await?;
                u.kernel.reporter.report(Event::NodesReplacing {
                    step,
                    workload: self.daemon.display.clone(),
                    nodes: nodes.clone(),
                    decided_by: self.sized_by.to_string(),
                    ordered_by: ordered_by.to_string(),
                });
                u.replace_pods(&self.daemon, &nodes, &self.hash).await?;
            }
            Action::AwaitReplaced { nodes } => {
                u.await_replaced(&self.daemon, &nodes, &self.hash).await?;
                u.kernel.reporter.report(Event::NodesReplaced {
                    step: self.steps_done,
                    workload: self.daemon.display.clone(),
                    nodes,
                });
            }
        }
        Ok(Input::Done)
    }

    async fn finish(&mut self, u: &mut Updater<'_>) -> Result<(), UpdateError> {
        let (ns, name) = (&self.daemon.ns, &self.daemon.name);
        let set = u.daemon_set(ns, name).await?;
        if let Some(patch) = set.restoring() {
            (u.kernel.cluster)
                .patch_workload(AppsKind::DaemonSet, ns, name, &patch)
                .await?;
        }
        let controller = self.daemon.display.clone();
        u.report_updated_in_place(controller, self.rollback);
        Ok(())
    }

    fn aborted(&self, step: u32, decided_by: &DecidedBy, reason: &str, left: usize) -> String {
        format!(
            "{decided_by} aborted the update of {} at step {} with {left} nodes left on the old pod (the DaemonSet stays OnDelete): {reason}",
            self.daemon.display,
            step + 1
        )
    }
}
