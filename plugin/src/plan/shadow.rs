//! Shadow hooks (`mode: Shadow` in the policy): how a site tries a policy on real rotations
//! before trusting it. A shadow hook is asked once per real decision at every point it serves,
//! with the input the built-in rules see, as if it were the site's only hook; what it would
//! decide is reported beside the decision taken, with whether the two agree. Nothing it answers
//! is acted on, and its faults are reported the same way: a shadow hook never stops a run.

use serde::Serialize;

use crate::plan::decide::{
    self, BatchDecision, Chosen, GateDecision, Selected, Verdict, built_in_choice,
};
use crate::plan::hook::{
    BatchAnswer, BatchInfo, CallContext, Candidate, GroupInfo, HealthSummary, Hook, HookFault,
    Phase, Progress,
};
use crate::policy::{HookMode, HookPoint};

/// How many names a selection's words show before counting the rest.
const NAMES_SHOWN: usize = 8;

/// What a shadow hook would have decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowDecision {
    pub hook: String,
    pub point: HookPoint,
    /// The gate's phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// In the words of a decision: `defer`, `order a, b, …`, `size 2: …`, `pause 60s: …`,
    /// `proceed`, `wait 20s: …`, `abort: …`; `no answer` after a fault.
    pub decision: String,
    /// Whether the run would do the same were this hook deciding alone (a defer agrees with
    /// the built-in behaviour).
    pub agrees: bool,
    /// Why it gave no usable answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ShadowDecision {
    /// `hook/NAME (shadow) would DECISION; agrees|differs`: one line for a table or an event.
    pub fn describe(&self) -> String {
        match &self.error {
            Some(error) => format!(
                "hook/{} (shadow) failed: {error}; shadow hooks never decide",
                self.hook
            ),
            None => format!(
                "hook/{} (shadow) would {}; {}",
                self.hook,
                self.decision,
                if self.agrees {
                    "agrees"
                } else {
                    "differs from the decision taken"
                }
            ),
        }
    }
}

/// Whether `hook` is asked at `point` in shadow.
fn in_shadow(hook: &dyn Hook, point: HookPoint) -> bool {
    hook.mode() == HookMode::Shadow && hook.points().contains(&point)
}

fn shadows(
    hooks: &mut [Box<dyn Hook>],
    point: HookPoint,
) -> impl Iterator<Item = &mut Box<dyn Hook>> {
    hooks
        .iter_mut()
        .filter(move |h| in_shadow(h.as_ref(), point))
}

fn record(
    hook: &dyn Hook,
    point: HookPoint,
    phase: Option<Phase>,
    answer: Result<(String, bool), HookFault>,
) -> ShadowDecision {
    let (decision, agrees, error) = match answer {
        Ok((decision, agrees)) => (decision, agrees, None),
        Err(fault) => ("no answer".to_string(), false, Some(fault.to_string())),
    };
    ShadowDecision {
        hook: hook.name().to_string(),
        point,
        phase,
        decision,
        agrees,
        error,
    }
}

/// The shadow selections, beside `decided`.
pub fn select(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    group: &GroupInfo,
    candidates: &[Candidate],
    decided: &Selected,
) -> Vec<ShadowDecision> {
    let built_in = built_in_choice(candidates);
    let taken: Vec<usize> = decided.chosen.iter().map(|c| c.index).collect();
    shadows(hooks, HookPoint::Select)
        .map(|hook| {
            let answer =
                decide::ask_select(hook.as_mut(), ctx, group, candidates, &built_in).map(|order| {
                    match order {
                        None => ("defer".to_string(), indexes(&built_in) == taken),
                        Some(order) => (order_words(&order, candidates), indexes(&order) == taken),
                    }
                });
            record(hook.as_ref(), HookPoint::Select, None, answer)
        })
        .collect()
}

fn indexes(chosen: &[Chosen]) -> Vec<usize> {
    chosen.iter().map(|c| c.index).collect()
}

/// `order a, b, c` with the first names, and how many there are in all when that is more.
fn order_words(order: &[Chosen], candidates: &[Candidate]) -> String {
    let names: Vec<&str> = order
        .iter()
        .take(NAMES_SHOWN)
        .map(|c| candidates[c.index].name.as_str())
        .collect();
    let more = if order.len() > NAMES_SHOWN {
        format!(", … ({} in all)", order.len())
    } else {
        String::new()
    };
    if order.is_empty() {
        "choose none".to_string()
    } else {
        format!("order {}{more}", names.join(", "))
    }
}

/// The shadow batch sizes, beside `decided`.
pub fn batch_size(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    progress: &Progress,
    decided: &BatchDecision,
) -> Vec<ShadowDecision> {
    let built_in = decide::built_in_size(progress);
    let shown = decide::shown(progress);
    shadows(hooks, HookPoint::Batch)
        .map(|hook| {
            let answer = decide::ask_batch(hook.as_mut(), ctx, &shown).map(|answer| {
                let would = match answer {
                    BatchAnswer::Defer => None,
                    BatchAnswer::Size { count, reason } => Some(BatchDecision::Size {
                        size: count,
                        reason,
                        by: decided.by().clone(),
                    }),
                    BatchAnswer::Pause { seconds, reason } => Some(BatchDecision::Pause {
                        seconds,
                        reason,
                        by: decided.by().clone(),
                    }),
                };
                match would {
                    None => ("defer".to_string(), same_batch(&built_in, decided)),
                    Some(would) => (would.to_string(), same_batch(&would, decided)),
                }
            });
            record(hook.as_ref(), HookPoint::Batch, None, answer)
        })
        .collect()
}

/// The same action: the same size, or a pause of the same length.
fn same_batch(a: &BatchDecision, b: &BatchDecision) -> bool {
    match (a, b) {
        (BatchDecision::Size { size: x, .. }, BatchDecision::Size { size: y, .. }) => x == y,
        (BatchDecision::Pause { seconds: x, .. }, BatchDecision::Pause { seconds: y, .. }) => {
            x == y
        }
        _ => false,
    }
}

/// The shadow gates' verdicts, beside `decided`.
pub fn gate(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    phase: Phase,
    batch: &BatchInfo,
    summary: &HealthSummary,
    decided: &GateDecision,
) -> Vec<ShadowDecision> {
    shadows(hooks, HookPoint::Gate)
        .map(|hook| {
            let answer =
                decide::ask_gate(hook.as_mut(), ctx, phase, batch, summary).map(|verdict| {
                    match verdict {
                        None => (
                            "defer".to_string(),
                            same_verdict(&Verdict::Proceed, decided),
                        ),
                        Some(v) => (v.to_string(), same_verdict(&v, decided)),
                    }
                });
            record(hook.as_ref(), HookPoint::Gate, Some(phase), answer)
        })
        .collect()
}

/// The same verdict: both go on, both wait as long, or both abort.
fn same_verdict(v: &Verdict, decided: &GateDecision) -> bool {
    match (v, &decided.verdict) {
        (Verdict::Proceed, Verdict::Proceed) | (Verdict::Abort(_), Verdict::Abort(_)) => true,
        (Verdict::Wait { seconds: x, .. }, Verdict::Wait { seconds: y, .. }) => x == y,
        _ => false,
    }
}

/// The shadow drain orders for the drain of `node`, beside `decided`.
pub fn drain_order(
    hooks: &mut [Box<dyn Hook>],
    ctx: &CallContext,
    node: &str,
    pods: &[crate::snapshot::Pod],
    decided: &decide::DrainOrdered,
) -> Vec<ShadowDecision> {
    shadows(hooks, HookPoint::DrainOrder)
        .map(|hook| {
            let answer = decide::ask_drain_order(hook.as_mut(), ctx, node, pods).map(|turns| {
                let agrees = turns == decided.turns;
                match turns {
                    None => ("defer".to_string(), agrees),
                    Some(turns) => (decide::describe_turns(Some(&turns)), agrees),
                }
            });
            record(hook.as_ref(), HookPoint::DrainOrder, None, answer)
        })
        .collect()
}

#[cfg(test)]
mod tests;
