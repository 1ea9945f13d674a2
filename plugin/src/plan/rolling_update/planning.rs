//! The planner loop every workload flow shares: it drives a flow's machine with simulated
//! outcomes (each action succeeds, every new pod is Ready at once) and the hooks' real answers,
//! asked as a live run asks them, once per step. A batching hook's pause moves the simulated
//! clock (up to a week); a gate's wait is shown and assumed to clear; an abort stops the plan
//! there. What each flow's steps are and how its questions are put to the hooks is the flow's
//! ([`Planned`]).

use serde::Serialize;

use super::flow::{Act, Answer, Ask, Flow, Gating, Held, Outcome, Sizing, Step};
use crate::plan::decide::{BatchDecision, GateDecision, HookFailed, Verdict};
use crate::plan::estimate::StepEstimates;
use crate::plan::hook::{CallContext, DecidedBy, Hook, Phase, Timing};
use crate::plan::shadow::ShadowDecision;
use crate::plan::{GateStep, PauseStep, SimulatedPauses};

pub use super::asks::Asked;

/// What a recorded step carries besides the flow's own: the pause held before it and what
/// shadow hooks said about its size.
#[derive(Debug, Default)]
pub struct Notes {
    pub pause: Option<PauseStep>,
    pub shadow: Vec<ShadowDecision>,
}

impl Notes {
    /// The decisions about a step sized by `by` (for `reason`, kept when a hook gave it).
    pub fn decisions(self, by: DecidedBy, reason: String) -> StepDecisions {
        let by_hook = by != DecidedBy::BuiltIn;
        StepDecisions {
            size_reason: by_hook.then_some(reason),
            decided_by: by,
            pause: self.pause,
            gate: None,
            shadow: self.shadow,
            estimate: None,
        }
    }
}

/// What the hooks decided about a recorded step, alike in every flow's plan: who sized it (and
/// why, when a hook did), the pause held before it, the gates' verdict after it, and what
/// shadow hooks would have said.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepDecisions {
    pub decided_by: DecidedBy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowDecision>,
    /// How long the step likely takes (with what the plan foresees before it), and when it
    /// ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<crate::plan::estimate::Estimate>,
}

/// The plan of a workload updated in place (a StatefulSet's partitions, a DaemonSet's nodes):
/// `{"kind": "RollingUpdatePlan", "target": {...}, "steps": [...]}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlacePlan<T, S> {
    pub kind: &'static str,
    pub target: T,
    pub steps: Vec<S>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A StatefulSet's: set when the ordinals below this one are on the new revision already,
    /// so that the partition drops to 0 after the last step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settle: Option<i32>,
    /// Set when a gate would stop the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// How long the update likely takes, and when it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<crate::plan::estimate::Estimate>,
}

impl<T, S> InPlacePlan<T, S> {
    /// A plan of `target` with no step yet.
    pub fn new(target: T) -> Self {
        InPlacePlan {
            kind: "RollingUpdatePlan",
            target,
            steps: Vec::new(),
            warnings: Vec::new(),
            settle: None,
            stopped: None,
            estimate: None,
        }
    }
}

/// Plans with `hooks`, asked in `ctx` and told `estimates`, what `machine` does, as
/// `planned` records it; the plan's warnings.
pub fn plan_in_place<P: Planned>(
    planned: &mut P,
    machine: P::Flow,
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    estimates: &StepEstimates,
) -> Result<Vec<String>, HookFailed> {
    let mut warnings = Vec::new();
    let mut asking = Asking {
        hooks,
        ctx: ctx.clone(),
        estimates: estimates.clone(),
        warnings: &mut warnings,
    };
    plan(planned, machine, &mut asking)?;
    Ok(warnings)
}

/// The hooks, the context of the calls (its clock simulated), what they are told of how long
/// steps take, and the plan's warnings.
pub struct Asking<'a> {
    pub hooks: &'a mut [Box<dyn Hook>],
    pub ctx: CallContext,
    pub estimates: StepEstimates,
    pub warnings: &'a mut Vec<String>,
}

impl Asking<'_> {
    /// The next question's hooks are told the estimates of the steps left (and of the step
    /// `sizing`, when it is one).
    fn tell(&mut self, sizing: bool, steps_left: u32) {
        let now = self.ctx.now;
        self.ctx.timing = self.estimates.timing(sizing, steps_left, now);
    }
}

/// A flow as its plan records it.
pub trait Planned {
    type Flow: Flow;

    /// The size the hooks give a step.
    fn size(
        &mut self,
        asking: &mut Asking,
        sizing: &Sizing<<Self::Flow as Flow>::Sizing>,
    ) -> Asked<BatchDecision>;

    /// The gates' verdict after a step.
    fn gate(
        &mut self,
        asking: &mut Asking,
        gating: &Gating<<Self::Flow as Flow>::Gating>,
    ) -> Asked<GateDecision>;

    /// The answer to a question of the flow's own.
    fn answer(
        &mut self,
        asking: &mut Asking,
        ask: <Self::Flow as Flow>::Ask,
    ) -> Asked<Answer<<Self::Flow as Flow>::Answer>>;

    /// Plays an action of the flow's own in the simulation (a step done is recorded with
    /// `notes`); what the flow is told, or `None` when the plan cannot go on.
    fn act(
        &mut self,
        act: <Self::Flow as Flow>::Act,
        notes: Notes,
    ) -> Option<Answer<<Self::Flow as Flow>::Answer>>;

    /// The decisions about the last step recorded, where the gates' verdict after it goes.
    fn last_step(&mut self) -> Option<&mut StepDecisions>;

    /// A gate aborts after `step`, leaving things `at`.
    fn stopped(
        &mut self,
        step: u32,
        decided_by: DecidedBy,
        reason: String,
        at: <Self::Flow as Flow>::Stop,
    );
}

/// A gate's verdict as a plan goes on with it: a wait is assumed to clear.
pub fn as_planned(decision: GateDecision) -> GateDecision {
    match decision.verdict {
        Verdict::Wait { .. } => GateDecision {
            verdict: Verdict::Proceed,
            by: DecidedBy::BuiltIn,
        },
        _ => decision,
    }
}

/// Drives `machine` to its end with `planned`'s simulation and the hooks of `asking`.
pub fn plan<P: Planned>(
    planned: &mut P,
    mut machine: P::Flow,
    asking: &mut Asking,
) -> Result<(), HookFailed> {
    let mut pauses = SimulatedPauses::default();
    let mut shadow = Vec::new();
    let mut input = Answer::Start;
    loop {
        let step: Step<_, _, _, _, _> = machine.step(input);
        input = match step {
            Step::Ask(Ask::Size(sizing)) => {
                asking.tell(true, machine.steps_left());
                let (decision, said) = planned.size(asking, &sizing)?;
                asking.ctx.timing = Timing::default();
                shadow.extend(said);
                Answer::Sized(decision)
            }
            Step::Ask(Ask::Gate(gating)) => {
                // The step just done took its estimate, as a run's would.
                if gating.attempt == 0 {
                    asking.ctx.now += asking.estimates.step_seconds();
                }
                asking.tell(false, machine.steps_left());
                let (decision, said) = planned.gate(asking, &gating)?;
                asking.ctx.timing = Timing::default();
                if let Some(last) = planned.last_step() {
                    last.gate = GateStep::from_decision(Phase::AfterBatch, decision.clone());
                    last.shadow.extend(said);
                }
                Answer::Judged(as_planned(decision))
            }
            Step::Ask(Ask::Own(ask)) => {
                let (answer, said) = planned.answer(asking, ask)?;
                shadow.extend(said);
                answer
            }
            Step::Do(Act::Wait(hold)) => {
                // Only a pause comes here: a gate's wait is assumed to clear.
                debug_assert_eq!(hold.held_by, Held::Pause);
                let (ctx, warnings) = (&mut asking.ctx, &mut *asking.warnings);
                let (seconds, reason, by) = (hold.seconds, hold.reason, hold.decided_by);
                if !pauses.add(ctx, seconds, reason, by, warnings) {
                    return Ok(());
                }
                Answer::Done
            }
            Step::Do(Act::Own(act)) => {
                let notes = Notes {
                    pause: pauses.pending.take(),
                    shadow: std::mem::take(&mut shadow),
                };
                match planned.act(act, notes) {
                    Some(answer) => answer,
                    None => return Ok(()),
                }
            }
            Step::Done(Outcome::Finished) => return Ok(()),
            Step::Done(Outcome::Aborted {
                step,
                decided_by,
                reason,
                at,
            }) => {
                planned.stopped(step, decided_by, reason, at);
                return Ok(());
            }
        };
    }
}
