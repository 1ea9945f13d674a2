//! The nodes of the test cluster: registered here as a kubelet registers itself (labels,
//! capacity, the kubelet's version), then kept by kwok (see [`super::kwok`]): their heartbeats,
//! their pods Running and Ready, their terminating pods removed.
//!
//! What stays here is what kwok cannot do or what a test plays by hand: the instances behind the
//! nodes (the simulated cloud lists them), a kubelet that stops (kwok leaves the node, which then
//! reports NotReady), a container whose readiness probe fails or that exits (the pod status a
//! kubelet would write), and runner pods, run as processes by [`RunnerPods`] with their output
//! served at the nodes' kubelet port.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::kwok::{MANAGED_LABEL, MANAGED_VALUE};
use super::runner_pods::{RUNNER_LABEL, RunnerPods};

/// The taint the server puts on a node until the control plane has seen it Ready.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The node label that names a node's group.
pub const GROUP_LABEL: &str = "kops.k8s.io/instancegroup";

/// A node to register.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub name: String,
    pub group: String,
    pub zone: Option<String>,
    pub control_plane: bool,
    pub kubelet_version: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `spec.providerID`; by default `sim:///<group>/<name>`.
    pub provider_id: Option<String>,
    /// Whether the node carries [`GROUP_LABEL`]: nodes of a machine controller (Cluster API,
    /// Karpenter) name their group their own way.
    pub group_label: bool,
}

impl NodeSpec {
    pub fn new(name: &str, group: &str) -> Self {
        NodeSpec {
            name: name.into(),
            group: group.into(),
            zone: None,
            control_plane: false,
            kubelet_version: "v1.20.2".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            provider_id: None,
            group_label: true,
        }
    }
    pub fn provider_id(mut self, id: &str) -> Self {
        self.provider_id = Some(id.into());
        self
    }
    pub fn without_group_label(mut self) -> Self {
        self.group_label = false;
        self
    }
    pub fn zone(mut self, zone: &str) -> Self {
        self.zone = Some(zone.into());
        self
    }
    pub fn control_plane(mut self) -> Self {
        self.control_plane = true;
        self
    }
    pub fn kubelet(mut self, version: &str) -> Self {
        self.kubelet_version = version.into();
        self
    }
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    fn all_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        if self.group_label {
            labels.insert(GROUP_LABEL.into(), self.group.clone());
        }
        labels.insert("kubernetes.io/hostname".into(), self.name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        if let Some(zone) = &self.zone {
            labels.insert("topology.kubernetes.io/zone".into(), zone.clone());
        }
        if self.control_plane {
            labels.insert(
                "node-role.kubernetes.io/control-plane".into(),
                String::new(),
            );
        }
        labels
    }
}

#[derive(Default)]
struct State {
    /// The registered nodes, by name: the instances behind them.
    nodes: HashMap<String, NodeSpec>,
    /// Runner pods already started or being stopped, by uid.
    handled: HashSet<String>,
}

/// Handle to the nodes; clones share it.
#[derive(Clone)]
pub struct NodeSim {
    client: Client,
    state: Arc<Mutex<State>>,
    runtime: tokio::runtime::Handle,
    /// Who runs the pods of runs handed to the cluster, once a test asked for them.
    runners: Arc<Mutex<Option<Arc<RunnerPods>>>>,
    /// Where the nodes' kubelet answers the API server (0: nowhere), as their status says.
    kubelet_port: Arc<AtomicU16>,
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string()
}

/// How long kwok may take to make a registered node Ready.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long a booting instance waits before it tries to register again (a kubelet backs off
/// from 100 ms up to seconds).
const REGISTER_RETRY: Duration = Duration::from_millis(500);

/// Whether `e` says the API server did not take a request (down, starting, overloaded) rather
/// than refused it.
fn unanswered(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        _ => true,
    }
}

impl NodeSim {
    /// Starts watching for runner pods on the current runtime.
    pub async fn start(client: Client) -> anyhow::Result<NodeSim> {
        let sim = NodeSim {
            client,
            state: Arc::new(Mutex::new(State::default())),
            runtime: tokio::runtime::Handle::current(),
            runners: Arc::default(),
            kubelet_port: Arc::default(),
        };
        tokio::spawn(sim.clone().runner_pods());
        Ok(sim)
    }

    /// Runner pods bound to the nodes run as processes (see [`RunnerPods`]) from now on, their
    /// output served at `kubelet_port`, which every node's status names from now on.
    pub async fn run_runner_pods(&self, runners: Arc<RunnerPods>, kubelet_port: u16) {
        *self.runners.lock().unwrap() = Some(runners);
        self.kubelet_port.store(kubelet_port, Ordering::SeqCst);
        let names: Vec<String> = self.state.lock().unwrap().nodes.keys().cloned().collect();
        let api: Api<Node> = Api::all(self.client.clone());
        let endpoint =
            json!({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}}}});
        for name in names {
            let _ = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&endpoint))
                .await;
        }
    }

    /// Registers a node for kwok to keep, and waits until it is Ready and schedulable. Runs on
    /// the cluster's runtime, so any test runtime may await it.
    pub async fn add(&self, spec: NodeSpec) -> anyhow::Result<()> {
        let sim = self.clone();
        self.runtime
            .spawn(async move { sim.register(spec).await })
            .await?
    }

    async fn register(&self, spec: NodeSpec) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut labels = spec.all_labels();
        labels.insert(MANAGED_LABEL.into(), MANAGED_VALUE.into());
        let version = &spec.kubelet_version;
        let name = &spec.name;
        // As a kubelet registers: its status (capacity, addresses, version) comes with the Node.
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": spec.annotations},
            "spec": {"providerID": spec.provider_id.clone().unwrap_or_else(|| format!("sim:///{}/{name}", spec.group))},
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port.load(Ordering::SeqCst)}},
                "nodeInfo": {"kubeletVersion": version, "kubeProxyVersion": version, "osImage": "simulated",
                             "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "sim://1",
                             "kernelVersion": "sim", "machineID": name, "systemUUID": name, "bootID": name},
            },
        }))?;
        // The instance exists (for the cloud's `list`) before its Node object does, as in a
        // real cloud: whoever sees the Node can find the instance.
        (self.state.lock().unwrap().nodes).insert(name.clone(), spec.clone());
        // As a kubelet does, registration is tried again while the API server cannot take it
        // (say, it restarts): an instance boots whether or not the control plane answers.
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            match api.create(&PostParams::default(), &node).await {
                // 409: an earlier try was taken, its answer lost.
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 => break,
                Err(e) if unanswered(&e) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(REGISTER_RETRY).await;
                }
                Err(e) => {
                    self.state.lock().unwrap().nodes.remove(name);
                    return Err(e.into());
                }
            }
        }
        // The server taints a new node not-ready (NoSchedule) until the node lifecycle
        // controller has seen it Ready: only then does the scheduler place pods on it.
        let schedulable = |node: Option<&Node>| {
            node.is_some_and(|n| {
                is_ready(n)
                    && !(n.spec.as_ref().and_then(|s| s.taints.as_ref()))
                        .is_some_and(|t| t.iter().any(|t| t.key == NOT_READY_TAINT))
            })
        };
        tokio::time::timeout(
            READY_WITHIN,
            kube::runtime::wait::await_condition(api, name, schedulable),
        )
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "node {name} was not Ready without its {NOT_READY_TAINT} taint within {READY_WITHIN:?} (is kwok running?)"
            )
        })??;
        Ok(())
    }

    /// Deletes a node object and its instance.
    pub async fn remove(&self, name: &str) -> anyhow::Result<()> {
        let sim = self.clone();
        let name = name.to_string();
        self.runtime
            .spawn(async move {
                sim.state.lock().unwrap().nodes.remove(&name);
                let api: Api<Node> = Api::all(sim.client.clone());
                match api.delete(&name, &DeleteParams::default()).await {
                    Err(kube::Error::Api(status)) if status.code != 404 => {
                        Err(kube::Error::Api(status).into())
                    }
                    Err(e) if !matches!(e, kube::Error::Api(_)) => Err(e.into()),
                    _ => Ok(()),
                }
            })
            .await?
    }

    /// Makes a node's kubelet stop (kwok leaves it; it reports NotReady), or start again (kwok
    /// takes it back and makes it Ready; returns once it is).
    pub async fn set_ready(&self, name: &str, ready: bool) -> anyhow::Result<()> {
        let sim = self.clone();
        let name = name.to_string();
        self.runtime
            .spawn(async move { sim.switch_kubelet(&name, ready).await })
            .await?
    }

    async fn switch_kubelet(&self, name: &str, on: bool) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        let managed = on.then_some(MANAGED_VALUE);
        let label = json!({"metadata": {"labels": {MANAGED_LABEL: managed}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&label))
            .await?;
        if on {
            let ready = |node: Option<&Node>| node.is_some_and(is_ready);
            tokio::time::timeout(
                READY_WITHIN,
                kube::runtime::wait::await_condition(api, name, ready),
            )
            .await
            .map_err(|_| anyhow::anyhow!("kwok did not make node {name} Ready again"))??;
            return Ok(());
        }
        // Its last word, as a kubelet that stops says it: NotReady (strategic merge: by type).
        let t = now();
        let status = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "lastHeartbeatTime": t, "lastTransitionTime": t,
             "reason": "KubeletNotReady", "message": "the test stopped this node's kubelet"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
            .await?;
        Ok(())
    }

    /// Ends a running pod's containers, as its kubelet would when they exit 0: the pod turns
    /// `Succeeded`. (kwok's own pod-complete stage, which ends every Job's pod at once, is not
    /// run: a Job's pod runs until its test ends it.)
    pub async fn complete_pod(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let t = now();
        let status = json!({"status": {
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": t},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": t}],
        }});
        self.patch_pod_status(namespace, name, status).await
    }

    /// Makes a running pod report not Ready (a failing readiness probe), or Ready again. kwok
    /// moves only Pending pods, so it leaves this as set.
    pub async fn set_pod_ready(
        &self,
        namespace: &str,
        name: &str,
        ready: bool,
    ) -> anyhow::Result<()> {
        let t = now();
        let status = if ready { "True" } else { "False" };
        let status = json!({"status": {
            "conditions": [{"type": "Ready", "status": status, "lastTransitionTime": t},
                           {"type": "ContainersReady", "status": status, "lastTransitionTime": t}],
        }});
        self.patch_pod_status(namespace, name, status).await
    }

    async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        status: serde_json::Value,
    ) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let name = name.to_string();
        self.runtime
            .spawn(async move {
                // A strategic merge replaces the conditions it names and keeps the others.
                api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status))
                    .await
                    .map(|_| ())
            })
            .await??;
        Ok(())
    }

    /// The spec a node was registered with.
    pub fn spec_of(&self, name: &str) -> Option<NodeSpec> {
        self.state.lock().unwrap().nodes.get(name).cloned()
    }

    /// Names of the registered nodes of `group`, sorted.
    pub fn nodes_of(&self, group: &str) -> Vec<String> {
        let state = self.state.lock().unwrap();
        let mut names: Vec<String> = (state.nodes.values())
            .filter(|n| n.group == group)
            .map(|n| n.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Watches runner pods: starts the ones bound to the nodes, stops the ones deleted there.
    async fn runner_pods(self) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(RUNNER_LABEL);
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                self.react(pod);
            }
        }
    }

    fn react(&self, pod: Pod) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let Some(runners) = self.runners.lock().unwrap().clone() else {
            return;
        };
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let key = format!(
            "{}/{}",
            pod.uid().unwrap_or_default(),
            if terminating { "delete" } else { "start" }
        );
        {
            let mut state = self.state.lock().unwrap();
            if !state.nodes.contains_key(&node) || !state.handled.insert(key) {
                return;
            }
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        match (terminating, phase.unwrap_or("Pending")) {
            (true, _) => runners.stop(pod),
            (false, "Pending") => runners.start(pod),
            _ => {}
        }
    }
}

fn is_ready(node: &Node) -> bool {
    (node.status.as_ref().and_then(|s| s.conditions.as_ref()))
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
