//! The dry-run plan of a rolling update: the planner drives the scale loop
//! ([`super::scale_loop`]) with simulated pods (every new pod available at once) and records the
//! scale operations, with the batching and gate hooks consulted at each step as a live run
//! consults them. Pure: controllers, pods and hook answers in, plan out. The executor
//! (`crate::workload::scale`) drives the same loop and shares [`step_amount`] and [`gate_after`].

use serde::Serialize;

use super::controller::{Controller, Kind};
use super::pods::PodInfo;
use super::scale_loop::{Action, Held, Input, Question, ScaleLoop, Step};
use super::steps::Budgets;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed, Verdict};
use crate::plan::hook::{
    BatchInfo, CallContext, Candidate, DecidedBy, GroupInfo, HealthSummary, Hook, Instances, Phase,
    Progress,
};
use crate::plan::shadow::{self, ShadowDecision};
use crate::plan::{GateStep, PLAN_API_VERSION, PauseStep, Role, SimulatedPauses};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Old,
    Next,
}

/// What happens once the next controller is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cleanup {
    /// One-name form: the next controller takes the old one's name.
    Rename,
    /// Two-name form (and rollback): the old controller is deleted, the next keeps its name.
    DeleteOld,
}

impl Cleanup {
    /// The two-name form (NEXT given) keeps NEXT and deletes the old controller; the one-name
    /// form renames.
    pub fn for_next(given: bool) -> Cleanup {
        if given {
            Cleanup::DeleteOld
        } else {
            Cleanup::Rename
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct OldSide {
    pub kind: Kind,
    pub name: String,
    pub replicas: i32,
}

#[derive(Debug, Clone, Serialize)]
pub struct NextSide {
    pub name: String,
    pub replicas: i32,
    pub desired: i32,
    pub exists: bool,
}

fn is_built_in(by: &DecidedBy) -> bool {
    *by == DecidedBy::BuiltIn
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleStep {
    pub controller: Side,
    pub replicas: i32,
    #[serde(skip_serializing_if = "is_built_in")]
    pub decided_by: DecidedBy,
    /// The batching hook's reason for the step's size, when a hook sized it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
    /// What shadow hooks would decide about the step's size and the gate after it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowDecision>,
}

/// The order in which the selection hook wants the old pods removed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionOrder {
    pub pods: Vec<String>,
    pub decided_by: DecidedBy,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdatePlan {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub old: OldSide,
    pub next: NextSide,
    pub max_surge: i32,
    pub max_unavailable: i32,
    pub steps: Vec<ScaleStep>,
    pub cleanup: Cleanup,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_order: Option<DeletionOrder>,
    /// What shadow hooks would decide about the old pods' order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowDecision>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Set when a gate would stop the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// Where the loop stands, as the hooks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopState {
    pub old: i32,
    pub next: i32,
    pub next_available: i32,
    pub desired: i32,
    pub steps_done: u32,
}

/// The controller pair as a "group" for the hooks: size is the desired count, up to date the
/// next controller's replicas, selected the old one's.
pub fn group_info(name: &str, state: &LoopState, budgets: &Budgets) -> GroupInfo {
    GroupInfo {
        name: name.to_string(),
        role: Role::Node,
        size: state.desired.max(0) as u32,
        up_to_date: state.next.max(0) as u32,
        selected: state.old.max(0) as u32,
        max_surge: budgets.max_surge.max(0) as u32,
        max_unavailable: budgets.max_unavailable.max(0) as u32,
    }
}

/// The size of one scale step: the built-in amount, or less if a batching hook says so; and
/// what shadow hooks would say.
pub fn step_amount(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    group: &GroupInfo,
    state: &LoopState,
    pending: Instances,
    built_in: i32,
    warnings: &mut Vec<String>,
) -> Result<(BatchDecision, Vec<ShadowDecision>), HookFailed> {
    let progress = Progress {
        group,
        batches_done: state.steps_done,
        updated: state.next_available.max(0) as u32,
        pending,
        max_batch: built_in.max(0) as u32,
        max_batch_reason: format!(
            "the rolling update's step of {built_in} (maxSurge {}, maxUnavailable {})",
            group.max_surge, group.max_unavailable
        ),
    };
    let decision = decide::batch_size(hooks, ctx, &progress, warnings)?;
    let said = shadow::batch_size(hooks, ctx, &progress, &decision);
    Ok((decision, said))
}

/// The gates' verdict after a scale step of `controller`, and what shadow gates would say.
#[allow(clippy::too_many_arguments)]
pub fn gate_after(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    controller: &str,
    state: &LoopState,
    pods_not_ready: u32,
    attempt: u32,
    warnings: &mut Vec<String>,
) -> Result<(GateDecision, Vec<ShadowDecision>), HookFailed> {
    let batch = BatchInfo {
        index: state.steps_done.saturating_sub(1),
        instances: vec![controller.to_string()],
        canary: false,
        attempt,
    };
    let summary = HealthSummary {
        pods_total: (state.old.max(0) + state.next.max(0)) as u32,
        pods_not_ready,
        ..Default::default()
    };
    let decision = decide::gate(hooks, ctx, Phase::AfterBatch, &batch, &summary, warnings)?;
    let said = shadow::gate(hooks, ctx, Phase::AfterBatch, &batch, &summary, &decision);
    Ok((decision, said))
}

/// Everything the plan is made from.
pub struct PlanInput<'a> {
    pub old: &'a Controller,
    pub old_pods: &'a [PodInfo],
    pub next_name: String,
    pub next_replicas: i32,
    pub next_exists: bool,
    pub desired: i32,
    pub budgets: Budgets,
    pub cleanup: Cleanup,
    pub ctx: CallContext,
}

/// Plans the scale steps, asking the hooks as a live run would.
pub fn plan(
    input: &PlanInput,
    hooks: &mut [Box<dyn Hook>],
) -> Result<RollingUpdatePlan, HookFailed> {
    let mut warnings = decide::left_out_warnings(hooks);
    let ctx = input.ctx.clone();
    let owned = super::pods::owned_by(input.old_pods, input.old.uid());
    let candidates = Instances::from(
        owned
            .iter()
            .map(|p| p.candidate(input.old.name()))
            .collect::<Vec<Candidate>>(),
    );
    let state = LoopState {
        old: input.old.replicas(),
        next: input.next_replicas,
        next_available: input.next_replicas,
        desired: input.desired,
        steps_done: 0,
    };
    let budgets = input.budgets;
    let mut said = Vec::new();
    let deletion_order = if candidates.is_empty() {
        None
    } else {
        let group = group_info(input.old.name(), &state, &budgets);
        let selected = decide::select(hooks, &ctx, &group, &candidates, &mut warnings)?;
        said = shadow::select(hooks, &ctx, &group, &candidates, &selected);
        (selected.by != DecidedBy::BuiltIn).then(|| DeletionOrder {
            pods: selected
                .chosen
                .iter()
                .map(|c| candidates[c.index].name.clone())
                .collect(),
            decided_by: selected.by,
        })
    };

    let (plan_steps, stopped) = simulate(input, hooks, &candidates, ctx, &mut warnings)?;
    Ok(RollingUpdatePlan {
        api_version: PLAN_API_VERSION,
        kind: "RollingUpdatePlan",
        old: OldSide {
            kind: input.old.kind,
            name: input.old.name().to_string(),
            replicas: input.old.replicas(),
        },
        next: NextSide {
            name: input.next_name.clone(),
            replicas: input.next_replicas,
            desired: input.desired,
            exists: input.next_exists,
        },
        max_surge: budgets.max_surge,
        max_unavailable: budgets.max_unavailable,
        steps: plan_steps,
        cleanup: input.cleanup,
        deletion_order,
        shadow: said,
        warnings,
        stopped,
    })
}

/// The planner's side of the scale loop: the simulated controllers and what is recorded.
struct Simulation<'a> {
    input: &'a PlanInput<'a>,
    ctx: CallContext,
    old: i32,
    next: i32,
    steps: Vec<ScaleStep>,
    /// Pauses asked for before the next step, and how long the loop paused in all.
    pauses: SimulatedPauses,
    sized_by: DecidedBy,
    size_reason: String,
    /// What shadow hooks said about the next step.
    shadow: Vec<ShadowDecision>,
}

/// Drives the scale loop with simulated pods (every new pod available at once) and the hooks'
/// real answers; returns the steps and, when a gate stops the loop, why. A gate's wait is shown
/// and assumed to clear; the old pods' order is the one asked for once, before the loop.
fn simulate(
    input: &PlanInput,
    hooks: &mut [Box<dyn Hook>],
    candidates: &Instances,
    ctx: CallContext,
    warnings: &mut Vec<String>,
) -> Result<(Vec<ScaleStep>, Option<String>), HookFailed> {
    let mut sim = Simulation {
        input,
        ctx,
        old: input.old.replicas(),
        next: input.next_replicas,
        steps: Vec::new(),
        pauses: SimulatedPauses::default(),
        sized_by: DecidedBy::BuiltIn,
        size_reason: String::new(),
        shadow: Vec::new(),
    };
    let mut machine = ScaleLoop::new(input.budgets, input.desired);
    // Each step changes one side, so this bounds a plan that could not end.
    let limit = 4 * (sim.old.max(0) + input.desired.max(0)) as usize + 8;
    let mut step_input = Input::Start;
    while sim.steps.len() < limit {
        step_input = match machine.step(step_input) {
            Step::Ask(Question::Observe) => Input::Observed(LoopState {
                old: sim.old,
                next: sim.next,
                next_available: sim.next,
                desired: input.desired,
                steps_done: 0,
            }),
            Step::Ask(Question::StepSize { state, max, .. }) => {
                let group = group_info(input.old.name(), &state, &input.budgets);
                let pending = candidates.window(0, state.old.max(0) as usize);
                let (decision, said) =
                    step_amount(hooks, &sim.ctx, &group, &state, pending, max, warnings)?;
                sim.shadow.extend(said);
                if let BatchDecision::Size { by, reason, .. } = &decision {
                    sim.sized_by = by.clone();
                    sim.size_reason = reason.clone();
                }
                Input::Sized(decision)
            }
            Step::Ask(Question::Order { .. }) => Input::Ordered,
            Step::Ask(Question::Gate {
                side,
                state,
                attempt,
                ..
            }) => match sim.gate(hooks, side, &state, attempt, warnings)? {
                Ok(decision) => Input::Judged(decision),
                Err(stopped) => return Ok((sim.steps, Some(stopped))),
            },
            Step::Do(Action::Scale { side, replicas, .. }) => {
                match side {
                    Side::Next => sim.next = replicas,
                    Side::Old => sim.old = replicas,
                }
                Input::Scaled(replicas)
            }
            Step::Do(Action::Wait {
                seconds,
                reason,
                decided_by,
                held_by: Held::Pause,
            }) => {
                if !sim.pause_for(seconds, reason, decided_by, warnings) {
                    return Ok((sim.steps, None));
                }
                Input::Done
            }
            // A gate's wait is shown with its verdict.
            Step::Do(_) => Input::Done,
            Step::Done(_) => return Ok((sim.steps, None)),
        };
    }
    Ok((sim.steps, None))
}

impl Simulation<'_> {
    /// The gate's first answer after a step is asked and recorded with the step; a wait is
    /// assumed to clear. `Err` carries why an abort stops the plan.
    fn gate(
        &mut self,
        hooks: &mut [Box<dyn Hook>],
        side: Side,
        state: &LoopState,
        attempt: u32,
        warnings: &mut Vec<String>,
    ) -> Result<Result<GateDecision, String>, HookFailed> {
        if attempt > 0 {
            return Ok(Ok(GateDecision {
                verdict: Verdict::Proceed,
                by: DecidedBy::BuiltIn,
            }));
        }
        let name = controller_name(self.input, side);
        let (gate, said) = gate_after(hooks, &self.ctx, name, state, 0, 0, warnings)?;
        self.shadow.extend(said);
        let replicas = match side {
            Side::Next => state.next,
            Side::Old => state.old,
        };
        self.steps.push(ScaleStep {
            controller: side,
            replicas,
            decided_by: self.sized_by.clone(),
            size_reason: (self.sized_by != DecidedBy::BuiltIn).then(|| self.size_reason.clone()),
            pause: self.pauses.pending.take(),
            gate: GateStep::from_decision(Phase::AfterBatch, gate.clone()),
            shadow: std::mem::take(&mut self.shadow),
        });
        if let Verdict::Abort(reason) = &gate.verdict {
            let by = &gate.by;
            return Ok(Err(format!(
                "{by} aborts after scaling {name} to {replicas}: {reason}"
            )));
        }
        Ok(Ok(gate))
    }

    /// Moves the simulated clock on by a pause; false once the pauses pass a week.
    fn pause_for(
        &mut self,
        seconds: u32,
        reason: String,
        by: DecidedBy,
        warnings: &mut Vec<String>,
    ) -> bool {
        self.pauses
            .add(&mut self.ctx, seconds, reason, by, warnings)
    }
}

fn controller_name<'a>(input: &'a PlanInput, side: Side) -> &'a str {
    match side {
        Side::Next => input.next_name.as_str(),
        Side::Old => input.old.name(),
    }
}

#[cfg(test)]
mod tests;
