//! Evictions a PodDisruptionBudget blocks, and pods a drain waits for (they ask not to be
//! disrupted, or run to completion), recorded on the Lease as what holds the run while a batch
//! drains, so that `status` from any machine names the pod and the budget or the reason: the
//! most common reasons a rotation stands still.

use std::sync::Mutex;

use super::{RotateError, Rotation};
use crate::events::{Event, Reporter};

/// Passes the drain's events on, keeping the latest blocked eviction for the run to record.
pub(super) struct BlockedEvictions<'a> {
    inner: &'a dyn Reporter,
    latest: Mutex<Option<String>>,
    changed: tokio::sync::Notify,
}

impl<'a> BlockedEvictions<'a> {
    pub(super) fn new(inner: &'a dyn Reporter) -> Self {
        BlockedEvictions {
            inner,
            latest: Mutex::new(None),
            changed: tokio::sync::Notify::new(),
        }
    }
}

impl Reporter for BlockedEvictions<'_> {
    fn report(&self, event: Event) {
        if let Event::EvictionBlocked { node, .. } | Event::PodHeld { node, .. } = &event {
            let what = format!("draining node {node}: {}", event.describe());
            *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
            self.changed.notify_one();
        }
        self.inner.report(event);
    }
}

impl Rotation<'_> {
    /// Runs `drains`, recording each blocked eviction on the lock as what holds the run; the
    /// record goes when they end. While something holds them, an abort request stops them
    /// where they are (between two requests: as safe as a stopped run, which the next run
    /// resumes); a drain that moves is left to finish its step.
    pub(super) async fn recording_blocks<T>(
        &self,
        blocked: &BlockedEvictions<'_>,
        drains: impl std::future::Future<Output = T>,
    ) -> Result<T, RotateError> {
        tokio::pin!(drains);
        let abort = self.kernel.abort_requested();
        tokio::pin!(abort);
        let mut recorded: Option<String> = None;
        loop {
            tokio::select! {
                value = &mut drains => {
                    if recorded.is_some() {
                        self.kernel.record_holding(None).await?;
                    }
                    return Ok(value);
                }
                request = &mut abort, if recorded.is_some() => {
                    let what = recorded.take().unwrap_or_default();
                    let at = format!("while {what}");
                    return Err(self.kernel.honour_abort(request?, &at).await.into());
                }
                () = blocked.changed.notified() => {
                    let latest = blocked.latest.lock().unwrap_or_else(|e| e.into_inner()).take();
                    if let Some(what) = latest {
                        self.kernel.record_holding(Some(&what)).await?;
                        recorded = Some(what);
                    }
                }
            }
        }
    }
}
