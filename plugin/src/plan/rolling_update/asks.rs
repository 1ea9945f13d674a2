//! The questions every workload flow puts to the hooks, in one place for the planner and the
//! live run alike: a step's size (the controller pair's, a StatefulSet's partition step, a
//! DaemonSet's nodes), the gates' verdict after a step, the DaemonSet's node order, and how
//! many pods a budget lets go at a time.

use super::flow::Gating;
use super::node_loop::Ordered;
use super::partition_loop::GateAbout;
use super::pods::PodInfo;
use super::steps::Budgets;
use crate::plan::Role;
use crate::plan::decide::{self, BatchDecision, GateDecision, HookFailed};
use crate::plan::hook::{
    BatchInfo, CallContext, Candidate, GroupInfo, HealthSummary, Hook, Instances, Phase, Progress,
};
use crate::plan::shadow::{self, ShadowDecision};
use crate::policy::IntOrPercent;

/// A hook question's answer and what shadow hooks would have said.
pub type Asked<D> = Result<(D, Vec<ShadowDecision>), HookFailed>;

/// `max` of `replicas` pods: a percentage rounds down; at least 1.
pub fn pods_at_a_time(max: IntOrPercent, replicas: i32) -> u32 {
    let replicas = u32::try_from(replicas).unwrap_or(0);
    match max {
        IntOrPercent::Int(n) => n,
        IntOrPercent::Percent(p) => replicas * p / 100,
    }
    .max(1)
}

/// The batching hooks' size for a step described by `progress`, and what shadow hooks say.
fn ask_batch_size(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    progress: &Progress,
    warnings: &mut Vec<String>,
) -> Asked<BatchDecision> {
    let decision = decide::batch_size(hooks, ctx, progress, warnings)?;
    let said = shadow::batch_size(hooks, ctx, progress, &decision);
    Ok((decision, said))
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
) -> Asked<BatchDecision> {
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
    ask_batch_size(hooks, ctx, &progress, warnings)
}

/// The gates' verdict after a scale step of `controller`, and what shadow gates would say.
pub fn ask_scale_gate(
    asking: ScaleGate<'_>,
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    warnings: &mut Vec<String>,
) -> Asked<GateDecision> {
    let batch = BatchInfo {
        index: asking.state.steps_done.saturating_sub(1),
        instances: vec![asking.controller.to_string()],
        canary: false,
        attempt: asking.attempt,
    };
    let pods = asking.state.old.max(0) + asking.state.next.max(0);
    ask_gate(hooks, ctx, &batch, pods, asking.pods_not_ready, warnings)
}

/// What a scale step's gate is asked about: the controller scaled, where the pair stands, its
/// pods not Ready, and the waits asked for so far.
pub struct ScaleGate<'a> {
    pub controller: &'a str,
    pub state: &'a LoopState,
    pub pods_not_ready: u32,
    pub attempt: u32,
}

/// `name-ordinal`, for the ordinals `range` holds, highest first.
pub fn pod_names(name: &str, range: std::ops::Range<i32>) -> Vec<String> {
    range.rev().map(|o| format!("{name}-{o}")).collect()
}

/// Where a StatefulSet's partitioned update stands when a question is asked.
pub struct PartitionAt<'a> {
    pub name: &'a str,
    pub replicas: i32,
    pub partition: i32,
    pub max_unavailable: u32,
    pub steps_done: u32,
}

/// The size of the next step, at most `max`: built in, or what the batching hooks say, offered
/// the pods still to update (highest ordinal first) as the pending instances.
pub fn ask_partition_size(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    at: &PartitionAt,
    pods: &[PodInfo],
    max: u32,
    warnings: &mut Vec<String>,
) -> Asked<BatchDecision> {
    let max_unavailable = i32::try_from(at.max_unavailable).unwrap_or(i32::MAX);
    let budgets = Budgets {
        max_surge: 0,
        max_unavailable,
        min_available: at.replicas - max_unavailable,
    };
    let state = LoopState {
        old: at.partition,
        next: at.replicas - at.partition,
        next_available: at.replicas - at.partition,
        desired: at.replicas,
        steps_done: at.steps_done,
    };
    let group = group_info(at.name, &state, &budgets);
    let pending: Vec<_> = pod_names(at.name, 0..at.partition)
        .iter()
        .filter_map(|n| pods.iter().find(|p| &p.name == n))
        .map(|p| p.candidate(at.name))
        .collect();
    let pending = Instances::from(pending).window(0, max as usize);
    let max = i32::try_from(max).unwrap_or(i32::MAX);
    step_amount(hooks, ctx, &group, &state, pending, max, warnings)
}

/// The gates' verdict after a step updated `batch`, with `pods_not_ready` of `replicas` pods
/// not Ready.
pub fn ask_gate(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    batch: &BatchInfo,
    replicas: i32,
    pods_not_ready: u32,
    warnings: &mut Vec<String>,
) -> Asked<GateDecision> {
    let summary = HealthSummary {
        pods_total: u32::try_from(replicas).unwrap_or(0),
        pods_not_ready,
        ..Default::default()
    };
    let decision = decide::gate(hooks, ctx, Phase::AfterBatch, batch, &summary, warnings)?;
    let said = shadow::gate(hooks, ctx, Phase::AfterBatch, batch, &summary, &decision);
    Ok((decision, said))
}

/// The batch a gate is asked about after a step: the step's pods, highest ordinal first.
pub fn partition_batch(name: &str, gating: &Gating<GateAbout>) -> BatchInfo {
    BatchInfo {
        index: gating.step,
        instances: pod_names(name, gating.about.ordinals.clone()),
        canary: gating.about.canary,
        attempt: gating.attempt,
    }
}

/// The DaemonSet `name` as a group: its nodes to update, done so far, the budget.
fn node_group(name: &str, total: usize, done: usize, pending: usize, max: u32) -> GroupInfo {
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

/// Where a DaemonSet's node-by-node update stands when a question is asked.
pub struct NodesAt<'a> {
    pub name: &'a str,
    /// Nodes the update started with.
    pub total: usize,
    pub max_unavailable: u32,
    pub steps_done: u32,
}

/// The size of the next step, at most `max`: built in, or what the batching hooks say, offered
/// the nodes left (`pending`, at most `max` of them).
pub fn ask_node_size(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    at: &NodesAt,
    pending: &[Candidate],
    max: u32,
    warnings: &mut Vec<String>,
) -> Asked<BatchDecision> {
    let done = at.total.saturating_sub(pending.len());
    let group = node_group(at.name, at.total, done, pending.len(), at.max_unavailable);
    let progress = Progress {
        group: &group,
        batches_done: at.steps_done,
        updated: done as u32,
        pending: Instances::from(pending.to_vec()).window(0, max as usize),
        max_batch: max,
        max_batch_reason: format!("the DaemonSet's maxUnavailable of {}", at.max_unavailable),
    };
    ask_batch_size(hooks, ctx, &progress, warnings)
}

/// The order of the nodes left: the built-in one (by name), or the selection hooks'.
pub fn ask_order(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    at: &NodesAt,
    pending: &[Candidate],
    warnings: &mut Vec<String>,
) -> Asked<Ordered> {
    let done = at.total.saturating_sub(pending.len());
    let group = node_group(at.name, at.total, done, pending.len(), at.max_unavailable);
    let selected = decide::select(hooks, ctx, &group, pending, warnings)?;
    let said = shadow::select(hooks, ctx, &group, pending, &selected);
    let order = selected
        .chosen
        .iter()
        .map(|c| pending[c.index].name.clone())
        .collect();
    Ok((Ordered(order, selected.by), said))
}

/// The candidates named by `names`, in that order.
pub fn in_order(candidates: &[Candidate], names: &[String]) -> Vec<Candidate> {
    names
        .iter()
        .filter_map(|n| candidates.iter().find(|c| &c.name == n).cloned())
        .collect()
}

/// The batch a gate is asked about after a step: the nodes it replaced.
pub fn node_batch(gating: &Gating<Vec<String>>) -> BatchInfo {
    BatchInfo {
        index: gating.step,
        instances: gating.about.clone(),
        canary: false,
        attempt: gating.attempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percentage_of_replicas_rounds_down_to_at_least_one() {
        assert_eq!(pods_at_a_time(IntOrPercent::Percent(50), 5), 2);
        assert_eq!(pods_at_a_time(IntOrPercent::Percent(10), 5), 1);
        assert_eq!(pods_at_a_time(IntOrPercent::Int(0), 5), 1);
        assert_eq!(pods_at_a_time(IntOrPercent::Int(3), 5), 3);
    }
}
