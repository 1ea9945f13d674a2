//! The plan of a DaemonSet's node-by-node update: the node machine driven with simulated pods
//! (every new pod Ready at once), the hooks asked as a live run asks them, once per step. A
//! gate's wait is assumed to clear; an abort stops the plan there; pauses move the simulated
//! clock, up to a week. `ask_size` and `ask_order` serve the live run too.

use serde::Serialize;

use super::node_loop::{Action, Input, NodeLoop, Outcome, Question, Step};
use super::partition_planner::{as_planned, ask_gate};
use crate::plan::decide::{self, BatchDecision, HookFailed};
use crate::plan::hook::{BatchInfo, CallContext, Candidate, DecidedBy, GroupInfo, Hook, Instances};
use crate::plan::hook::{Phase, Progress};
use crate::plan::shadow::{self, ShadowDecision};
use crate::plan::{GateStep, PauseStep, Role, SimulatedPauses};

/// The plan JSON: `{"kind": "RollingUpdatePlan", "target": {...}, "steps": [{"nodes"}, ...]}`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePlan {
    pub kind: &'static str,
    pub target: Target,
    pub steps: Vec<NodeStep>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub kind: &'static str,
    pub name: String,
    /// Nodes running an old pod: each is in exactly one step.
    pub nodes: usize,
}

/// One step: the nodes whose old pod it replaces, in the order they were chosen.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStep {
    pub nodes: Vec<String>,
    pub decided_by: DecidedBy,
    pub ordered_by: DecidedBy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowDecision>,
}

/// What the plan is made from.
pub struct NodeInput<'a> {
    pub name: &'a str,
    /// The nodes running an old pod, as candidates, in the built-in order.
    pub candidates: &'a [Candidate],
    /// The nodes an update that resumes replaced already (awaited and gated first).
    pub updated: Vec<String>,
    pub max_unavailable: u32,
    pub ctx: CallContext,
}

/// The DaemonSet `name` as a group: its nodes to update, done so far, the budget.
fn group(name: &str, total: usize, done: usize, pending: usize, max: u32) -> GroupInfo {
    GroupInfo {
        name: name.to_string(),
        role: Role::Node,
        size: total as u32,
        up_to_date: done as u32,
        selected: pending as u32,
        max_surge: 0,
        max_unavailable: max,
    }
}

/// Where the update stands when a question is asked.
pub struct Stand<'a> {
    pub name: &'a str,
    /// Nodes the update started with.
    pub total: usize,
    pub max_unavailable: u32,
    pub steps_done: u32,
}

/// The size of the next step, at most `max`: built in, or what the batching hooks say, offered
/// the nodes left (`pending`, at most `max` of them).
pub fn ask_size(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    at: &Stand,
    pending: &[Candidate],
    max: u32,
    warnings: &mut Vec<String>,
) -> Result<(BatchDecision, Vec<ShadowDecision>), HookFailed> {
    let done = at.total.saturating_sub(pending.len());
    let group = group(at.name, at.total, done, pending.len(), at.max_unavailable);
    let progress = Progress {
        group: &group,
        batches_done: at.steps_done,
        updated: done as u32,
        pending: Instances::from(pending.to_vec()).window(0, max as usize),
        max_batch: max,
        max_batch_reason: format!("the DaemonSet's maxUnavailable of {}", at.max_unavailable),
    };
    let decision = decide::batch_size(hooks, ctx, &progress, warnings)?;
    let said = shadow::batch_size(hooks, ctx, &progress, &decision);
    Ok((decision, said))
}

/// The order of the nodes left: the built-in one (by name), or the selection hooks'.
pub fn ask_order(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    at: &Stand,
    pending: &[Candidate],
    warnings: &mut Vec<String>,
) -> Result<(Vec<String>, DecidedBy, Vec<ShadowDecision>), HookFailed> {
    let done = at.total.saturating_sub(pending.len());
    let group = group(at.name, at.total, done, pending.len(), at.max_unavailable);
    let selected = decide::select(hooks, ctx, &group, pending, warnings)?;
    let said = shadow::select(hooks, ctx, &group, pending, &selected);
    let order = selected
        .chosen
        .iter()
        .map(|c| pending[c.index].name.clone())
        .collect();
    Ok((order, selected.by, said))
}

/// The candidates named by `names`, in that order.
pub fn in_order(candidates: &[Candidate], names: &[String]) -> Vec<Candidate> {
    names
        .iter()
        .filter_map(|n| candidates.iter().find(|c| &c.name == n).cloned())
        .collect()
}

/// Plans the update `input` describes with `hooks`.
pub fn plan(input: &NodeInput, hooks: &mut [Box<dyn Hook>]) -> Result<NodePlan, HookFailed> {
    let mut plan = NodePlan {
        kind: "RollingUpdatePlan",
        target: Target {
            kind: "DaemonSet",
            name: input.name.to_string(),
            nodes: input.candidates.len(),
        },
        steps: Vec::new(),
        warnings: Vec::new(),
        stopped: None,
    };
    let names = input.candidates.iter().map(|c| c.name.clone()).collect();
    let mut machine = NodeLoop::new(names, input.updated.clone(), input.max_unavailable);
    let mut ctx = input.ctx.clone();
    let mut pauses = SimulatedPauses::default();
    let mut said = Vec::new();
    let mut sized_by = DecidedBy::BuiltIn;
    let mut steps_done = 0;
    let mut step = machine.step(Input::Start);
    loop {
        let at = Stand {
            name: input.name,
            total: input.candidates.len(),
            max_unavailable: input.max_unavailable,
            steps_done,
        };
        let answer = match step {
            Step::Ask(Question::StepSize { max, pending, .. }) => {
                let pending = in_order(input.candidates, &pending);
                let (decision, shadow) =
                    ask_size(hooks, &ctx, &at, &pending, max, &mut plan.warnings)?;
                said.extend(shadow);
                sized_by = decision.by().clone();
                Input::Sized(decision)
            }
            Step::Ask(Question::Order { pending }) => {
                let pending = in_order(input.candidates, &pending);
                let (order, by, shadow) =
                    ask_order(hooks, &ctx, &at, &pending, &mut plan.warnings)?;
                said.extend(shadow);
                Input::Ordered(order, by)
            }
            Step::Do(Action::Wait {
                seconds,
                reason,
                decided_by,
            }) => {
                // Only a pause comes here in a plan: a gate's wait is assumed to clear.
                if !pauses.add(&mut ctx, seconds, reason, decided_by, &mut plan.warnings) {
                    return Ok(plan);
                }
                Input::Done
            }
            Step::Do(Action::Replace {
                nodes,
                size_reason,
                ordered_by,
                ..
            }) => {
                let by_hook = sized_by != DecidedBy::BuiltIn;
                plan.steps.push(NodeStep {
                    nodes,
                    decided_by: sized_by.clone(),
                    ordered_by,
                    size_reason: by_hook.then_some(size_reason),
                    pause: pauses.pending.take(),
                    gate: None,
                    shadow: std::mem::take(&mut said),
                });
                Input::Done
            }
            Step::Do(Action::AwaitReplaced { .. }) => Input::Done,
            Step::Ask(Question::Gate {
                step,
                nodes,
                attempt,
            }) => {
                let batch = BatchInfo {
                    index: step,
                    instances: nodes,
                    canary: false,
                    attempt,
                };
                let total = i32::try_from(input.candidates.len()).unwrap_or(i32::MAX);
                let (decision, shadow) =
                    ask_gate(hooks, &ctx, &batch, total, 0, &mut plan.warnings)?;
                if let Some(last) = plan.steps.last_mut() {
                    last.gate = GateStep::from_decision(Phase::AfterBatch, decision.clone());
                    last.shadow.extend(shadow);
                }
                steps_done = step + 1;
                Input::Judged(as_planned(decision))
            }
            Step::Done(Outcome::Finished) => return Ok(plan),
            Step::Done(Outcome::Aborted {
                left,
                decided_by,
                reason,
                ..
            }) => {
                plan.stopped = Some(format!(
                    "{decided_by} stops the update with {left} nodes left: {reason}"
                ));
                return Ok(plan);
            }
        };
        step = machine.step(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::rolling_update::daemon_set::node_candidate;

    #[test]
    fn each_node_is_in_exactly_one_step_in_the_selection_order() {
        use crate::plan::decide::tests::FakeHook;
        use crate::plan::hook::{Choice, SelectAnswer};
        use crate::policy::HookPoint;
        let candidates: Vec<Candidate> = ["n1", "n2", "n3", "n4", "n5"]
            .iter()
            .map(|n| node_candidate(None, n, "agent", true))
            .collect();
        let input = NodeInput {
            name: "agent",
            candidates: &candidates,
            updated: Vec::new(),
            max_unavailable: 2,
            ctx: CallContext {
                now: 0,
                run_id: "plan".into(),
                dry_run: true,
            },
        };
        let built_in = plan(&input, &mut []).unwrap();
        let steps: Vec<Vec<String>> = built_in.steps.iter().map(|s| s.nodes.clone()).collect();
        assert_eq!(steps, [vec!["n1", "n2"], vec!["n3", "n4"], vec!["n5"]]);

        let mut reverse = FakeHook::new("reverse", &[HookPoint::Select]);
        reverse.select = Box::new(|candidates| {
            Ok(SelectAnswer::Choose(
                candidates
                    .iter()
                    .rev()
                    .map(|c| Choice {
                        name: c.name.clone(),
                        reason: "last first".into(),
                        force: false,
                    })
                    .collect(),
            ))
        });
        let mut hooks = vec![reverse.boxed()];
        let ordered = plan(&input, &mut hooks).unwrap();
        let steps: Vec<Vec<String>> = ordered.steps.iter().map(|s| s.nodes.clone()).collect();
        assert_eq!(steps, [vec!["n5", "n4"], vec!["n3", "n2"], vec!["n1"]]);
        assert_eq!(
            ordered.steps[0].ordered_by,
            DecidedBy::Hook("reverse".into())
        );
        let json = serde_json::to_value(&ordered).unwrap();
        assert_eq!(
            json["target"],
            serde_json::json!({"kind": "DaemonSet", "name": "agent", "nodes": 5})
        );
    }
}
