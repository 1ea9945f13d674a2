//! The operator's pause and abort requests to a rolling update, recorded on the controller (or
//! StatefulSet) being updated ([`crate::cluster::controls`]) and honoured before each step: a
//! pause holds the update there until it is withdrawn, an abort stops it (resumably, never
//! rolled back).

use futures::StreamExt;

use super::execute::{UpdateError, Updater};
use crate::cluster::controls::{Control, Controls, Workload};
use crate::events::Event;

impl Updater<'_> {
    async fn controls_of(&self, w: &Workload, ns: &str) -> Result<Controls, UpdateError> {
        let view = self.cluster.controller_controls(w, ns).await?;
        Ok(view.map(|v| v.controls).unwrap_or_default())
    }

    /// A safe point `at`, before a step of the update of `w`: a standing abort stops the
    /// update here; a pause holds it here until withdrawn (or an abort comes).
    pub(super) async fn checkpoint(
        &self,
        w: &Workload,
        ns: &str,
        at: &str,
    ) -> Result<(), UpdateError> {
        let mut controls = self.controls_of(w, ns).await?;
        if let Some(pause) = controls.pause.clone() {
            self.reporter.report(Event::Paused {
                by: pause.by.clone(),
                reason: pause.reason.clone(),
                at: at.to_string(),
            });
            let mut changes = self.cluster.workload_changes(w, ns);
            while controls.pause.is_some() && controls.abort.is_none() {
                changes.next().await;
                controls = self.controls_of(w, ns).await?;
            }
            if controls.abort.is_none() {
                self.reporter.report(Event::Resumed { at: at.to_string() });
            }
        }
        let Some(abort) = controls.abort else {
            return Ok(());
        };
        // Taken off, so that running the same command again resumes the update.
        self.cluster
            .set_controller_control(w, ns, Control::Abort, None)
            .await?;
        Err(UpdateError::Stopped(format!(
            "aborted {}; stopped {at}",
            abort.describe()
        )))
    }
}
