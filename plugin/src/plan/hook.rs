//! What the planner asks a policy hook and what it may answer, independent of how the hook runs.
//!
//! The WebAssembly host (`crate::hooks`) implements [`Hook`]; unit tests implement it with plain
//! closures. Answers are checked by [`crate::plan::decide`] before anything uses them.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::Duration;

use super::estimate::Estimate;
use crate::labels::Labels;
use crate::plan::Role;
use crate::policy::{FailurePolicy, HookMode, HookPoint};
use crate::snapshot::{Pod, Taint};

/// What an instance stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceKind {
    Node,
    Pod,
}

/// A candidate for replacement, as a hook sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub kind: InstanceKind,
    pub name: String,
    pub group: String,
    pub role: Role,
    pub zone: Option<String>,
    pub labels: Labels,
    pub annotations: Labels,
    pub taints: Vec<Taint>,
    pub ready: bool,
    pub unschedulable: bool,
    pub created: Option<i64>,
    pub kubelet_version: Option<String>,
    pub pods: u32,
    pub pods_not_ready: u32,
    /// Whether the built-in rules find it up to date (a hook must `force` to choose it).
    pub up_to_date: bool,
    /// Why it is in the current choice: the built-in rules' reason or an earlier hook's; none
    /// when it is not chosen.
    pub reason: Option<String>,
}

/// A group and its budget, as a hook sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupInfo {
    pub name: String,
    pub role: Role,
    pub size: u32,
    pub up_to_date: u32,
    pub selected: u32,
    pub max_surge: u32,
    pub max_unavailable: u32,
}

/// What every call is told about the run.
#[derive(Debug, Clone, PartialEq)]
pub struct CallContext {
    pub now: i64,
    pub run_id: String,
    pub dry_run: bool,
    /// What a hook asking `estimates` (contract 0.3.5) is told.
    pub timing: Timing,
    /// What a hook asking `others-disrupting` (contract 0.3.7) is told: the nodes of the group
    /// at hand other tools are taking out.
    pub others: Vec<super::ledger::Disruption>,
}

/// How long the decision at hand likely takes to carry out, and the run after it: the same
/// estimator the plan's estimates come from, asked by the driver with each question.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timing {
    /// The batch (or step) the call is about; none when it is about none.
    pub batch: Option<Estimate>,
    /// What is left of the run from this call on, the batch at hand included.
    pub remaining: Option<Estimate>,
}

/// Where a group's update stands when the next batch is sized.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress<'a> {
    pub group: &'a GroupInfo,
    pub batches_done: u32,
    pub updated: u32,
    pub pending: Instances,
    pub max_batch: u32,
    /// Why `max_batch` is the built-in size (the budget, the canary, the last few).
    pub max_batch_reason: String,
}

/// A list of instances a hook reads on demand: the candidates of a selection, or the ones still
/// to update in update order. A window of a list shared by every batch of a group, so that
/// handing the next batch's candidates to a hook copies nothing (the WebAssembly host keeps them
/// for the hook to read from).
#[derive(Debug, Clone, PartialEq)]
pub struct Instances {
    order: Arc<[Candidate]>,
    window: Range<usize>,
}

impl Instances {
    /// All of `order`.
    pub fn new(order: Arc<[Candidate]>) -> Instances {
        let window = 0..order.len();
        Instances { order, window }
    }

    /// These instances from the `start`th on, at most `len` of them.
    pub fn window(&self, start: usize, len: usize) -> Instances {
        let start = (self.window.start + start).min(self.window.end);
        let end = start.saturating_add(len).min(self.window.end);
        Instances {
            order: self.order.clone(),
            window: start..end,
        }
    }
}

impl Deref for Instances {
    type Target = [Candidate];

    fn deref(&self) -> &[Candidate] {
        &self.order[self.window.clone()]
    }
}

impl From<Vec<Candidate>> for Instances {
    fn from(order: Vec<Candidate>) -> Instances {
        Instances::new(order.into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    BeforeGroup,
    BeforeBatch,
    AfterBatch,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::BeforeGroup => "before-group",
            Phase::BeforeBatch => "before-batch",
            Phase::AfterBatch => "after-batch",
        }
    }
}

/// The batch a gate is asked about.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BatchInfo {
    pub index: u32,
    pub instances: Vec<String>,
    pub canary: bool,
    pub attempt: u32,
}

/// The stage of a fleet a `before-stage` gate is asked about (contract 0.3.6).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StageInfo {
    /// The fleet's name.
    #[serde(default)]
    pub fleet: String,
    #[serde(default)]
    pub index: u32,
    pub name: String,
    /// Its clusters' kubeconfig contexts.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// How many times the gates have answered `wait` for this stage so far.
    #[serde(default)]
    pub attempt: u32,
}

/// How a cluster's rotation in a fleet ended, as a stage gate is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterOutcome {
    Succeeded,
    /// Done but for nodes it set aside (exit code 6).
    NodesSetAside,
}

/// One cluster of the stage before, as it ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClusterResult {
    pub cluster: String,
    pub outcome: ClusterOutcome,
    /// Seconds since the Unix epoch.
    pub finished: i64,
}

/// The stage before the one a gate is asked about, as it ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageOutcome {
    pub name: String,
    pub clusters: Vec<ClusterResult>,
    /// Seconds since its last cluster ended.
    pub soaked_seconds: u64,
}

/// A PodDisruptionBudget covering pods of a batch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetCover {
    pub namespace: String,
    pub name: String,
    pub disruptions_allowed: i32,
    pub pods_in_batch: u32,
}

/// The cluster's health as validation saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HealthSummary {
    pub nodes_total: u32,
    pub nodes_not_ready: u32,
    pub nodes_unschedulable: u32,
    pub pods_total: u32,
    pub pods_not_ready: u32,
    pub system_pods_not_ready: u32,
    pub budgets: Vec<BudgetCover>,
    pub failures: Vec<String>,
}

/// One chosen instance and the hook's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub name: String,
    pub reason: String,
    /// The hook replaces it even though it is up to date.
    pub force: bool,
}

/// One chosen instance by its index among the candidates offered, and the hook's reason: a
/// flat answer (contract 0.3.4) is read into these as it is cut, without a string per name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub index: u32,
    pub reason: String,
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectAnswer {
    Defer,
    Choose(Vec<Choice>),
    /// The same, each candidate found already.
    ChooseAt(Vec<Pick>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchAnswer {
    Defer,
    Size { count: u32, reason: String },
    Pause { seconds: u32, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateAnswer {
    Defer,
    Proceed,
    Wait { seconds: u32, reason: String },
    Abort(String),
}

/// Why a hook gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookFault {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("ran out of memory (limit {} MiB)", .0 >> 20)]
    OutOfMemory(u64),
    #[error("trapped: {0}")]
    Trap(String),
    #[error("returned an error: {0}")]
    Refused(String),
    #[error("gave an invalid answer: {0}")]
    InvalidAnswer(String),
    #[error("answer of {size} bytes exceeds the {limit}-byte limit")]
    AnswerTooLarge { size: usize, limit: usize },
    #[error("does not implement the {0} point")]
    NotImplemented(HookPoint),
    /// It asked a metrics source the policy does not grant it: a fault whatever it answered,
    /// so that the plan and the run name the hook.
    #[error(
        "asked metrics source {0:?}, which the policy does not grant it (add it to the hook's `metrics`)"
    )]
    MetricsNotGranted(String),
    #[error("timed out after {after:?} waiting on metrics source {name}")]
    MetricsTimeout { after: Duration, name: String },
    /// It listed objects the policy does not grant it: a fault whatever it answered (a gate
    /// that cannot read its data must not pass for one that read it and proceeded).
    #[error("read {0}")]
    ObjectsNotGranted(String),
}

/// One policy hook.
pub trait Hook {
    fn name(&self) -> &str;
    /// The points it is asked at.
    fn points(&self) -> &[HookPoint];
    /// Points the module implements that the policy does not enable: never asked, shown as a
    /// warning so that a point left out by mistake does not vanish silently.
    fn left_out(&self) -> &[HookPoint] {
        &[]
    }
    fn failure_policy(&self) -> FailurePolicy;
    /// Whether its answers decide, or are only reported beside the decision ([`HookMode::Shadow`]).
    fn mode(&self) -> HookMode {
        HookMode::Enforce
    }

    fn select(
        &mut self,
        ctx: &CallContext,
        group: &GroupInfo,
        candidates: &Instances,
    ) -> Result<SelectAnswer, HookFault>;

    fn next_batch(
        &mut self,
        ctx: &CallContext,
        progress: &Progress,
    ) -> Result<BatchAnswer, HookFault>;

    fn gate(
        &mut self,
        ctx: &CallContext,
        phase: Phase,
        batch: &BatchInfo,
        summary: &HealthSummary,
    ) -> Result<GateAnswer, HookFault>;

    /// Whether a fleet goes on to `stage` (the gate phase `before-stage`), `previous` being the
    /// stage before it as it ended. Modules before contract 0.3.6 do not serve it: they defer.
    fn stage_gate(
        &mut self,
        _ctx: &CallContext,
        _stage: &StageInfo,
        _previous: Option<&StageOutcome>,
    ) -> Result<GateAnswer, HookFault> {
        Ok(GateAnswer::Defer)
    }

    /// The turns in which the drain of `node` evicts `pods`. Modules of contract 0.3.0 do not
    /// serve this point: they defer.
    fn drain_order(
        &mut self,
        _ctx: &CallContext,
        _node: &str,
        _pods: &[Pod],
    ) -> Result<DrainOrderAnswer, HookFault> {
        Ok(DrainOrderAnswer::Defer)
    }
}

/// A hook's answer at the `drain-order` point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOrderAnswer {
    Defer,
    /// Turns of pods, `namespace/name`, as the hook gave them (not yet checked).
    Turns(Vec<Vec<String>>),
}

/// `hook/<name>`, or `built-in`: who decided something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    BuiltIn,
    Hook(String),
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecidedBy::BuiltIn => f.write_str("built-in"),
            DecidedBy::Hook(name) => write!(f, "hook/{name}"),
        }
    }
}

impl serde::Serialize for DecidedBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Instances {
        let all: Vec<Candidate> = names
            .iter()
            .map(|n| crate::plan::decide::tests::candidate(n, None))
            .collect();
        all.into()
    }

    fn names(p: &Instances) -> Vec<&str> {
        p.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn windows_are_clamped_and_nest() {
        let all = named(&["a", "b", "c", "d", "e"]);
        let cases: &[(usize, usize, &[&str])] = &[
            (0, 2, &["a", "b"]),
            (3, 10, &["d", "e"]),
            (5, 1, &[]),
            (9, 9, &[]),
            (1, usize::MAX, &["b", "c", "d", "e"]),
        ];
        for (start, len, expected) in cases {
            assert_eq!(names(&all.window(*start, *len)), *expected, "{start}+{len}");
        }
        // A window of a window counts from its own start and never reaches past its end.
        let inner = all.window(1, 3).window(1, 5);
        assert_eq!(names(&inner), ["c", "d"]);
    }
}
