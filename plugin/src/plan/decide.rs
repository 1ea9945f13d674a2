//! Asks the configured hooks and turns their answers into one decision, after checking every
//! answer against what the host allows. An invalid answer is a hook fault, never an action.
//!
//! Composition when several hooks serve the same point:
//! - selection chains: each hook sees the previous hook's order and may reorder or trim it;
//! - batching takes the most careful answer: any pause wins (the longest), else the smallest size;
//! - gates take the most careful verdict: abort, then the longest wait, then proceed.
//!
//! A fault is an error under `failurePolicy: Fail` and a warning plus the built-in behaviour
//! under `Ignore`.

use std::collections::HashSet;
use std::fmt;

use rustc_hash::FxHashMap;

use crate::plan::hook::{
    BatchAnswer, BatchInfo, CallContext, Candidate, Choice, DecidedBy, GateAnswer, GroupInfo,
    HealthSummary, Hook, HookFault, Instances, Phase, Pick, Progress, SelectAnswer, StageInfo,
    StageOutcome,
};
use crate::policy::{FailurePolicy, HookMode, HookPoint};

/// The longest pause or wait a hook may ask for at once: a week, the span of a weekly window.
pub const MAX_WAIT_SECONDS: u32 = 7 * 24 * 3600;

/// A hook failed under `failurePolicy: Fail`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "hook {hook} failed at the {point} point: {fault} (failurePolicy: Fail stops the run; nothing was changed by this step)"
)]
pub struct HookFailed {
    pub hook: String,
    pub point: HookPoint,
    pub fault: HookFault,
}

/// An instance chosen for update, with the reason and who chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// Index into the candidates.
    pub index: usize,
    pub reason: String,
    pub by: DecidedBy,
}

/// The size of the next batch, or a pause before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchDecision {
    Size {
        size: u32,
        /// Why this size: the budget's limit, or the hook's reason.
        reason: String,
        by: DecidedBy,
    },
    Pause {
        seconds: u32,
        reason: String,
        by: DecidedBy,
    },
}

/// Whether the rotation goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    Wait { seconds: u32, reason: String },
    Abort(String),
}

impl fmt::Display for BatchDecision {
    /// In the words of events and plans: `size 2: reason`, `pause 60s: reason`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchDecision::Size { size, reason, .. } => write!(f, "size {size}: {reason}"),
            BatchDecision::Pause {
                seconds, reason, ..
            } => write!(f, "pause {seconds}s: {reason}"),
        }
    }
}

impl BatchDecision {
    pub fn by(&self) -> &DecidedBy {
        match self {
            BatchDecision::Size { by, .. } | BatchDecision::Pause { by, .. } => by,
        }
    }
}

impl fmt::Display for Verdict {
    /// In the words of events and plans: `proceed`, `wait 30s: reason`, `abort: reason`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Proceed => f.write_str("proceed"),
            Verdict::Wait { seconds, reason } => write!(f, "wait {seconds}s: {reason}"),
            Verdict::Abort(reason) => write!(f, "abort: {reason}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDecision {
    pub verdict: Verdict,
    pub by: DecidedBy,
}

/// Applies the hook's failure policy to a fault.
fn on_fault(
    hook: &dyn Hook,
    point: HookPoint,
    fault: HookFault,
    warnings: &mut Vec<String>,
) -> Result<(), HookFailed> {
    match hook.failure_policy() {
        FailurePolicy::Fail => Err(HookFailed {
            hook: hook.name().to_string(),
            point,
            fault,
        }),
        FailurePolicy::Ignore => {
            let warning = format!(
                "hook {} failed at the {point} point: {fault}; ignored (failurePolicy: Ignore), built-in behaviour used",
                hook.name()
            );
            // The same failure at every batch (a read the policy does not grant) is said once.
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
            Ok(())
        }
    }
}

/// Whether `hook` takes part in the decisions at `point`. Shadow hooks are asked apart
/// ([`crate::plan::shadow`]) and never decide.
fn decides(hook: &dyn Hook, point: HookPoint) -> bool {
    hook.mode() == HookMode::Enforce && hook.points().contains(&point)
}

/// A warning per hook whose module implements points the policy leaves out.
pub fn left_out_warnings(hooks: &[Box<dyn Hook>]) -> Vec<String> {
    hooks
        .iter()
        .filter(|h| !h.left_out().is_empty())
        .map(|h| {
            format!(
                "hook {}: the module implements {} but the policy enables only {}, so it is not asked there (list the point under `points`, or leave `points` out to enable all)",
                h.name(),
                HookPoint::list(h.left_out()),
                HookPoint::list(h.points()),
            )
        })
        .collect()
}

/// Whether any of `hooks` is asked at `point`, deciding or in shadow: then the question is put
/// to the hooks (with the reads it needs) and its decision reported.
pub fn serves_any(hooks: &[Box<dyn Hook>], point: HookPoint) -> bool {
    hooks.iter().any(|h| h.points().contains(&point))
}

/// The built-in choice: candidates with a reason, in their order.
pub fn built_in_choice(candidates: &[Candidate]) -> Vec<Chosen> {
    candidates
        .iter()
        .enumerate()
        .filter_map(|(index, c)| {
            c.reason.as_ref().map(|r| Chosen {
                index,
                reason: r.clone(),
                by: DecidedBy::BuiltIn,
            })
        })
        .collect()
}

/// The outcome of selection: the chosen instances in update order, and who decided last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    pub chosen: Vec<Chosen>,
    pub by: DecidedBy,
}

/// Runs the selection hooks in order over `candidates` (built-in reasons already set).
pub fn select(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    group: &GroupInfo,
    candidates: &[Candidate],
    warnings: &mut Vec<String>,
) -> Result<Selected, HookFailed> {
    let mut chosen = built_in_choice(candidates);
    let mut decided = DecidedBy::BuiltIn;
    for hook in hooks.iter_mut() {
        if !decides(hook.as_ref(), HookPoint::Select) {
            continue;
        }
        match ask_select(hook.as_mut(), ctx, group, candidates, &chosen) {
            Ok(None) => {}
            Ok(Some(order)) => {
                decided = DecidedBy::Hook(hook.name().to_string());
                chosen = order;
            }
            Err(fault) => on_fault(hook.as_ref(), HookPoint::Select, fault, warnings)?,
        }
    }
    Ok(Selected {
        chosen,
        by: decided,
    })
}

/// One hook's selection, checked, given the current choice: `None` when it defers.
pub(crate) fn ask_select(
    hook: &mut dyn Hook,
    ctx: &CallContext,
    group: &GroupInfo,
    candidates: &[Candidate],
    chosen: &[Chosen],
) -> Result<Option<Vec<Chosen>>, HookFault> {
    // The hook sees the current choice first, with its reasons, then the rest.
    let picked: HashSet<usize> = chosen.iter().map(|c| c.index).collect();
    let mut view: Vec<Candidate> = Vec::with_capacity(candidates.len());
    let mut view_index: Vec<usize> = Vec::with_capacity(candidates.len());
    for c in chosen {
        let mut cand = candidates[c.index].clone();
        cand.reason = Some(c.reason.clone());
        view.push(cand);
        view_index.push(c.index);
    }
    for (i, c) in candidates.iter().enumerate() {
        if !picked.contains(&i) {
            let mut cand = c.clone();
            cand.reason = None;
            view.push(cand);
            view_index.push(i);
        }
    }
    let info = GroupInfo {
        selected: chosen.len() as u32,
        ..group.clone()
    };
    let view = Instances::from(view);
    let Some(order) = hook
        .select(ctx, &info, &view)
        .and_then(|a| check_selection(a, &view))?
    else {
        return Ok(None);
    };
    let by = DecidedBy::Hook(hook.name().to_string());
    Ok(Some(
        order
            .into_iter()
            .map(|(i, reason)| Chosen {
                index: view_index[i],
                reason,
                by: by.clone(),
            })
            .collect(),
    ))
}

/// Checks a selection: every choice a candidate, none twice, up-to-date ones only when forced.
/// Returns view indexes and reasons.
fn check_selection(
    answer: SelectAnswer,
    view: &[Candidate],
) -> Result<Option<Vec<(usize, String)>>, HookFault> {
    let picks = match answer {
        SelectAnswer::Defer => return Ok(None),
        SelectAnswer::Choose(choices) => by_name(choices, view)?,
        SelectAnswer::ChooseAt(picks) => picks,
    };
    let mut seen = HashSet::new();
    let mut order = Vec::with_capacity(picks.len());
    for pick in picks {
        let i = pick.index as usize;
        let Some(candidate) = view.get(i) else {
            return Err(HookFault::InvalidAnswer(format!(
                "chose candidate {i}, but there are {} (counted from 0)",
                view.len()
            )));
        };
        if !seen.insert(i) {
            return Err(HookFault::InvalidAnswer(format!(
                "chose {:?} twice",
                candidate.name
            )));
        }
        // Adding an up-to-date instance needs force; keeping one an earlier hook forced does not.
        if candidate.up_to_date && candidate.reason.is_none() && !pick.force {
            return Err(HookFault::InvalidAnswer(format!(
                "chose {:?}, which is up to date, without force (set force on the choice to replace it anyway)",
                candidate.name
            )));
        }
        let reason = if pick.reason.trim().is_empty() {
            "chosen by hook".to_string()
        } else {
            pick.reason
        };
        order.push((i, reason));
    }
    Ok(Some(order))
}

/// Choices by name as picks by index; a name that is no candidate is an invalid answer.
fn by_name(choices: Vec<Choice>, view: &[Candidate]) -> Result<Vec<Pick>, HookFault> {
    let position = positions(view);
    choices
        .into_iter()
        .map(|choice| match position.get(choice.name.as_str()) {
            Some(&index) => Ok(Pick {
                index,
                reason: choice.reason,
                force: choice.force,
            }),
            None => Err(not_a_candidate(&choice.name)),
        })
        .collect()
}

/// Where each of `view` is, by name: how an answer that names candidates is read.
pub fn positions(view: &[Candidate]) -> FxHashMap<&str, u32> {
    let mut at = FxHashMap::default();
    at.reserve(view.len());
    for (i, c) in view.iter().enumerate() {
        at.insert(c.name.as_str(), i as u32);
    }
    at
}

/// What choosing `name`, which is not a candidate, is.
pub fn not_a_candidate(name: &str) -> HookFault {
    HookFault::InvalidAnswer(format!("chose {name:?}, which is not a candidate"))
}

/// Sizes the next batch. `progress.max_batch` is the built-in size and the upper bound.
pub fn batch_size(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    progress: &Progress,
    warnings: &mut Vec<String>,
) -> Result<BatchDecision, HookFailed> {
    let mut decision = built_in_size(progress);
    let progress = &shown(progress);
    for hook in hooks.iter_mut() {
        if !decides(hook.as_ref(), HookPoint::Batch) {
            continue;
        }
        let by = DecidedBy::Hook(hook.name().to_string());
        match ask_batch(hook.as_mut(), ctx, progress) {
            Ok(BatchAnswer::Defer) => {}
            Ok(BatchAnswer::Pause { seconds, reason }) => {
                let longer = match &decision {
                    BatchDecision::Pause { seconds: s, .. } => seconds > *s,
                    BatchDecision::Size { .. } => true,
                };
                if longer {
                    decision = BatchDecision::Pause {
                        seconds,
                        reason,
                        by,
                    };
                }
            }
            Ok(BatchAnswer::Size { count, reason }) => {
                // A hook's size never exceeds the built-in one, so it replaces it; among hooks
                // the smallest wins.
                if let BatchDecision::Size {
                    size: current,
                    by: current_by,
                    ..
                } = &decision
                    && (count < *current || *current_by == DecidedBy::BuiltIn)
                {
                    decision = BatchDecision::Size {
                        size: count,
                        reason,
                        by,
                    };
                }
            }
            Err(fault) => on_fault(hook.as_ref(), HookPoint::Batch, fault, warnings)?,
        }
    }
    Ok(decision)
}

/// The batch the budget allows, when no hook says otherwise.
pub(crate) fn built_in_size(progress: &Progress) -> BatchDecision {
    BatchDecision::Size {
        size: progress.max_batch,
        reason: progress.max_batch_reason.clone(),
        by: DecidedBy::BuiltIn,
    }
}

/// What a batching hook is shown. A batch is a prefix of at most `max_batch` pending
/// instances, so only those: a call costs the batch, not the group, and a plan stays linear in
/// the group's size.
pub(crate) fn shown<'a>(progress: &Progress<'a>) -> Progress<'a> {
    let shown = (progress.max_batch as usize).min(progress.pending.len());
    Progress {
        pending: progress.pending.window(0, shown),
        ..progress.clone()
    }
}

/// One hook's batch answer, checked against the budget; a size without a reason gets one.
pub(crate) fn ask_batch(
    hook: &mut dyn Hook,
    ctx: &CallContext,
    progress: &Progress,
) -> Result<BatchAnswer, HookFault> {
    let answer = hook
        .next_batch(ctx, progress)
        .and_then(|a| check_batch(a, progress))?;
    Ok(match answer {
        BatchAnswer::Size { count, reason } if reason.trim().is_empty() => BatchAnswer::Size {
            count,
            reason: "no reason given".into(),
        },
        other => other,
    })
}

/// `answer` if the budget allows it; an error naming the group, the batch and why the budget is
/// what it is (the canary, the budget, the last few) otherwise.
fn check_batch(answer: BatchAnswer, progress: &Progress) -> Result<BatchAnswer, HookFault> {
    let max_batch = progress.max_batch;
    match &answer {
        BatchAnswer::Size { count: 0, .. } => Err(HookFault::InvalidAnswer(
            "batch size 0 (answer pause to wait)".into(),
        )),
        BatchAnswer::Size { count: n, .. } if *n > max_batch => {
            Err(HookFault::InvalidAnswer(format!(
                "batch size {n} for batch {} of group {} exceeds the budget of {max_batch} ({})",
                progress.batches_done + 1,
                progress.group.name,
                progress.max_batch_reason
            )))
        }
        BatchAnswer::Pause { seconds, .. } => check_wait(*seconds).map(|_| answer),
        _ => Ok(answer),
    }
}

fn check_wait(seconds: u32) -> Result<(), HookFault> {
    if seconds == 0 || seconds > MAX_WAIT_SECONDS {
        return Err(HookFault::InvalidAnswer(format!(
            "wait of {seconds}s is outside 1s..{MAX_WAIT_SECONDS}s"
        )));
    }
    Ok(())
}

/// Asks the gates whether to go on.
pub fn gate(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    phase: Phase,
    batch: &BatchInfo,
    summary: &HealthSummary,
    warnings: &mut Vec<String>,
) -> Result<GateDecision, HookFailed> {
    most_careful(hooks, warnings, |hook| {
        hook.gate(ctx, phase, batch, summary)
    })
}

/// Asks the gates whether a fleet goes on to `stage` (the phase `before-stage`).
pub fn stage_gate(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    stage: &StageInfo,
    previous: Option<&StageOutcome>,
    warnings: &mut Vec<String>,
) -> Result<GateDecision, HookFailed> {
    most_careful(hooks, warnings, |hook| {
        hook.stage_gate(ctx, stage, previous)
    })
}

/// The most careful verdict of the gates that decide, each asked with `ask`.
fn most_careful(
    hooks: &mut [Box<dyn Hook>],
    warnings: &mut Vec<String>,
    mut ask: impl FnMut(&mut dyn Hook) -> Result<GateAnswer, HookFault>,
) -> Result<GateDecision, HookFailed> {
    let mut decision = GateDecision {
        verdict: Verdict::Proceed,
        by: DecidedBy::BuiltIn,
    };
    for hook in hooks.iter_mut() {
        if !decides(hook.as_ref(), HookPoint::Gate) {
            continue;
        }
        let verdict = match ask(hook.as_mut()).and_then(checked_verdict) {
            Ok(None) => continue,
            Ok(Some(verdict)) => verdict,
            Err(fault) => {
                on_fault(hook.as_ref(), HookPoint::Gate, fault, warnings)?;
                continue;
            }
        };
        if severity(&verdict) > severity(&decision.verdict) || decision.by == DecidedBy::BuiltIn {
            decision = GateDecision {
                verdict,
                by: DecidedBy::Hook(hook.name().to_string()),
            };
        }
    }
    Ok(decision)
}

/// One gate's verdict, checked: `None` when it defers.
pub(crate) fn ask_gate(
    hook: &mut dyn Hook,
    ctx: &CallContext,
    phase: Phase,
    batch: &BatchInfo,
    summary: &HealthSummary,
) -> Result<Option<Verdict>, HookFault> {
    checked_verdict(hook.gate(ctx, phase, batch, summary)?)
}

/// A gate's answer as a verdict (`None` when it defers), its wait bounded.
pub(crate) fn checked_verdict(answer: GateAnswer) -> Result<Option<Verdict>, HookFault> {
    Ok(match answer {
        GateAnswer::Defer => None,
        GateAnswer::Proceed => Some(Verdict::Proceed),
        GateAnswer::Wait { seconds, reason } => {
            check_wait(seconds)?;
            Some(Verdict::Wait { seconds, reason })
        }
        GateAnswer::Abort(reason) => Some(Verdict::Abort(if reason.trim().is_empty() {
            "no reason given".into()
        } else {
            reason
        })),
    })
}

/// Orders verdicts from the least to the most careful.
fn severity(v: &Verdict) -> u64 {
    match v {
        Verdict::Proceed => 0,
        Verdict::Wait { seconds, .. } => 1 + u64::from(*seconds),
        Verdict::Abort(_) => u64::MAX,
    }
}

mod drain_order;
pub use drain_order::{DrainOrdered, drain_order};
pub(crate) use drain_order::{ask as ask_drain_order, describe as describe_turns};

#[cfg(test)]
pub(crate) mod tests;
