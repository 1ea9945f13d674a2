//! The on-call engineer's controls: pause, resume and abort requests, recorded on the rotation's
//! Lease (or, for a rolling update, on the controller being updated) from any terminal, and read
//! by the running executor at its safe points. Those are the places every run and every
//! `status` already reads, so a request made from another machine needs nothing else to reach
//! the run.

use std::collections::BTreeMap;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use super::controllers::Write;
use super::lock::{LOCK_NAME, api, delete_unchanged, has_run_state, lease_request};
use super::workloads::AppsKind;
use super::{Cluster, ClusterError};
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
        }
    }

    /// Reads an annotation's value. One written by hand (`kubectl annotate lease ...
    /// rollout-ext.io/pause=maintenance`) is a request too: its text is the reason.
    fn parse(text: &str) -> Self {
        serde_json::from_str(text).unwrap_or_else(|_| ControlRequest {
            by: "an annotation written by hand".into(),
            reason: text.to_string(),
            at: String::new(),
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

    /// Yields whenever the watch of the Lease delivers something (a change, or a re-list): a
    /// wake-up to read the controls again, instead of polling. Backs off on watch errors; the
    /// read that follows each wake-up reports them.
    pub fn lock_changes(&self) -> impl Stream<Item = ()> + Send + use<> {
        let config = watcher::Config::default().fields(&format!("metadata.name={LOCK_NAME}"));
        watcher(api(self), config).default_backoff().map(|_| ())
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

    /// Yields whenever the watch of `workload` delivers something: a wake-up to read its
    /// controls again.
    pub fn workload_changes(
        &self,
        workload: &Workload,
        namespace: &str,
    ) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>> {
        match workload {
            Workload::Controller(kind, name) => {
                Box::pin(self.controller_changes(*kind, namespace, name))
            }
            Workload::StatefulSet(name) | Workload::DaemonSet(name) => {
                Box::pin(self.apps_changes(workload.apps_kind(), namespace, name))
            }
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
