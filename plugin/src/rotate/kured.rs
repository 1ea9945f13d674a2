//! kured's reboot lock, held by the run while a batch takes nodes out (when others' disruptions
//! are counted and a kured DaemonSet is in the cluster): kured then starts no reboot until the
//! batch is replaced and validated. Taken right before the batch's cordons, holding while kured's
//! own holders leave no room (abortable, `status` says who); let go after the batch, and when
//! the run ends however it ends. A killed run's hold is let go by the next run. A server or role
//! that refuses the write is said once, not a stop: the ledger still counts kured's reboots.

use std::sync::atomic::Ordering;

use super::{GroupRun, RotateError, Rotation};
use crate::cluster::kured::KuredLock;
use crate::events::Event;
use crate::snapshot::kured::LockSpot;

impl Rotation<'_> {
    /// Takes kured's lock for `nodes`, the batch about to be cordoned. Returns whether the run
    /// held for it (the cluster has moved on since the batch was read).
    pub(super) async fn take_kured_lock(
        &self,
        nodes: &[String],
        run: &GroupRun,
    ) -> Result<bool, RotateError> {
        if !self.counts_others() {
            return Ok(false);
        }
        let spots: Vec<LockSpot> = (run.latest.kured_lock_spots().into_iter())
            .cloned()
            .collect();
        let mut held = false;
        for spot in &spots {
            loop {
                let taken = (self.cluster)
                    .take_kured_lock(spot, &self.kernel.run_id, nodes)
                    .await;
                match taken {
                    Ok(KuredLock::Taken | KuredLock::NoDaemonSet) => break,
                    Ok(KuredLock::HeldBy(by)) => {
                        held = true;
                        self.hold_for_kured(spot, &by, &run.name).await?;
                    }
                    Err(e) => {
                        self.kured_refused(&e);
                        break;
                    }
                }
            }
        }
        Ok(held)
    }

    /// Holds until the view shows room in kured's lock at `spot`, held now by `by`.
    async fn hold_for_kured(
        &self,
        spot: &LockSpot,
        by: &[String],
        group: &str,
    ) -> Result<(), RotateError> {
        let event = Event::KuredLockHeld {
            daemon_set: format!("{}/{}", spot.namespace, spot.name),
            holders: by.to_vec(),
        };
        let what = format!("group {group}: {}", event.describe());
        let wait = self.until_view(|snapshot| {
            let now = jiff::Timestamp::now().as_second();
            match snapshot.kured_lock_has_room(spot, now) {
                true => Ok(()),
                false => Err(()),
            }
        });
        // Said once recorded: whoever sees the event finds the record.
        let waited = async {
            self.kernel.reporter.report(event);
            wait.await
        };
        self.kernel.holding(what, None, waited).await
    }

    /// Lets go of the run's holds on kured's locks (this run's, or a killed run's).
    pub(super) async fn release_kured_lock(&self) {
        if !self.counts_others() {
            return;
        }
        let snapshot = match self.view.current() {
            Ok(s) => s,
            Err(e) => return self.kured_refused(&e),
        };
        for spot in snapshot.kured_lock_spots() {
            if let Err(e) = self.cluster.release_kured_lock(spot).await {
                self.kured_refused(&e);
            }
        }
    }

    /// Says, once, that kured's lock could not be taken or let go.
    fn kured_refused(&self, error: &dyn std::fmt::Display) {
        if !self.kured_refused.swap(true, Ordering::Relaxed) {
            self.warn(format!(
                "cannot take or let go of kured's reboot lock: {error}; the run goes on, counting the reboots kured starts"
            ));
        }
    }
}
