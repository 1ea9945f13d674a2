//! What a run has left, group by group, and what hooks are told of it with each question: the
//! planner and the run keep the same tally and ask the same estimator, so a hook sees in a plan
//! what it would see in the run, and the figure the plan prints for what is left.

use super::{Bases, Estimator, FixedWaits, History, Span, Stage, estimate, seconds};
use crate::plan::group_loop::{GroupLoop, GroupStart};
use crate::plan::hook::Timing;
use crate::plan::{BatchPlan, Role};
use crate::policy::StatedDurations;

/// What estimates are made from: the cluster's history (with what a run measured since), the
/// policy's stated durations and the run's configured waits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Durations {
    pub history: History,
    pub stated: StatedDurations,
    pub fixed: FixedWaits,
}

impl Durations {
    pub fn estimator(&self) -> Estimator<'_> {
        Estimator {
            history: &self.history,
            stated: &self.stated,
            fixed: self.fixed,
        }
    }

    /// Adds what run `run_id` measured in `group`.
    pub fn learn(&mut self, group: &str, run_id: &str, measured: &[(Stage, u64)]) {
        let entry = self.history.groups.entry(group.to_string()).or_default();
        entry.record_all(run_id, measured);
    }
}

/// One group's work as the tally keeps it.
#[derive(Debug, Clone, PartialEq)]
struct Tallied {
    group: String,
    role: Role,
    /// Instances still to replace.
    instances: usize,
    /// How many go at once.
    concurrency: usize,
    /// Whether the first batch is a canary of one still to come.
    canary: bool,
    /// The size of its last batch: the batches still to go are foreseen at that size (a
    /// hook that sizes them one at a time is told of a longer run than the budget allows).
    last_size: Option<usize>,
}

/// The groups a run rotates, in order, and what each has left.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkTally {
    groups: Vec<Tallied>,
    /// Whether a batch of the run is done: until then the run's setup is still to come.
    started: bool,
}

/// What a group has left in a run: its batches still to go.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkLeft<'a> {
    group: &'a str,
    role: Role,
    batches: u64,
}

impl WorkTally {
    /// A group the run will rotate, from its start: the built-in choice, its budget's
    /// concurrency at a time, after a canary of one when nothing is up to date and nothing
    /// surges (as the group loop goes).
    pub fn add(&mut self, group: &str, role: Role, start: &GroupStart) {
        let budget = start.budget.resolve(start.info.selected).ok();
        let concurrency = budget.map_or(1, |b| b.concurrency as usize).max(1);
        let surges = budget.is_some_and(|b| b.surge > 0) && !start.cloud_only;
        self.groups.push(Tallied {
            group: group.to_string(),
            role,
            instances: start.info.selected as usize,
            concurrency,
            canary: start.info.up_to_date == 0 && !surges,
            last_size: None,
        });
    }

    /// The selection `machine` took for `group`: its instances, its budget's concurrency at a
    /// time (nothing before the selection).
    pub fn chose(&mut self, group: &str, machine: &GroupLoop) {
        let (Some(chosen), Some(budget)) = (machine.selected(), machine.budget()) else {
            return;
        };
        if let Some(g) = self.groups.iter_mut().find(|g| g.group == group) {
            g.instances = chosen.chosen.len();
            g.concurrency = (budget.concurrency as usize).max(1);
        }
    }

    /// A batch of `replaced` instances of `group` is done: the batches still to go are
    /// foreseen at its size (unless it was the canary).
    pub fn batch_done(&mut self, group: &str, replaced: usize) {
        self.started = true;
        if let Some(g) = self.groups.iter_mut().find(|g| g.group == group) {
            // A canary's size is the rule's, not a choice the next batches follow.
            if !g.canary {
                g.last_size = Some(replaced.max(1));
            }
        }
        self.dropped(group, replaced);
    }

    /// `dropped` instances of `group` need no batch any more (gone, or replaced by a batch).
    pub fn dropped(&mut self, group: &str, dropped: usize) {
        if let Some(g) = self.groups.iter_mut().find(|g| g.group == group) {
            g.instances = g.instances.saturating_sub(dropped);
            g.canary = false;
        }
    }

    /// Whether a batch of the run is done (its setup is behind it).
    pub fn started(&self) -> bool {
        self.started
    }

    /// Each group's batches still to go.
    fn left(&self) -> impl Iterator<Item = WorkLeft<'_>> {
        self.groups.iter().map(|g| {
            let canary = usize::from(g.canary && g.instances > 0);
            let at_once = g.last_size.unwrap_or(g.concurrency).min(g.concurrency);
            let rest = (g.instances - canary).div_ceil(at_once.max(1));
            WorkLeft {
                group: &g.group,
                role: g.role,
                batches: (canary + rest) as u64,
            }
        })
    }
}

/// What a question is about, for the estimates its hooks are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskedAbout<'a> {
    /// A batch of `group` (its size, a gate before it, its drains' order).
    Batch { group: &'a str, role: Role },
    /// Anything else: a selection, a gate before a group or after a batch.
    Other,
}

impl Estimator<'_> {
    /// What the hooks of a question asked at `now` are told: the batch at hand (one budget
    /// wave, nothing foreseen) and the run's remaining work as `tally` counts it.
    pub fn timing(&self, tally: &WorkTally, asking: AskedAbout, now: i64) -> Timing {
        let batch = match asking {
            AskedAbout::Batch { group, role } => {
                let mut bases = Bases::default();
                let span = self.replacement(group, role, 1, &mut bases);
                Some(estimate(span, None, &bases))
            }
            AskedAbout::Other => None,
        };
        Timing {
            batch,
            remaining: Some(self.remaining(tally, now)),
        }
    }

    /// What is left of a run as `tally` counts it, ending from `now`: the run's setup while no
    /// batch is done, then each group's batches (nothing foreseen: no pause, gate wait or
    /// budget wave; a run re-estimates after each batch), as the plan adds them up.
    fn remaining(&self, tally: &WorkTally, now: i64) -> super::Estimate {
        let mut bases = Bases::default();
        let mut span = Span::default();
        let mut left = tally.left().filter(|w| w.batches > 0).peekable();
        if let Some(first) = left.peek().filter(|_| !tally.started) {
            span = self.stage(first.group, Stage::Setup, &mut bases);
        }
        for work in left {
            let batch = self.replacement(work.group, work.role, 1, &mut bases);
            span = span + batch.times(work.batches);
        }
        estimate(span, Some(now + seconds(span.p50)), &bases)
    }

    /// The run's setup before `group`'s first batch, in milliseconds: a plan's clock moves by
    /// it with the run's first batch.
    pub fn setup(&self, group: &str) -> u64 {
        self.stage(group, Stage::Setup, &mut Bases::default()).p50
    }

    /// How long a planned batch of `group` likely takes in milliseconds, with the budget
    /// waves its forecast sees (what the plan foresees waiting is not in it: a plan's clock
    /// moves by that as it goes).
    pub fn carried_out(&self, group: &str, role: Role, batch: &BatchPlan) -> u64 {
        let mut bases = Bases::default();
        let span = match batch.surge {
            true => {
                self.stage(group, Stage::Other, &mut bases)
                    + self.stage(group, Stage::Replacement, &mut bases)
            }
            false => self.replacement(group, role, super::waves(batch), &mut bases),
        };
        span.p50
    }
}

/// What a rolling update's hooks are told: the durations, and the workload's name in the
/// history (`KIND/NAMESPACE/NAME`, as its runs record their steps).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepEstimates {
    pub durations: Durations,
    pub subject: String,
}

impl StepEstimates {
    /// What the hooks of a question asked at `now` are told, with `steps_left` steps to come:
    /// a step's estimate when the question sizes the next step (`sizing`), and the steps left
    /// from here (the one sized included).
    pub fn timing(&self, sizing: bool, steps_left: u32, now: i64) -> Timing {
        let mut bases = Bases::default();
        let step = self.step(&mut bases);
        let rest = step.times(u64::from(steps_left));
        let ends = now.saturating_add(super::seconds(rest.p50));
        Timing {
            batch: sizing.then(|| estimate(step, None, &bases)),
            remaining: Some(estimate(rest, Some(ends), &bases)),
        }
    }

    /// A step's likely duration in whole seconds, rounded up: a plan's clock moves by it.
    pub fn step_seconds(&self) -> i64 {
        let p50 = self.step(&mut Bases::default()).p50;
        i64::try_from(p50.div_ceil(1000)).unwrap_or(i64::MAX)
    }

    /// Adds a step this run measured, for its next estimates.
    pub fn learn(&mut self, run_id: &str, measured: &[(Stage, u64)]) {
        let subject = self.subject.clone();
        self.durations.learn(&subject, run_id, measured);
    }

    fn step(&self, bases: &mut Bases) -> Span {
        (self.durations.estimator()).stage(&self.subject, Stage::Step, bases)
    }
}
