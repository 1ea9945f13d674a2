//! The pods an update reads and waits on: for each selector it looks at, one watch (listed once,
//! then watched, see [`SelectedPods`]) started at its first look and kept for the update. A wait
//! for their next change is abortable, as every hold of the kernel's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::execute::{UpdateError, Updater};
use crate::cluster::view::{Deadline, SelectedPods};
use crate::plan::rolling_update::pods::PodInfo;

/// The watched pods of an update, by namespace and selector.
#[derive(Default)]
pub struct WatchedPods(tokio::sync::Mutex<HashMap<(String, String), Arc<SelectedPods>>>);

impl Updater<'_> {
    /// The watched pods `selector` picks in `ns` (listed and watched from the first look).
    pub(super) async fn selected(
        &self,
        ns: &str,
        selector: &str,
    ) -> Result<Arc<SelectedPods>, UpdateError> {
        let mut watched = self.pods.0.lock().await;
        let key = (ns.to_string(), selector.to_string());
        if let Some(pods) = watched.get(&key) {
            return Ok(pods.clone());
        }
        let pods = Arc::new(SelectedPods::start(self.kernel.cluster, ns, selector).await?);
        watched.insert(key, pods.clone());
        Ok(pods)
    }

    /// The pods `selector` picks in `ns`, as the watch has them now.
    pub(super) async fn pods_now(
        &self,
        ns: &str,
        selector: &str,
    ) -> Result<Vec<PodInfo>, UpdateError> {
        Ok(self.selected(ns, selector).await?.pods()?)
    }

    /// Waits for the next change of the pods `selector` picks in `ns`, or the poll interval (a
    /// pod Ready but not yet for minReadySeconds is due with nothing to wake on); an abort
    /// request ends the wait and stops the update `while` what it waited for.
    pub(super) async fn next_pod_change(
        &self,
        ns: &str,
        selector: &str,
        what: String,
    ) -> Result<(), UpdateError> {
        let pods = self.selected(ns, selector).await?;
        let interval = self.settings.poll_interval;
        let change = async { Ok::<_, UpdateError>(pods.changed(interval).await?) };
        self.kernel.holding(what, None, change).await
    }

    /// Looks at the pods with `look` until it finds what it waits for (`Ok`), again at each
    /// change of the pods `wait.selector` picks (or each poll interval). `Err(progress)` goes
    /// on; past the deadline (for [`Deadline::Moving`], without a change of the progress) the
    /// update makes no progress. An abort ends the wait.
    pub(super) async fn wait_on_pods<T, P: PartialEq>(
        &self,
        wait: PodWait<'_>,
        mut look: impl AsyncFnMut() -> Result<Result<T, P>, UpdateError>,
    ) -> Result<T, UpdateError> {
        let mut since = Instant::now();
        let mut last = None;
        loop {
            let progress = match look().await? {
                Ok(done) => return Ok(done),
                Err(progress) => progress,
            };
            let moved = last.as_ref() != Some(&progress);
            if matches!(wait.deadline, Deadline::Moving(_)) && moved {
                since = Instant::now();
            } else if since.elapsed() > wait.deadline.duration() {
                return Err(UpdateError::NoProgress(wait.deadline.duration()));
            }
            last = Some(progress);
            (self.next_pod_change(wait.ns, wait.selector, wait.what.clone())).await?;
        }
    }
}

/// A wait on an update's pods: whose pods wake it, what it waits for (as an abort names it),
/// and how long it may last.
pub(super) struct PodWait<'a> {
    pub ns: &'a str,
    pub selector: &'a str,
    pub what: String,
    pub deadline: Deadline,
}
