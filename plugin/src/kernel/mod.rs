//! The executor kernel: what every live flow (the node rotation, and each workload flow) does
//! the same way around its own steps. It asks the hooks (once per decision, off the async
//! workers, reporting each decision they took part in and what shadow hooks would have said),
//! holds for waits that an abort cuts short, honours pause, resume and abort at safe points,
//! checks the lock, and records what holds the run where `status` reads it.
//!
//! The flows own their steps and effects; the kernel owns none of them.

mod ask;
mod controls;
mod hold;

use crate::cluster::Cluster;
use crate::cluster::ClusterError;
pub use crate::cluster::controls::ControlsAt;
use crate::cluster::controls::{ControlRequest, WatchedControls};
use crate::cluster::lock::LockGuard;
use crate::events::{Event, Reporter};
use crate::plan::decide::HookFailed;
use crate::plan::estimate::Stage;
use crate::plan::hook::{CallContext, Hook, Timing};
use crate::plan::ledger::Disruption;

pub use ask::At;

/// Why the kernel stopped a run.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error(transparent)]
    Hook(#[from] HookFailed),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// An operator's abort, honoured at `at`.
    #[error("aborted {}; stopped {at}", request.describe())]
    Stopped { request: ControlRequest, at: String },
    #[error("the lock was taken over by another run; stopping here")]
    LockLost,
}

/// One live run's kernel.
pub struct Kernel<'a> {
    pub cluster: &'a Cluster,
    pub hooks: &'a mut [Box<dyn Hook>],
    pub reporter: &'a dyn Reporter,
    /// Who runs, as hooks are told (`run-id`).
    pub run_id: String,
    /// Where the operator's requests stand (the rotation's Lease, which is also its lock and
    /// its record of what holds it; or the workload), and a watch of them.
    controls: ControlsAt,
    watched: WatchedControls,
    /// The run's lock, when it holds one: a run that lost it stops at its next safe point.
    pub lock: Option<&'a LockGuard>,
    /// A write of the durations the run measured failed: said once, not tried again.
    durations_unrecorded: std::sync::atomic::AtomicBool,
    /// What the next question's hooks are told of how long things take (see [`Kernel::tell`]).
    timing: Timing,
    /// What every question's hooks are told others disrupt (see [`Kernel::tell_others`]).
    others: Vec<Disruption>,
    /// The warnings the hooks' answers left, said once a run: a hook that fails the same way at
    /// every batch (a read its policy does not grant) is one warning, not one per batch.
    warned: std::collections::HashSet<String>,
}

/// What a kernel is made of.
pub struct Parts<'a> {
    pub cluster: &'a Cluster,
    pub hooks: &'a mut [Box<dyn Hook>],
    pub reporter: &'a dyn Reporter,
    pub run_id: String,
    pub controls: ControlsAt,
    pub lock: Option<&'a LockGuard>,
}

impl<'a> Kernel<'a> {
    /// A kernel of `parts`, watching the operator's requests from now on.
    pub fn new(parts: Parts<'a>) -> Self {
        Kernel {
            watched: parts.cluster.watch_controls(&parts.controls),
            cluster: parts.cluster,
            hooks: parts.hooks,
            reporter: parts.reporter,
            run_id: parts.run_id,
            controls: parts.controls,
            lock: parts.lock,
            durations_unrecorded: std::sync::atomic::AtomicBool::new(false),
            warned: Default::default(),
            timing: Timing::default(),
            others: Vec::new(),
        }
    }

    /// The operator's requests stand at `controls` from now on (a rolling update rolling back
    /// takes them on the controller it now scales down).
    pub fn control_at(&mut self, controls: ControlsAt) {
        if self.controls != controls {
            self.watched = self.cluster.watch_controls(&controls);
            self.controls = controls;
        }
    }
}

impl Kernel<'_> {
    /// The context of a hook call made now, for real, with what [`Kernel::tell`] gave (once).
    pub fn ctx(&mut self) -> CallContext {
        CallContext {
            now: jiff::Timestamp::now().as_second(),
            run_id: self.run_id.clone(),
            dry_run: false,
            timing: std::mem::take(&mut self.timing),
            others: self.others.clone(),
        }
    }

    /// What the hooks of the next question are told of how long things take: its batch or
    /// step and the run's remaining work. A question asked without it tells them nothing.
    pub fn tell(&mut self, timing: Timing) {
        self.timing = timing;
    }

    /// What the hooks of every question from now on are told others disrupt in the group at
    /// hand (a rotation tells it as it reads its ledger; other flows have none).
    pub fn tell_others(&mut self, others: Vec<Disruption>) {
        self.others = others;
    }

    pub fn warn(&self, message: String) {
        self.reporter.report(Event::Warning { message });
    }

    /// Keeps what the run measured of `subject` (a group, or a workload `KIND/NS/NAME`) in the
    /// cluster's history, for later estimates. A write that fails is said once and not tried
    /// again: estimates are advice, never a reason to stop.
    pub async fn record_durations(&self, subject: &str, measured: &[(Stage, u64)]) {
        use std::sync::atomic::Ordering;
        if self.durations_unrecorded.load(Ordering::Relaxed) {
            return;
        }
        let written = (self.cluster)
            .record_history(subject, &self.run_id, measured)
            .await;
        if let Err(e) = written {
            if self.durations_unrecorded.swap(true, Ordering::Relaxed) {
                return;
            }
            self.warn(format!(
                "cannot record this run's durations for later estimates (plans fall back on the policy's or the built-in figures): {e}"
            ));
        }
    }

    /// Stops the run if another took its lock over.
    pub fn check_lock(&self) -> Result<(), KernelError> {
        match self.lock {
            Some(lock) if lock.lost() => Err(KernelError::LockLost),
            _ => Ok(()),
        }
    }
}
