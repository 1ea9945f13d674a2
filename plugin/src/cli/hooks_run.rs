//! `hooks run MODULE POINT --input FILE`: asks one point of a module once, with the call's
//! input written as JSON, and prints its answer as the plugin reads it (checked as a plan checks
//! it), as `kwctl run` does with a request file. The input's fields are the WIT's, in
//! camelCase; those left out take the values below.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::Failure;
use super::hooks_entry::EntryArgs;
use crate::hooks::{HookRuntime, LoadError, ObjectSource, SnapshotObjects};
use crate::plan::decide::{self, Chosen, Verdict};
use crate::plan::hook::{
    BatchAnswer, CallContext, DecidedBy, DrainOrderAnswer, Hook, HookFault, Instances, Progress,
};
use crate::policy::HookPoint;
use crate::snapshot::Snapshot;

mod input;

use input::{Input, candidate, context, stage_outcome};

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
    let group = input.group_info(matches!(point, RunPointArg::Batch));
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
            // As a plan offers them: the next batch's worth.
            pending.truncate(max_batch as usize);
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
            decide::ask_gate(hook, ctx, phase, &input.batch, &input.summary).map(verdict)
        }
        RunPointArg::BeforeStage => {
            let Some(stage) = input.stage else {
                return Err(Failure::usage(format!(
                    "{file}: a before-stage gate is asked about a stage: add \"stage\": {{\"name\": …}}"
                )));
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
