//! The plan of a DaemonSet's node-by-node update: the node machine driven by the planner loop
//! every workload flow shares ([`super::planning`]), with simulated pods (every new pod Ready at
//! once). `ask_size` and `ask_order` serve the live run too.

use serde::Serialize;

use super::asks::{NodesAt, ask_gate, ask_node_size, ask_order, in_order, node_batch};
use super::flow::{Gating, Sizing};
use super::node_loop::{Action, Input, NodeLoop, Question};
use super::planning::{self, Asked, Asking, InPlacePlan, Notes, Planned, StepDecisions};
use crate::plan::decide::{BatchDecision, GateDecision, HookFailed};
use crate::plan::estimate::StepEstimates;
use crate::plan::hook::{CallContext, Candidate, DecidedBy, Hook};

/// The plan JSON: `{"kind": "RollingUpdatePlan", "target": {...}, "steps": [{"nodes"}, ...]}`.
pub type NodePlan = InPlacePlan<Target, NodeStep>;

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
    pub ordered_by: DecidedBy,
    #[serde(flatten)]
    pub decisions: StepDecisions,
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
    /// What the hooks are told of how long steps take.
    pub estimates: StepEstimates,
}

/// The node machine as its plan records it.
struct Recording<'a> {
    input: &'a NodeInput<'a>,
    plan: NodePlan,
    steps_done: u32,
}

impl Recording<'_> {
    fn at(&self) -> NodesAt<'_> {
        NodesAt {
            name: self.input.name,
            total: self.input.candidates.len(),
            max_unavailable: self.input.max_unavailable,
            steps_done: self.steps_done,
        }
    }
}

impl Planned for Recording<'_> {
    type Flow = NodeLoop;

    fn size(&mut self, asking: &mut Asking, sizing: &Sizing<Vec<String>>) -> Asked<BatchDecision> {
        let pending = in_order(self.input.candidates, &sizing.about);
        let (hooks, ctx, warnings) = (&mut *asking.hooks, &asking.ctx, &mut *asking.warnings);
        ask_node_size(hooks, ctx, &self.at(), &pending, sizing.max, warnings)
    }

    fn gate(&mut self, asking: &mut Asking, gating: &Gating<Vec<String>>) -> Asked<GateDecision> {
        let batch = node_batch(gating);
        self.steps_done = gating.step + 1;
        let total = i32::try_from(self.input.candidates.len()).unwrap_or(i32::MAX);
        ask_gate(asking.hooks, &asking.ctx, &batch, total, 0, asking.warnings)
    }

    fn answer(&mut self, asking: &mut Asking, ask: Question) -> Asked<Input> {
        let Question::Order { pending } = ask;
        let pending = in_order(self.input.candidates, &pending);
        let (hooks, ctx, warnings) = (&mut *asking.hooks, &asking.ctx, &mut *asking.warnings);
        let (ordered, said) = ask_order(hooks, ctx, &self.at(), &pending, warnings)?;
        Ok((Input::Own(ordered), said))
    }

    fn act(&mut self, act: Action, notes: Notes) -> Option<Input> {
        if let Action::Replace {
            nodes,
            sized_by,
            size_reason,
            ordered_by,
            ..
        } = act
        {
            self.plan.steps.push(NodeStep {
                nodes,
                ordered_by,
                decisions: notes.decisions(sized_by, size_reason),
            });
        }
        Some(Input::Done)
    }

    fn last_step(&mut self) -> Option<&mut StepDecisions> {
        self.plan.steps.last_mut().map(|s| &mut s.decisions)
    }

    fn stopped(&mut self, _: u32, decided_by: DecidedBy, reason: String, left: usize) {
        self.plan.stopped = Some(format!(
            "{decided_by} stops the update with {left} nodes left: {reason}"
        ));
    }
}

/// Plans the update `input` describes with `hooks`.
pub fn plan(input: &NodeInput, hooks: &mut [Box<dyn Hook>]) -> Result<NodePlan, HookFailed> {
    let names = input.candidates.iter().map(|c| c.name.clone()).collect();
    let machine = NodeLoop::new(names, input.updated.clone(), input.max_unavailable);
    let mut recording = Recording {
        input,
        plan: NodePlan::new(Target {
            kind: "DaemonSet",
            name: input.name.to_string(),
            nodes: input.candidates.len(),
        }),
        steps_done: 0,
    };
    recording.plan.warnings =
        planning::plan_in_place(&mut recording, machine, hooks, &input.ctx, &input.estimates)?;
    Ok(recording.plan)
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
                timing: Default::default(),
                others: Vec::new(),
            },
            estimates: Default::default(),
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
