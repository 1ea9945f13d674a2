//! Karpenter itself beside the test control plane: `sigs.k8s.io/karpenter` at the release of
//! `tests/cluster/karpenter/VERSION`, its kwok cloud provider's main package, built from its
//! module and cached by `install-control-plane.sh` with the CustomResourceDefinitions its module
//! ships. It runs as a local process (leader election off, its metrics and health ports free),
//! started when a test first asks for it ([`super::TestCluster::karpenter`]), and does all of
//! Karpenter's work: it launches NodeClaims for pods that wait, creates their nodes (which the
//! harness's kwok keeps Ready: NodePools label them for it) and terminates a deleted NodeClaim
//! through its own finalizer, drain included.
//!
//! The NodePools made here are tainted [`POOL_TAINT`] and their instance types narrowed to one
//! (8 CPUs), so that Karpenter launches nodes only for the pods of the tests that ask for it,
//! one node for every two of their pods. Nodes report the control plane's release as their
//! kubelet version ([`new_kubelet`]); [`Karpenter::busy_pool`] marks the nodes it starts with
//! as older ([`OLD_KUBELET`]), which is what a rotation replaces.
//!
//! Nothing here stands in for Karpenter: the stand-in this replaced is gone. What it could do
//! and Karpenter cannot is choose a node's kubelet version, which a test now sets on the nodes
//! it starts with.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::broadcast;

use super::Processes;
use super::kwok::{MANAGED_LABEL, MANAGED_VALUE};

/// The label naming a node's (and a NodeClaim's) NodePool.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// The taint on the nodes of the NodePools made here (its value: the pool), which only their
/// tests' pods tolerate.
pub const POOL_TAINT: &str = "rollout-ext.test/karpenter";
/// The one instance type of the NodePools made here: 8 CPUs, two of a busy pool's pods.
const INSTANCE_TYPE: &str = "c-8x-amd64-linux";
/// The kubelet version [`Karpenter::busy_pool`] gives the nodes it starts with.
pub const OLD_KUBELET: &str = "v1.36.0";
/// The KWOKNodeClass every NodePool made here names; its registration delay is the boot time.
const NODE_CLASS: &str = "default";
/// How long a new node takes to register by default.
pub const BOOT: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(120);

/// The kubelet version of a node Karpenter launches: the control plane's release (see
/// [`super::kwok`]).
pub fn new_kubelet() -> String {
    format!("v{}", super::k8s_version())
}

/// The Karpenter release the tests run (`tests/cluster/karpenter/VERSION`).
pub fn version() -> &'static str {
    include_str!("../../cluster/karpenter/VERSION").trim()
}

/// Where Karpenter and its definitions are cached (`bin/karpenter`, `crds/*.yaml`).
fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ROLLOUT_EXT_KARPENTER_DIR") {
        return PathBuf::from(dir);
    }
    super::cache_root().join(format!("karpenter-{}", version().trim_start_matches('v')))
}

fn cached(path: &str) -> anyhow::Result<PathBuf> {
    super::installed(dir().join(path))
}

/// The CustomResourceDefinitions of Karpenter's module (NodePool, NodeClaim, KWOKNodeClass), as
/// one YAML stream.
pub(super) fn crds() -> anyhow::Result<String> {
    let mut docs = Vec::new();
    for file in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.kwok.sh_kwoknodeclasses.yaml",
    ] {
        let path = cached(&format!("crds/{file}"))?;
        docs.push(std::fs::read_to_string(&path).with_context(|| path.display().to_string())?);
    }
    Ok(docs.join("\n---\n"))
}

/// The NodeClaims API (`karpenter.sh/v1`, cluster-scoped).
pub fn nodeclaims(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("karpenter.sh", "NodeClaim"))
}

/// The NodePools API (`karpenter.sh/v1`, cluster-scoped).
pub fn nodepools(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("karpenter.sh", "NodePool"))
}

fn node_classes(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource("karpenter.kwok.sh", "KWOKNodeClass"),
    )
}

fn resource(group: &str, kind: &str) -> ApiResource {
    let version = if group == "karpenter.sh" {
        "v1"
    } else {
        "v1alpha1"
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// One NodeClaim deletion, as first seen (its deletion requested, or it gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClaimDeletion {
    pub nodeclaim: String,
    /// Its node, if it had registered one.
    pub node: Option<String>,
}

#[derive(Default)]
struct Seen {
    deleted: HashSet<String>,
    deletions: Vec<NodeClaimDeletion>,
}

/// Handle to the running Karpenter; clones share it.
#[derive(Clone)]
pub struct Karpenter {
    client: Client,
    runtime: tokio::runtime::Handle,
    seen: Arc<Mutex<Seen>>,
    feed: broadcast::Sender<NodeClaimDeletion>,
}

impl Karpenter {
    /// Starts the Karpenter process; [`Karpenter::connect`] then makes its node class and
    /// watches it work.
    pub(super) fn spawn(
        processes: &Processes,
        kubeconfig: &Path,
        root: &Path,
    ) -> anyhow::Result<()> {
        let [metrics, health] = super::ports::free_ports()?;
        let args = [
            "--disable-leader-election".to_string(),
            format!("--metrics-port={metrics}"),
            format!("--health-probe-port={health}"),
            "--log-level=info".into(),
        ];
        let env = [("KUBECONFIG".to_string(), kubeconfig.display().to_string())];
        processes.spawn_with_env(
            "karpenter",
            &cached("bin/karpenter")?,
            &args,
            &env,
            &root.join("karpenter.log"),
        )?;
        eprintln!(
            "test cluster: Karpenter {} (sigs.k8s.io/karpenter, kwok cloud provider) started",
            version()
        );
        Ok(())
    }

    /// Creates the node class NodePools name and starts the watch of NodeClaims, on the current
    /// runtime (the cluster's); the definitions must be established.
    pub(super) async fn connect(client: Client) -> anyhow::Result<Karpenter> {
        let class: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": NODE_CLASS},
            "spec": {"nodeRegistrationDelay": duration(BOOT)},
        }))?;
        match node_classes(&client)
            .create(&PostParams::default(), &class)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            other => {
                other.context("creating the KWOKNodeClass")?;
            }
        }
        let karpenter = Karpenter {
            client,
            runtime: tokio::runtime::Handle::current(),
            seen: Arc::default(),
            feed: broadcast::channel(1024).0,
        };
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let watching = karpenter.clone();
        tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let config = watcher::Config::default();
            let mut events = watcher(nodeclaims(&watching.client), config)
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))
                        if c.metadata.deletion_timestamp.is_some() =>
                    {
                        watching.deleted(&c)
                    }
                    Ok(watcher::Event::Delete(c)) => watching.deleted(&c),
                    _ => {}
                }
            }
        });
        tokio::time::timeout(WAIT, synced)
            .await
            .map_err(|_| anyhow::anyhow!("the watch of NodeClaims did not sync"))??;
        Ok(karpenter)
    }

    fn deleted(&self, claim: &DynamicObject) {
        let name = claim.name_any();
        let mut seen = self.seen.lock().unwrap();
        if !seen.deleted.insert(name.clone()) {
            return;
        }
        let node = claim.data["status"]["nodeName"].as_str();
        let deletion = NodeClaimDeletion {
            nodeclaim: name,
            node: node.filter(|n| !n.is_empty()).map(str::to_string),
        };
        seen.deletions.push(deletion.clone());
        let _ = self.feed.send(deletion);
    }

    /// Runs `future` on the cluster's runtime, where the watches live.
    async fn on_cluster<T: Send + 'static>(
        &self,
        future: impl Future<Output = anyhow::Result<T>> + Send + 'static,
    ) -> anyhow::Result<T> {
        self.runtime.spawn(future).await?
    }

    /// Creates NodePool `name` and waits until Karpenter says it is Ready. `budgets` is its
    /// `spec.disruption.budgets` (by default Karpenter's, `[{nodes: 10%}]`); consolidation waits
    /// forever and nodes never expire, unless `disruption` says otherwise (merged over those).
    pub async fn create_pool(
        &self,
        name: &str,
        disruption: Option<serde_json::Value>,
    ) -> anyhow::Result<()> {
        let mut rules = json!({
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "Never",
            "budgets": [{"nodes": "10%"}],
        });
        if let Some(serde_json::Value::Object(more)) = disruption {
            for (key, value) in more {
                rules[key] = value;
            }
        }
        let pool: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"labels": {MANAGED_LABEL: MANAGED_VALUE}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": NODE_CLASS},
                        "requirements": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        ],
                        "taints": [{"key": POOL_TAINT, "value": name, "effect": "NoSchedule"}],
                        "expireAfter": "Never",
                    },
                },
                "disruption": rules,
            },
        }))?;
        let (api, name) = (nodepools(&self.client), name.to_string());
        self.on_cluster(async move {
            api.create(&PostParams::default(), &pool).await?;
            let ready = |p: Option<&DynamicObject>| p.is_some_and(|p| condition_true(p, "Ready"));
            tokio::time::timeout(WAIT, await_condition(api, &name, ready))
                .await
                .map_err(|_| anyhow::anyhow!("Karpenter did not make NodePool {name} Ready"))??;
            Ok(())
        })
        .await
    }

    /// A busy NodePool `pool`, as the tests rotate one: ReplicaSet `web` (namespace `pool`) of
    /// two pods per node, for which Karpenter launches `nodes` nodes. Each pod asks 3 of a
    /// node's 8 CPUs, so the pods evicted from a node fit nowhere until Karpenter launches a
    /// node for them, and one new node takes exactly one old node's pods (a rotation leaves the
    /// pool at its size). Once the pods are Ready the nodes are marked as running an older
    /// kubelet ([`OLD_KUBELET`]); returns them.
    pub async fn busy_pool(&self, pool: &str, nodes: usize) -> anyhow::Result<BTreeSet<String>> {
        self.busy_pool_with(pool, nodes, None).await
    }

    /// [`Karpenter::busy_pool`] with `disruption` merged over the pool's disruption rules (see
    /// [`Karpenter::create_pool`]).
    pub async fn busy_pool_with(
        &self,
        pool: &str,
        nodes: usize,
        disruption: Option<serde_json::Value>,
    ) -> anyhow::Result<BTreeSet<String>> {
        self.create_pool(pool, disruption).await?;
        let spec = json!({
            "nodeSelector": {NODEPOOL_LABEL: pool},
            "tolerations": [{"key": POOL_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "registry.invalid/app:1",
                            "resources": {"requests": {"cpu": "3"}}}],
        });
        let (client, pool) = (self.client.clone(), pool.to_string());
        self.on_cluster(async move {
            crate::workloads::create_namespace(&client, &pool).await;
            let replicas = 2 * nodes as i32;
            crate::workloads::replica_set_with(&client, &pool, "web", replicas, json!({}), spec)
                .await;
            let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &pool);
            let ready = |r: Option<&ReplicaSet>| {
                let status = r.and_then(|r| r.status.as_ref());
                status.and_then(|s| s.ready_replicas) == Some(replicas)
            };
            tokio::time::timeout(WAIT, await_condition(sets, "web", ready))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "the pods of NodePool {pool} were not Ready on Karpenter's nodes"
                    )
                })??;
            let api: Api<Node> = Api::all(client.clone());
            let selector = format!("{NODEPOOL_LABEL}={pool}");
            let list = api.list(&ListParams::default().labels(&selector)).await?;
            let names: BTreeSet<String> = list.items.iter().map(|n| n.name_any()).collect();
            if names.len() != nodes {
                bail!("Karpenter launched {names:?} for NodePool {pool}, not {nodes} nodes");
            }
            // Karpenter's last word on a node it launched, which may come after its pods are
            // Ready: a test that compares the cluster before and after a run must not see it.
            for name in &names {
                let initialized = |n: Option<&Node>| {
                    n.and_then(|n| n.metadata.labels.as_ref())
                        .and_then(|l| l.get("karpenter.sh/initialized"))
                        .is_some_and(|v| v == "true")
                };
                tokio::time::timeout(WAIT, await_condition(api.clone(), name, initialized))
                    .await
                    .map_err(|_| anyhow::anyhow!("Karpenter did not initialize node {name}"))??;
            }
            let old = json!({"status": {"nodeInfo": {"kubeletVersion": OLD_KUBELET}}});
            for name in &names {
                api.patch_status(name, &PatchParams::default(), &Patch::Merge(&old))
                    .await?;
            }
            Ok(names)
        })
        .await
    }

    /// How long a launched node takes to register (the KWOKNodeClass's registration delay, in
    /// whole seconds; by default [`BOOT`]).
    pub fn set_boot_delay(&self, delay: Duration) {
        let api = node_classes(&self.client);
        let patch = json!({"spec": {"nodeRegistrationDelay": duration(delay)}});
        let patched = self.runtime.spawn(async move {
            api.patch(NODE_CLASS, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        });
        futures::executor::block_on(patched)
            .expect("the patch ran")
            .expect("the KWOKNodeClass takes its registration delay");
    }

    /// Every NodeClaim deletion seen so far, in order.
    pub fn deletions(&self) -> Vec<NodeClaimDeletion> {
        self.seen.lock().unwrap().deletions.clone()
    }

    /// Every NodeClaim deletion from now on, as it is seen (before its node goes).
    pub fn subscribe(&self) -> broadcast::Receiver<NodeClaimDeletion> {
        self.feed.subscribe()
    }
}

/// A duration as the KWOKNodeClass takes one: whole seconds (`5s`), rounded up.
fn duration(d: Duration) -> String {
    format!("{}s", d.as_millis().div_ceil(1000))
}

fn condition_true(object: &DynamicObject, type_: &str) -> bool {
    (object.data["status"]["conditions"].as_array().into_iter())
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}
