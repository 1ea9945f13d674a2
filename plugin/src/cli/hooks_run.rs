//! `hooks run MODULE POINT --input FILE`: asks one point of a module once, with the call's
//! input written as JSON, and prints its answer as the plugin reads it (checked as a plan checks
//! it), as `kwctl run` does with a request file. The input's fields are the WIT's, in
//! camelCase; those left out take the values below.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::Failure;
use super::hooks_entry::EntryArgs;
use crate::hooks::{HookRuntime, LoadError, ObjectSource, SnapshotObjects};
use crate::labels::Labels;
use crate::plan::Role;
use crate::plan::decide::{self, Chosen, Verdict};
use crate::plan::hook::{
    BatchAnswer, BatchInfo, BudgetCover, CallContext, Candidate, ClusterOutcome, ClusterResult,
    DecidedBy, DrainOrderAnswer, GroupInfo, HealthSummary, Hook, HookFault, InstanceKind,
    Instances, Phase, Progress, StageInfo, StageOutcome, Timing,
};
use crate::plan::ledger::Disruption;
use crate::policy::HookPoint;
use crate::snapshot::{Snapshot, Taint};

/// What `hooks run` is asked.
#[derive(Debug, clap::Args)]
pub struct RunPoint {
    #[command(flatten)]
    entry: EntryArgs,
    /// The point to ask.
    #[arg(value_enum)]
    point: RunPointArg,
    /// The call's input as JSON (`-`: standard input); see docs/hooks.md, "hooks run".
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// The objects the hook may list (a v1 List, as `snapshot` saves), within what the
    /// policy's contextResources grant.
    #[arg(long, value_name = "FILE")]
    snapshot: Option<PathBuf>,
}

/// A point `hooks run` asks: the policy's points, with the gate before a fleet's stage apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunPointArg {
    Select,
    Batch,
    Gate,
    BeforeStage,
    DrainOrder,
}

impl RunPointArg {
    fn point(self) -> HookPoint {
        match self {
            RunPointArg::Select => HookPoint::Select,
            RunPointArg::Batch => HookPoint::Batch,
            RunPointArg::Gate | RunPointArg::BeforeStage => HookPoint::Gate,
            RunPointArg::DrainOrder => HookPoint::DrainOrder,
        }
    }
}

/// What every call is told, as `context` gives it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ContextIn {
    /// RFC 3339; the time it runs when left out.
    now: Option<String>,
    run_id: Option<String>,
    dry_run: Option<bool>,
    /// What `estimates()` answers: `batch` and `remaining`, each `{seconds, p90Seconds, basis}`.
    #[serde(default)]
    estimates: EstimatesIn,
    /// What `others-disrupting` answers: `[{node, by}]`.
    #[serde(default)]
    others_disrupting: Vec<DisruptionIn>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EstimatesIn {
    batch: Option<EstimateIn>,
    remaining: Option<EstimateIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EstimateIn {
    seconds: u64,
    p90_seconds: Option<u64>,
    #[serde(default = "stated_basis")]
    basis: String,
}

fn stated_basis() -> String {
    "hooks run input".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DisruptionIn {
    node: String,
    by: String,
}

/// A group: its name, role and budget.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GroupIn {
    #[serde(default = "nodes")]
    name: String,
    #[serde(default)]
    role: RoleIn,
    size: Option<u32>,
    #[serde(default)]
    up_to_date: u32,
    #[serde(default)]
    max_surge: u32,
    #[serde(default = "one")]
    max_unavailable: u32,
}

impl Default for GroupIn {
    fn default() -> GroupIn {
        GroupIn {
            name: nodes(),
            role: RoleIn::Node,
            size: None,
            up_to_date: 0,
            max_surge: 0,
            max_unavailable: 1,
        }
    }
}

fn nodes() -> String {
    "nodes".into()
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum RoleIn {
    Bastion,
    ControlPlane,
    #[default]
    Node,
}

/// An instance (a candidate, a pending one).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InstanceIn {
    name: String,
    #[serde(default)]
    pod: bool,
    zone: Option<String>,
    #[serde(default)]
    labels: Labels,
    #[serde(default)]
    annotations: Labels,
    #[serde(default)]
    taints: Vec<TaintIn>,
    #[serde(default = "yes")]
    ready: bool,
    #[serde(default)]
    unschedulable: bool,
    /// RFC 3339.
    created: Option<String>,
    kubelet_version: Option<String>,
    #[serde(default)]
    pods: u32,
    #[serde(default)]
    pods_not_ready: u32,
    #[serde(default)]
    up_to_date: bool,
    /// Why it is in the current choice; none when it is not chosen.
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaintIn {
    key: String,
    #[serde(default)]
    value: String,
    effect: String,
}

/// Where a group's update stands, at `batch`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProgressIn {
    #[serde(default)]
    batches_done: u32,
    #[serde(default)]
    updated: u32,
    /// The budget's batch when left out: the group's maxUnavailable.
    max_batch: Option<u32>,
    max_batch_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BatchIn {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    instances: Vec<String>,
    #[serde(default)]
    canary: bool,
    #[serde(default)]
    attempt: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SummaryIn {
    #[serde(default)]
    nodes_total: u32,
    #[serde(default)]
    nodes_not_ready: u32,
    #[serde(default)]
    nodes_unschedulable: u32,
    #[serde(default)]
    pods_total: u32,
    #[serde(default)]
    pods_not_ready: u32,
    #[serde(default)]
    system_pods_not_ready: u32,
    #[serde(default)]
    budgets: Vec<BudgetIn>,
    #[serde(default)]
    failures: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BudgetIn {
    namespace: String,
    name: String,
    disruptions_allowed: i32,
    #[serde(default)]
    pods_in_batch: u32,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StageIn {
    #[serde(default)]
    fleet: String,
    #[serde(default)]
    index: u32,
    name: String,
    #[serde(default)]
    clusters: Vec<String>,
    #[serde(default)]
    attempt: u32,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StageOutcomeIn {
    name: String,
    #[serde(default)]
    clusters: Vec<ClusterResultIn>,
    #[serde(default)]
    soaked_seconds: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClusterResultIn {
    cluster: String,
    #[serde(default)]
    nodes_set_aside: bool,
    /// RFC 3339.
    finished: String,
}

/// A call's input: `context` and what the point takes.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Input {
    #[serde(default)]
    context: ContextIn,
    /// select, batch.
    #[serde(default)]
    group: GroupIn,
    /// select: the group's instances, the current choice (those with a `reason`) first.
    #[serde(default)]
    candidates: Vec<InstanceIn>,
    /// batch: where the update stands, and the instances still to update, in update order.
    #[serde(default)]
    progress: ProgressIn,
    #[serde(default)]
    pending: Vec<InstanceIn>,
    /// gate.
    phase: Option<PhaseIn>,
    #[serde(default)]
    batch: BatchIn,
    #[serde(default)]
    summary: SummaryIn,
    /// before-stage.
    stage: Option<StageIn>,
    previous: Option<StageOutcomeIn>,
    /// drain-order: the node and the pods its drain evicts (Pod objects).
    node: Option<String>,
    #[serde(default)]
    pods: Vec<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum PhaseIn {
    BeforeGroup,
    BeforeBatch,
    AfterBatch,
}

pub fn run(run: RunPoint) -> Result<(), Failure> {
    let text = match run.input.to_str() {
        Some("-") => std::io::read_to_string(std::io::stdin())
            .map_err(|e| Failure::usage(format!("cannot read the input: {e}")))?,
        _ => std::fs::read_to_string(&run.input)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", run.input.display())))?,
    };
    let shown = run.input.display().to_string();
    let mut input: Input =
        serde_json::from_str(&text).map_err(|e| Failure::usage(format!("{shown}: {e}")))?;
    let ctx = context(std::mem::take(&mut input.context), &shown)?;
    let runtime = HookRuntime::shared()
        .map_err(|e| Failure::failed(format!("cannot start the WebAssembly runtime: {e}")))?;
    let (policy, spec) = run.entry.policy_and_spec(runtime, &[run.point.point()])?;
    let objects: Arc<dyn ObjectSource> = match &run.snapshot {
        Some(file) => {
            let bytes = std::fs::read(file)
                .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
            Arc::new(SnapshotObjects::new(bytes))
        }
        None => Arc::new(SnapshotObjects::new(br#"{"items": []}"#.to_vec())),
    };
    let allowed = Arc::new(policy.context_resources.clone());
    let mut hook =
        runtime
            .load(&spec, objects, allowed)
            .map_err(|e| match (e, &run.entry.policy) {
                (
                    LoadError::PointNotImplemented {
                        module,
                        implemented,
                        ..
                    },
                    _,
                ) => Failure::usage(format!(
                    "module {module} does not serve {}: it declares {implemented}",
                    point_name(run.point)
                )),
                (e, Some(_)) => Failure::from(e.at(&policy.source, &spec)),
                (e, None) => Failure::usage(e.to_string()),
            })?;
    let answer = ask(&mut hook, run.point, input, &ctx, &shown)?;
    let answer = answer.map_err(|fault| {
        Failure::failed(format!(
            "hook {} failed at {}: {fault}",
            spec.name,
            point_name(run.point)
        ))
    })?;
    println!(
        "{}",
        serde_json::to_string_pretty(&answer).unwrap_or_default()
    );
    Ok(())
}

fn point_name(point: RunPointArg) -> &'static str {
    match point {
        RunPointArg::Select => "select",
        RunPointArg::Batch => "batch",
        RunPointArg::Gate => "gate",
        RunPointArg::BeforeStage => "before-stage",
        RunPointArg::DrainOrder => "drain-order",
    }
}

/// Asks `point` of `hook` with `input`: the answer as JSON, or the hook's fault. An input that
/// lacks what the point needs is a usage error.
fn ask(
    hook: &mut dyn Hook,
    point: RunPointArg,
    input: Input,
    ctx: &CallContext,
    file: &str,
) -> Result<Result<Value, HookFault>, Failure> {
    let group = group_info(&input.group, input.candidates.len());
    Ok(match point {
        RunPointArg::Select => {
            let mut candidates = Vec::new();
            for c in input.candidates {
                candidates.push(candidate(c, &group, file)?);
            }
            let chosen: Vec<Chosen> = (candidates.iter().enumerate())
                .filter_map(|(index, c)| {
                    let reason = c.reason.clone()?;
                    Some(Chosen {
                        index,
                        reason,
                        by: DecidedBy::BuiltIn,
                    })
                })
                .collect();
            let group = GroupInfo {
                selected: chosen.len() as u32,
                ..group
            };
            decide::ask_select(hook, ctx, &group, &candidates, &chosen).map(|order| match order {
                None => json!({"answer": "defer"}),
                Some(order) => {
                    let order: Vec<Value> = (order.iter())
                        .map(|c| json!({"name": candidates[c.index].name, "reason": c.reason}))
                        .collect();
                    json!({"answer": "choose", "order": order})
                }
            })
        }
        RunPointArg::Batch => {
            let mut pending = Vec::new();
            for c in input.pending {
                pending.push(candidate(c, &group, file)?);
            }
            let max_batch = (input.progress.max_batch)
                .unwrap_or(group.max_unavailable.max(1))
                .min(pending.len().max(1) as u32);
            let progress = Progress {
                group: &group,
                batches_done: input.progress.batches_done,
                updated: input.progress.updated,
                pending: Instances::from(pending),
                max_batch,
                max_batch_reason: (input.progress.max_batch_reason)
                    .unwrap_or_else(|| "the budget".into()),
            };
            decide::ask_batch(hook, ctx, &progress).map(|answer| match answer {
                BatchAnswer::Defer => json!({"answer": "defer"}),
                BatchAnswer::Size { count, reason } => {
                    json!({"answer": "size", "count": count, "reason": reason})
                }
                BatchAnswer::Pause { seconds, reason } => {
                    json!({"answer": "pause", "seconds": seconds, "reason": reason})
                }
            })
        }
        RunPointArg::Gate => {
            let Some(phase) = input.phase else {
                return Err(Failure::usage(format!(
                    "{file}: a gate is asked at a phase: add \"phase\": \"before-group\", \"before-batch\" or \"after-batch\""
                )));
            };
            let phase = match phase {
                PhaseIn::BeforeGroup => Phase::BeforeGroup,
                PhaseIn::BeforeBatch => Phase::BeforeBatch,
                PhaseIn::AfterBatch => Phase::AfterBatch,
            };
            let batch = BatchInfo {
                index: input.batch.index,
                instances: input.batch.instances,
                canary: input.batch.canary,
                attempt: input.batch.attempt,
            };
            decide::ask_gate(hook, ctx, phase, &batch, &summary(input.summary)).map(verdict)
        }
        RunPointArg::BeforeStage => {
            let Some(stage) = input.stage else {
                return Err(Failure::usage(format!(
                    "{file}: a before-stage gate is asked about a stage: add \"stage\": {{\"name\": …}}"
                )));
            };
            let stage = StageInfo {
                fleet: stage.fleet,
                index: stage.index,
                name: stage.name,
                clusters: stage.clusters,
                attempt: stage.attempt,
            };
            let previous = match input.previous {
                Some(p) => Some(stage_outcome(p, file)?),
                None => None,
            };
            (hook.stage_gate(ctx, &stage, previous.as_ref()))
                .and_then(decide::checked_verdict)
                .map(verdict)
        }
        RunPointArg::DrainOrder => {
            let Some(node) = input.node else {
                return Err(Failure::usage(format!(
                    "{file}: drain-order is asked about a node: add \"node\": \"NAME\" and its \"pods\""
                )));
            };
            let list = json!({"apiVersion": "v1", "kind": "List", "items": input.pods});
            let pods = Snapshot::from_json(list.to_string().as_bytes())
                .map_err(|e| Failure::usage(format!("{file}: pods: {e}")))?
                .pods;
            let pods: Vec<_> = pods.iter().map(|p| p.as_ref().clone()).collect();
            hook.drain_order(ctx, &node, &pods)
                .map(|answer| match answer {
                    DrainOrderAnswer::Defer => json!({"answer": "defer"}),
                    DrainOrderAnswer::Turns(turns) => json!({"answer": "turns", "turns": turns}),
                })
        }
    })
}

fn verdict(verdict: Option<Verdict>) -> Value {
    match verdict {
        None => json!({"answer": "defer"}),
        Some(Verdict::Proceed) => json!({"answer": "proceed"}),
        Some(Verdict::Wait { seconds, reason }) => {
            json!({"answer": "wait", "seconds": seconds, "reason": reason})
        }
        Some(Verdict::Abort(reason)) => json!({"answer": "abort", "reason": reason}),
    }
}

/// An RFC 3339 time as Unix seconds; a usage error naming `what` otherwise.
fn unix_seconds(text: &str, what: &str, file: &str) -> Result<i64, Failure> {
    let at = text
        .parse::<jiff::Timestamp>()
        .map_err(|e| Failure::usage(format!("{file}: {what} {text:?}: {e}")))?;
    Ok(at.as_second())
}

fn context(c: ContextIn, file: &str) -> Result<CallContext, Failure> {
    let now = match &c.now {
        Some(t) => unix_seconds(t, "context.now", file)?,
        None => jiff::Timestamp::now().as_second(),
    };
    let estimate = |e: EstimateIn| crate::plan::estimate::Estimate {
        seconds: e.seconds,
        p90_seconds: e.p90_seconds.unwrap_or(e.seconds).max(e.seconds),
        ends_at: None,
        foreseen_wait_seconds: 0,
        basis: e.basis,
    };
    Ok(CallContext {
        now,
        run_id: c.run_id.unwrap_or_else(|| "hooks-run".into()),
        dry_run: c.dry_run.unwrap_or(true),
        timing: Timing {
            batch: c.estimates.batch.map(estimate),
            remaining: c.estimates.remaining.map(estimate),
        },
        others: (c.others_disrupting.into_iter())
            .map(|d| Disruption {
                node: d.node,
                by: d.by,
            })
            .collect(),
    })
}

fn group_info(g: &GroupIn, instances: usize) -> GroupInfo {
    GroupInfo {
        name: g.name.clone(),
        role: match g.role {
            RoleIn::Bastion => Role::Bastion,
            RoleIn::ControlPlane => Role::ControlPlane,
            RoleIn::Node => Role::Node,
        },
        size: g.size.unwrap_or(instances as u32),
        up_to_date: g.up_to_date,
        selected: 0,
        max_surge: g.max_surge,
        max_unavailable: g.max_unavailable,
    }
}

fn candidate(c: InstanceIn, group: &GroupInfo, file: &str) -> Result<Candidate, Failure> {
    let created = match &c.created {
        Some(t) => Some(unix_seconds(t, &format!("{}: created", c.name), file)?),
        None => None,
    };
    Ok(Candidate {
        kind: match c.pod {
            true => InstanceKind::Pod,
            false => InstanceKind::Node,
        },
        name: c.name,
        group: group.name.clone(),
        role: group.role,
        zone: c.zone,
        labels: c.labels,
        annotations: c.annotations,
        taints: (c.taints.into_iter())
            .map(|t| Taint {
                key: t.key,
                value: t.value,
                effect: t.effect,
            })
            .collect(),
        ready: c.ready,
        unschedulable: c.unschedulable,
        created,
        kubelet_version: c.kubelet_version,
        pods: c.pods,
        pods_not_ready: c.pods_not_ready,
        up_to_date: c.up_to_date,
        reason: c.reason,
    })
}

fn summary(s: SummaryIn) -> HealthSummary {
    HealthSummary {
        nodes_total: s.nodes_total,
        nodes_not_ready: s.nodes_not_ready,
        nodes_unschedulable: s.nodes_unschedulable,
        pods_total: s.pods_total,
        pods_not_ready: s.pods_not_ready,
        system_pods_not_ready: s.system_pods_not_ready,
        budgets: (s.budgets.into_iter())
            .map(|b| BudgetCover {
                namespace: b.namespace,
                name: b.name,
                disruptions_allowed: b.disruptions_allowed,
                pods_in_batch: b.pods_in_batch,
            })
            .collect(),
        failures: s.failures,
    }
}

fn stage_outcome(p: StageOutcomeIn, file: &str) -> Result<StageOutcome, Failure> {
    let mut clusters = Vec::new();
    for c in p.clusters {
        clusters.push(ClusterResult {
            finished: unix_seconds(&c.finished, &format!("{}: finished", c.cluster), file)?,
            cluster: c.cluster,
            outcome: match c.nodes_set_aside {
                true => ClusterOutcome::NodesSetAside,
                false => ClusterOutcome::Succeeded,
            },
        });
    }
    Ok(StageOutcome {
        name: p.name,
        clusters,
        soaked_seconds: p.soaked_seconds,
    })
}
