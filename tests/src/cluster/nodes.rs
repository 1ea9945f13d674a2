//! The node simulator: the kubelet's job for nodes that have no machine behind them. It registers
//! nodes, keeps their Ready condition and heartbeats fresh, marks pods bound to them Running and
//! Ready, and completes the deletion of their terminating pods.

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

use super::runner_pods::{RunnerPods, is_runner};

/// The taint the server puts on a node until the control plane has seen it Ready.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The node label that names a node's group.
pub const GROUP_LABEL: &str = "kops.k8s.io/instancegroup";

/// How the simulated kubelets behave.
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// From a pod's binding to its Running+Ready status.
    pub pod_ready_delay: Duration,
    /// Terminating pods are removed after their grace period, but never later than this.
    pub max_grace: Duration,
    /// How often Ready heartbeats are renewed.
    pub heartbeat: Duration,
}

impl Default for SimSettings {
    fn default() -> Self {
        SimSettings {
            pod_ready_delay: Duration::from_millis(200),
            max_grace: Duration::from_secs(1),
            heartbeat: Duration::from_secs(5),
        }
    }
}

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

#[derive(Debug)]
struct SimNode {
    spec: NodeSpec,
    ready: bool,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, SimNode>,
    /// Pods already marked Ready or being finished, by uid.
    handled: HashSet<String>,
}

/// Handle to the simulator; clones share it.
#[derive(Clone)]
pub struct NodeSim {
    client: Client,
    settings: SimSettings,
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

impl NodeSim {
    /// Starts the heartbeat and pod loops on the current runtime.
    pub async fn start(client: Client, settings: SimSettings) -> anyhow::Result<NodeSim> {
        let sim = NodeSim {
            client,
            settings,
            state: Arc::new(Mutex::new(State::default())),
            runtime: tokio::runtime::Handle::current(),
            runners: Arc::default(),
            kubelet_port: Arc::default(),
        };
        tokio::spawn(sim.clone().heartbeats());
        tokio::spawn(sim.clone().pods());
        Ok(sim)
    }

    /// Runner pods bound to simulated nodes run as processes (see [`RunnerPods`]) from now on,
    /// their output served at `kubelet_port`, which every node's status names from now on.
    pub async fn run_runner_pods(&self, runners: Arc<RunnerPods>, kubelet_port: u16) {
        *self.runners.lock().unwrap() = Some(runners);
        self.kubelet_port.store(kubelet_port, Ordering::SeqCst);
        let names: Vec<String> = self.state.lock().unwrap().nodes.keys().cloned().collect();
        for name in names {
            let _ = self.report_status(&name).await;
        }
    }

    /// Registers a Ready node. Runs on the simulator's runtime, so any test runtime may await it.
    pub async fn add(&self, spec: NodeSpec) -> anyhow::Result<()> {
        let sim = self.clone();
        self.runtime
            .spawn(async move { sim.register(spec).await })
            .await?
    }

    async fn register(&self, spec: NodeSpec) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": spec.name, "labels": spec.all_labels(), "annotations": spec.annotations},
            "spec": {"providerID": spec.provider_id.clone().unwrap_or_else(|| format!("sim:///{}/{}", spec.group, spec.name))},
        }))?;
        // The instance exists (for the cloud's `list`) before its Node object does, as in a
        // real cloud: whoever sees the Node can find the instance.
        self.state.lock().unwrap().nodes.insert(
            spec.name.clone(),
            SimNode {
                spec: spec.clone(),
                ready: true,
            },
        );
        if let Err(e) = api.create(&PostParams::default(), &node).await {
            self.state.lock().unwrap().nodes.remove(&spec.name);
            return Err(e.into());
        }
        self.report_status(&spec.name).await?;
        // The server taints a new node not-ready (NoSchedule) until the node lifecycle
        // controller has seen it Ready: only then does the scheduler place pods on it.
        let schedulable = |node: Option<&Node>| {
            node.is_some_and(|n| {
                !(n.spec.as_ref().and_then(|s| s.taints.as_ref()))
                    .is_some_and(|t| t.iter().any(|t| t.key == NOT_READY_TAINT))
            })
        };
        tokio::time::timeout(
            Duration::from_secs(60),
            kube::runtime::wait::await_condition(api, &spec.name, schedulable),
        )
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "node {} kept its {NOT_READY_TAINT} taint for 60s",
                spec.name
            )
        })??;
        Ok(())
    }

    /// Deletes a node object and stops simulating it.
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

    /// Makes a node report NotReady (or Ready again).
    pub async fn set_ready(&self, name: &str, ready: bool) -> anyhow::Result<()> {
        if let Some(node) = self.state.lock().unwrap().nodes.get_mut(name) {
            node.ready = ready;
        }
        let sim = self.clone();
        let name = name.to_string();
        self.runtime
            .spawn(async move { sim.report_status(&name).await })
            .await?
    }

    /// Ends a running pod's containers, as its kubelet would when they exit 0: the pod turns
    /// `Succeeded`.
    pub async fn complete_pod(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let t = now();
        let status = json!({"status": {
            "phase": "Succeeded",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": t},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": t}],
        }});
        self.patch_pod_status(namespace, name, status).await
    }

    /// Makes a running pod report not Ready (a failing readiness probe), or Ready again.
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

    /// The spec a simulated node was registered with.
    pub fn spec_of(&self, name: &str) -> Option<NodeSpec> {
        self.state
            .lock()
            .unwrap()
            .nodes
            .get(name)
            .map(|n| n.spec.clone())
    }

    /// Names of the simulated nodes of `group`, sorted.
    pub fn nodes_of(&self, group: &str) -> Vec<String> {
        let state = self.state.lock().unwrap();
        let mut names: Vec<String> = state
            .nodes
            .values()
            .filter(|n| n.spec.group == group)
            .map(|n| n.spec.name.clone())
            .collect();
        names.sort();
        names
    }

    async fn report_status(&self, name: &str) -> anyhow::Result<()> {
        let (ready, version) = {
            let state = self.state.lock().unwrap();
            match state.nodes.get(name) {
                Some(n) => (n.ready, n.spec.kubelet_version.clone()),
                None => return Ok(()),
            }
        };
        let t = now();
        let condition = |type_: &str, healthy: bool, reason: &str| {
            json!({"type": type_, "status": if healthy { "False" } else { "True" },
                   "lastHeartbeatTime": t, "lastTransitionTime": t, "reason": reason, "message": reason})
        };
        let status = json!({"status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [
                condition("MemoryPressure", true, "KubeletHasSufficientMemory"),
                condition("DiskPressure", true, "KubeletHasNoDiskPressure"),
                condition("PIDPressure", true, "KubeletHasSufficientPID"),
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastHeartbeatTime": t, "lastTransitionTime": t,
                 "reason": if ready { "KubeletReady" } else { "KubeletNotReady" }, "message": "simulated"},
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port.load(Ordering::SeqCst)}},
            "nodeInfo": {"kubeletVersion": version, "kubeProxyVersion": version, "osImage": "simulated",
                         "operatingSystem": "linux", "architecture": "amd64", "containerRuntimeVersion": "sim://1",
                         "kernelVersion": "sim", "machineID": name, "systemUUID": name, "bootID": name},
        }});
        let api: Api<Node> = Api::all(self.client.clone());
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    /// Renews every node's heartbeat, as kubelets do.
    async fn heartbeats(self) {
        let mut ticker = tokio::time::interval(self.settings.heartbeat);
        loop {
            ticker.tick().await;
            let names: Vec<String> = self.state.lock().unwrap().nodes.keys().cloned().collect();
            for name in names {
                let _ = self.report_status(&name).await;
            }
        }
    }

    /// Watches pods: starts the ones bound to simulated nodes, finishes the ones terminating there.
    async fn pods(self) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let pods = match event {
                Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod)) => vec![pod],
                _ => continue,
            };
            for pod in pods {
                self.react(pod);
            }
        }
    }

    fn react(&self, pod: Pod) {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            return;
        };
        let uid = pod.uid().unwrap_or_default();
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let key = format!("{uid}/{}", if terminating { "delete" } else { "start" });
        {
            let mut state = self.state.lock().unwrap();
            if !state.nodes.contains_key(&node) || !state.handled.insert(key) {
                return;
            }
        }
        let runners = self.runners.lock().unwrap().clone();
        if let Some(runners) = runners.filter(|_| is_runner(&pod)) {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            match (terminating, phase.unwrap_or("Pending")) {
                (true, _) => runners.stop(pod),
                (false, "Pending") => runners.start(pod),
                _ => {}
            }
            return;
        }
        let sim = self.clone();
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        if terminating {
            let grace = Duration::from_secs(
                pod.metadata
                    .deletion_grace_period_seconds
                    .unwrap_or(0)
                    .max(0) as u64,
            );
            let wait = grace.min(self.settings.max_grace);
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
                let _ = api
                    .delete(
                        &name,
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        },
                    )
                    .await;
            });
        } else if pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("Pending")
            == "Pending"
        {
            let delay = self.settings.pod_ready_delay;
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let t = now();
                let cond =
                    |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": t});
                let containers: Vec<serde_json::Value> = pod
                    .spec
                    .as_ref()
                    .map(|s| {
                        s.containers
                            .iter()
                            .map(|c| {
                                json!({
                        "name": c.name, "image": c.image, "imageID": "sim://image", "ready": true,
                        "restartCount": 0, "started": true, "state": {"running": {"startedAt": t}}})
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let status = json!({"status": {
                    "phase": "Running", "hostIP": "127.0.0.1", "podIP": "10.244.0.1", "startTime": t,
                    "conditions": [cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled")],
                    "containerStatuses": containers,
                }});
                let api: Api<Pod> = Api::namespaced(sim.client.clone(), &ns);
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await;
            });
        }
    }
}
