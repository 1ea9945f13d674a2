//! What a run measures of itself for the cluster's history ([`crate::cluster::history`]): each
//! batch's stages as it replaces it, and the run's setup once it is done, so that the next plan
//! estimates from this cluster's own durations. Configured holds (delays, intervals) are left
//! out: plans add them as configured. A history that cannot be written is said once and the run
//! goes on: estimates are advice, never a reason to stop.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::Rotation;
use crate::plan::estimate::Stage;

/// The run's own times: when it started, its first batch began and its last batch ended.
#[derive(Debug)]
pub struct RunClock {
    started: Instant,
    first_batch: Option<Instant>,
    last_batch_end: Option<Instant>,
    /// The group whose history keeps the run's setup: the first it replaced a batch of.
    first_group: Option<String>,
}

impl RunClock {
    /// A clock of a run that started at `started` (the command's start, connecting included).
    pub fn new(started: Instant) -> RunClock {
        RunClock {
            started,
            first_batch: None,
            last_batch_end: None,
            first_group: None,
        }
    }
}

impl RunClock {
    /// Since the command started.
    pub(super) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// One batch's stages as it goes.
pub(super) struct BatchClock {
    began: Instant,
    stages: Vec<(Stage, Duration)>,
    /// Configured holds: not measured, plans add them as configured.
    held: Duration,
}

impl BatchClock {
    pub(super) fn start() -> BatchClock {
        BatchClock {
            began: Instant::now(),
            stages: Vec::new(),
            held: Duration::ZERO,
        }
    }

    /// Runs `work`, its time counted to `stage`.
    pub(super) async fn time<T>(&mut self, stage: Stage, work: impl Future<Output = T>) -> T {
        let at = Instant::now();
        let out = work.await;
        self.stages.push((stage, at.elapsed()));
        out
    }

    /// Runs `work`, a configured hold, its time left out.
    pub(super) async fn hold<T>(&mut self, work: impl Future<Output = T>) -> T {
        let at = Instant::now();
        let out = work.await;
        self.held += at.elapsed();
        out
    }

    /// Each stage's time in milliseconds, and the rest of the batch as [`Stage::Other`].
    fn measured(&self) -> Vec<(Stage, u64)> {
        split(self.began.elapsed(), &self.stages, self.held)
    }
}

/// A batch of `total` as its stages (a stage timed twice, summed) and the rest, less `held`,
/// as [`Stage::Other`], in milliseconds.
fn split(total: Duration, stages: &[(Stage, Duration)], held: Duration) -> Vec<(Stage, u64)> {
    let mut by_stage: Vec<(Stage, Duration)> = Vec::new();
    for (stage, took) in stages {
        match by_stage.iter_mut().find(|(s, _)| s == stage) {
            Some((_, sum)) => *sum += *took,
            None => by_stage.push((*stage, *took)),
        }
    }
    let timed: Duration = by_stage.iter().map(|(_, d)| *d).sum();
    by_stage.push((Stage::Other, total.saturating_sub(timed + held)));
    (by_stage.into_iter())
        .map(|(stage, d)| (stage, u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
        .collect()
}

impl Rotation<'_> {
    /// Marks a batch of `group` begun, for the run's setup.
    pub(super) fn batch_begins(&mut self, group: &str, clock: &BatchClock) {
        if self.clock.first_batch.is_none() {
            self.clock.first_batch = Some(clock.began);
            self.clock.first_group = Some(group.to_string());
        }
    }

    /// Records what a replaced batch of `group` (`replaced` instances) measured, and says how
    /// long the rest of the run likely takes now.
    pub(super) async fn batch_replaced(&mut self, group: &str, replaced: usize, clock: BatchClock) {
        self.clock.last_batch_end = Some(Instant::now());
        let measured = clock.measured();
        self.learn(group, replaced, &measured);
        let estimate = self.estimate();
        // Two writes on the way to the next batch, neither waiting on the other.
        let this = &*self;
        let recorded = this.kernel.record_durations(group, &measured);
        let said = async {
            if let Some(event) = &estimate {
                this.record_estimate(event).await;
            }
        };
        tokio::join!(recorded, said);
        if let Some(event) = estimate {
            self.kernel.reporter.report(event);
        }
    }

    /// Records the run's setup: its start to its first batch, and its last batch to now.
    pub(super) async fn run_done(&mut self) {
        let (Some(first), Some(last), Some(group)) = (
            self.clock.first_batch,
            self.clock.last_batch_end,
            self.clock.first_group.clone(),
        ) else {
            return;
        };
        let setup = first.duration_since(self.clock.started) + last.elapsed();
        let millis = u64::try_from(setup.as_millis()).unwrap_or(u64::MAX);
        let setup = [(Stage::Setup, millis)];
        self.kernel.record_durations(&group, &setup).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_its_stages_and_the_rest_without_its_holds() {
        let s = Duration::from_secs;
        let stages = [
            (Stage::Drain, s(10)),
            (Stage::Replacement, s(100)),
            (Stage::Replacement, s(20)),
            (Stage::Validation, s(5)),
        ];
        assert_eq!(
            split(s(167), &stages, s(30)),
            vec![
                (Stage::Drain, 10_000),
                (Stage::Replacement, 120_000),
                (Stage::Validation, 5_000),
                (Stage::Other, 2_000),
            ]
        );
        let other = split(s(1), &stages, s(30)).pop();
        assert_eq!(other, Some((Stage::Other, 0)), "never below nothing");
    }
}
