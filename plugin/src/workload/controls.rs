//! The operator's pause and abort requests to a rolling update, recorded on the controller being
//! updated ([`crate::cluster::controls`]) and honoured before each scaling step: a pause holds
//! the update there until it is withdrawn, an abort stops it (resumably, never rolled back).

use futures::StreamExt;

use super::execute::{UpdateError, Updater};
use crate::cluster::controls::{Control, Controls};
use crate::events::Event;
use crate::plan::rolling_update::controller::Controller;

impl Updater<'_> {
    async fn controls_of(&self, c: &Controller, ns: &str) -> Result<Controls, UpdateError> {
        let view = self
            .cluster
            .controller_controls(c.kind, ns, c.name())
            .await?;
        Ok(view.map(|v| v.controls).unwrap_or_default())
    }

    /// A safe point `at`, before a scaling step of the update of `c`: a standing abort stops
    /// the update here; a pause holds it here until withdrawn (or an abort comes).
    pub(super) async fn checkpoint(
        &self,
        c: &Controller,
        ns: &str,
        at: &str,
    ) -> Result<(), UpdateError> {
        let mut controls = self.controls_of(c, ns).await?;
        if let Some(pause) = controls.pause.clone() {
            self.reporter.report(Event::Paused {
                by: pause.by.clone(),
                reason: pause.reason.clone(),
                at: at.to_string(),
            });
            let mut changes = self
                .cluster
                .controller_changes(c.kind, ns, c.name())
                .boxed();
            while controls.pause.is_some() && controls.abort.is_none() {
                changes.next().await;
                controls = self.controls_of(c, ns).await?;
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
            .set_controller_control(c.kind, ns, c.name(), Control::Abort, None)
            .await?;
        Err(UpdateError::Stopped(format!(
            "aborted {}; stopped {at}",
            abort.describe()
        )))
    }
}
