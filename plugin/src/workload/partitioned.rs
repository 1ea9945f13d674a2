//! The executor of a StatefulSet's partitioned update: drives [`PartitionLoop`] against the
//! cluster. The new template goes in with the partition at the replica count (nothing moves)
//! and the original update strategy recorded on the object, in one write; each step lowers the
//! partition (for an `OnDelete` StatefulSet: deletes the step's pods itself, highest first),
//! awaits the pods it updates Ready on the new revision, then asks the gates; the strategy is
//! restored at the end. The partition and revisions on the object are the state:
//! the same command, run again, goes on from them. A rollback is the same loop towards the
//! revision the pods ran before, read from its ControllerRevision.

use serde_json::{Value, json};

use std::convert::Infallible;

use super::driving::{self, Live, rolled_back};
use super::execute::{UpdateError, Updater};
use super::pods::PodWait;
use crate::cluster::controls::Workload;
use crate::cluster::view::Deadline;
use crate::events::Event;
use crate::kernel::ControlsAt;
use crate::plan::decide::{self, BatchDecision, GateDecision};
use crate::plan::hook::{DecidedBy, Phase};
use crate::plan::rolling_update::asks::{
    PartitionAt, ask_gate, ask_partition_size, partition_batch, pod_names, pods_at_a_time,
};
use crate::plan::rolling_update::flow::{Gating, Sizing};
use crate::plan::rolling_update::in_place::InPlaceWorkload;
use crate::plan::rolling_update::partition_loop::{Action, GateAbout, Input, PartitionLoop};
use crate::plan::rolling_update::pods::PodInfo;
pub use crate::plan::rolling_update::stateful_set::PartitionAction;
use crate::plan::rolling_update::stateful_set::{self, Start, StatefulSet};
use crate::policy::IntOrPercent;

#[derive(Debug, Clone)]
pub struct PartitionRequest {
    pub namespace: String,
    pub name: String,
    pub action: PartitionAction,
    /// Pods in the first step of an update that has not moved yet (0: no canary).
    pub canary: u32,
    /// `--max-unavailable`; else the set's own (see [`StatefulSet::budget`]).
    pub max_unavailable: Option<IntOrPercent>,
}

/// A step of the partition: the ordinals from `to` up to (not including) `from` move.
#[derive(Debug, Clone, Copy)]
struct Lowering {
    from: i32,
    to: i32,
}

impl Updater<'_> {
    /// Runs the request: start (or find) the update, step it through, restore the strategy.
    pub async fn run_partitioned(&mut self, request: &PartitionRequest) -> Result<(), UpdateError> {
        let ns = request.namespace.as_str();
        let set = self.stateful_set(ns, &request.name).await?;
        let set = self.start(ns, set, &request.action).await?;
        let rollback = matches!(request.action, PartitionAction::Rollback);
        let max = request.max_unavailable;
        let outcome = (self.partitions(ns, set, true, request.canary, rollback, max)).await;
        let Some(reason) = self.rolls_back(&outcome) else {
            return outcome;
        };
        let set = self.stateful_set(ns, &request.name).await?;
        let set = self.start(ns, set, &PartitionAction::Rollback).await?;
        self.partitions(ns, set, false, 0, true, max).await?;
        Err(rolled_back(reason))
    }

    async fn stateful_set(&self, ns: &str, name: &str) -> Result<StatefulSet, UpdateError> {
        self.kernel
            .cluster
            .get_stateful_set(ns, name)
            .await?
            .ok_or_else(|| {
                UpdateError::Invalid(format!(
                    "statefulset {name:?} not found in namespace {ns:?}"
                ))
            })
    }

    /// The StatefulSet once its controller has seen its latest spec.
    async fn observed(&self, ns: &str, set: StatefulSet) -> Result<StatefulSet, UpdateError> {
        if set.observed() && set.update_revision().is_some() {
            return Ok(set);
        }
        Ok(self
            .kernel
            .cluster
            .wait_stateful_set(ns, set.name(), self.settings.timeout, |s| {
                s.observed() && s.update_revision().is_some()
            })
            .await?)
    }

    async fn set_pods(&self, ns: &str, set: &StatefulSet) -> Result<Vec<PodInfo>, UpdateError> {
        self.pods_now(ns, &set.selector_string()).await
    }

    /// Starts the update `action` asks for, or finds it under way.
    async fn start(
        &self,
        ns: &str,
        set: StatefulSet,
        action: &PartitionAction,
    ) -> Result<StatefulSet, UpdateError> {
        let set = self.observed(ns, set).await?;
        let pods = self.set_pods(ns, &set).await?;
        match stateful_set::start(&set, &pods, action).map_err(UpdateError::Invalid)? {
            Start::Resume => {
                self.kernel.reporter.report(Event::UpdateContinued {
                    controller: set.display(),
                });
                Ok(set)
            }
            Start::Write(template) => {
                if template.is_some() && set.recorded_strategy().is_some() {
                    self.kernel.reporter.report(Event::Warning {
                        message: format!(
                            "{} was being updated to another template; this update starts over from its pods as they are",
                            set.display()
                        ),
                    });
                }
                self.begin(ns, set, template, false).await
            }
            Start::Revert(revision) => {
                let template = self.kernel.cluster
                    .revision_template(ns, &revision)
                    .await?
                    .ok_or_else(|| {
                        UpdateError::Invalid(format!(
                            "the revision {revision} of {} is gone: there is no template to roll back to",
                            set.display()
                        ))
                    })?;
                self.kernel.reporter.report(Event::RollbackStarted {
                    controller: set.display(),
                    replicas: set.replicas(),
                });
                self.begin(ns, set, Some(template), true).await
            }
        }
    }

    /// Starts the update in one write (see [`StatefulSet::begun`]).
    async fn begin(
        &self,
        ns: &str,
        set: StatefulSet,
        template: Option<Value>,
        rollback: bool,
    ) -> Result<StatefulSet, UpdateError> {
        use crate::cluster::controllers::Write;
        let begun = |s: &StatefulSet| s.begun(template.clone(), rollback);
        let changed = (self.kernel.cluster)
            .change_stateful_set(ns, &set, begun, Write::Apply)
            .await?;
        if changed.rewritten {
            self.kernel.warn(super::status_moved(&set.display()));
        }
        Ok(changed.object)
    }

    /// Steps the partition down to 0 and restores the strategy; `with_hooks` false for a
    /// rollback after an abort, whose every answer is the built-in one; `max`: the
    /// `--max-unavailable` given, else the set's own.
    async fn partitions(
        &mut self,
        ns: &str,
        set: StatefulSet,
        with_hooks: bool,
        canary: u32,
        rollback: bool,
        max: Option<IntOrPercent>,
    ) -> Result<(), UpdateError> {
        let set = self.observed(ns, set).await?;
        let revision = set.update_revision().unwrap_or_default().to_string();
        let pods = self.set_pods(ns, &set).await?;
        let floor = stateful_set::floor(&set, &pods, &revision);
        let at = stateful_set::partition_of(&set, &pods, &revision);
        let replicas = set.replicas();
        let max_unavailable = pods_at_a_time(set.budget(max), replicas);
        self.kernel.reporter.report(Event::PartitionUpdateStarted {
            workload: set.display(),
            replicas,
            partition: at,
            floor,
            revision: revision.clone(),
            max_unavailable,
        });
        if with_hooks {
            for message in decide::left_out_warnings(self.kernel.hooks) {
                self.kernel.warn(message);
            }
        }
        self.kernel.control_at(ControlsAt::Workload {
            workload: Workload::StatefulSet(set.name().to_string()),
            namespace: ns.to_string(),
        });
        let machine = PartitionLoop::new(replicas, at, floor, max_unavailable, canary);
        let mut live = Partitioned {
            ns: ns.to_string(),
            set,
            max_unavailable,
            partition: at,
            steps_done: 0,
            rollback,
        };
        driving::drive(self, &mut live, machine, with_hooks).await
    }

    /// Lowers the partition as `lowering` says (for an `OnDelete` StatefulSet: deletes the
    /// pods of those ordinals not on the update revision, highest first, and the controller
    /// starts them again on it), once the pods that step takes down and those
    /// unavailable besides them (a pod that fails, a run stopped mid-step leaving pods
    /// starting) keep within `max_unavailable`.
    async fn set_partition(
        &self,
        ns: &str,
        set: &StatefulSet,
        lowering: Lowering,
        max_unavailable: u32,
    ) -> Result<(), UpdateError> {
        let Lowering {
            from,
            to: partition,
        } = lowering;
        let wait = PodWait {
            ns,
            selector: &set.selector_string(),
            what: format!("waiting for the unavailable pods of {}", set.display()),
            deadline: Deadline::Within(self.settings.timeout),
        };
        let doomed = (self.wait_on_pods(wait, async || {
            let set = (self.observed(ns, self.stateful_set(ns, set.name()).await?)).await?;
            let revision = set.update_revision().unwrap_or_default().to_string();
            let pods = self.set_pods(ns, &set).await?;
            let doomed = stateful_set::to_delete(&set, &pods, partition, from, &revision);
            let now = jiff::Timestamp::now().as_second();
            let others_down = stateful_set::unavailable_besides(&set, &pods, &doomed, now);
            // A step that takes nothing down (the settling of ordinals on the revision already)
            // never waits.
            if doomed.is_empty() || others_down + doomed.len() <= max_unavailable as usize {
                return Ok(Ok(doomed));
            }
            self.kernel.reporter.report(Event::Waiting {
                seconds: self.settings.poll_interval.as_secs(),
                reason: format!(
                    "{others_down} pods of {} are unavailable: updating {} more would pass maxUnavailable {max_unavailable}",
                    set.display(),
                    doomed.len()
                ),
            });
            Ok(Err(others_down))
        }))
        .await?;
        if set.on_delete() {
            for pod in doomed {
                self.kernel.cluster.delete_pod_object(ns, &pod).await?;
            }
            return Ok(());
        }
        let patch =
            json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": partition}}}});
        self.kernel
            .cluster
            .patch_stateful_set(ns, set.name(), &patch)
            .await?;
        Ok(())
    }

    /// Waits until every pod at or above `partition` is available on the update revision;
    /// gives up when nothing moved for the timeout.
    async fn await_updated(
        &self,
        ns: &str,
        set: &StatefulSet,
        partition: i32,
    ) -> Result<(), UpdateError> {
        let wait = PodWait {
            ns,
            selector: &set.selector_string(),
            what: format!(
                "waiting for the pods of {} from ordinal {partition} to be available",
                set.display()
            ),
            deadline: Deadline::Moving(self.settings.timeout),
        };
        self.wait_on_pods(wait, async || {
            let set = (self.observed(ns, self.stateful_set(ns, set.name()).await?)).await?;
            let revision = set.update_revision().unwrap_or_default().to_string();
            let pods = self.set_pods(ns, &set).await?;
            let now = jiff::Timestamp::now().as_second();
            let left = stateful_set::waiting_for(&set, &pods, partition, &revision, now);
            Ok(if left.is_empty() { Ok(()) } else { Err(left) })
        })
        .await
    }

    /// Puts the recorded update strategy back and forgets the record.
    async fn restore(&self, ns: &str, set: &StatefulSet) -> Result<(), UpdateError> {
        let Some(set) = self.kernel.cluster.get_stateful_set(ns, set.name()).await? else {
            return Ok(());
        };
        let Some(patch) = set.restoring() else {
            return Ok(());
        };
        self.kernel
            .cluster
            .patch_stateful_set(ns, set.name(), &patch)
            .await?;
        Ok(())
    }
}

/// A StatefulSet's partitioned update as the executor carries it out.
struct Partitioned {
    ns: String,
    set: StatefulSet,
    max_unavailable: u32,
    /// The partition now, and the steps done (gated) so far.
    partition: i32,
    steps_done: u32,
    rollback: bool,
}

impl Live for Partitioned {
    type Flow = PartitionLoop;

    async fn size(
        &mut self,
        u: &mut Updater<'_>,
        sizing: &Sizing<bool>,
    ) -> Result<BatchDecision, UpdateError> {
        let pods = u.set_pods(&self.ns, &self.set).await?;
        let at = PartitionAt {
            name: self.set.name(),
            replicas: self.set.replicas(),
            partition: self.partition,
            max_unavailable: self.max_unavailable,
            steps_done: self.steps_done,
        };
        Ok(u.kernel
            .ask_size(self.steps_done, sizing.attempt, |hooks, ctx, warnings| {
                ask_partition_size(hooks, ctx, &at, &pods, sizing.max, warnings)
            })?)
    }

    async fn gate(
        &mut self,
        u: &mut Updater<'_>,
        gating: &Gating<GateAbout>,
    ) -> Result<GateDecision, UpdateError> {
        let batch = partition_batch(self.set.name(), gating);
        let pods = u.set_pods(&self.ns, &self.set).await?;
        let not_ready = pods.iter().filter(|p| !p.ready && !p.terminating).count() as u32;
        let replicas = self.set.replicas();
        let (index, attempt) = (batch.index, batch.attempt);
        Ok(u.kernel
            .ask_gate(Phase::AfterBatch, index, attempt, |hooks, ctx, warnings| {
                ask_gate(hooks, ctx, &batch, replicas, not_ready, warnings)
            })?)
    }

    fn passed(&mut self, _: &mut Updater<'_>, gating: &Gating<GateAbout>) {
        self.steps_done = gating.step + 1;
    }

    async fn answer(
        &mut self,
        _: &mut Updater<'_>,
        ask: Infallible,
        _: bool,
    ) -> Result<Input, UpdateError> {
        match ask {}
    }

    fn safe_point(&self, act: &Action) -> Option<String> {
        match act {
            Action::SetPartition { step, .. } => {
                Some(driving::before_step(*step, &self.set.display()))
            }
            _ => None,
        }
    }

    async fn act(&mut self, u: &mut Updater<'_>, act: Action) -> Result<Input, UpdateError> {
        match act {
            Action::SetPartition {
                step,
                from,
                to,
                canary,
                decided_by,
                ..
            } => {
                u.kernel.reporter.report(Event::PartitionSet {
                    step,
                    workload: self.set.display(),
                    from,
                    to,
                    pods: pod_names(self.set.name(), to..from),
                    canary,
                    decided_by: decided_by.to_string(),
                });
                let (ns, max) = (&self.ns, self.max_unavailable);
                u.set_partition(ns, &self.set, Lowering { from, to }, max)
                    .await?;
                self.partition = to;
            }
            Action::Settle { from } => {
                u.kernel.reporter.report(Event::PartitionSet {
                    step: self.steps_done,
                    workload: self.set.display(),
                    from,
                    to: 0,
                    pods: Vec::new(),
                    canary: false,
                    decided_by: DecidedBy::BuiltIn.to_string(),
                });
                let (ns, max) = (&self.ns, self.max_unavailable);
                u.set_partition(ns, &self.set, Lowering { from, to: 0 }, max)
                    .await?;
                self.partition = 0;
            }
            Action::AwaitUpdated { partition } => {
                u.await_updated(&self.ns, &self.set, partition).await?;
                u.kernel.reporter.report(Event::PodsUpdated {
                    step: self.steps_done,
                    workload: self.set.display(),
                    partition,
                });
            }
        }
        Ok(Input::Done)
    }

    async fn finish(&mut self, u: &mut Updater<'_>) -> Result<(), UpdateError> {
        u.restore(&self.ns, &self.set).await?;
        let controller = self.set.display();
        u.report_updated_in_place(controller, self.rollback);
        Ok(())
    }

    fn aborted(&self, step: u32, decided_by: &DecidedBy, reason: &str, partition: i32) -> String {
        format!(
            "{decided_by} aborted the update of {} after step {} with the partition at {partition}: {reason}",
            self.set.display(),
            step + 1
        )
    }
}
