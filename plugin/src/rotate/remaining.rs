//! The run's estimate of what is left, kept current: said when the run starts and after each
//! batch (an `estimate` event, and on the Lease for `status`), re-estimated from the cluster's
//! history with what this run measured added; and a stage that runs past its 90th percentile in
//! this group's history is said, once per batch, while it still runs.

use std::future::Future;
use std::time::Duration;

use super::Rotation;
use crate::events::Event;
use crate::keys;
use crate::plan::Role;
use crate::plan::estimate::{AskedAbout, Durations, Stage, WorkTally};
use crate::plan::group_loop::{GroupLoop, GroupStart};
use crate::plan::hook::Timing;

/// What the run estimates from, and what it has left.
#[derive(Debug, Default)]
pub struct RunEstimates {
    /// The cluster's history as the run read it, with what the run measured since.
    pub durations: Durations,
    tally: WorkTally,
    /// How far the run is, as `status` shows it.
    pub progress: super::progress::RunProgress,
}

impl RunEstimates {
    pub fn new(durations: Durations) -> RunEstimates {
        RunEstimates {
            durations,
            tally: WorkTally::default(),
            progress: Default::default(),
        }
    }

    /// A group the run will rotate, from its start.
    pub(super) fn plan_group(&mut self, group: &str, role: Role, start: &GroupStart) {
        self.tally.add(group, role, start);
        self.progress.add(group, start.info.selected as usize);
    }

    /// The selection of `group`, which `machine` took, chose its instances.
    pub(super) fn chose(&mut self, group: &str, machine: &GroupLoop) {
        self.tally.chose(group, machine);
        if let Some(chosen) = machine.selected() {
            self.progress.chose(group, chosen.chosen.len());
        }
    }

    /// `dropped` instances of `group` need no batch any more (removed by someone else).
    pub(super) fn dropped(&mut self, group: &str, dropped: usize) {
        self.tally.dropped(group, dropped);
        self.progress.dropped(group, dropped);
    }

    /// What the hooks of a question about `asking`, asked now, are told.
    pub(super) fn timing(&self, asking: AskedAbout) -> Timing {
        let now = jiff::Timestamp::now().as_second();
        (self.durations.estimator()).timing(&self.tally, asking, now)
    }

    /// The 90th percentile of `stage` in `group`'s own history.
    fn slow_after(&self, group: &str, stage: Stage) -> Option<Duration> {
        (self.durations.estimator().slow_after(group, stage)).map(Duration::from_millis)
    }
}

impl Rotation<'_> {
    /// Says, and records on the Lease, how long the rest of the run likely takes.
    pub(super) async fn say_estimate(&mut self) {
        if let Some(event) = self.estimate() {
            self.record_estimate(&event).await;
            self.kernel.reporter.report(event);
        }
    }

    /// How long the rest of the run likely takes, if anything can tell.
    pub(super) fn estimate(&mut self) -> Option<Event> {
        let timing = self.estimates.timing(AskedAbout::Other);
        let e = timing.remaining?;
        Some(Event::Estimate {
            elapsed_seconds: self.clock.elapsed().as_secs(),
            remaining_seconds: e.seconds,
            remaining_p90_seconds: e.p90_seconds,
            ends_at: e.ends_at,
            basis: e.basis,
        })
    }

    /// Puts `estimate` and the run's progress on the Lease, for `status`: advice, so a Lease
    /// that cannot take them does not stop the run.
    pub(super) async fn record_estimate(&self, estimate: &Event) {
        if let Ok(text) = serde_json::to_string(estimate) {
            let progress = self.estimates.progress.record();
            let states = [
                (keys::ESTIMATE, Some(text.as_str())),
                (keys::PROGRESS, Some(progress.as_str())),
            ];
            let _ = self.lock.set_states(&states).await;
        }
    }

    /// Keeps what a replaced batch of `group` measured, for the run's next estimates.
    pub(super) fn learn(&mut self, group: &str, replaced: usize, measured: &[(Stage, u64)]) {
        let run_id = self.settings.plan.run_id.clone();
        self.estimates.durations.learn(group, &run_id, measured);
        self.estimates.tally.batch_done(group, replaced);
        self.estimates.progress.batch_done(group, replaced);
    }

    /// Runs `work`, the `stage` of a batch of `group`: past the stage's 90th percentile in the
    /// group's history it is said (a warning, and on the Lease for `status`) while it runs.
    pub(super) async fn watched<T>(
        &self,
        group: &str,
        stage: Stage,
        work: impl Future<Output = T>,
    ) -> T {
        let Some(p90) = self.estimates.slow_after(group, stage) else {
            return work.await;
        };
        let started = tokio::time::Instant::now();
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => return out,
            _ = tokio::time::sleep(p90) => {}
        }
        let message = format!(
            "group {group}: slower than this cluster's history: {} has taken {} so far, p90 {}",
            stage.describe(),
            crate::duration::human_duration(started.elapsed().as_secs() as i64),
            crate::duration::human_duration(p90.as_secs().max(1) as i64)
        );
        self.kernel.reporter.report(Event::Warning {
            message: message.clone(),
        });
        // The note is written while the stage goes on: the stage may be in the middle of a
        // write of the run's state itself, which the note's write waits for.
        let note = self.lock.set_state(keys::SLOW, Some(&message));
        let (out, _) = tokio::join!(&mut work, note);
        let _ = self.lock.set_state(keys::SLOW, None).await;
        out
    }
}
