//! A rotation followed from outside it (`status --watch`): its Lease, the nodes it marks, its
//! Events and the pods left on each node it drains, each listed once and then watched, as one
//! stream of changes. Nothing here polls; a cut watch is resumed with kube's backoff.

use std::collections::{BTreeMap, HashMap};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as KubeEvent, Node, Pod};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as Watched, watcher};
use tokio::sync::mpsc;

use super::drain::QuarantineRecord;
use super::lock::{LOCK_NAME, LOCK_NAMESPACE, LockStatus};
use super::recorder::COMPONENT;
use super::{Cluster, Request};
use crate::keys;

/// One change to what a rotation shows of itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// The Lease as it is now; `None`: no run holds or left one.
    Lease(Option<LockStatus>),
    /// Every node that carries a mark of the run, listed afresh.
    Nodes(Vec<NodeMarks>),
    /// A node's marks changed (none left: the run is done with it).
    Node(NodeMarks),
    NodeGone(String),
    /// A new Event of a run, or a repeat of one (its count grew).
    Event(RunEvent),
    /// The Events there were when the watch began are all said: the next are new.
    EventsListed,
    /// The pods a drain still has to move off `node` (namespace/name).
    PodsLeft {
        node: String,
        pods: Vec<String>,
    },
    /// A watch cannot go on for now (`what` names it); it is tried again.
    Failed {
        what: &'static str,
        message: String,
    },
}

/// The resources the view watches, as a `Failed` names them.
pub const LEASES: &str = "leases.coordination.k8s.io";
pub const NODES: &str = "nodes";
pub const PODS: &str = "pods";
pub const EVENTS: &str = "events";

impl Followed {
    /// The watch this news came from, which therefore works again (`None` for a failure).
    pub fn watch(&self) -> Option<&'static str> {
        match self {
            Followed::Lease(_) => Some(LEASES),
            Followed::Nodes(_) | Followed::Node(_) | Followed::NodeGone(_) => Some(NODES),
            Followed::Event(_) | Followed::EventsListed => Some(EVENTS),
            Followed::PodsLeft { .. } => Some(PODS),
            Followed::Failed { .. } => None,
        }
    }
}

/// What the run marked a node with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMarks {
    pub name: String,
    /// `cordoned` (draining), `drained`, … (see [`keys::PHASE`]).
    pub phase: Option<String>,
    pub detached: bool,
    pub quarantine: Option<QuarantineRecord>,
}

impl NodeMarks {
    pub fn marked(&self) -> bool {
        self.phase.is_some() || self.detached || self.quarantine.is_some()
    }

    /// Whether a drain of it is under way (it is cordoned and not yet drained).
    pub fn draining(&self) -> bool {
        self.phase.as_deref() == Some("cordoned") && self.quarantine.is_none()
    }

    fn of(
        name: String,
        annotations: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Self {
        NodeMarks {
            name,
            phase: annotations.get(keys::PHASE).cloned(),
            detached: annotations.contains_key(keys::DETACHED),
            quarantine: QuarantineRecord::from_marks(
                annotations.get(keys::QUARANTINED).map(String::as_str),
                labels.contains_key(keys::QUARANTINED),
            ),
        }
    }
}

/// A Kubernetes Event of a run, as `status --watch` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEvent {
    /// Its object's name, to tell a repeat from a new one.
    pub name: String,
    /// When it last happened.
    pub at: Option<jiff::Timestamp>,
    pub reason: String,
    /// `node NAME`, or `run` for the run as a whole.
    pub regarding: String,
    /// Without the run's id, which every note ends with.
    pub note: String,
    pub warning: bool,
    pub count: i32,
}

impl RunEvent {
    fn of(event: KubeEvent) -> RunEvent {
        let series = event.series.as_ref();
        let at = (series
            .and_then(|s| s.last_observed_time.as_ref())
            .map(|t| t.0))
        .or(event.last_timestamp.as_ref().map(|t| t.0))
        .or(event.event_time.as_ref().map(|t| t.0))
        .or(event.metadata.creation_timestamp.as_ref().map(|t| t.0));
        let object = &event.involved_object;
        let regarding = match object.kind.as_deref() {
            Some("Node") => format!("node {}", object.name.as_deref().unwrap_or_default()),
            Some("Lease") => "run".to_string(),
            kind => format!(
                "{} {}",
                kind.unwrap_or("object").to_lowercase(),
                object.name.as_deref().unwrap_or_default()
            ),
        };
        let message = event.message.unwrap_or_default();
        let note = match message.rfind(" (run ") {
            Some(at) if message.ends_with(')') => message[..at].to_string(),
            _ => message,
        };
        RunEvent {
            name: event.metadata.name.unwrap_or_default(),
            at,
            reason: event.reason.unwrap_or_default(),
            regarding,
            note,
            warning: event.type_.as_deref() == Some("Warning"),
            count: series.and_then(|s| s.count).or(event.count).unwrap_or(1),
        }
    }
}

/// Whether a pod is one a drain moves: not a DaemonSet's, not a static pod's mirror, not done.
fn drain_moves(pod: &Pod) -> bool {
    let daemon = (pod.metadata.owner_references.iter().flatten()).any(|o| o.kind == "DaemonSet");
    let mirror = (pod.metadata.annotations.iter().flatten())
        .any(|(k, _)| k == "kubernetes.io/config.mirror");
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !daemon && !mirror && !matches!(phase, Some("Succeeded" | "Failed"))
}

impl Cluster {
    /// Follows the node rotation: every change, from the first list of each watch on.
    pub fn follow_rotation(&self) -> mpsc::UnboundedReceiver<Followed> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.follow_lease_into(tx.clone());
        let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), LOCK_NAMESPACE);
        let config = watcher::Config::default().fields(&format!("reportingComponent={COMPONENT}"));
        let events_request = Request {
            verb: "watch",
            resource: EVENTS,
            namespace: Some(LOCK_NAMESPACE),
        };
        spawn_followed(
            watcher(events, config),
            self.server.clone(),
            events_request,
            tx.clone(),
            |change, tx: &Sender| {
                let _ = match change {
                    Watched::InitApply(e) | Watched::Apply(e) => {
                        tx.send(Followed::Event(RunEvent::of(e)))
                    }
                    Watched::InitDone => tx.send(Followed::EventsListed),
                    Watched::Init | Watched::Delete(_) => return,
                };
            },
        );
        tokio::spawn(follow_nodes(self.clone(), tx));
        rx
    }

    /// Follows the rotation's Lease alone (what a fleet's view reads of each cluster).
    pub fn follow_lease(&self) -> mpsc::UnboundedReceiver<Followed> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.follow_lease_into(tx);
        rx
    }

    fn follow_lease_into(&self, tx: Sender) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LOCK_NAMESPACE);
        let config = watcher::Config::default().fields(&format!("metadata.name={LOCK_NAME}"));
        let lease_request = Request {
            verb: "watch",
            resource: LEASES,
            namespace: Some(LOCK_NAMESPACE),
        };
        spawn_followed(
            watcher(leases, config),
            self.server.clone(),
            lease_request,
            tx,
            {
                let mut listed = false;
                move |change, tx: &Sender| match change {
                    Watched::Init => listed = false,
                    Watched::InitApply(lease) | Watched::Apply(lease) => {
                        listed = true;
                        let _ = tx.send(Followed::Lease(Some(LockStatus::of(lease))));
                    }
                    Watched::Delete(_) => {
                        let _ = tx.send(Followed::Lease(None));
                    }
                    Watched::InitDone if !listed => {
                        let _ = tx.send(Followed::Lease(None));
                    }
                    Watched::InitDone => {}
                }
            },
        );
    }
}

type Sender = mpsc::UnboundedSender<Followed>;

/// Runs `stream` until `tx` is closed, passing each change to `on`; a failure is said once per
/// run of failures.
fn spawn_followed<K, S>(
    stream: S,
    server: String,
    request: Request<'static>,
    tx: Sender,
    mut on: impl FnMut(Watched<K>, &Sender) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    S: Stream<Item = Result<Watched<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream.default_backoff());
        let mut failing = false;
        while let Some(change) = stream.next().await {
            if tx.is_closed() {
                return;
            }
            match change {
                Ok(change) => {
                    failing = false;
                    on(change, &tx);
                }
                Err(e) if !failing => {
                    failing = true;
                    let _ = tx.send(Followed::Failed {
                        what: request.resource,
                        message: watch_error(&server, &request, e),
                    });
                }
                Err(_) => {}
            }
        }
    })
}

/// A watch's failure in the words of the layer's other errors (naming verb and resource).
pub(super) fn watch_error(server: &str, request: &Request, error: watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => request.error(server, e).to_string(),
        other => other.to_string(),
    }
}

/// The nodes' marks (their metadata only), and a watch of the pods of each node being drained
/// for as long as it is.
async fn follow_nodes(cluster: Cluster, tx: Sender) {
    let nodes: Api<PartialObjectMeta<Node>> = Api::all(cluster.client.clone());
    let (marks_tx, mut marks) = mpsc::unbounded_channel();
    let request = Request {
        verb: "watch",
        resource: NODES,
        namespace: None,
    };
    let watch = spawn_followed(
        watcher(nodes, watcher::Config::default()),
        cluster.server.clone(),
        request,
        marks_tx,
        {
            let mut listing = Vec::new();
            move |change, tx: &Sender| {
                let marks_of = |m: PartialObjectMeta<Node>| {
                    let meta = m.metadata;
                    NodeMarks::of(
                        meta.name.unwrap_or_default(),
                        &meta.annotations.unwrap_or_default(),
                        &meta.labels.unwrap_or_default(),
                    )
                };
                let _ = match change {
                    Watched::Init => {
                        listing.clear();
                        return;
                    }
                    Watched::InitApply(m) => {
                        listing.extend(Some(marks_of(m)).filter(NodeMarks::marked));
                        return;
                    }
                    Watched::InitDone => tx.send(Followed::Nodes(std::mem::take(&mut listing))),
                    Watched::Apply(m) => tx.send(Followed::Node(marks_of(m))),
                    Watched::Delete(m) => {
                        tx.send(Followed::NodeGone(m.metadata.name.unwrap_or_default()))
                    }
                };
            }
        },
    );
    // The drains followed: node → its pods' watch.
    let mut drains: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    let draining = |name: &str, now: bool, drains: &mut HashMap<_, _>| match (
        now,
        drains.contains_key(name),
    ) {
        (true, false) => {
            let handle = follow_pods_on(&cluster, name, tx.clone());
            drains.insert(name.to_string(), handle);
        }
        (false, true) => {
            if let Some(h) = drains.remove(name) {
                h.abort();
            }
        }
        _ => {}
    };
    while let Some(change) = marks.recv().await {
        match &change {
            Followed::Nodes(all) => {
                let now: Vec<&str> = (all.iter().filter(|m| m.draining()))
                    .map(|m| m.name.as_str())
                    .collect();
                let gone: Vec<String> = (drains.keys())
                    .filter(|n| !now.contains(&n.as_str()))
                    .cloned()
                    .collect();
                for name in gone {
                    draining(&name, false, &mut drains);
                }
                for name in now {
                    draining(name, true, &mut drains);
                }
            }
            Followed::Node(m) => draining(&m.name, m.draining(), &mut drains),
            Followed::NodeGone(name) => draining(name, false, &mut drains),
            _ => {}
        }
        // Unmarked nodes are news only to one that showed them marked.
        if tx.send(change).is_err() {
            break;
        }
    }
    watch.abort();
    for (_, handle) in drains {
        handle.abort();
    }
}

/// Watches the pods bound to `node`, saying the ones a drain still moves after each change.
fn follow_pods_on(cluster: &Cluster, node: &str, tx: Sender) -> tokio::task::JoinHandle<()> {
    let pods: Api<Pod> = Api::all(cluster.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let request = Request {
        verb: "watch",
        resource: PODS,
        namespace: None,
    };
    let node = node.to_string();
    let mut left: BTreeMap<String, bool> = BTreeMap::new();
    let mut listing = false;
    spawn_followed(
        watcher(pods, config),
        cluster.server.clone(),
        request,
        tx,
        move |change, tx: &Sender| {
            let key = |p: &Pod| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or_default(),
                    p.metadata.name.as_deref().unwrap_or_default()
                )
            };
            match change {
                Watched::Init => {
                    listing = true;
                    left.clear();
                    return;
                }
                Watched::InitApply(p) => {
                    left.insert(key(&p), drain_moves(&p));
                    return;
                }
                Watched::InitDone => listing = false,
                Watched::Apply(p) => {
                    left.insert(key(&p), drain_moves(&p));
                }
                Watched::Delete(p) => {
                    left.remove(&key(&p));
                }
            }
            if !listing {
                let pods = (left.iter())
                    .filter(|(_, moves)| **moves)
                    .map(|(k, _)| k.clone())
                    .collect();
                let _ = tx.send(Followed::PodsLeft {
                    node: node.clone(),
                    pods,
                });
            }
        },
    )
}
