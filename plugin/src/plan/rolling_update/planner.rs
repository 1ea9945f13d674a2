//! The dry-run plan of a rolling update: the planner drives the scale loop
//! ([`super::scale_loop`]) with simulated pods (every new pod available at once) and records the
//! scale operations, with the batching and gate hooks consulted at each step as a live run
//! consults them. Pure: controllers, pods and hook answers in, plan out. The executor
//! (`crate::workload::scale`) drives the same loop and shares its questions ([`super::asks`]).

use serde::Serialize;

use super::asks::{LoopState, ScaleGate, ask_scale_gate, group_info, step_amount};
use super::controller::{Controller, Kind};
use super::flow::{Gating, Sizing};
use super::planning::{self, Asked, Asking, Notes, Planned, StepDecisions};
use super::pods::PodInfo;
use super::scale_loop::{Action, Input, Question, ScaleLoop, Seen, Told};
use super::steps::Budgets;
use crate::plan::PLAN_API_VERSION;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed};
use crate::plan::estimate::StepEstimates;
use crate::plan::hook::{CallContext, Candidate, DecidedBy, Hook, Instances};
use crate::plan::shadow::{self, ShadowDecision};

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

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleStep {
    pub controller: Side,
    pub replicas: i32,
    #[serde(flatten)]
    pub decisions: StepDecisions,
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
    /// How long the update likely takes, and when it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<crate::plan::estimate::Estimate>,
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
    /// What the hooks are told of how long steps take.
    pub estimates: StepEstimates,
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
        estimate: None,
    })
}

/// The planner's side of the scale loop: the simulated controllers and what is recorded.
struct Simulation<'a> {
    input: &'a PlanInput<'a>,
    candidates: &'a Instances,
    old: i32,
    next: i32,
    steps: Vec<ScaleStep>,
    /// The batching hook's reason for the size of the step at hand.
    size_reason: String,
    stopped: Option<String>,
}

impl Planned for Simulation<'_> {
    type Flow = ScaleLoop;

    fn size(&mut self, asking: &mut Asking, sizing: &Sizing<Seen>) -> Asked<BatchDecision> {
        let state = &sizing.about.state;
        let group = group_info(self.input.old.name(), state, &self.input.budgets);
        let pending = self.candidates.window(0, state.old.max(0) as usize);
        let max = i32::try_from(sizing.max).unwrap_or(i32::MAX);
        let (hooks, ctx, warnings) = (&mut *asking.hooks, &asking.ctx, &mut *asking.warnings);
        let (decision, said) = step_amount(hooks, ctx, &group, state, pending, max, warnings)?;
        if let BatchDecision::Size { reason, .. } = &decision {
            self.size_reason = reason.clone();
        }
        Ok((decision, said))
    }

    fn gate(&mut self, asking: &mut Asking, gating: &Gating<Seen>) -> Asked<GateDecision> {
        let name = controller_name(self.input, gating.about.side);
        let state = &gating.about.state;
        let (hooks, ctx, warnings) = (&mut *asking.hooks, &asking.ctx, &mut *asking.warnings);
        let asked = ScaleGate {
            controller: name,
            state,
            pods_not_ready: 0,
            attempt: gating.attempt,
        };
        ask_scale_gate(asked, hooks, ctx, warnings)
    }

    fn answer(&mut self, _: &mut Asking, ask: Question) -> Asked<Input> {
        let told = match ask {
            Question::Observe => Told::Observed(LoopState {
                old: self.old,
                next: self.next,
                next_available: self.next,
                desired: self.input.desired,
                steps_done: 0,
            }),
            // The old pods' order was asked once, before the loop.
            Question::Order { .. } => Told::Ordered,
        };
        Ok((Input::Own(told), Vec::new()))
    }

    fn act(&mut self, act: Action, notes: Notes) -> Option<Input> {
        // Each step changes one side, so this bounds a plan that could not end.
        let limit = 4 * (self.input.old.replicas().max(0) + self.input.desired.max(0)) as usize + 8;
        if self.steps.len() >= limit {
            return None;
        }
        let Action::Scale {
            side,
            replicas,
            decided_by,
            ..
        } = act
        else {
            return Some(Input::Done);
        };
        match side {
            Side::Next => self.next = replicas,
            Side::Old => self.old = replicas,
        }
        self.steps.push(ScaleStep {
            controller: side,
            replicas,
            decisions: notes.decisions(decided_by, self.size_reason.clone()),
        });
        Some(Input::Own(Told::Scaled(replicas)))
    }

    fn last_step(&mut self) -> Option<&mut StepDecisions> {
        self.steps.last_mut().map(|s| &mut s.decisions)
    }

    fn stopped(&mut self, _: u32, decided_by: DecidedBy, reason: String, at: Seen) {
        let name = controller_name(self.input, at.side);
        let replicas = match at.side {
            Side::Next => at.state.next,
            Side::Old => at.state.old,
        };
        self.stopped = Some(format!(
            "{decided_by} aborts after scaling {name} to {replicas}: {reason}"
        ));
    }
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
        candidates,
        old: input.old.replicas(),
        next: input.next_replicas,
        steps: Vec::new(),
        size_reason: String::new(),
        stopped: None,
    };
    let machine = ScaleLoop::new(input.budgets, input.desired);
    let mut asking = Asking {
        hooks,
        ctx,
        estimates: input.estimates.clone(),
        warnings,
    };
    planning::plan(&mut sim, machine, &mut asking)?;
    Ok((sim.steps, sim.stopped))
}

fn controller_name<'a>(input: &'a PlanInput, side: Side) -> &'a str {
    match side {
        Side::Next => input.next_name.as_str(),
        Side::Old => input.old.name(),
    }
}

#[cfg(test)]
mod tests;
