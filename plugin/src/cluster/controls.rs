//! The on-call engineer's controls: pause, resume and abort requests, recorded on the rotation's
//! Lease (or, for a rolling update, on the controller being updated) from any terminal, and read
//! by the running executor at its safe points. Those are the places every run and every
//! `status` already reads, so a request made from another machine needs nothing else to reach
//! the run.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

use super::controllers::Write;
use super::lock::{LOCK_NAME, api, delete_unchanged, has_run_state, lease_request};
use super::workloads::AppsKind;
use super::{Cluster, ClusterError, Request};
use crate::keys;
use crate::plan::rolling_update::controller::Kind;

/// Who asked for a pause or an abort, why, and when (RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ControlRequest {
    pub by: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub at: String,
    /// An abort of the node rotation that also uncordons the nodes the run cordoned and did
    /// not terminate (`abort --uncordon`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub uncordon: bool,
}

impl ControlRequest {
    /// A request made now.
    pub fn now(by: &str, reason: &str) -> Self {
        let at = jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_default();
        ControlRequest {
            by: by.to_string(),
            reason: reason.to_string(),
            at: at.to_string(),
            uncordon: false,
        }
    }

    /// Reads an annotation's value. One written by hand (`kubectl annotate lease ...
    /// rollout-ext.io/pause=maintenance`) is a request too: its text is the reason.
    fn parse(text: &str) -> Self {
        serde_json::from_str(text).unwrap_or_else(|_| ControlRequest {
            by: "an annotation written by hand".into(),
            reason: text.to_string(),
            at: String::new(),
            uncordon: false,
        })
    }

    /// "by alice@laptop at 2026-11-24T10:00:00Z: node pool maintenance"
    pub fn describe(&self) -> String {
        let mut text = format!("by {}", self.by);
        if !self.at.is_empty() {
            text.push_str(&format!(" at {}", self.at));
        }
        if !self.reason.is_empty() {
            text.push_str(&format!(": {}", self.reason));
        }
        text
    }

    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The requests standing on the Lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Controls {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<ControlRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort: Option<ControlRequest>,
}

impl Controls {
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        let read = |key: &str| annotations.get(key).map(|v| ControlRequest::parse(v));
        Controls {
            pause: read(keys::PAUSE),
            abort: read(keys::ABORT),
        }
    }
}

/// Which request an operator makes or withdraws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Pause,
    Abort,
}

impl Control {
    fn key(self) -> &'static str {
        match self {
            Control::Pause => keys::PAUSE,
            Control::Abort => keys::ABORT,
        }
    }
}

/// The Lease as a control request sees it.
#[derive(Debug, Clone, Default)]
pub struct LeaseView {
    /// Empty when no run holds the lock.
    pub holder: String,
    pub controls: Controls,
}

impl Cluster {
    /// The holder and the standing requests; `None` when there is no Lease (no run, no state).
    pub async fn controls(&self) -> Result<Option<LeaseView>, ClusterError> {
        let Some(lease) = self.read_lease().await? else {
            return Ok(None);
        };
        Ok(Some(LeaseView {
            holder: lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default(),
            controls: Controls::from_annotations(&lease.metadata.annotations.unwrap_or_default()),
        }))
    }

    /// Records `request` as the standing `control` (or, with `None`, withdraws it). Without a
    /// Lease one is created with no holder: the next run takes it and finds the request.
    pub async fn set_control(
        &self,
        control: Control,
        request: Option<&ControlRequest>,
    ) -> Result<(), ClusterError> {
        let leases = api(self);
        let value = request.map(ControlRequest::to_json);
        let patch = serde_json::json!({"metadata": {"annotations": {control.key(): value}}});
        // Twice at most: a Lease created or deleted by a run between our two calls.
        for _ in 0..2 {
            match leases
                .patch(LOCK_NAME, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 && value.is_none() => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(lease_request("patch").error(&self.server, e)),
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LOCK_NAME.into()),
                    annotations: Some(
                        [(control.key().to_string(), value.clone().unwrap_or_default())].into(),
                    ),
                    ..Default::default()
                },
                spec: Some(Default::default()),
            };
            match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(lease_request("create").error(&self.server, e)),
            }
        }
        Err(ClusterError::Api {
            verb: "patch".into(),
            resource: "leases.coordination.k8s.io".into(),
            code: 409,
            message: format!("{LOCK_NAME} was created and deleted again meanwhile; try again"),
        })
    }

    /// Deletes the Lease if nothing is left on it: no holder and no state of a run (what a
    /// `resume` leaves behind when it withdraws a pause made while no run was going).
    pub async fn drop_idle_lock(&self) -> Result<(), ClusterError> {
        let Some(lease) = self.read_lease().await? else {
            return Ok(());
        };
        let held = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .is_some_and(|h| !h.is_empty());
        if held || has_run_state(&lease) {
            return Ok(());
        }
        // Changed meanwhile (a new pause, a run taking it): it is no longer idle.
        delete_unchanged(self, lease).await.map(drop)
    }
}

/// A controller of a rolling update as a control request sees it.
#[derive(Debug, Clone, Default)]
pub struct ControllerView {
    /// An update of it is under way or was interrupted (it names its next controller, or it
    /// carries the strategy a StatefulSet's update recorded).
    pub updating: bool,
    pub controls: Controls,
}

/// What an operator's request to a rolling update is recorded on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    Controller(Kind, String),
    StatefulSet(String),
    DaemonSet(String),
}

impl Workload {
    fn apps_kind(&self) -> AppsKind {
        match self {
            Workload::DaemonSet(_) => AppsKind::DaemonSet,
            _ => AppsKind::StatefulSet,
        }
    }

    /// As the commands name it: `rc/foo`, `sts/db`.
    pub fn shown(&self) -> String {
        match self {
            Workload::Controller(kind, name) => format!("{}/{name}", kind.short()),
            Workload::StatefulSet(name) => format!("sts/{name}"),
            Workload::DaemonSet(name) => format!("ds/{name}"),
        }
    }
}

impl Cluster {
    /// The requests standing on `workload`; `None` when it does not exist.
    pub async fn controller_controls(
        &self,
        workload: &Workload,
        namespace: &str,
    ) -> Result<Option<ControllerView>, ClusterError> {
        let (annotations, updating) = match workload {
            Workload::Controller(kind, name) => {
                let Some(c) = self.get_controller(*kind, namespace, name).await? else {
                    return Ok(None);
                };
                let annotations = c.annotations();
                let updating = annotations.contains_key(keys::LEGACY_NEXT_CONTROLLER);
                (annotations, updating)
            }
            Workload::StatefulSet(name) | Workload::DaemonSet(name) => {
                let kind = workload.apps_kind();
                let Some(object) = self.get_workload(kind, namespace, name).await? else {
                    return Ok(None);
                };
                let annotations: BTreeMap<String, String> = object["metadata"]["annotations"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect();
                let updating = annotations.contains_key(keys::ORIGINAL_UPDATE_STRATEGY);
                (annotations, updating)
            }
        };
        Ok(Some(ControllerView {
            updating,
            controls: Controls::from_annotations(&annotations),
        }))
    }

    /// Records `request` as the standing `control` on `workload` (or withdraws it).
    pub async fn set_controller_control(
        &self,
        workload: &Workload,
        namespace: &str,
        control: Control,
        request: Option<&ControlRequest>,
    ) -> Result<(), ClusterError> {
        let value = request.map(ControlRequest::to_json);
        let patch = serde_json::json!({"metadata": {"annotations": {control.key(): value}}});
        match workload {
            Workload::Controller(kind, name) => self
                .patch_controller(*kind, namespace, name, &patch, Write::Apply)
                .await
                .map(drop),
            Workload::StatefulSet(name) | Workload::DaemonSet(name) => self
                .patch_workload(workload.apps_kind(), namespace, name, &patch)
                .await
                .map(drop),
        }
    }
}

/// Where the operator's pause and abort requests to a run stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlsAt {
    /// The rotation's Lease.
    Lease,
    /// The workload being updated.
    Workload {
        workload: Workload,
        namespace: String,
    },
}

/// What a watch of the controls has seen.
#[derive(Debug, Clone)]
enum Seen {
    /// Not listed yet.
    Unknown,
    Known(Controls),
    Failed(std::sync::Arc<ClusterError>),
}

/// The requests standing where a run's controls stand, kept current by a watch of that one
/// object (its metadata only): a safe point reads them without asking the server, and an abort
/// is seen the moment it is made. Dropping it stops the watch.
pub struct WatchedControls {
    seen: tokio::sync::watch::Receiver<Seen>,
    task: tokio::task::AbortHandle,
}

impl Drop for WatchedControls {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WatchedControls {
    /// The requests standing now (once the watch has listed the object).
    pub async fn current(&self) -> Result<Controls, ClusterError> {
        let mut seen = self.seen.clone();
        self.next(&mut seen, true).await
    }

    /// Resolves with the requests at their next change (or the first list).
    pub async fn changed(&self) -> Result<Controls, ClusterError> {
        let mut seen = self.seen.clone();
        seen.borrow_and_update();
        self.next(&mut seen, false).await
    }

    async fn next(
        &self,
        seen: &mut tokio::sync::watch::Receiver<Seen>,
        now: bool,
    ) -> Result<Controls, ClusterError> {
        let mut now = now;
        loop {
            if now {
                match &*seen.borrow_and_update() {
                    Seen::Known(controls) => return Ok(controls.clone()),
                    Seen::Failed(error) => return Err(ClusterError::ViewFailed(error.clone())),
                    Seen::Unknown => {}
                }
            }
            now = true;
            if seen.changed().await.is_err() {
                return Err(ClusterError::ViewStopped);
            }
        }
    }
}

/// Keeps `tx` current with the annotations of object `name` of `api`: read once, then watched
/// from the version read (so that only `get` and `watch` of it are needed, never `list`), read
/// again when the watch loses its place.
async fn watch_annotations<K>(
    api: kube::Api<K>,
    name: String,
    request: Request<'static>,
    server: String,
    tx: tokio::sync::watch::Sender<Seen>,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let fail = |e: kube::Error| {
        let error = std::sync::Arc::new(request.error(&server, e));
        tx.send_replace(Seen::Failed(error));
    };
    // After a failure that is worth another try, the next one waits a little longer.
    let mut rest = RETRY_FIRST;
    loop {
        let (controls, version) = match api.get_opt(&name).await {
            Ok(Some(o)) => (
                Controls::from_annotations(o.annotations()),
                o.resource_version().unwrap_or_default(),
            ),
            // No object (yet): its requests are none, and the watch sees it come.
            Ok(None) => (Controls::default(), "0".to_string()),
            Err(e) if super::retry::is_final(&e) => return fail(e),
            Err(_) => {
                tokio::time::sleep(rest).await;
                rest = (rest * 2).min(RETRY_MOST);
                continue;
            }
        };
        tx.send_replace(Seen::Known(controls));
        let mut from = version;
        'watch: loop {
            let mut events = match api.watch(&params, &from).await {
                Ok(events) => events.boxed(),
                Err(e) if super::retry::is_final(&e) => return fail(e),
                Err(_) => break 'watch,
            };
            rest = RETRY_FIRST;
            while let Some(event) = events.next().await {
                let seen = match event {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                        from = o.resource_version().unwrap_or(from);
                        Controls::from_annotations(o.annotations())
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        from = o.resource_version().unwrap_or(from);
                        Controls::default()
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        from = b.metadata.resource_version;
                        continue;
                    }
                    // The version is gone (or the watch failed): read the object again.
                    Ok(WatchEvent::Error(_)) | Err(_) => break 'watch,
                };
                tx.send_replace(Seen::Known(seen));
            }
            // Closed by the server: resumed where it was.
        }
        tokio::time::sleep(rest).await;
        rest = (rest * 2).min(RETRY_MOST);
    }
}

/// How long the watch of the controls rests after a failure, doubling up to a few seconds.
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(100);
const RETRY_MOST: std::time::Duration = std::time::Duration::from_secs(5);

impl Cluster {
    /// Starts watching the requests standing at `at`.
    pub fn watch_controls(&self, at: &ControlsAt) -> WatchedControls {
        let (tx, seen) = tokio::sync::watch::channel(Seen::Unknown);
        let server = self.server.clone();
        let task = match at {
            ControlsAt::Lease => tokio::spawn(watch_annotations(
                api(self),
                LOCK_NAME.to_string(),
                lease_request("watch"),
                server,
                tx,
            )),
            ControlsAt::Workload {
                workload: Workload::Controller(kind, name),
                namespace,
            } => tokio::spawn(watch_annotations(
                self.controllers(*kind, namespace),
                name.clone(),
                Request {
                    verb: "watch",
                    resource: kind.resource(),
                    namespace: None,
                },
                server,
                tx,
            )),
            ControlsAt::Workload {
                workload: workload @ (Workload::StatefulSet(name) | Workload::DaemonSet(name)),
                namespace,
            } => tokio::spawn(watch_annotations(
                self.apps(workload.apps_kind(), namespace),
                name.clone(),
                Request {
                    verb: "watch",
                    resource: workload.apps_kind().resource(),
                    namespace: None,
                },
                server,
                tx,
            )),
        };
        WatchedControls {
            seen,
            task: task.abort_handle(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_through_the_annotation() {
        let request = ControlRequest {
            by: "alice@laptop".into(),
            reason: "zone b maintenance".into(),
            at: "2026-11-24T10:00:00Z".into(),
            uncordon: false,
        };
        let annotations: BTreeMap<String, String> =
            [(keys::PAUSE.to_string(), request.to_json())].into();
        let controls = Controls::from_annotations(&annotations);
        assert_eq!(controls.pause.as_ref(), Some(&request));
        assert_eq!(controls.abort, None);
        assert_eq!(
            request.describe(),
            "by alice@laptop at 2026-11-24T10:00:00Z: zone b maintenance"
        );
    }

    #[test]
    fn an_annotation_written_by_hand_is_a_request_with_its_text_as_reason() {
        let annotations: BTreeMap<String, String> =
            [(keys::ABORT.to_string(), "stop now".to_string())].into();
        let abort = Controls::from_annotations(&annotations).abort.unwrap();
        assert_eq!(abort.reason, "stop now");
        assert_eq!(
            abort.describe(),
            "by an annotation written by hand: stop now"
        );
    }
}
