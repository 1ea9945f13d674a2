//! Cluster validation as kops does it between batches: every node Ready, no unschedulable node
//! the run did not cordon, system pods Ready; `count` consecutive successes, `success_interval`
//! apart, within `timeout`. Each check reads the live view; after a failure the next check
//! waits for the view to change, not for a timer.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::ClusterError;
use super::view::{Deadline, LiveView, WaitError};
use crate::events::{Event, Reporter};
use crate::plan::hook::HealthSummary;

/// How validation is judged.
#[derive(Debug, Clone)]
pub struct ValidationSettings {
    /// Consecutive successes needed (kops' `--validate-count`).
    pub count: u32,
    /// Time between two successful checks.
    pub success_interval: Duration,
    /// The whole validation must succeed within this (kops' `--validation-timeout`).
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    #[error("the cluster did not validate within {timeout:?}: {}", .failures.join("; "))]
    Timeout {
        timeout: Duration,
        failures: Vec<String>,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl LiveView {
    /// Validates until `settings.count` consecutive checks pass, or the timeout. A failed check
    /// is repeated at the view's next change, a passed one after `success_interval`.
    pub async fn validate(
        &self,
        settings: &ValidationSettings,
        cordoned_by_run: &HashSet<&str>,
        reporter: &dyn Reporter,
    ) -> Result<HealthSummary, ValidationError> {
        let deadline = Instant::now() + settings.timeout;
        let mut passed = 0;
        loop {
            // A check sees the run's own last change; a failed one waits for the next.
            self.caught_up().await?;
            let summary = self.health(cordoned_by_run)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if summary.failures.is_empty() {
                passed += 1;
                reporter.report(Event::Validated {
                    passed,
                    needed: settings.count,
                });
                if passed >= settings.count {
                    return Ok(summary);
                }
                if left < settings.success_interval {
                    return Err(ValidationError::Timeout {
                        timeout: settings.timeout,
                        failures: vec![format!(
                            "only {passed} of {} checks passed in time",
                            settings.count
                        )],
                    });
                }
                tokio::time::sleep(settings.success_interval).await;
                continue;
            }
            passed = 0;
            reporter.report(Event::ValidationFailed {
                failures: summary.failures.clone(),
                seconds_left: left.as_secs(),
            });
            let failures = summary.failures;
            let still_failing = |_: &crate::snapshot::Snapshot| match self.health(cordoned_by_run) {
                Ok(s) if s.failures != failures => Ok(()),
                _ => Err(()),
            };
            match self.wait_until(Deadline::Within(left), still_failing).await {
                Ok(()) => {}
                Err(WaitError::Expired(())) => {
                    return Err(ValidationError::Timeout {
                        timeout: settings.timeout,
                        failures,
                    });
                }
                Err(WaitError::View(e)) => return Err(e.into()),
            }
        }
    }
}
