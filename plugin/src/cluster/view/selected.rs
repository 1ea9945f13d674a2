//! The pods a label selector picks in one namespace, listed once and then watched: what a
//! workload update reads of its pods and waits on. A look at them is a read of memory and a
//! wait is woken by their changes, so an update costs the API server one LIST and one WATCH
//! per selector, not a LIST per look and a new watch per wait. Failures are the view's: an
//! answer (forbidden) or a server gone for longer than a request is retried fails every read
//! after; a watch cut mid-stream resumes, and one that lost its place lists again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use tokio::task::JoinHandle;

use super::feed::{Watching, watch_whole};
use crate::cluster::{Cluster, ClusterError, Request};
use crate::plan::rolling_update::pods::PodInfo;

/// The pods of one selector, as the watch has them.
#[derive(Default)]
struct Held {
    pods: BTreeMap<String, PodInfo>,
    /// A list under way: it replaces `pods` once complete.
    relisting: Option<BTreeMap<String, PodInfo>>,
    listed: bool,
    failed: Option<Arc<ClusterError>>,
}

struct Shared {
    held: Mutex<Held>,
    /// Counts the changes: waits are woken by it.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    fn change(&self, f: impl FnOnce(&mut Held)) {
        f(&mut self.held.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.send_modify(|n| *n += 1);
    }
}

/// The watched pods of a selector. Dropping it stops the watch.
pub struct SelectedPods {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    /// The change count the last read of the pods saw: a wait ends at any change after it.
    read_at: AtomicU64,
}

impl Drop for SelectedPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SelectedPods {
    /// Lists the pods `selector` picks in `namespace` and starts watching them; returns once
    /// they are listed.
    pub async fn start(
        cluster: &Cluster,
        namespace: &str,
        selector: &str,
    ) -> Result<SelectedPods, ClusterError> {
        let shared = Arc::new(Shared {
            held: Mutex::new(Held::default()),
            changed: tokio::sync::watch::Sender::new(0),
        });
        let feed = Feed {
            shared: shared.clone(),
            api: cluster.pods_api(namespace),
            config: watcher::Config::default().labels(selector),
            namespace: namespace.to_string(),
            server: cluster.server.clone(),
            retry_for: cluster.retry_for,
        };
        let task = tokio::spawn(feed.run());
        let pods = SelectedPods {
            shared,
            task,
            read_at: AtomicU64::new(0),
        };
        let mut changes = pods.shared.changed.subscribe();
        loop {
            {
                let held = pods.held();
                if let Some(failed) = &held.failed {
                    return Err(ClusterError::ViewFailed(failed.clone()));
                }
                if held.listed {
                    break;
                }
            }
            if changes.changed().await.is_err() {
                return Err(ClusterError::ViewStopped);
            }
        }
        Ok(pods)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.shared.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pods as the watch has them now, by name.
    pub fn pods(&self) -> Result<Vec<PodInfo>, ClusterError> {
        let held = self.held();
        // Read under the lock, after the pods: a change counted later is one this read may not
        // show, so a wait after it does not miss it.
        let count = *self.shared.changed.borrow();
        self.read_at.store(count, Ordering::Relaxed);
        match &held.failed {
            Some(failed) => Err(ClusterError::ViewFailed(failed.clone())),
            None => Ok(held.pods.values().cloned().collect()),
        }
    }

    /// Returns at the pods' first change since they were last read (at once if one came
    /// meanwhile), or after `within` (a pod Ready but not yet for minReadySeconds becomes
    /// available with no change to wake on).
    pub async fn changed(&self, within: Duration) -> Result<(), ClusterError> {
        let mut changes = self.shared.changed.subscribe();
        let read_at = self.read_at.load(Ordering::Relaxed);
        let change = changes.wait_for(|count| *count != read_at);
        if let Ok(Err(_)) = tokio::time::timeout(within, change).await {
            return Err(ClusterError::ViewStopped);
        }
        let held = self.held();
        match &held.failed {
            Some(failed) => Err(ClusterError::ViewFailed(failed.clone())),
            None => Ok(()),
        }
    }
}

/// The watch task of one selector.
struct Feed {
    shared: Arc<Shared>,
    api: Api<DynamicObject>,
    config: watcher::Config,
    namespace: String,
    server: String,
    retry_for: Duration,
}

impl Feed {
    async fn run(self) {
        let watching = Watching {
            request: Request {
                verb: "watch",
                resource: "pods",
                namespace: Some(&self.namespace),
            },
            server: &self.server,
            retry_for: self.retry_for,
        };
        let shared = &self.shared;
        let seen = |event| shared.change(|held| apply(held, event));
        let failed = |error| {
            shared.change(|held| {
                held.failed.get_or_insert_with(|| Arc::new(error));
            })
        };
        watch_whole(
            watching,
            self.api.clone(),
            self.config.clone(),
            seen,
            failed,
        )
        .await
    }
}

/// A watch event applied to what is held.
fn apply(held: &mut Held, event: watcher::Event<DynamicObject>) {
    let info = |object: &DynamicObject| {
        let value = serde_json::to_value(object).unwrap_or_default();
        PodInfo::from_value(&value)
    };
    match event {
        watcher::Event::Init => held.relisting = Some(BTreeMap::new()),
        watcher::Event::InitApply(object) => {
            let pod = info(&object);
            let list = held.relisting.get_or_insert_with(BTreeMap::new);
            list.insert(pod.name.clone(), pod);
        }
        watcher::Event::InitDone => {
            if let Some(list) = held.relisting.take() {
                held.pods = list;
            }
            held.listed = true;
        }
        watcher::Event::Apply(object) => {
            let pod = info(&object);
            held.pods.insert(pod.name.clone(), pod);
        }
        watcher::Event::Delete(object) => {
            held.pods.remove(&info(&object).name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool) -> DynamicObject {
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "web"},
            "status": {"conditions": [{"type": "Ready", "status": status}]}
        }))
        .unwrap()
    }

    fn names(held: &Held) -> Vec<(String, bool)> {
        held.pods
            .values()
            .map(|p| (p.name.clone(), p.ready))
            .collect()
    }

    #[test]
    fn a_relist_replaces_what_is_held_once_complete_and_events_apply_in_order() {
        let mut held = Held::default();
        apply(&mut held, watcher::Event::Init);
        apply(&mut held, watcher::Event::InitApply(pod("a", true)));
        assert!(!held.listed && held.pods.is_empty());
        apply(&mut held, watcher::Event::InitDone);
        assert!(held.listed);
        apply(&mut held, watcher::Event::Apply(pod("b", false)));
        apply(&mut held, watcher::Event::Apply(pod("a", false)));
        assert_eq!(names(&held), [("a".into(), false), ("b".into(), false)]);
        // A relist (the watch lost its place): until it completes the old pods stand; then
        // what it did not name is gone.
        apply(&mut held, watcher::Event::Init);
        apply(&mut held, watcher::Event::InitApply(pod("b", true)));
        assert_eq!(names(&held).len(), 2);
        apply(&mut held, watcher::Event::InitDone);
        assert_eq!(names(&held), [("b".into(), true)]);
        apply(&mut held, watcher::Event::Delete(pod("b", true)));
        assert!(held.pods.is_empty());
    }

    #[tokio::test]
    async fn a_change_after_the_last_read_ends_the_next_wait_at_once() {
        let shared = Arc::new(Shared {
            held: Mutex::new(Held {
                listed: true,
                ..Held::default()
            }),
            changed: tokio::sync::watch::Sender::new(0),
        });
        let pods = SelectedPods {
            shared: shared.clone(),
            task: tokio::spawn(async {}),
            read_at: AtomicU64::new(0),
        };
        assert!(pods.pods().unwrap().is_empty());
        shared.change(|held| apply(held, watcher::Event::Apply(pod("a", true))));
        // The change came between the read and the wait: the wait ends at once, not after
        // its hour.
        let hour = Duration::from_secs(3600);
        let waited = tokio::time::timeout(Duration::from_secs(5), pods.changed(hour)).await;
        assert!(matches!(waited, Ok(Ok(()))), "the wait missed the change");
        assert_eq!(pods.pods().unwrap().len(), 1);
        // Nothing changed since that read: the wait goes on.
        let waited = tokio::time::timeout(Duration::from_millis(200), pods.changed(hour)).await;
        assert!(waited.is_err(), "the wait ended with nothing changed");
    }
}
