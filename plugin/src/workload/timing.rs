//! What a rolling update measures of itself for the cluster's history
//! ([`crate::cluster::history`]): each step, from its sizing to its gate (its pods changed and
//! Ready again; hooks' holds left out, plans add them as foreseen), and the run's setup, under
//! the workload's name (`sts/NAMESPACE/NAME`), so that the next plan of its update estimates
//! from them (the kernel writes them: see [`crate::kernel::Kernel::record_durations`]); and what
//! its hooks are told of the steps left, estimated from the cluster's history with the steps
//! this run measured added.

use std::time::Duration;

use tokio::time::Instant;

use super::execute::Updater;
use crate::plan::estimate::{Stage, StepEstimates};
use crate::plan::hook::Timing;

/// The update's own times, and what it estimates from.
#[derive(Debug)]
pub struct StepClock {
    /// The cluster's history and the workload's name in it (`KIND/NAMESPACE/NAME`).
    estimates: StepEstimates,
    started: Instant,
    /// The step under way: when it began, and the holds within it.
    step: Option<(Instant, Duration)>,
    first_step: Option<Instant>,
    last_step_end: Option<Instant>,
}

impl StepClock {
    /// The clock of an update estimated from `estimates`, whose command started at `started`.
    pub fn new(estimates: StepEstimates, started: Instant) -> StepClock {
        StepClock {
            estimates,
            started,
            step: None,
            first_step: None,
            last_step_end: None,
        }
    }

    /// A step is sized: it begins, unless one is under way.
    pub(super) fn step_begins(&mut self) {
        if self.step.is_none() {
            let now = Instant::now();
            self.step = Some((now, Duration::ZERO));
            self.first_step.get_or_insert(now);
        }
    }

    /// A hook's hold within the step, left out of it.
    pub(super) fn held(&mut self, took: Duration) {
        if let Some((_, held)) = &mut self.step {
            *held += took;
        }
    }

    /// The step under way ends (its gate is asked): how long it took, in milliseconds.
    fn step_ends(&mut self) -> Option<u64> {
        let now = Instant::now();
        let (began, held) = self.step.take()?;
        self.last_step_end = Some(now);
        let took = now.duration_since(began).saturating_sub(held);
        Some(u64::try_from(took.as_millis()).unwrap_or(u64::MAX))
    }

    /// What the hooks of a question asked now are told, with `steps_left` to come (a step
    /// being sized, when `sizing`, included).
    pub(super) fn told(&self, sizing: bool, steps_left: u32) -> Timing {
        let now = jiff::Timestamp::now().as_second();
        self.estimates.timing(sizing, steps_left, now)
    }

    /// The update's setup: its start to its first step, and its last step to now.
    fn setup(&self) -> Option<u64> {
        let setup = self.first_step?.duration_since(self.started) + self.last_step_end?.elapsed();
        Some(u64::try_from(setup.as_millis()).unwrap_or(u64::MAX))
    }
}

impl Updater<'_> {
    /// The step under way ends: what it took goes to the history.
    pub(super) async fn step_done(&mut self) {
        if let Some(millis) = self.timing.step_ends() {
            let step = [(Stage::Step, millis)];
            let subject = self.timing.estimates.subject.clone();
            self.kernel.record_durations(&subject, &step).await;
            (self.timing.estimates).learn(&self.kernel.run_id, &step);
        }
    }

    /// The update is done: its setup goes to the history.
    pub(super) async fn update_done(&mut self) {
        if let Some(millis) = self.timing.setup() {
            let setup = [(Stage::Setup, millis)];
            let subject = &self.timing.estimates.subject;
            self.kernel.record_durations(subject, &setup).await;
        }
    }
}
