//! Holding: a hook's wait, a configured delay or a wait on the cluster, recorded where `status`
//! reads what holds the run (the rotation's Lease), and cut short by an abort request (nothing
//! is in flight during one).

use std::time::Duration;

use super::{ControlsAt, Kernel, KernelError};
use crate::events::Event;
use crate::keys;

/// What holds the run, as the lock records it for `status`: JSON `{"what", "since"}`.
pub fn holding_record(what: &str) -> String {
    let since = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_default();
    serde_json::json!({"what": what, "since": since.to_string()}).to_string()
}

impl Kernel<'_> {
    /// Records (or, with `None`, clears) what holds the run, on the rotation's Lease; a
    /// workload's update has no such record.
    pub async fn record_holding(&self, what: Option<&str>) -> Result<(), KernelError> {
        if let (ControlsAt::Lease, Some(lock)) = (&self.controls, self.lock) {
            let record = what.map(holding_record);
            lock.set_state(keys::HOLDING, record.as_deref()).await?;
        }
        Ok(())
    }

    /// Reports a wait and sleeps through it, abortable, recorded meanwhile.
    pub async fn hold(&self, duration: Duration, reason: String) -> Result<(), KernelError> {
        let what = format!(
            "waiting {}: {reason}",
            crate::duration::human_duration(duration.as_secs() as i64)
        );
        // Reported once recorded: whoever sees the event finds the record.
        let wait = async {
            self.reporter.report(Event::Waiting {
                seconds: duration.as_secs(),
                reason,
            });
            tokio::time::sleep(duration).await;
            Ok(())
        };
        self.holding(what, None, wait).await
    }

    /// Runs `wait` with `what` recorded as what holds the run; the record goes when the wait
    /// ends, and stays with a run that stopped in it. An abort request ends the wait and stops
    /// the run `stop_at` (by default, "while" what it waited for).
    pub async fn holding<T, E: From<KernelError>>(
        &self,
        what: String,
        stop_at: Option<&str>,
        wait: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.record_holding(Some(&what)).await?;
        let value = tokio::select! {
            value = wait => value?,
            abort = self.abort_requested() => {
                let at = stop_at.map_or_else(|| format!("while {what}"), str::to_string);
                return Err(self.honour_abort(abort?, &at).await.into());
            }
        };
        // The record goes while the run goes on: its next step need not wait for the write.
        if let (ControlsAt::Lease, Some(lock)) = (&self.controls, self.lock) {
            lock.clear_soon(keys::HOLDING)
                .await
                .map_err(KernelError::from)?;
        }
        Ok(value)
    }
}
