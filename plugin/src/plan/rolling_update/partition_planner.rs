//! The plan of a StatefulSet's partitioned update: the partition machine driven by the planner
//! loop every workload flow shares ([`super::planning`]), with simulated pods (every updated
//! pod Ready at once). `ask_size` and `ask_gate` serve the live run too.

use serde::Serialize;

use std::convert::Infallible;

use super::asks::{PartitionAt, ask_gate, ask_partition_size, partition_batch, pod_names};
use super::flow::{Gating, Sizing};
use super::partition_loop::{Action, GateAbout, Input, PartitionLoop};
use super::planning::{self, Asked, Asking, InPlacePlan, Notes, Planned, StepDecisions};
use super::pods::PodInfo;
use crate::plan::decide::{BatchDecision, GateDecision, HookFailed};
use crate::plan::estimate::StepEstimates;
use crate::plan::hook::{CallContext, DecidedBy, Hook};

/// The plan JSON: `{"kind": "RollingUpdatePlan", "target": {...}, "steps": [...]}`.
pub type PartitionPlan = InPlacePlan<Target, PartitionStep>;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    pub kind: &'static str,
    pub name: String,
    pub replicas: i32,
}

/// One step: the partition it sets and the pods it updates, highest ordinal first.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStep {
    pub partition: i32,
    pub pods: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub canary: bool,
    #[serde(flatten)]
    pub decisions: StepDecisions,
}

/// What the plan is made from.
pub struct PartitionInput<'a> {
    pub name: &'a str,
    pub replicas: i32,
    /// Where the partition stands: the replica count for a new update.
    pub partition: i32,
    /// The lowest ordinal not on the new revision.
    pub floor: i32,
    pub max_unavailable: u32,
    pub canary: u32,
    /// The StatefulSet's pods, offered to batching hooks as the pending instances.
    pub pods: &'a [PodInfo],
    pub ctx: CallContext,
    /// What the hooks are told of how long steps take.
    pub estimates: StepEstimates,
}

/// The partition machine as its plan records it.
struct Recording<'a> {
    input: &'a PartitionInput<'a>,
    plan: PartitionPlan,
    /// The partition now, and the steps done (gated) so far.
    partition: i32,
    steps_done: u32,
}

impl Planned for Recording<'_> {
    type Flow = PartitionLoop;

    fn size(&mut self, asking: &mut Asking, sizing: &Sizing<bool>) -> Asked<BatchDecision> {
        let at = PartitionAt {
            name: self.input.name,
            replicas: self.input.replicas,
            partition: self.partition,
            max_unavailable: self.input.max_unavailable,
            steps_done: self.steps_done,
        };
        let pods = self.input.pods;
        ask_partition_size(
            asking.hooks,
            &asking.ctx,
            &at,
            pods,
            sizing.max,
            asking.warnings,
        )
    }

    fn gate(&mut self, asking: &mut Asking, gating: &Gating<GateAbout>) -> Asked<GateDecision> {
        let batch = partition_batch(self.input.name, gating);
        self.steps_done = gating.step + 1;
        let replicas = self.input.replicas;
        ask_gate(
            asking.hooks,
            &asking.ctx,
            &batch,
            replicas,
            0,
            asking.warnings,
        )
    }

    fn answer(&mut self, _: &mut Asking, ask: Infallible) -> Asked<Input> {
        match ask {}
    }

    fn act(&mut self, act: Action, notes: Notes) -> Option<Input> {
        match act {
            Action::SetPartition {
                from,
                to,
                canary,
                decided_by,
                reason,
                ..
            } => {
                self.partition = to;
                self.plan.steps.push(PartitionStep {
                    partition: to,
                    pods: pod_names(self.input.name, to..from),
                    canary,
                    decisions: notes.decisions(decided_by, reason),
                });
            }
            Action::AwaitUpdated { .. } => {}
            Action::Settle { from } => {
                self.partition = 0;
                self.plan.settle = Some(from);
            }
        }
        Some(Input::Done)
    }

    fn last_step(&mut self) -> Option<&mut StepDecisions> {
        self.plan.steps.last_mut().map(|s| &mut s.decisions)
    }

    fn stopped(&mut self, _: u32, decided_by: DecidedBy, reason: String, partition: i32) {
        self.plan.stopped = Some(format!(
            "{decided_by} aborts with the partition at {partition}: {reason}"
        ));
    }
}

/// Plans the update `input` describes with `hooks`.
pub fn plan(
    input: &PartitionInput,
    hooks: &mut [Box<dyn Hook>],
) -> Result<PartitionPlan, HookFailed> {
    let mut recording = Recording {
        input,
        plan: PartitionPlan::new(Target {
            kind: "StatefulSet",
            name: input.name.to_string(),
            replicas: input.replicas,
        }),
        partition: input.partition,
        steps_done: 0,
    };
    let machine = PartitionLoop::new(
        input.replicas,
        input.partition,
        input.floor,
        input.max_unavailable,
        input.canary,
    );
    recording.plan.warnings =
        planning::plan_in_place(&mut recording, machine, hooks, &input.ctx, &input.estimates)?;
    Ok(recording.plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(replicas: i32, partition: i32, max: u32) -> PartitionInput<'static> {
        PartitionInput {
            name: "web",
            replicas,
            partition,
            floor: 0,
            max_unavailable: max,
            canary: 1,
            pods: &[],
            ctx: CallContext {
                now: 0,
                run_id: "plan".into(),
                dry_run: true,
                timing: Default::default(),
                others: Vec::new(),
            },
            estimates: Default::default(),
        }
    }

    #[test]
    fn five_replicas_two_at_a_time_update_highest_ordinals_first() {
        let plan = plan(&input(5, 5, 2), &mut []).unwrap();
        let steps: Vec<(i32, Vec<String>, bool)> = plan
            .steps
            .iter()
            .map(|s| (s.partition, s.pods.clone(), s.canary))
            .collect();
        assert_eq!(
            steps,
            [
                (4, vec!["web-4".to_string()], true),
                (2, vec!["web-3".into(), "web-2".into()], false),
                (0, vec!["web-1".into(), "web-0".into()], false),
            ]
        );
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(
            json["target"],
            serde_json::json!({"kind": "StatefulSet", "name": "web", "replicas": 5})
        );
        assert_eq!(json["steps"][0]["canary"], true);
        assert!(json["steps"][1].get("canary").is_none());
    }

    #[test]
    fn hooks_are_told_each_step_and_the_steps_left_as_the_plan_clock_moves() {
        use crate::plan::decide::tests::FakeHook;
        use crate::plan::estimate::{GroupHistory, Stage};
        use crate::policy::HookPoint;
        let hook = FakeHook::new("h", &[HookPoint::Batch, HookPoint::Gate]);
        let calls = hook.calls.clone();
        let mut input = input(5, 5, 2);
        input.estimates.subject = "sts/shop/web".into();
        let mut history = GroupHistory::default();
        history.record("run-1", Stage::Step, 30_000);
        history.record("run-1", Stage::Step, 50_000);
        let groups = &mut input.estimates.durations.history.groups;
        groups.insert("sts/shop/web".into(), history);
        plan(&input, &mut [hook.boxed()]).unwrap();
        let calls = calls.lock().unwrap();
        let told: Vec<(&str, i64, Option<u64>, u64)> = (calls.iter())
            .map(|(point, ctx)| {
                let t = &ctx.timing;
                let step = t.batch.as_ref().map(|e| e.seconds);
                (*point, ctx.now, step, t.remaining.as_ref().unwrap().seconds)
            })
            .collect();
        // Steps of 1 (the canary), 2 and 2 at the median of 30 s and 50 s; the clock moves by a
        // step before each gate.
        assert_eq!(
            told,
            [
                ("batch", 0, Some(30), 90),
                ("after-batch", 30, None, 60),
                ("batch", 30, Some(30), 60),
                ("after-batch", 60, None, 30),
                ("batch", 60, Some(30), 30),
                ("after-batch", 90, None, 0),
            ]
        );
        let first = calls[0].1.timing.batch.as_ref().unwrap();
        assert_eq!(
            (first.p90_seconds, first.basis.as_str()),
            (50, "history of 1 run")
        );
    }

    #[test]
    fn hooks_size_the_steps_and_a_gate_that_aborts_stops_the_plan_with_its_partition() {
        use crate::plan::decide::tests::FakeHook;
        use crate::plan::hook::{BatchAnswer, GateAnswer};
        use crate::policy::HookPoint;
        let mut one = FakeHook::new("one", &[HookPoint::Batch]);
        one.batch = Box::new(|_| {
            Ok(BatchAnswer::Size {
                count: 1,
                reason: "one at a time".into(),
            })
        });
        let mut third = FakeHook::new("third", &[HookPoint::Gate]);
        third.gate = Box::new(|batch| {
            Ok(match batch.index {
                2 => GateAnswer::Abort(format!("{} looks wrong", batch.instances[0])),
                _ => GateAnswer::Proceed,
            })
        });
        let mut hooks = vec![one.boxed(), third.boxed()];
        let plan = plan(&input(5, 5, 2), &mut hooks).unwrap();
        let partitions: Vec<i32> = plan.steps.iter().map(|s| s.partition).collect();
        assert_eq!(partitions, [4, 3, 2]);
        assert_eq!(
            plan.steps[1].decisions.size_reason.as_deref(),
            Some("one at a time")
        );
        assert_eq!(
            plan.stopped.as_deref(),
            Some("hook/third aborts with the partition at 2: web-2 looks wrong")
        );
    }

    #[test]
    fn a_resumed_update_plans_only_what_is_left() {
        let resumed = plan(&input(5, 2, 1), &mut []).unwrap();
        let partitions: Vec<i32> = resumed.steps.iter().map(|s| s.partition).collect();
        assert_eq!(partitions, [1, 0]);
        assert!(plan(&input(5, 0, 1), &mut []).unwrap().steps.is_empty());
    }
}
