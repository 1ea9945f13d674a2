//! Pure planning: the flows as step machines ([`group_loop`]), the batch math, and the
//! [`Plan`] the planner records by driving them. No I/O happens here (this module must not
//! import `hooks`, `cluster` or `progress`): hooks are reached through the [`hook::Hook`]
//! trait, and time is an input.
//!
//! The plan is what the rotation would do if every batch succeeded: groups in seed order, each
//! with its resolved budget, its instances in update order with the reason and who decided, and
//! the batches (surges, canary, waves) the executor runs, from the same step machine.

pub mod budget;
pub mod capacity;
pub mod decide;
pub mod drain;
pub mod estimate;
pub mod fleet;
pub mod forecast;
pub mod group_loop;
pub mod groups;
pub mod health;
pub mod hook;
mod instances;
pub mod ledger;
pub mod planner;
pub mod prepare;
pub mod rolling_update;
pub mod shadow;

use std::fmt;

use serde::Serialize;

use crate::policy::{PolicyError, RollingUpdate};
use decide::{GateDecision, HookFailed, Verdict};
use drain::DrainOptions;
use groups::Staleness;
use hook::{DecidedBy, GroupInfo, Phase};
use shadow::ShadowDecision;

pub use planner::plan_nodes;

pub const PLAN_API_VERSION: &str = "rollout-ext/v1alpha1";

/// How long the simulation follows a hook's pauses before giving up on a group.
pub(crate) const MAX_SIMULATED_PAUSE: i64 = 7 * 24 * 3600;

/// What a flow's step machine says next: ask a question (a decision for the policy), perform an
/// action, or stop with an outcome. The drivers (planner, executors) answer and carry out.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<Question, Action, Outcome> {
    Ask(Question),
    Do(Action),
    Done(Outcome),
}

/// The role of an instance group, in update order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Bastion,
    ControlPlane,
    Node,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Bastion => "bastion",
            Role::ControlPlane => "control-plane",
            Role::Node => "node",
        }
    }

    /// Parses kops' and our spellings: `Bastion`, `Master`, `ControlPlane`, `control-plane`, `Node`.
    pub fn parse(text: &str) -> Result<Role, String> {
        match text.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "bastion" => Ok(Role::Bastion),
            "master" | "controlplane" | "apiserver" => Ok(Role::ControlPlane),
            "node" => Ok(Role::Node),
            _ => Err(format!(
                "unknown instance group role {text:?}: expected bastion, control-plane (or master) or node"
            )),
        }
    }
}

/// Everything besides the snapshot and the policy that shapes a plan.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub now: i64,
    pub run_id: String,
    pub dry_run: bool,
    /// `--group-label`, else the policy's.
    pub group_label: Option<String>,
    /// Cluster-wide budget: flags over the policy's `rollingUpdate`.
    pub rolling_update: RollingUpdate,
    pub instance_groups: Vec<String>,
    pub roles: Vec<Role>,
    pub staleness: Staleness,
    pub force: bool,
    pub interactive: bool,
    pub cloud_only: bool,
    pub drain: DrainOptions,
    /// `--soak`: how long to hold after each batch, over the policy's `soakTime`.
    pub soak: Option<std::time::Duration>,
    /// Ask the after-batch gate too, judging the cluster as the plan simulates it after each
    /// batch ([`health::after_batch`]); otherwise it is assumed to proceed. Plans of `nodes` and
    /// `hooks test` (unless `--phase` leaves it out) set it.
    pub ask_after_batch: bool,
    /// What the plan's estimates, and those its hooks are told, are made from.
    pub durations: estimate::Durations,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("instance group {name:?} not found; groups in the cluster: {known}")]
    UnknownGroup { name: String, known: String },
    #[error(transparent)]
    Hook(#[from] HookFailed),
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub groups: Vec<GroupPlan>,
    pub warnings: Vec<String>,
    /// Set when a gate would stop the run: what stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// What the run does with a node whose drain cannot finish, when it sets such nodes aside
    /// (`drain.undrainable: Quarantine`); absent when it stops (the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undrainable: Option<UndrainablePlan>,
    /// The hook modules kept in registries, each with the digest its reference resolved to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<PlannedModule>,
    /// How long the run likely takes, and when it likely ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<estimate::Estimate>,
}

/// A hook module from a registry as the plan shows it: what the policy names and the manifest
/// digest that is run (a tag resolved, or the digest the policy pins).
#[derive(Debug, Clone, Serialize)]
pub struct PlannedModule {
    pub hook: String,
    pub reference: String,
    pub digest: String,
}

impl PlannedModule {
    /// The registry modules of `policy` that were pulled.
    pub fn of(policy: &crate::policy::Policy) -> Vec<PlannedModule> {
        (policy.hooks.iter())
            .filter_map(|h| match &h.module {
                crate::policy::ModuleSource::Registry {
                    reference,
                    pulled: Some(pulled),
                } => Some(PlannedModule {
                    hook: h.name.clone(),
                    reference: reference.to_string(),
                    digest: pulled.digest.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// `drain.undrainable` as the plan shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UndrainablePlan {
    pub action: &'static str,
    pub max_quarantined: u32,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupPlan {
    /// Name, role, size, up-to-date and selected counts, resolved budget.
    #[serde(flatten)]
    pub group: GroupInfo,
    pub concurrency: u32,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
    /// The group's nodes other tools are disrupting now (see [`ledger`]); the first batch takes
    /// only what they leave of the budget.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub others_disrupting: Vec<ledger::Disruption>,
    /// What shadow hooks would decide about the selection and the before-group gate.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowDecision>,
    pub instances: Vec<InstancePlan>,
    pub batches: Vec<BatchPlan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aborted: Option<String>,
    /// How long the group likely takes (its batches, its gate's wait), and when it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<estimate::Estimate>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstancePlan {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub update: bool,
    pub reason: String,
    pub decided_by: DecidedBy,
    pub pods: u32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchPlan {
    pub instances: Vec<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub canary: bool,
    /// A surge: new instances are created for these before any is drained.
    #[serde(skip_serializing_if = "is_false")]
    pub surge: bool,
    pub decided_by: DecidedBy,
    /// Why the batch has this size: the budget's limit or the batching hook's reason.
    pub size_reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
    /// The soak after it, before the next batch (then the cluster is validated again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak_seconds: Option<u32>,
    /// What will slow or stop its drain (budgets), and the pods it evicts that find no room;
    /// none when nothing is in the way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast: Option<forecast::Forecast>,
    /// The after-batch gate's verdict, when the plan asked it ([`PlanOptions::ask_after_batch`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_gate: Option<GateStep>,
    /// What shadow hooks would decide about this batch's size and its gates.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow: Vec<ShadowDecision>,
    /// Its nodes the run would likely set aside (`drain.undrainable: Quarantine`): those whose
    /// drain the forecast sees blocked, up to `maxQuarantined` over the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub likely_set_aside: Vec<String>,
    /// The runner pods of runs handed to the cluster (`--in-cluster`) on its nodes: their
    /// drain moves the run, whose Job's next pod resumes it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moves_runner: Vec<String>,
    /// How long the batch likely takes (with what the plan foresees before it), and when it
    /// ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<estimate::Estimate>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseStep {
    pub seconds: u64,
    pub reason: String,
    pub decided_by: DecidedBy,
}

impl PauseStep {
    /// Adds a hook's pause to the one pending before the next step; the latest reason and hook
    /// are shown.
    pub(crate) fn add_to(
        pending: &mut Option<PauseStep>,
        seconds: u32,
        reason: String,
        by: DecidedBy,
    ) {
        let step = pending.get_or_insert(PauseStep {
            seconds: 0,
            reason: String::new(),
            decided_by: by.clone(),
        });
        step.seconds += u64::from(seconds);
        step.reason = reason;
        step.decided_by = by;
    }
}

/// The pauses a plan simulates: each moves the plan's clock; past a week the plan stops.
#[derive(Debug, Default)]
pub(crate) struct SimulatedPauses {
    total: i64,
    /// The pause to show before the next step.
    pub pending: Option<PauseStep>,
}

impl SimulatedPauses {
    /// Moves `ctx`'s clock on by a pause of `by`; false, with a warning, once the pauses pass
    /// a week.
    pub fn add(
        &mut self,
        ctx: &mut hook::CallContext,
        seconds: u32,
        reason: String,
        by: DecidedBy,
        warnings: &mut Vec<String>,
    ) -> bool {
        self.total += i64::from(seconds);
        ctx.now += i64::from(seconds);
        let who = by.to_string();
        PauseStep::add_to(&mut self.pending, seconds, reason, by);
        if self.total > MAX_SIMULATED_PAUSE {
            warnings.push(format!(
                "{who} kept pausing for more than 7 days; the plan stops here"
            ));
            return false;
        }
        true
    }
}

/// A gate's verdict as a plan shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateVerdict {
    Proceed,
    Wait,
    Abort,
}

impl fmt::Display for GateVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GateVerdict::Proceed => "proceed",
            GateVerdict::Wait => "wait",
            GateVerdict::Abort => "abort",
        })
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateStep {
    /// When the verdict was given: before the group, before the batch or after it.
    pub phase: Phase,
    pub verdict: GateVerdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub decided_by: DecidedBy,
}

impl GateStep {
    pub(crate) fn from_decision(phase: Phase, d: GateDecision) -> Option<GateStep> {
        if d.by == DecidedBy::BuiltIn {
            return None;
        }
        let (verdict, seconds, reason) = match d.verdict {
            Verdict::Proceed => (GateVerdict::Proceed, None, None),
            Verdict::Wait { seconds, reason } => (GateVerdict::Wait, Some(seconds), Some(reason)),
            Verdict::Abort(reason) => (GateVerdict::Abort, None, Some(reason)),
        };
        Some(GateStep {
            phase,
            verdict,
            seconds,
            reason,
            decided_by: d.by,
        })
    }
}

#[cfg(test)]
mod tests;
