//! A Cluster API stand-in: the MachineDeployment, MachineSet and Machine controllers of
//! `cluster.x-k8s.io/v1beta1`, as far as rotating nodes meets them, so that the plugin's
//! `clusterAPI` provider is tested against the objects and reactions it would meet in a real
//! cluster.
//!
//! Each MachineDeployment owns one MachineSet, `<md>-ms`, whose replicas and template follow the
//! MachineDeployment's (a template change does not roll the Machines out: only new Machines get
//! it). Each MachineSet keeps `spec.replicas` Machines that are not being deleted, removing those
//! marked `cluster.x-k8s.io/delete-machine` first, then those without a Node, then the newest.
//! A new Machine boots after the boot delay and registers a Node (through [`NodeSim`]) named
//! after it; a deleted Machine loses its Node (not drained: the stand-in records whether the
//! real controller would have drained it) and then its finalizer. Status reflects Machines, not
//! Node conditions: a Machine is ready once it has its Node. Nodes are cluster-wide and named
//! after their Machines, so MachineDeployment names are best unique across namespaces.
//!
//! The controllers are level-triggered, as the real ones are: watches of the three kinds queue
//! the objects they touch (and their owners), and one reconciler reads each afresh from the API
//! server and acts on the difference.

mod reconcile;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::api::{PostParams, ResourceExt};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::nodes::NodeSim;

pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
/// Machine labels of this prefix are kept on the Machine's Node (Cluster API's label sync).
pub const NODE_LABEL_PREFIX: &str = "node.cluster.x-k8s.io/";
/// The label [`CapiSim::create_deployment`] puts on its Machines, and so on their Nodes:
/// the MachineDeployment's name, for node selectors and watches.
pub const POOL_LABEL: &str = "node.cluster.x-k8s.io/pool";
/// The Machine a MachineSet removes first when scaled down.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// A Machine whose Node the real controller would not drain before deleting it.
pub const EXCLUDE_NODE_DRAINING: &str = "machine.cluster.x-k8s.io/exclude-node-draining";
/// Keeps a deleted Machine until its Node is gone.
pub const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
/// The cluster the Machines of [`CapiSim::create_deployment`] belong to.
pub const CLUSTER_NAME: &str = "test";

const API_VERSION: &str = "cluster.x-k8s.io/v1beta1";
/// How long [`CapiSim::wait_machines`] waits.
const WAIT: Duration = Duration::from_secs(60);

/// The Cluster API kinds the stand-in serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    MachineDeployment,
    MachineSet,
    Machine,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::MachineDeployment, Kind::MachineSet, Kind::Machine];

    pub fn resource(self) -> ApiResource {
        let (kind, plural) = match self {
            Kind::MachineDeployment => ("MachineDeployment", "machinedeployments"),
            Kind::MachineSet => ("MachineSet", "machinesets"),
            Kind::Machine => ("Machine", "machines"),
        };
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", kind);
        ApiResource::from_gvk_with_plural(&gvk, plural)
    }
}

/// An object to reconcile.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    kind: Kind,
    namespace: String,
    name: String,
}

/// A Machine deletion the Machine controller acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineDeletion {
    pub namespace: String,
    pub machine: String,
    /// Its Node, if it had one.
    pub node: Option<String>,
    /// Whether it carried [`EXCLUDE_NODE_DRAINING`]; without it the real controller would have
    /// drained the Node first.
    pub drain_excluded: bool,
}

struct State {
    boot_delay: Duration,
    /// How long the controllers take to see a change (see [`CapiSim::set_lag`]).
    lag: Duration,
    /// `(namespace, MachineDeployment or MachineSet)` whose new Machines never get a Node.
    never_joins: HashSet<(String, String)>,
    deletions: Vec<MachineDeletion>,
    created: Vec<String>,
    /// The last Machine number of each `(namespace, MachineSet)`.
    counters: HashMap<(String, String), u32>,
    /// Machines (by uid) whose boot has begun.
    booted: HashSet<String>,
    /// Machines (by uid) whose deletion is recorded.
    deleting: HashSet<String>,
}

/// Handle to the stand-in; clones share it.
#[derive(Clone)]
pub struct CapiSim {
    client: Client,
    nodes: NodeSim,
    state: Arc<Mutex<State>>,
    feed: broadcast::Sender<MachineDeletion>,
    queue: mpsc::UnboundedSender<Key>,
    runtime: tokio::runtime::Handle,
}

impl CapiSim {
    /// Starts the controllers on the current runtime, once the CustomResourceDefinitions of
    /// `tests/cluster/crds/cluster-api.yaml` are served.
    pub async fn start(client: Client, nodes: NodeSim) -> anyhow::Result<CapiSim> {
        let (queue, keys) = mpsc::unbounded_channel();
        let sim = CapiSim {
            client,
            nodes,
            state: Arc::new(Mutex::new(State {
                boot_delay: Duration::from_millis(500),
                lag: Duration::ZERO,
                never_joins: HashSet::new(),
                deletions: Vec::new(),
                created: Vec::new(),
                counters: HashMap::new(),
                booted: HashSet::new(),
                deleting: HashSet::new(),
            })),
            feed: broadcast::channel(1024).0,
            queue,
            runtime: tokio::runtime::Handle::current(),
        };
        for kind in Kind::ALL {
            tokio::spawn(sim.clone().watch(kind));
        }
        tokio::spawn(sim.clone().reconcile_all(keys));
        Ok(sim)
    }

    /// Creates a MachineDeployment of `replicas` Machines running kubelet `version` in
    /// `namespace` (created if missing), of cluster [`CLUSTER_NAME`].
    pub async fn create_deployment(
        &self,
        namespace: &str,
        name: &str,
        replicas: i32,
        version: &str,
    ) -> anyhow::Result<()> {
        let labels = json!({CLUSTER_NAME_LABEL: CLUSTER_NAME, DEPLOYMENT_NAME_LABEL: name});
        let mut template_labels = labels.clone();
        template_labels[POOL_LABEL] = json!(name);
        let md: DynamicObject = serde_json::from_value(json!({
            "apiVersion": API_VERSION,
            "kind": "MachineDeployment",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {CLUSTER_NAME_LABEL: CLUSTER_NAME}},
            "spec": {
                "clusterName": CLUSTER_NAME,
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": template_labels},
                    "spec": {
                        "clusterName": CLUSTER_NAME,
                        "version": version,
                        "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                        "infrastructureRef": {
                            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                            "kind": "SimMachineTemplate",
                            "name": name,
                            "namespace": namespace,
                        },
                    },
                },
            },
        }))?;
        let (client, namespace) = (self.client.clone(), namespace.to_string());
        self.on_runtime(async move {
            let namespaces: Api<Namespace> = Api::all(client.clone());
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
            match namespaces.create(&PostParams::default(), &ns).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                other => {
                    other?;
                }
            }
            api(&client, Kind::MachineDeployment, &namespace)
                .create(&PostParams::default(), &md)
                .await?;
            Ok(())
        })
        .await
    }

    /// Sets a MachineDeployment's replicas.
    pub async fn scale(&self, namespace: &str, md: &str, replicas: i32) -> anyhow::Result<()> {
        let patch = json!({"spec": {"replicas": replicas}});
        self.patch(Kind::MachineDeployment, namespace, md, patch)
            .await
    }

    /// The kubelet version new Machines of a MachineDeployment get (its template's and its
    /// MachineSet's, at once); the Machines it has keep theirs.
    pub async fn set_version(
        &self,
        namespace: &str,
        md: &str,
        version: &str,
    ) -> anyhow::Result<()> {
        let patch = json!({"spec": {"template": {"spec": {"version": version}}}});
        self.patch(Kind::MachineDeployment, namespace, md, patch.clone())
            .await?;
        self.patch(Kind::MachineSet, namespace, &format!("{md}-ms"), patch)
            .await
    }

    /// Whether new Machines of a MachineDeployment (or of a MachineSet of none) boot without
    /// ever registering a Node: they stay Provisioning.
    pub fn set_never_joins(&self, namespace: &str, md: &str, never: bool) {
        let key = (namespace.to_string(), md.to_string());
        let mut state = self.state.lock().unwrap();
        if never {
            state.never_joins.insert(key);
        } else {
            state.never_joins.remove(&key);
        }
    }

    /// How long a new Machine takes to register its Node.
    pub fn set_boot_delay(&self, delay: Duration) {
        self.state.lock().unwrap().boot_delay = delay;
    }

    /// How long the controllers take to act on a change: as busy ones do, they then act on
    /// all the changes made meanwhile at once, on the objects as those left them.
    pub fn set_lag(&self, lag: Duration) {
        self.state.lock().unwrap().lag = lag;
    }

    /// Every Machine deletion acted on so far, in order.
    pub fn deletions(&self) -> Vec<MachineDeletion> {
        self.state.lock().unwrap().deletions.clone()
    }

    /// The names of the Machines created so far, in order.
    pub fn created(&self) -> Vec<String> {
        self.state.lock().unwrap().created.clone()
    }

    /// Every Machine deletion from now on, as the stand-in begins acting on it.
    pub fn subscribe(&self) -> broadcast::Receiver<MachineDeletion> {
        self.feed.subscribe()
    }

    /// The deletions of Machines of `namespace` that had a Node, from now on, as an observer
    /// hears them: the termination of that Node's instance.
    pub fn calls(
        &self,
        namespace: &str,
    ) -> impl futures::Stream<Item = crate::observer::InstanceCall> + Send + 'static {
        let namespace = namespace.to_string();
        futures::stream::unfold(self.subscribe(), move |mut feed| {
            let namespace = namespace.clone();
            async move {
                loop {
                    let deletion = match feed.recv().await {
                        Ok(deletion) => deletion,
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            panic!("observer: missed {n} Machine deletions")
                        }
                        Err(_) => return None,
                    };
                    let Some(node) = deletion.node.filter(|_| deletion.namespace == namespace)
                    else {
                        continue;
                    };
                    let call = crate::observer::InstanceCall {
                        verb: crate::observer::Verb::Terminate,
                        node,
                    };
                    return Some((call, feed));
                }
            }
        })
    }

    /// The deletions [`CapiSim::calls`] has yielded for `namespace` so far, one line each.
    pub fn calls_made(&self, namespace: &str) -> Vec<String> {
        self.deletions()
            .into_iter()
            .filter(|d| d.namespace == namespace && d.node.is_some())
            .map(|d| format!("delete Machine {}", d.machine))
            .collect()
    }

    /// Waits, watching, until a MachineDeployment has exactly `n` Machines not being deleted,
    /// all of kubelet `version` and with a Ready Node; returns their names, sorted.
    pub async fn wait_machines(
        &self,
        namespace: &str,
        md: &str,
        n: usize,
        version: &str,
    ) -> anyhow::Result<Vec<String>> {
        let version = version.to_string();
        let what = format!("{n} Machines of {version} with Ready Nodes");
        let check = move |machines: &[Arc<DynamicObject>], nodes: &Store<Node>| {
            let active: Vec<_> = machines.iter().filter(|m| !deleting(m)).collect();
            let good = |m: &&Arc<DynamicObject>| {
                let node = m.data["status"]["nodeRef"]["name"].as_str();
                m.data["spec"]["version"] == version.as_str()
                    && node
                        .and_then(|n| nodes.get(&ObjectRef::new(n)))
                        .is_some_and(|n| node_ready(&n))
            };
            (active.len() == n && active.iter().all(good)).then(|| {
                let mut names: Vec<String> = active.iter().map(|m| m.name_any()).collect();
                names.sort();
                names
            })
        };
        self.on_runtime(watch_machines(
            self.client.clone(),
            namespace,
            md,
            what,
            check,
        ))
        .await
    }

    /// Waits, watching, until the Machines of a MachineDeployment (those being deleted too)
    /// satisfy `condition`, described by `what` for the error; returns them.
    pub async fn wait_for(
        &self,
        namespace: &str,
        md: &str,
        what: &str,
        condition: impl Fn(&[DynamicObject]) -> bool + Send + 'static,
    ) -> anyhow::Result<Vec<DynamicObject>> {
        let check = move |machines: &[Arc<DynamicObject>], _: &Store<Node>| {
            let machines: Vec<DynamicObject> = machines.iter().map(|m| (**m).clone()).collect();
            condition(&machines).then_some(machines)
        };
        let what = what.to_string();
        self.on_runtime(watch_machines(
            self.client.clone(),
            namespace,
            md,
            what,
            check,
        ))
        .await
    }

    /// Runs `future` on the stand-in's runtime, so that any test runtime may await it.
    async fn on_runtime<T: Send + 'static>(
        &self,
        future: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
    ) -> anyhow::Result<T> {
        self.runtime.spawn(future).await?
    }

    async fn patch(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> anyhow::Result<()> {
        let objects = api(&self.client, kind, namespace);
        let name = name.to_string();
        self.on_runtime(async move {
            objects
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok(())
        })
        .await
    }

    /// Queues every object of `kind` that changes, and its owner (whose status or Machines
    /// depend on it).
    async fn watch(self, kind: Kind) {
        let objects: Api<DynamicObject> = Api::all_with(self.client.clone(), &kind.resource());
        let mut events = watcher(objects, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let object = match event {
                Ok(watcher::Event::Apply(o))
                | Ok(watcher::Event::InitApply(o))
                | Ok(watcher::Event::Delete(o)) => o,
                _ => continue,
            };
            let namespace = object.namespace().unwrap_or_default();
            let owner = object
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.api_version == API_VERSION);
            let owner = owner.and_then(|o| match (kind, o.kind.as_str()) {
                (Kind::Machine, "MachineSet") => Some((Kind::MachineSet, o.name.clone())),
                (Kind::MachineSet, "MachineDeployment") => {
                    Some((Kind::MachineDeployment, o.name.clone()))
                }
                _ => None,
            });
            let this = (kind, object.name_any());
            for (kind, name) in std::iter::once(this).chain(owner) {
                let namespace = namespace.clone();
                let _ = self.queue.send(Key {
                    kind,
                    namespace,
                    name,
                });
            }
        }
    }
}

pub(crate) fn api(client: &Client, kind: Kind, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.resource())
}

/// Whether `node` reports Ready.
fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn deleting(machine: &DynamicObject) -> bool {
    machine.metadata.deletion_timestamp.is_some()
}

/// Watches the Machines of MachineDeployment `md` and all Nodes until `check` of them gives a
/// value, for at most [`WAIT`].
fn watch_machines<T: Send + 'static>(
    client: Client,
    namespace: &str,
    md: &str,
    what: String,
    mut check: impl FnMut(&[Arc<DynamicObject>], &Store<Node>) -> Option<T> + Send + 'static,
) -> impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static {
    let (namespace, md) = (namespace.to_string(), md.to_string());
    async move {
        let machines = Writer::new(Kind::Machine.resource());
        let nodes = Writer::<Node>::default();
        let (machine_store, node_store) = (machines.as_reader(), nodes.as_reader());
        let selector = format!("{DEPLOYMENT_NAME_LABEL}={md}");
        let machine_events = watcher(
            api(&client, Kind::Machine, &namespace),
            watcher::Config::default().labels(&selector),
        );
        let node_events = watcher(Api::<Node>::all(client.clone()), watcher::Config::default());
        // Which watch yields, and whether its listing is complete.
        let mut events = std::pin::pin!(futures::stream::select(
            reflector::reflector(machines, machine_events.default_backoff())
                .map(|e| (0, matches!(e, Ok(watcher::Event::InitDone)))),
            reflector::reflector(nodes, node_events.default_backoff())
                .map(|e| (1, matches!(e, Ok(watcher::Event::InitDone)))),
        ));
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut listed = [false; 2];
        loop {
            if listed == [true; 2] {
                let mut seen = machine_store.state();
                seen.sort_by_key(|m| m.name_any());
                if let Some(value) = check(&seen, &node_store) {
                    return Ok(value);
                }
            }
            match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(Some((source, init_done))) => listed[source] |= init_done,
                Ok(None) => bail!("the Machine and Node watches ended"),
                Err(_) => {
                    let seen: Vec<String> = machine_store
                        .state()
                        .iter()
                        .map(|m| {
                            let (spec, status) = (&m.data["spec"], &m.data["status"]);
                            format!(
                                "{} (version {}, phase {}, node {}{})",
                                m.name_any(),
                                spec["version"],
                                status["phase"],
                                status["nodeRef"]["name"],
                                if deleting(m) { ", being deleted" } else { "" },
                            )
                        })
                        .collect();
                    bail!(
                        "MachineDeployment {namespace}/{md} did not have {what} within {WAIT:?}; \
                         its Machines: {seen:?}"
                    )
                }
            }
        }
    }
}
