//! Waiting on the view: a predicate checked against the view as it is, again at each of its
//! changes, until it holds or its deadline passes. The view first catches up with the run's own
//! writes, so that a wait never ends on what the run just changed.

use std::time::{Duration, Instant};

use super::LiveView;
use crate::cluster::ClusterError;
use crate::snapshot::Snapshot;

/// How long a wait may last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// In all.
    Within(Duration),
    /// While what it waits for does not move: each change of the predicate's progress restarts
    /// the clock.
    Moving(Duration),
}

impl Deadline {
    pub fn duration(self) -> Duration {
        match self {
            Deadline::Within(d) | Deadline::Moving(d) => d,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WaitError<P> {
    /// The deadline passed; the predicate's last progress.
    #[error("the wait ran out")]
    Expired(P),
    #[error(transparent)]
    View(#[from] ClusterError),
}

impl LiveView {
    /// Waits until `check` holds over the view: `Ok` ends the wait, `Err(progress)` goes on
    /// (a progress unequal to the last one is a move, for [`Deadline::Moving`]).
    pub async fn wait_until<T, P: PartialEq>(
        &self,
        deadline: Deadline,
        mut check: impl FnMut(&Snapshot) -> Result<T, P>,
    ) -> Result<T, WaitError<P>> {
        let mut changes = self.changes();
        let snapshot = self.caught_up().await?;
        let mut progress = match check(&snapshot) {
            Ok(done) => return Ok(done),
            Err(progress) => progress,
        };
        let mut since = Instant::now();
        loop {
            let until = since + deadline.duration();
            match tokio::time::timeout_at(until.into(), changes.changed()).await {
                Err(_) => return Err(WaitError::Expired(progress)),
                Ok(Err(_)) => return Err(WaitError::View(ClusterError::ViewStopped)),
                Ok(Ok(())) => {}
            }
            changes.borrow_and_update();
            let now = self.current()?;
            // Nodes that joined what the run follows have their pods listed as they come.
            self.look_at(self.followed(&now));
            match check(&now) {
                Ok(done) => return Ok(done),
                Err(now) => {
                    if matches!(deadline, Deadline::Moving(_)) && now != progress {
                        since = Instant::now();
                    }
                    progress = now;
                }
            }
        }
    }
}
