//! The operator's pause and abort requests, honoured at the flow's safe points (between two
//! steps, so never inside a drain's evictions, a termination or a scaling step) and in holds,
//! which an abort cuts short. The requests stand on the rotation's Lease or on the workload
//! ([`crate::cluster::controls`]); the run learns of them by watching it.

use futures::{Stream, StreamExt};

use super::hold::holding_record;
use super::{ControlsAt, Kernel, KernelError};
use crate::cluster::controls::{Control, ControlRequest, Controls};
use crate::events::Event;
use crate::keys;

impl Kernel<'_> {
    async fn read_controls(&self) -> Result<Controls, KernelError> {
        let controls = match &self.controls {
            ControlsAt::Lease => self.cluster.controls().await?.map(|l| l.controls),
            ControlsAt::Workload {
                workload,
                namespace,
            } => (self
                .cluster
                .controller_controls(workload, namespace)
                .await?)
                .map(|v| v.controls),
        };
        Ok(controls.unwrap_or_default())
    }

    /// Wakes up at each change of what the requests stand on (its first wake-up follows the
    /// watch's initial list).
    fn control_changes(&self) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>> {
        match &self.controls {
            ControlsAt::Lease => Box::pin(self.cluster.lock_changes()),
            ControlsAt::Workload {
                workload,
                namespace,
            } => self.cluster.workload_changes(workload, namespace),
        }
    }

    /// A safe point `at`: a lost lock or a standing abort stops the run here; a pause holds it
    /// here until it is withdrawn (or an abort comes).
    pub async fn checkpoint(&self, at: &str) -> Result<(), KernelError> {
        self.check_lock()?;
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

    /// Resolves once no pause stands.
    async fn until_resumed(&self) -> Result<(), KernelError> {
        let mut changes = self.control_changes();
        while self.read_controls().await?.pause.is_some() {
            changes.next().await;
        }
        Ok(())
    }

    /// Resolves with the first abort request that stands.
    pub async fn abort_requested(&self) -> Result<ControlRequest, KernelError> {
        let mut changes = self.control_changes();
        loop {
            // The watch's first wake-up follows its initial list: the requests are read at once.
            changes.next().await;
            if let Some(abort) = self.read_controls().await?.abort {
                return Ok(abort);
            }
        }
    }

    /// Takes the abort request off (the next run must not stop on it), records where the run
    /// stopped, and returns the error that ends it.
    pub async fn honour_abort(&self, request: ControlRequest, at: &str) -> KernelError {
        let taken_off = match (&self.controls, self.lock) {
            (ControlsAt::Lease, Some(lock)) => {
                let record =
                    holding_record(&format!("aborted {}; stopped {at}", request.describe()));
                let states = [(keys::ABORT, None), (keys::HOLDING, Some(record.as_str()))];
                lock.set_states(&states).await
            }
            (ControlsAt::Lease, None) => Ok(()),
            (
                ControlsAt::Workload {
                    workload,
                    namespace,
                },
                _,
            ) => {
                self.cluster
                    .set_controller_control(workload, namespace, Control::Abort, None)
                    .await
            }
        };
        match taken_off {
            Ok(()) => KernelError::Stopped {
                request,
                at: at.to_string(),
            },
            Err(e) => e.into(),
        }
    }
}
