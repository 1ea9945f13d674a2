//! The operator's pause and abort requests, honoured at the flow's safe points (between two
//! steps, so never inside a drain's evictions, a termination or a scaling step) and in holds,
//! which an abort cuts short. The requests stand on the rotation's Lease or on the workload
//! ([`crate::cluster::controls`]); the kernel keeps them current with one watch of that object.

use super::hold::holding_record;
use super::{ControlsAt, Kernel, KernelError};
use crate::cluster::controls::{Control, ControlRequest};
use crate::events::Event;
use crate::keys;

impl Kernel<'_> {
    /// A safe point `at`: a lost lock or a standing abort stops the run here; a pause holds it
    /// here until it is withdrawn (or an abort comes).
    pub async fn checkpoint(&self, at: &str) -> Result<(), KernelError> {
        self.check_lock()?;
        let controls = self.watched.current().await?;
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
        let mut controls = self.watched.current().await?;
        while controls.pause.is_some() {
            controls = self.watched.changed().await?;
        }
        Ok(())
    }

    /// Resolves with the first abort request that stands.
    pub async fn abort_requested(&self) -> Result<ControlRequest, KernelError> {
        let mut controls = self.watched.current().await?;
        loop {
            if let Some(abort) = controls.abort {
                return Ok(abort);
            }
            controls = self.watched.changed().await?;
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
