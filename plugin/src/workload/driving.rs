//! The executor loop every workload flow shares: it drives a flow's machine against the
//! cluster, asks the hooks through the kernel (the built-in answers when the hooks are left out,
//! as in a rollback after an abort), holds for their pauses and waits (an abort cuts them
//! short), honours pause and abort before each of the flow's own actions that it names a safe
//! point, and ends the flow finished or aborted. What each flow's questions and actions do
//! against the cluster is the flow's ([`Live`]).

use std::time::Duration;

use super::execute::{UpdateError, Updater};
use crate::events::Event;
use crate::plan::decide::{BatchDecision, GateDecision, Verdict};
use crate::plan::hook::{DecidedBy, Timing};
use crate::plan::rolling_update::flow::{Act, Answer, Ask, Flow, Gating, Outcome, Sizing, Step};

/// A flow as a live run carries it out.
pub(super) trait Live {
    type Flow: Flow;

    /// The size the hooks give a step, from the workload as it is now.
    async fn size(
        &mut self,
        u: &mut Updater<'_>,
        sizing: &Sizing<<Self::Flow as Flow>::Sizing>,
    ) -> Result<BatchDecision, UpdateError>;

    /// The gates' verdict after a step, from the workload as it is now.
    async fn gate(
        &mut self,
        u: &mut Updater<'_>,
        gating: &Gating<<Self::Flow as Flow>::Gating>,
    ) -> Result<GateDecision, UpdateError>;

    /// A step passed its gate (the hooks' verdict, or the built-in one without hooks).
    fn passed(&mut self, u: &mut Updater<'_>, gating: &Gating<<Self::Flow as Flow>::Gating>);

    /// The answer to a question of the flow's own (the built-in one without hooks).
    async fn answer(
        &mut self,
        u: &mut Updater<'_>,
        ask: <Self::Flow as Flow>::Ask,
        with_hooks: bool,
    ) -> Result<Answer<<Self::Flow as Flow>::Answer>, UpdateError>;

    /// Where the run stands before `act`, when a pause or an abort may hold or stop it there.
    fn safe_point(&self, act: &<Self::Flow as Flow>::Act) -> Option<String>;

    /// Carries out an action of the flow's own; what the flow is told.
    async fn act(
        &mut self,
        u: &mut Updater<'_>,
        act: <Self::Flow as Flow>::Act,
    ) -> Result<Answer<<Self::Flow as Flow>::Answer>, UpdateError>;

    /// A hook's hold is over: a decision, not a lack of progress.
    fn held(&mut self) {}

    /// The flow finished: what is left to restore, and the report.
    async fn finish(&mut self, u: &mut Updater<'_>) -> Result<(), UpdateError>;

    /// Why the run stops when a gate aborts after `step`, leaving things `at`.
    fn aborted(
        &self,
        step: u32,
        decided_by: &DecidedBy,
        reason: &str,
        at: <Self::Flow as Flow>::Stop,
    ) -> String;
}

/// The safe point before step `step` (from 0) of the update of `workload`.
pub(super) fn before_step(step: u32, workload: &str) -> String {
    format!("before step {} of the update of {workload}", step + 1)
}

/// The error of an update a gate aborted and the run rolled back.
pub(super) fn rolled_back(reason: String) -> UpdateError {
    UpdateError::Aborted(format!("{reason}; rolled back"))
}

impl Updater<'_> {
    /// Why a gate aborted an update that `outcome` ended, when the run rolls back on abort (the
    /// rollback reported as starting); `None` when the outcome stands as it is.
    pub(super) fn rolls_back(&self, outcome: &Result<(), UpdateError>) -> Option<String> {
        match outcome {
            Err(UpdateError::Aborted(reason)) if self.settings.rollback_on_abort => {
                let reason = reason.clone();
                (self.kernel.reporter).report(Event::RollingBackOnAbort {
                    reason: reason.clone(),
                });
                Some(reason)
            }
            _ => None,
        }
    }

    /// Reports a workload updated (or rolled back) in place, with no next controller.
    pub(super) fn report_updated_in_place(&self, controller: String, rollback: bool) {
        self.kernel.reporter.report(if rollback {
            Event::RolledBack { controller }
        } else {
            Event::UpdateDone {
                controller,
                next: None,
            }
        });
    }
}

/// The size a step takes when no hook is asked.
fn built_in(max: u32) -> BatchDecision {
    BatchDecision::Size {
        size: max,
        reason: "built-in".into(),
        by: DecidedBy::BuiltIn,
    }
}

/// Drives `machine` to its end against the cluster; `with_hooks` false for a rollback after an
/// abort, whose every answer is the built-in one.
pub(super) async fn drive<L: Live>(
    u: &mut Updater<'_>,
    live: &mut L,
    mut machine: L::Flow,
    with_hooks: bool,
) -> Result<(), UpdateError> {
    let mut input = Answer::Start;
    loop {
        let step: Step<_, _, _, _, _> = machine.step(input);
        input = match step {
            Step::Ask(Ask::Size(sizing)) if with_hooks => {
                u.timing.step_begins();
                u.kernel.tell(u.timing.told(true, machine.steps_left()));
                let sized = live.size(u, &sizing).await;
                // Told once, to the size question only.
                u.kernel.tell(Timing::default());
                Answer::Sized(sized?)
            }
            Step::Ask(Ask::Size(sizing)) => {
                u.timing.step_begins();
                Answer::Sized(built_in(sizing.max))
            }
            Step::Ask(Ask::Gate(gating)) => {
                u.step_done().await;
                let decision = match with_hooks {
                    true => {
                        u.kernel.tell(u.timing.told(false, machine.steps_left()));
                        let judged = live.gate(u, &gating).await;
                        u.kernel.tell(Timing::default());
                        judged?
                    }
                    false => GateDecision {
                        verdict: Verdict::Proceed,
                        by: DecidedBy::BuiltIn,
                    },
                };
                if decision.verdict == Verdict::Proceed {
                    live.passed(u, &gating);
                }
                Answer::Judged(decision)
            }
            Step::Ask(Ask::Own(ask)) => live.answer(u, ask, with_hooks).await?,
            Step::Do(Act::Wait(hold)) => {
                let reason = format!("{} [{}]", hold.reason, hold.decided_by);
                let seconds = Duration::from_secs(u64::from(hold.seconds));
                let began = tokio::time::Instant::now();
                u.kernel.hold(seconds, reason).await?;
                u.timing.held(began.elapsed());
                live.held();
                Answer::Done
            }
            Step::Do(Act::Own(act)) => {
                if let Some(at) = live.safe_point(&act) {
                    u.kernel.checkpoint(&at).await?;
                }
                live.act(u, act).await?
            }
            Step::Done(Outcome::Finished) => {
                live.finish(u).await?;
                u.update_done().await;
                return Ok(());
            }
            Step::Done(Outcome::Aborted {
                step,
                decided_by,
                reason,
                at,
            }) => {
                let why = live.aborted(step, &decided_by, &reason, at);
                return Err(UpdateError::Aborted(why));
            }
        };
    }
}
