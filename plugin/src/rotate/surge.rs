//! A surge: new instances boot before old ones go. The chosen instances are detached from
//! their group (the provider brings replacements), the group's expected size grows by as
//! many, and the rotation waits for the replacements and validates.

use super::records::{self, expected_key, record_of, surging_key};
use super::{GroupRun, RotateError, Rotation};
use crate::events::Event;
use crate::provider::Target;

impl Rotation<'_> {
    pub(super) async fn surge(
        &self,
        instances: &[String],
        canary: bool,
        run: &mut GroupRun,
    ) -> Result<(), RotateError> {
        run.expected += instances.len();
        let targets: Vec<Target> = instances
            .iter()
            .map(|node| records::target(&run.latest, &run.name, node))
            .collect();
        let record = serde_json::Value::from_iter(targets.iter().map(record_of)).to_string();
        let key = surging_key(&run.name);
        // The new expected size and the surge's record go together: a run stopped at any
        // point finds the surge counted once, and finishes it (see `finish_stopped_steps`).
        let step = self.steps.begin().await;
        self.lock
            .set_states(&[
                (&expected_key(&run.name), Some(&run.expected.to_string())),
                (&key, Some(&record)),
            ])
            .await?;
        self.kernel.reporter.report(Event::Surging {
            group: run.name.clone(),
            detached: instances.to_vec(),
            canary,
        });
        for target in &targets {
            self.detach(target).await?;
        }
        self.lock.set_state(&key, None).await?;
        drop(step);
        let fresh = self.wait_ready(&run.name, run.expected).await?;
        self.validate(&fresh, &run.found_cordoned).await
    }
}
