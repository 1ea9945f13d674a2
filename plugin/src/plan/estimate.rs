//! How long a plan takes: each batch, group and the run, estimated from what this cluster has
//! shown (the durations earlier runs measured, per group), else from the policy's
//! `spec.estimates`, else from built-in defaults, each estimate saying which it rests on. What
//! the plan foresees (a window's pause, a gate's wait, a soak) and the run's configured delays
//! are added as they are. Pure: the history is read and written by the cluster layer and
//! measured by the run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::rolling_update::planning::StepDecisions;
use super::{BatchPlan, GroupPlan, Plan, Role};
use crate::policy::StatedDurations;

/// A measured part of a run, by the name it has in the history and in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Stage {
    /// A batch's drain, from its first cordon to its last pod gone, per budget wave.
    Drain,
    /// From a batch's termination to its replacements Ready (booting and joining).
    Replacement,
    /// From the replacements Ready to the cluster validated.
    Validation,
    /// From a batch's termination to its evicted pods Ready again (groups kept by their pods).
    PodsBack,
    /// The rest of a batch: API calls, and waiting for an earlier batch's replacements.
    Other,
    /// A run's start (connecting, locking, reading the cluster) and its end.
    Setup,
    /// A rolling update's step: its pods changed and Ready again, gates asked.
    Step,
}

impl Stage {
    pub const ALL: [Stage; 7] = [
        Stage::Drain,
        Stage::Replacement,
        Stage::Validation,
        Stage::PodsBack,
        Stage::Other,
        Stage::Setup,
        Stage::Step,
    ];

    /// How messages name it.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Drain => "drain",
            Stage::Replacement => "replacement joining",
            Stage::Validation => "validation",
            Stage::PodsBack => "evicted pods back",
            Stage::Other => "batch overhead",
            Stage::Setup => "run setup",
            Stage::Step => "step's pods Ready",
        }
    }

    /// The built-in guess in milliseconds, for a cluster with no history and a policy that
    /// states none.
    pub fn default_millis(self) -> u64 {
        1000 * match self {
            Stage::Drain => 60,
            Stage::Replacement => 300,
            Stage::Validation => 30,
            Stage::PodsBack => 60,
            Stage::Other => 5,
            Stage::Setup => 5,
            Stage::Step => 60,
        }
    }

    fn stated(self, stated: &StatedDurations) -> Option<Duration> {
        match self {
            Stage::Drain => stated.drain,
            Stage::Replacement => stated.replacement,
            Stage::Validation => stated.validation,
            Stage::PodsBack => stated.pods_back,
            Stage::Other | Stage::Setup | Stage::Step => None,
        }
    }
}

/// Samples kept per group and stage, newest last: recent runs speak for the cluster as it is.
pub const KEPT_SAMPLES: usize = 20;
/// Runs remembered per group.
pub const KEPT_RUNS: usize = 10;

/// What recent runs measured in one group: durations in milliseconds per stage, and which
/// runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupHistory {
    #[serde(default)]
    pub runs: Vec<String>,
    #[serde(default)]
    pub samples: BTreeMap<Stage, Vec<u64>>,
}

impl GroupHistory {
    /// Adds every stage run `run_id` measured (milliseconds).
    pub fn record_all(&mut self, run_id: &str, measured: &[(Stage, u64)]) {
        for (stage, millis) in measured {
            self.record(run_id, *stage, *millis);
        }
    }

    /// Adds what run `run_id` measured, forgetting the oldest beyond the bounds.
    pub fn record(&mut self, run_id: &str, stage: Stage, millis: u64) {
        let samples = self.samples.entry(stage).or_default();
        samples.push(millis);
        let excess = samples.len().saturating_sub(KEPT_SAMPLES);
        samples.drain(..excess);
        if !self.runs.iter().any(|r| r == run_id) {
            self.runs.push(run_id.to_string());
            let excess = self.runs.len().saturating_sub(KEPT_RUNS);
            self.runs.drain(..excess);
        }
    }
}

/// The cluster's history: per group.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub groups: BTreeMap<String, GroupHistory>,
}

/// The run's fixed waits that a plan does not list: configured, so added as they are.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FixedWaits {
    pub post_drain_delay: Duration,
    pub load_balancer_delay: Duration,
    pub bastion_interval: Duration,
    pub master_interval: Duration,
    pub node_interval: Duration,
    /// `--cloudonly`: nothing is drained and nothing waited for after termination.
    pub cloud_only: bool,
}

impl FixedWaits {
    fn interval(&self, role: Role) -> u64 {
        millis(match role {
            Role::Bastion => self.bastion_interval,
            Role::ControlPlane => self.master_interval,
            Role::Node => self.node_interval,
        })
    }
}

/// A duration estimate, as plans and events show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Estimate {
    /// The likely duration (each measured stage at its median).
    pub seconds: u64,
    /// A cautious one (each measured stage at its 90th percentile).
    pub p90_seconds: u64,
    /// When it likely ends, from the plan's `--now`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ends_at: Option<String>,
    /// Of `seconds`, what the plan foresees waiting: windows' pauses, gates' waits, soaks.
    #[serde(skip_serializing_if = "is_zero")]
    pub foreseen_wait_seconds: u64,
    /// What it rests on: history of N runs, the policy's `spec.estimates`, defaults.
    pub basis: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a stage's figures came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    History,
    OtherGroups,
    Policy,
    Default,
}

/// A stage's or a step's duration in milliseconds: likely and cautious, and what was foreseen
/// waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    p50: u64,
    p90: u64,
    waits: u64,
}

impl std::ops::Add for Span {
    type Output = Span;
    fn add(self, o: Span) -> Span {
        Span {
            p50: self.p50 + o.p50,
            p90: self.p90 + o.p90,
            waits: self.waits + o.waits,
        }
    }
}

impl Span {
    fn fixed(millis: u64) -> Span {
        Span {
            p50: millis,
            p90: millis,
            waits: 0,
        }
    }

    /// A wait the plan foresees, of `seconds`.
    fn waited(seconds: u64) -> Span {
        Span {
            p50: seconds * 1000,
            p90: seconds * 1000,
            waits: seconds * 1000,
        }
    }

    fn times(self, n: u64) -> Span {
        Span {
            p50: self.p50 * n,
            p90: self.p90 * n,
            waits: self.waits * n,
        }
    }
}

/// The `q`th percentile (0–100) of `samples`, nearest rank.
pub fn percentile(samples: &[u64], q: u64) -> Option<u64> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (q * sorted.len() as u64).div_ceil(100).max(1);
    sorted.get(rank as usize - 1).copied()
}

/// Estimates plans from a history, the policy's stated durations and the run's fixed waits.
pub struct Estimator<'a> {
    pub history: &'a History,
    pub stated: &'a StatedDurations,
    pub fixed: FixedWaits,
}

/// What an estimate rested on, stage by stage, and how many runs' history it used.
#[derive(Default)]
struct Bases {
    by_stage: BTreeMap<Stage, Source>,
    runs: BTreeSet<String>,
}

impl Bases {
    fn merge(&mut self, other: &Bases) {
        for (stage, source) in &other.by_stage {
            let kept = self.by_stage.entry(*stage).or_insert(*source);
            *kept = (*kept).min(*source);
        }
        self.runs.extend(other.runs.iter().cloned());
    }

    /// "history of 3 runs", "defaults: no history", or a list of what rests on what.
    fn describe(&self) -> String {
        let of = |source: Source| -> Vec<&'static str> {
            (self.by_stage.iter())
                .filter(|(_, s)| **s == source)
                .map(|(stage, _)| stage.describe())
                .collect()
        };
        let (history, others, policy, defaults) = (
            of(Source::History),
            of(Source::OtherGroups),
            of(Source::Policy),
            of(Source::Default),
        );
        if history.is_empty() && others.is_empty() {
            return match (policy.is_empty(), defaults.is_empty()) {
                (true, _) => "defaults: no history".into(),
                (false, true) => "policy (spec.estimates): no history".into(),
                (false, false) => format!(
                    "policy (spec.estimates) for {}; defaults for {}: no history",
                    policy.join(", "),
                    defaults.join(", ")
                ),
            };
        }
        let runs = self.runs.len();
        let mut parts = Vec::new();
        if !history.is_empty() {
            let plural = if runs == 1 { "" } else { "s" };
            parts.push(format!("history of {runs} run{plural}"));
        }
        if !others.is_empty() {
            parts.push(format!("other groups' history for {}", others.join(", ")));
        }
        if !policy.is_empty() {
            parts.push(format!("policy for {}", policy.join(", ")));
        }
        if !defaults.is_empty() {
            parts.push(format!("defaults for {}", defaults.join(", ")));
        }
        parts.join("; ")
    }
}

impl Estimator<'_> {
    /// A stage's figures for `group`: its own history, else the other groups', else the policy,
    /// else the default.
    fn stage(&self, group: &str, stage: Stage, bases: &mut Bases) -> Span {
        let own = self.history.groups.get(group);
        let samples = own
            .and_then(|h| h.samples.get(&stage))
            .filter(|s| !s.is_empty());
        let (span, source) = if let Some(samples) = samples {
            bases
                .runs
                .extend(own.into_iter().flat_map(|h| h.runs.iter().cloned()));
            (spread(samples), Source::History)
        } else {
            let pooled: Vec<u64> = (self.history.groups.values())
                .flat_map(|h| h.samples.get(&stage).into_iter().flatten().copied())
                .collect();
            if !pooled.is_empty() {
                (spread(&pooled), Source::OtherGroups)
            } else if let Some(stated) = stage.stated(self.stated) {
                (Span::fixed(millis(stated)), Source::Policy)
            } else {
                (Span::fixed(stage.default_millis()), Source::Default)
            }
        };
        bases.by_stage.insert(stage, source);
        span
    }

    /// Whether `group`'s history shows a wait for evicted pods (a group kept by its pods).
    fn waits_for_pods(&self, group: &str) -> bool {
        (self.history.groups.get(group)).is_some_and(|h| {
            h.samples
                .get(&Stage::PodsBack)
                .is_some_and(|s| !s.is_empty())
        })
    }

    /// One batch of `group`: what the plan foresees before it, its drain (once per budget
    /// wave), the fixed delays, the replacements joining, validation, and its soak.
    fn batch(&self, group: &GroupPlan, batch: &BatchPlan, bases: &mut Bases) -> Span {
        let name = &group.group.name;
        let role = group.group.role;
        if batch.surge {
            // New instances come up; nothing is drained or validated yet.
            return self.stage(name, Stage::Other, bases)
                + self.stage(name, Stage::Replacement, bases);
        }
        let mut span = Span::default();
        if let Some(pause) = &batch.pause {
            span = span + Span::waited(pause.seconds);
        }
        for gate in [&batch.gate, &batch.after_gate].into_iter().flatten() {
            span = span + Span::waited(u64::from(gate.seconds.unwrap_or(0)));
        }
        span = span + self.replacement(name, role, waves(batch), bases);
        if let Some(soak) = batch.soak_seconds {
            span = span + Span::waited(u64::from(soak));
        }
        span
    }

    /// A batch's replacement itself: its drain (`waves` times), the fixed delays, the
    /// replacements joining (or the evicted pods back), validation, and the rest.
    fn replacement(&self, name: &str, role: Role, waves: u64, bases: &mut Bases) -> Span {
        let mut span = self.stage(name, Stage::Other, bases);
        if !self.fixed.cloud_only && role != Role::Bastion {
            span = span + self.stage(name, Stage::Drain, bases).times(waves);
            span = span + Span::fixed(millis(self.fixed.post_drain_delay));
            span = span + Span::fixed(millis(self.fixed.load_balancer_delay));
        }
        span = span + Span::fixed(self.fixed.interval(role));
        if !self.fixed.cloud_only {
            if self.waits_for_pods(name) {
                span = span + self.stage(name, Stage::PodsBack, bases);
            }
            span = span + self.stage(name, Stage::Replacement, bases);
            span = span + self.stage(name, Stage::Validation, bases);
        }
        span
    }

    /// Fills the estimates of a rolling update's `steps` (each its pods changed and Ready
    /// again, after what the plan foresees before it: a pause, a gate's wait) and returns the
    /// update's, under the history of `workload` (`sts/NAMESPACE/NAME`), from `now`.
    pub fn update<'s>(
        &self,
        workload: &str,
        steps: impl Iterator<Item = &'s mut StepDecisions>,
        now: i64,
    ) -> Estimate {
        let mut run_bases = Bases::default();
        let mut elapsed = self.stage(workload, Stage::Setup, &mut run_bases);
        for step in steps {
            let mut bases = Bases::default();
            let mut span = self.stage(workload, Stage::Step, &mut bases);
            if let Some(pause) = &step.pause {
                span = span + Span::waited(pause.seconds);
            }
            if let Some(gate) = &step.gate {
                span = span + Span::waited(u64::from(gate.seconds.unwrap_or(0)));
            }
            elapsed = elapsed + span;
            step.estimate = Some(estimate(span, Some(now + seconds(elapsed.p50)), &bases));
            run_bases.merge(&bases);
        }
        estimate(elapsed, Some(now + seconds(elapsed.p50)), &run_bases)
    }

    /// Fills the estimates of `plan`: every batch, every group and the run, each with the time
    /// it likely ends from `now` (seconds since the Unix epoch).
    pub fn annotate(&self, plan: &mut Plan, now: i64) {
        let mut run_bases = Bases::default();
        let mut elapsed = self.stage_of_run(&plan.groups, &mut run_bases);
        for group in &mut plan.groups {
            let mut group_bases = Bases::default();
            let mut total = Span::default();
            if let Some(gate) = &group.gate {
                let wait = Span::waited(u64::from(gate.seconds.unwrap_or(0)));
                total = total + wait;
                elapsed = elapsed + wait;
            }
            let mut estimates = Vec::new();
            for batch in &group.batches {
                let mut bases = Bases::default();
                let span = self.batch(group, batch, &mut bases);
                total = total + span;
                elapsed = elapsed + span;
                estimates.push(estimate(span, Some(now + seconds(elapsed.p50)), &bases));
                group_bases.merge(&bases);
            }
            for (batch, e) in group.batches.iter_mut().zip(estimates) {
                batch.estimate = Some(e);
            }
            let ends = (!group.batches.is_empty()).then_some(now + seconds(elapsed.p50));
            group.estimate = Some(estimate(total, ends, &group_bases));
            run_bases.merge(&group_bases);
        }
        plan.estimate = Some(estimate(
            elapsed,
            Some(now + seconds(elapsed.p50)),
            &run_bases,
        ));
    }

    /// The run's setup, from the history of the groups it rotates.
    fn stage_of_run(&self, groups: &[GroupPlan], bases: &mut Bases) -> Span {
        let first = groups.iter().find(|g| !g.batches.is_empty());
        first.map_or_else(Span::default, |g| {
            self.stage(&g.group.name, Stage::Setup, bases)
        })
    }

    /// The 90th percentile of `stage` in `group`'s own history, in milliseconds: the point past
    /// which a run is slower than this cluster has been. None without history.
    pub fn slow_after(&self, group: &str, stage: Stage) -> Option<u64> {
        let samples = self.history.groups.get(group)?.samples.get(&stage)?;
        percentile(samples, 90)
    }
}

/// How many times the batch's drain waits for a budget: the most waves any budget makes its
/// evictions go in (1 when none serializes them).
fn waves(batch: &BatchPlan) -> u64 {
    (batch.forecast.iter())
        .flat_map(|f| f.waits.iter())
        .map(|w| u64::from(w.waves))
        .max()
        .unwrap_or(1)
        .max(1)
}

fn spread(samples: &[u64]) -> Span {
    Span {
        p50: percentile(samples, 50).unwrap_or(0),
        p90: percentile(samples, 90).unwrap_or(0),
        waits: 0,
    }
}

fn estimate(span: Span, ends: Option<i64>, bases: &Bases) -> Estimate {
    Estimate {
        seconds: seconds(span.p50) as u64,
        p90_seconds: seconds(span.p90.max(span.p50)) as u64,
        ends_at: ends.and_then(|t| jiff::Timestamp::from_second(t).ok().map(|t| t.to_string())),
        foreseen_wait_seconds: seconds(span.waits) as u64,
        basis: bases.describe(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds as whole seconds, rounded.
fn seconds(millis: u64) -> i64 {
    i64::try_from(millis.saturating_add(500) / 1000).unwrap_or(i64::MAX)
}

mod work;

pub use work::{AskedAbout, Durations, StepEstimates, WorkTally};

#[cfg(test)]
mod tests;
