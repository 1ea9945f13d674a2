//! Kubernetes Events for what a run does, so that `kubectl get events`, `kubectl describe` and
//! every dashboard show it beside the cluster's own. A rotation's go on the Node a step concerns
//! (tainted, cordoned, drain started, blocked or finished, terminated) and on the rotation's
//! Lease for the run as a whole (started, batches, gate verdicts, pauses, replacements Ready,
//! finished or stopped), all in `kube-system`, beside the Lease (core `v1` Events about Nodes in
//! `default`, the only namespace that API accepts for them); a rolling update's on its
//! controllers (started, created, scaled, renamed, rolled back, done), in their namespace.
//!
//! [`EventRecorder`] is a [`Reporter`]: the executors' events pass through it unchanged to the
//! terminal and are published in the background, so a slow API server never slows the run.
//! Bounded, as the API server's own recorders are: a repeat (same object, same reason, same
//! related pod) updates the first Event's count instead of adding another, so a drain retried a
//! hundred times leaves one Event per blocked pod. `events.k8s.io/v1` where served, core `v1`
//! Events otherwise.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::sync::mpsc;

use super::lock::{LOCK_NAME, LOCK_NAMESPACE};
use super::{Cluster, ClusterError, Request};
use crate::events::{Event, Reporter};
use crate::plan::rolling_update::controller::Kind;

/// Who the Events say reported them.
pub const COMPONENT: &str = "rollout-ext";
/// Where a rotation's Events go. `events.k8s.io/v1` Events about cluster-scoped objects (Nodes)
/// may live in `kube-system` on every server version (`default` only on newer ones), and
/// `kubectl describe node` looks in every namespace.
const EVENTS_NAMESPACE: &str = LOCK_NAMESPACE;
/// Where core `v1` Events about a Node go: that API accepts them in `default` only (where the
/// kubelet puts its own).
const LEGACY_NODE_EVENTS_NAMESPACE: &str = "default";
/// The API server refuses longer notes.
const NOTE_LIMIT: usize = 1024;
/// How long the end of a run waits for Events still being published.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Regarding {
    Node(String),
    /// The rotation's Lease: the run as a whole.
    Lease,
    /// A controller of the rolling update, by name.
    Controller(String),
}

/// Which run the Events are about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Rotation,
    /// A rolling update of controllers of `kind` in `namespace`; it has no Lease.
    RollingUpdate {
        kind: Kind,
        namespace: String,
    },
    /// The update of a workload of `kind` (a StatefulSet) in `namespace`.
    Workload {
        kind: &'static str,
        api_version: &'static str,
        namespace: String,
    },
}

/// One Event to publish, before it meets the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub regarding: Regarding,
    /// PascalCase, as Kubernetes reasons are.
    pub reason: &'static str,
    pub note: String,
    pub warning: bool,
    /// `namespace/name` of a pod the Event also concerns (an eviction that is blocked).
    pub related_pod: Option<String>,
}

/// The Event an executor's event makes, if any: per-pod evictions, validations and hook
/// chatter stay on the terminal; what an operator looks for on a Node or the run does not.
pub fn record_of(event: &Event) -> Option<Record> {
    let record = |regarding, reason, warning| {
        Some(Record {
            regarding,
            reason,
            note: event.describe(),
            warning,
            related_pod: None,
        })
    };
    let node =
        |name: &str, reason, warning| record(Regarding::Node(name.to_string()), reason, warning);
    let run = |reason, warning| record(Regarding::Lease, reason, warning);
    // Some events name a controller as kubectl prints it (`rc/foo`).
    let controller = |name: &str, reason| {
        let name = name.rsplit_once('/').map_or(name, |(_, bare)| bare);
        record(Regarding::Controller(name.to_string()), reason, false)
    };
    match event {
        Event::Tainted { node: n, .. } => node(n, "Tainted", false),
        Event::Cordoned { node: n, .. } => node(n, "Cordoned", false),
        Event::DrainStarted { node: n, .. } => node(n, "DrainStarted", false),
        Event::Drained { node: n } => node(n, "Drained", false),
        Event::Terminated { node: n, .. } => node(n, "Terminated", false),
        Event::Quarantined { node: n, .. } => node(n, "Quarantined", true),
        Event::Uncordoned { node: n } => node(n, "Uncordoned", false),
        Event::EvictionBlocked { node: n, pod, .. } => Some(Record {
            related_pod: Some(pod.clone()),
            ..node(n, "EvictionBlocked", true)?
        }),
        Event::PodHeld { node: n, pod, .. } => Some(Record {
            related_pod: Some(pod.clone()),
            ..node(n, "PodHeld", false)?
        }),
        Event::HoldExpired { node: n, pod, .. } => Some(Record {
            related_pod: Some(pod.clone()),
            ..node(n, "HoldExpired", true)?
        }),
        Event::DrainEscalated { node: n, pod, .. } => Some(Record {
            related_pod: Some(pod.clone()),
            ..node(n, "DrainEscalated", true)?
        }),
        // The node is gone: the run's Lease carries it.
        Event::NodeGone { .. } => run("NodeGone", true),
        Event::OthersDisrupting { .. } => run("OthersDisrupting", true),
        Event::KuredLockHeld { .. } => run("KuredLockHeld", true),
        Event::GroupStarted { .. } => run("GroupStarted", false),
        Event::Surging { .. } => run("Surging", false),
        Event::BatchStarted { .. } => run("BatchStarted", false),
        Event::Replaced { .. } => run("ReplacementsReady", false),
        Event::PodsBack { .. } => run("EvictedPodsReady", false),
        Event::GroupDone { .. } => run("GroupDone", false),
        Event::Done => run("Finished", false),
        Event::Paused { .. } => run("Paused", false),
        Event::Resumed { .. } => run("Resumed", false),
        Event::Waiting { .. } => run("Waiting", false),
        Event::Decided {
            point: crate::policy::HookPoint::Gate,
            ..
        } => run("GateVerdict", false),
        Event::Warning { .. } => run("Warning", true),
        Event::UpdateStarted { old, .. } => controller(old, "RollingUpdateStarted"),
        Event::PartitionUpdateStarted { workload, .. } => {
            controller(workload, "RollingUpdateStarted")
        }
        Event::PartitionSet { workload, .. } => controller(workload, "PartitionSet"),
        Event::NodeUpdateStarted { workload, .. } => controller(workload, "RollingUpdateStarted"),
        Event::NodesReplacing { workload, .. } => controller(workload, "ReplacingPods"),
        Event::ControllerCreated { controller: c } => controller(c, "Created"),
        Event::Scaled { controller: c, .. } => controller(c, "Scaled"),
        Event::Renaming { to, .. } => controller(to, "Renamed"),
        Event::RolledBack { controller: c } => controller(c, "RolledBack"),
        Event::UpdateDone { controller: c, .. } => controller(c, "RollingUpdated"),
        _ => None,
    }
}

/// Sends the executors' events on to the terminal's reporter and publishes their Events.
pub struct EventRecorder {
    inner: Arc<dyn Reporter>,
    sender: Option<mpsc::UnboundedSender<Record>>,
    worker: tokio::task::JoinHandle<()>,
}

impl Reporter for EventRecorder {
    fn report(&self, event: Event) {
        if let (Some(record), Some(sender)) = (record_of(&event), &self.sender) {
            let _ = sender.send(record);
        }
        self.inner.report(event);
    }
}

impl EventRecorder {
    /// Starts publishing for run `run_id` (named in every note). A failure to publish is said
    /// once, through `inner`, and the run goes on: Events are a view of the run, not its state.
    pub fn start(cluster: &Cluster, run_id: &str, scope: Scope, inner: Arc<dyn Reporter>) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        let _ = sender.send(Record {
            regarding: Regarding::Lease,
            reason: "Started",
            note: "rotation started".into(),
            warning: false,
            related_pod: None,
        });
        let publisher = Publisher {
            cluster: cluster.clone(),
            run_id: run_id.to_string(),
            scope,
            series: HashMap::new(),
            uids: HashMap::new(),
            legacy: None,
        };
        let worker = tokio::spawn(publisher.run(receiver, inner.clone()));
        EventRecorder {
            inner,
            sender: Some(sender),
            worker,
        }
    }

    /// Records how the run ended when it stopped (`Finished` comes with the last executor
    /// event) and waits, briefly, for the rest to be published.
    pub async fn finish(mut self, stopped: Option<(&'static str, String)>) {
        if let (Some((reason, note)), Some(sender)) = (stopped, &self.sender) {
            let _ = sender.send(Record {
                regarding: Regarding::Lease,
                reason,
                note,
                warning: true,
                related_pod: None,
            });
        }
        self.sender = None;
        let _ = tokio::time::timeout(FLUSH_TIMEOUT, &mut self.worker).await;
    }
}

/// An Event already published, which a repeat updates.
struct Published {
    name: String,
    count: i32,
}

struct Publisher {
    cluster: Cluster,
    run_id: String,
    scope: Scope,
    /// By object, reason and related pod.
    series: HashMap<(Regarding, &'static str, Option<String>), Published>,
    /// The uid of each object an Event regards (`kubectl describe` matches on it).
    uids: HashMap<Regarding, Option<String>>,
    /// Whether only core `v1` Events are served; learned at the first Event.
    legacy: Option<bool>,
}

fn request<'a>(verb: &'a str, namespace: &'a str, legacy: bool) -> Request<'a> {
    Request {
        verb,
        resource: if legacy {
            "events"
        } else {
            "events.events.k8s.io"
        },
        namespace: Some(namespace),
    }
}

impl Publisher {
    async fn run(mut self, mut records: mpsc::UnboundedReceiver<Record>, inner: Arc<dyn Reporter>) {
        let mut warned = false;
        while let Some(record) = records.recv().await {
            if let Err(e) = self.publish(record).await
                && !warned
            {
                warned = true;
                inner.report(Event::Warning {
                    message: format!(
                        "cannot record Kubernetes Events ({e}); the run goes on without them"
                    ),
                });
            }
        }
    }

    /// Where Events about `regarding` go in this scope, as the `legacy` (core `v1`) API or not;
    /// `None` for objects the run has not (a rolling update has no Lease, a rotation no
    /// controllers).
    fn namespace(&self, regarding: &Regarding, legacy: bool) -> Option<&str> {
        match (&self.scope, regarding) {
            (Scope::Rotation, Regarding::Node(_)) if legacy => Some(LEGACY_NODE_EVENTS_NAMESPACE),
            (Scope::Rotation, Regarding::Node(_) | Regarding::Lease) => Some(EVENTS_NAMESPACE),
            (
                Scope::RollingUpdate { namespace, .. } | Scope::Workload { namespace, .. },
                Regarding::Controller(_),
            ) => Some(namespace),
            _ => None,
        }
    }

    async fn reference(&mut self, regarding: &Regarding) -> ObjectReference {
        if !self.uids.contains_key(regarding) {
            let uid = match (regarding, &self.scope) {
                (Regarding::Node(name), _) => self.cluster.node_uid(name).await,
                (Regarding::Lease, _) => self.cluster.lock_uid().await,
                (Regarding::Controller(name), Scope::RollingUpdate { kind, namespace }) => self
                    .cluster
                    .get_controller(*kind, namespace, name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.object["metadata"]["uid"].as_str().map(String::from)),
                (
                    Regarding::Controller(name),
                    Scope::Workload {
                        namespace, kind, ..
                    },
                ) => {
                    let object = match *kind {
                        "DaemonSet" => self
                            .cluster
                            .get_daemon_set(namespace, name)
                            .await
                            .map(|d| d.map(|d| d.object)),
                        _ => self
                            .cluster
                            .get_stateful_set(namespace, name)
                            .await
                            .map(|s| s.map(|s| s.object)),
                    };
                    object
                        .ok()
                        .flatten()
                        .and_then(|o| o["metadata"]["uid"].as_str().map(String::from))
                }
                (Regarding::Controller(_), Scope::Rotation) => None,
            };
            self.uids.insert(regarding.clone(), uid);
        }
        let uid = self.uids[regarding].clone();
        match regarding {
            Regarding::Controller(name) => {
                let (api_version, kind, namespace) = match &self.scope {
                    Scope::RollingUpdate { kind, namespace } => {
                        (kind.api_version(), kind.as_str(), namespace.clone())
                    }
                    Scope::Workload {
                        kind,
                        api_version,
                        namespace,
                    } => (*api_version, *kind, namespace.clone()),
                    Scope::Rotation => ("v1", "ReplicationController", String::new()),
                };
                ObjectReference {
                    api_version: Some(api_version.into()),
                    kind: Some(kind.into()),
                    name: Some(name.clone()),
                    namespace: Some(namespace),
                    uid,
                    ..Default::default()
                }
            }
            Regarding::Node(name) => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.clone()),
                uid,
                ..Default::default()
            },
            Regarding::Lease => ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: Some(LOCK_NAME.into()),
                namespace: Some(LOCK_NAMESPACE.into()),
                uid,
                ..Default::default()
            },
        }
    }

    async fn legacy(&mut self) -> bool {
        if self.legacy.is_none() {
            let served = self
                .cluster
                .client
                .list_api_group_resources("events.k8s.io/v1")
                .await
                .is_ok();
            self.legacy = Some(!served);
        }
        self.legacy == Some(true)
    }

    async fn publish(&mut self, record: Record) -> Result<(), ClusterError> {
        let legacy = self.legacy().await;
        let Some(namespace) = self
            .namespace(&record.regarding, legacy)
            .map(str::to_string)
        else {
            return Ok(());
        };
        let namespace = namespace.as_str();
        let api = events_api(&self.cluster, namespace, legacy);
        let key = (
            record.regarding.clone(),
            record.reason,
            record.related_pod.clone(),
        );
        let now = jiff::Timestamp::now();
        if let Some(published) = self.series.get_mut(&key) {
            published.count += 1;
            let patch = if legacy {
                json!({"count": published.count, "lastTimestamp": Time(now)})
            } else {
                json!({"series": {"count": published.count, "lastObservedTime": MicroTime(now)}})
            };
            api.patch(
                &published.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| request("patch", namespace, legacy).error(&self.cluster.server, e))?;
            return Ok(());
        }
        let regarding = self.reference(&record.regarding).await;
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(COMPONENT),
            now.as_nanosecond()
        );
        let mut note = format!("{} (run {})", record.note, self.run_id);
        if note.len() > NOTE_LIMIT {
            let mut cut = NOTE_LIMIT - 3;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
        let related = record
            .related_pod
            .as_deref()
            .and_then(|p| p.split_once('/'));
        let related = related.map(
            |(ns, pod)| json!({"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod}),
        );
        let kind = if record.warning { "Warning" } else { "Normal" };
        let body = if legacy {
            json!({
                "involvedObject": regarding, "related": related,
                "reason": record.reason, "message": note, "type": kind,
                "count": 1, "firstTimestamp": Time(now), "lastTimestamp": Time(now),
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT, "reportingInstance": instance(&self.run_id),
            })
        } else {
            json!({
                "regarding": regarding, "related": related,
                "reason": record.reason, "note": note, "type": kind,
                "action": "Rotate", "eventTime": MicroTime(now),
                "reportingController": COMPONENT, "reportingInstance": instance(&self.run_id),
            })
        };
        let object = DynamicObject::new(&name, &api_resource(legacy))
            .within(namespace)
            .data(body);
        api.create(&PostParams::default(), &object)
            .await
            .map_err(|e| request("create", namespace, legacy).error(&self.cluster.server, e))?;
        self.series.insert(key, Published { name, count: 1 });
        Ok(())
    }
}

/// `reportingInstance` is at most 128 characters.
fn instance(run_id: &str) -> String {
    run_id.chars().take(128).collect()
}

fn api_resource(legacy: bool) -> ApiResource {
    let gvk = if legacy {
        GroupVersionKind::gvk("", "v1", "Event")
    } else {
        GroupVersionKind::gvk("events.k8s.io", "v1", "Event")
    };
    ApiResource::from_gvk_with_plural(&gvk, "events")
}

fn events_api(cluster: &Cluster, namespace: &str, legacy: bool) -> Api<DynamicObject> {
    Api::namespaced_with(cluster.client.clone(), namespace, &api_resource(legacy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_steps_go_on_the_node_and_the_run_on_the_lease() {
        let cordoned = record_of(&Event::Cordoned {
            node: "n1".into(),
            excluded_from_load_balancers: true,
        })
        .unwrap();
        assert_eq!(cordoned.regarding, Regarding::Node("n1".into()));
        assert_eq!(cordoned.reason, "Cordoned");
        assert_eq!(
            cordoned.note,
            "cordoned node n1, excluded from external load balancers"
        );
        let blocked = record_of(&Event::EvictionBlocked {
            node: "n1".into(),
            pod: "shop/web-1".into(),
            reason: "PodDisruptionBudget shop/web allows no disruption".into(),
            retry_seconds: 5,
            seconds_left: 60,
        })
        .unwrap();
        assert!(blocked.warning);
        assert_eq!(blocked.related_pod.as_deref(), Some("shop/web-1"));
        let done = record_of(&Event::Done).unwrap();
        assert_eq!(
            (done.regarding, done.reason),
            (Regarding::Lease, "Finished")
        );
        // Per-pod progress stays on the terminal.
        let evicted = Event::Evicted {
            node: "n1".into(),
            pod: "shop/web-1".into(),
        };
        assert_eq!(record_of(&evicted), None);
    }
}
