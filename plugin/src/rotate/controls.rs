//! The operator's pause and abort requests, honoured at the executor's safe points: between two
//! steps of the machine (so never inside a drain's evictions or a termination), and in holds,
//! which an abort cuts short. The requests live on the Lease ([`crate::cluster::controls`]);
//! the executor learns of them by watching it.

use futures::StreamExt;

use super::ready::holding_record;
use super::{RotateError, Rotation};
use crate::cluster::controls::{ControlRequest, Controls};
use crate::events::Event;
use crate::keys;
use crate::plan::group_loop::{Action, Question, Step};
use crate::plan::hook::Phase;

/// Where the run stands before `step` of group `group`, as a pause or an abort reports it.
pub(super) fn safe_point(step: &Step, group: &str) -> String {
    let batch = |index: u32| format!("before batch {} of group {group}", index + 1);
    match step {
        Step::Ask(Question::Select)
        | Step::Do(Action::Begin { .. })
        | Step::Ask(Question::Gate {
            phase: Phase::BeforeGroup,
            ..
        }) => format!("before group {group} starts"),
        Step::Ask(Question::BatchSize(sizing)) => batch(sizing.batches_done),
        Step::Ask(Question::Gate {
            phase: Phase::BeforeBatch,
            batch: info,
        }) => batch(info.index),
        Step::Do(Action::Replace(step)) => batch(step.index),
        Step::Ask(Question::Gate {
            phase: Phase::AfterBatch,
            batch: info,
        }) => format!("after batch {} of group {group}", info.index + 1),
        Step::Do(Action::Soak { batch, .. }) => {
            format!(
                "after batch {} of group {group}, before its soak",
                batch + 1
            )
        }
        Step::Do(Action::Surge { .. }) => format!("before group {group} surges"),
        Step::Do(Action::Validate) => format!("in group {group}, before validating the cluster"),
        Step::Do(Action::Wait(wait)) => {
            format!("in group {group}, before a hold ({})", wait.reason)
        }
        Step::Done(_) => format!("at the end of group {group}"),
    }
}

/// The holding record of a run that stopped for `request`, for `status`.
fn stopped_record(request: &ControlRequest, at: &str) -> String {
    holding_record(&format!("aborted {}; stopped {at}", request.describe()))
}

impl Rotation<'_> {
    async fn read_controls(&self) -> Result<Controls, RotateError> {
        Ok(self
            .cluster
            .controls()
            .await?
            .map(|lease| lease.controls)
            .unwrap_or_default())
    }

    /// A safe point `at`: a standing abort stops the run here; a pause holds it here until it is
    /// withdrawn (or an abort comes).
    pub(super) async fn checkpoint(&self, at: &str) -> Result<(), RotateError> {
        let controls = self.read_controls().await?;
        if let Some(abort) = controls.abort {
            return Err(self.honour_abort(abort, at).await);
        }
        let Some(pause) = controls.pause else {
            return Ok(());
        };
        // Reported once recorded: whoever sees the event finds the record.
        let what = format!(
            "paused {at}, {}; `kubectl rollout-ext resume` continues",
            pause.describe()
        );
        let resumed = async {
            self.reporter.report(Event::Paused {
                by: pause.by.clone(),
                reason: pause.reason.clone(),
                at: at.to_string(),
            });
            self.until_resumed().await
        };
        self.holding(what, Some(at), resumed).await?;
        self.reporter.report(Event::Resumed { at: at.to_string() });
        Ok(())
    }

    /// Resolves once no pause stands on the Lease.
    async fn until_resumed(&self) -> Result<(), RotateError> {
        let mut changes = self.cluster.lock_changes().boxed();
        while self.read_controls().await?.pause.is_some() {
            changes.next().await;
        }
        Ok(())
    }

    /// Resolves with the first abort request that stands on the Lease.
    pub(super) async fn abort_requested(&self) -> Result<ControlRequest, RotateError> {
        let mut changes = self.cluster.lock_changes().boxed();
        loop {
            // The watch's first wake-up follows its initial list: the Lease is read at once.
            changes.next().await;
            if let Some(abort) = self.read_controls().await?.abort {
                return Ok(abort);
            }
        }
    }

    /// Takes the abort request off the Lease (the next run must not stop on it), records where
    /// the run stopped, and returns the error that ends it.
    pub(super) async fn honour_abort(&self, request: ControlRequest, at: &str) -> RotateError {
        let record = stopped_record(&request, at);
        let states = [(keys::ABORT, None), (keys::HOLDING, Some(record.as_str()))];
        match self.lock.set_states(&states).await {
            Ok(()) => RotateError::Stopped {
                request,
                at: at.to_string(),
            },
            Err(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::group_loop::BatchStep;
    use crate::plan::hook::DecidedBy;

    #[test]
    fn a_safe_point_names_the_batch_ahead() {
        let replace = Step::Do(Action::Replace(BatchStep {
            index: 1,
            instances: vec!["n2".into()],
            canary: false,
            decided_by: DecidedBy::BuiltIn,
            size_reason: String::new(),
        }));
        assert_eq!(
            safe_point(&replace, "nodes"),
            "before batch 2 of group nodes"
        );
        let soak = Step::Do(Action::Soak {
            batch: 0,
            seconds: 60,
        });
        assert_eq!(
            safe_point(&soak, "nodes"),
            "after batch 1 of group nodes, before its soak"
        );
        assert_eq!(
            safe_point(&Step::Ask(Question::Select), "nodes"),
            "before group nodes starts"
        );
    }
}
