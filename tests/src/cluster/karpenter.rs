//! A Karpenter stand-in: the karpenter.sh/v1 NodePools and NodeClaims the plugin meets when it
//! rotates nodes that Karpenter manages, with Karpenter's behaviour as far as the plugin relies on
//! it, driven by watches.
//!
//! - Provisioning: pods the scheduler marks Unschedulable that are for a NodePool (they select
//!   `karpenter.sh/nodepool: <pool>`, or name no pool while only one exists) get new NodeClaims,
//!   as many as they need once the room left on the pool's nodes and on those still booting is
//!   counted (see [`provisioning`]). A node takes 8 CPUs, 32Gi and 110 pods, as NodeSim reports;
//!   a new one is launched for at most [`KarpenterSim::set_pods_per_node`] pending pods. A pool
//!   never has more NodeClaims than its `spec.limits.nodes`, the stand-in's own limit (50 when
//!   unset).
//! - Launching: every NodeClaim (created by provisioning, by [`KarpenterSim::add_nodes`] or by
//!   anyone) is Launched at once and its Node registers through NodeSim after the boot delay.
//! - Termination: a NodeClaim being deleted has its Node tainted `karpenter.sh/disrupted`,
//!   drained by evictions (which PodDisruptionBudgets may refuse; refused ones are retried) and
//!   removed; then the `karpenter.sh/termination` finalizer goes. Nothing replaces the NodeClaim
//!   unless its evicted pods end up Pending.
//!
//! Not simulated: consolidation, drift, expiry, instance types, pod affinity.

mod lifecycle;
mod provisioning;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{Notify, broadcast, watch};

use super::nodes::NodeSim;

/// The label naming a node's (and a NodeClaim's) NodePool.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// Karpenter's finalizer on NodeClaims: the stand-in removes it once the node is gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// How the stand-in's providerIDs begin: `kwok-sim://<nodeclaim>`.
pub const PROVIDER_PREFIX: &str = "kwok-sim://";
const DEFAULT_VERSION: &str = "v1.20.2";
const WAIT: Duration = Duration::from_secs(60);

/// The NodeClaims API (`karpenter.sh/v1`, cluster-scoped).
pub fn nodeclaims(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("NodeClaim", "nodeclaims"))
}

/// The NodePools API (`karpenter.sh/v1`, cluster-scoped).
pub fn nodepools(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &resource("NodePool", "nodepools"))
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("karpenter.sh", "v1", kind), plural)
}

/// The node a NodeClaim registers as.
fn node_of(nodeclaim: &str) -> String {
    format!("{nodeclaim}-node")
}

/// One NodeClaim the stand-in terminated, as recorded when its deletion was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClaimDeletion {
    pub nodeclaim: String,
    /// Its node, if it had registered one.
    pub node: Option<String>,
}

struct State {
    boot_delay: Duration,
    pods_per_node: usize,
    /// Kubelet versions of new nodes, by pool.
    versions: HashMap<String, String>,
    /// Kubelet versions of the NodeClaims [`KarpenterSim::add_nodes`] created; they boot at once.
    direct: HashMap<String, String>,
    /// The deletion signal of each NodeClaim whose lifecycle runs.
    lifecycles: HashMap<String, watch::Sender<bool>>,
    /// NodeClaims created but not yet seen by the watch, with their pools: provisioning counts
    /// them, so that a burst of events launches no more.
    unseen: BTreeMap<String, String>,
    /// Registered NodeClaims and their pools (for the pools' status).
    registered: HashMap<String, String>,
    launched: Vec<String>,
    deletions: Vec<NodeClaimDeletion>,
}

/// Handle to the stand-in; clones share it.
#[derive(Clone)]
pub struct KarpenterSim {
    client: Client,
    nodes: NodeSim,
    state: Arc<Mutex<State>>,
    runtime: tokio::runtime::Handle,
    pods: Store<Pod>,
    node_store: Store<Node>,
    claims: Store<DynamicObject>,
    pools: Store<DynamicObject>,
    /// Something the provisioning arithmetic reads changed.
    dirty: Arc<Notify>,
    /// Bumped on every pod event, for drains waiting for pods to go.
    pods_changed: watch::Sender<u64>,
    feed: broadcast::Sender<NodeClaimDeletion>,
}

/// Watches `api` into `writer` (on the current runtime), calling `on_event` after the store took
/// each event in.
fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    mut on_event: impl FnMut(watcher::Event<K>) + Send + 'static,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
{
    let stream = watcher(api, config).default_backoff().reflect(writer);
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        while let Some(event) = stream.next().await {
            if let Ok(event) = event {
                on_event(event);
            }
        }
    });
}

impl KarpenterSim {
    /// Starts the watches and the provisioner on the current runtime; the karpenter.sh
    /// definitions must be established.
    pub async fn start(client: Client, nodes: NodeSim) -> anyhow::Result<KarpenterSim> {
        let (pods, pod_writer) = reflector::store();
        let (node_store, node_writer) = reflector::store();
        let claim_writer = Writer::new(resource("NodeClaim", "nodeclaims"));
        let pool_writer = Writer::new(resource("NodePool", "nodepools"));
        let sim = KarpenterSim {
            nodes,
            state: Arc::new(Mutex::new(State {
                boot_delay: Duration::from_millis(500),
                pods_per_node: 4,
                versions: HashMap::new(),
                direct: HashMap::new(),
                lifecycles: HashMap::new(),
                unseen: BTreeMap::new(),
                registered: HashMap::new(),
                launched: Vec::new(),
                deletions: Vec::new(),
            })),
            runtime: tokio::runtime::Handle::current(),
            pods,
            node_store,
            claims: claim_writer.as_reader(),
            pools: pool_writer.as_reader(),
            dirty: Arc::new(Notify::new()),
            pods_changed: watch::channel(0).0,
            feed: broadcast::channel(1024).0,
            client,
        };

        let all = watcher::Config::default;
        let (s, dirty) = (sim.clone(), sim.dirty.clone());
        spawn_watch(Api::all(sim.client.clone()), all(), pod_writer, move |_| {
            s.pods_changed.send_modify(|n| *n += 1);
            dirty.notify_one();
        });
        let dirty = sim.dirty.clone();
        let karpenter_nodes = all().labels(NODEPOOL_LABEL);
        spawn_watch(
            Api::all(sim.client.clone()),
            karpenter_nodes,
            node_writer,
            move |_| dirty.notify_one(),
        );
        let dirty = sim.dirty.clone();
        spawn_watch(nodepools(&sim.client), all(), pool_writer, move |_| {
            dirty.notify_one()
        });
        let s = sim.clone();
        spawn_watch(nodeclaims(&sim.client), all(), claim_writer, move |e| {
            s.on_claim(e)
        });

        let ready = async {
            sim.pods.wait_until_ready().await?;
            sim.node_store.wait_until_ready().await?;
            sim.claims.wait_until_ready().await?;
            sim.pools.wait_until_ready().await
        };
        tokio::time::timeout(WAIT, ready)
            .await
            .map_err(|_| anyhow::anyhow!("the Karpenter stand-in's watches did not sync"))??;
        tokio::spawn(sim.clone().provision());
        Ok(sim)
    }

    /// Creates NodePool `name`: nodes get `labels`, `budgets` is its `spec.disruption.budgets`
    /// (by default Karpenter's, `[{nodes: 10%}]`). Consolidation and expiry are off, as the
    /// stand-in does neither.
    pub async fn create_pool(
        &self,
        name: &str,
        labels: BTreeMap<String, String>,
        budgets: Option<serde_json::Value>,
    ) -> anyhow::Result<()> {
        let pool: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                        "expireAfter": "Never",
                    },
                },
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "Never",
                    "budgets": budgets.unwrap_or_else(|| json!([{"nodes": "10%"}])),
                },
            },
        }))?;
        let (api, name) = (nodepools(&self.client), name.to_string());
        self.runtime
            .spawn(async move {
                api.create(&PostParams::default(), &pool).await?;
                let t = lifecycle::now();
                let status = json!({"status": {
                    "nodes": 0, "resources": {"nodes": "0"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": t}],
                }});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                anyhow::Ok(())
            })
            .await?
    }

    /// Creates `n` NodeClaims of `pool` whose nodes boot at once with `kubelet_version` (a test's
    /// starting state; the pool's limit does not apply); returns their node names once Ready.
    pub async fn add_nodes(
        &self,
        pool: &str,
        n: usize,
        kubelet_version: &str,
    ) -> anyhow::Result<Vec<String>> {
        let (sim, pool, version) = (self.clone(), pool.to_string(), kubelet_version.to_string());
        self.runtime
            .spawn(async move {
                let template = nodepools(&sim.client).get(&pool).await?;
                let mut names = Vec::new();
                for _ in 0..n {
                    let name = sim.claim_name(&pool);
                    sim.state().direct.insert(name.clone(), version.clone());
                    sim.create_claim(&template, &name).await?;
                    names.push(name);
                }
                let api = nodeclaims(&sim.client);
                for name in &names {
                    let initialized = |c: Option<&DynamicObject>| {
                        c.is_some_and(|c| condition_true(c, "Initialized"))
                    };
                    tokio::time::timeout(WAIT, await_condition(api.clone(), name, initialized))
                        .await
                        .map_err(|_| anyhow::anyhow!("NodeClaim {name} did not initialize"))??;
                }
                Ok(names.iter().map(|n| node_of(n)).collect())
            })
            .await?
    }

    /// The kubelet version new nodes of `pool` run (by default v1.20.2).
    pub fn set_version(&self, pool: &str, version: &str) {
        self.state()
            .versions
            .insert(pool.to_string(), version.to_string());
    }

    /// A busy NodePool `pool`, as the tests rotate one: `nodes` old nodes (kubelet v1.19.7),
    /// new ones launched with v1.20.2, running ReplicaSet `web` (namespace `pool`) with two pods
    /// per node. Each pod asks 3 of a node's 8 CPUs, so the pods evicted from a node fit nowhere
    /// until Karpenter launches a node for them, and one new node takes exactly one old node's
    /// pods (a rotation leaves the pool at its size). Returns the old nodes once the pods are
    /// Ready.
    pub async fn busy_pool(&self, pool: &str, nodes: usize) -> anyhow::Result<BTreeSet<String>> {
        self.create_pool(pool, BTreeMap::new(), None).await?;
        let old = self.add_nodes(pool, nodes, "v1.19.7").await?;
        self.set_version(pool, "v1.20.2");
        let spec = json!({
            "nodeSelector": {NODEPOOL_LABEL: pool},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "registry.invalid/app:1",
                            "resources": {"requests": {"cpu": "3"}}}],
        });
        let (client, pool) = (self.client.clone(), pool.to_string());
        self.runtime
            .spawn(async move {
                crate::workloads::create_namespace(&client, &pool).await;
                let replicas = 2 * nodes as i32;
                crate::workloads::replica_set_with(
                    &client,
                    &pool,
                    "web",
                    replicas,
                    json!({}),
                    spec,
                )
                .await;
            })
            .await?;
        Ok(old.into_iter().collect())
    }

    /// How long a launched NodeClaim takes to register its node (by default 500 ms).
    pub fn set_boot_delay(&self, delay: Duration) {
        self.state().boot_delay = delay;
    }

    /// For how many pending pods (DaemonSet pods aside) provisioning launches one node, if their
    /// requests fit (by default 4); for every pool. Up, the node takes what the scheduler puts.
    pub fn set_pods_per_node(&self, pods: usize) {
        self.state().pods_per_node = pods.max(1);
        self.dirty.notify_one();
    }

    /// Every NodeClaim terminated so far, in order.
    pub fn deletions(&self) -> Vec<NodeClaimDeletion> {
        self.state().deletions.clone()
    }

    /// The NodeClaims provisioning created, in order.
    pub fn launched(&self) -> Vec<String> {
        self.state().launched.clone()
    }

    /// Every NodeClaim deletion from now on, as it is seen (before its node goes).
    pub fn subscribe(&self) -> broadcast::Receiver<NodeClaimDeletion> {
        self.feed.subscribe()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// `<pool>-<5 characters>`, from the alphabet of the apiserver's generated names.
    fn claim_name(&self, pool: &str) -> String {
        use std::hash::{BuildHasher, Hasher};
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            let mut hash = std::collections::hash_map::RandomState::new().build_hasher();
            hash.write_u128(jiff::Timestamp::now().as_nanosecond() as u128);
            let mut n = hash.finish();
            let suffix: String = (0..5)
                .map(|_| {
                    let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                    n /= ALPHABET.len() as u64;
                    c
                })
                .collect();
            let name = format!("{pool}-{suffix}");
            let taken = self.state().unseen.contains_key(&name)
                || self.claims.state().iter().any(|c| c.name_any() == name);
            if !taken {
                return name;
            }
        }
    }

    /// Creates NodeClaim `name` from `pool`'s template, as Karpenter's provisioner does.
    async fn create_claim(&self, pool: &DynamicObject, name: &str) -> anyhow::Result<()> {
        let pool_name = pool.name_any();
        let template = &pool.data["spec"]["template"];
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels[NODEPOOL_LABEL] = json!(pool_name);
        let claim: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": name, "labels": labels,
                "annotations": template["metadata"]["annotations"].as_object().cloned().unwrap_or_default(),
                "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": pool_name,
                                     "uid": pool.uid().unwrap_or_default(), "blockOwnerDeletion": true}],
                "finalizers": [TERMINATION_FINALIZER],
            },
            "spec": template["spec"],
        }))?;
        self.state().unseen.insert(name.to_string(), pool_name);
        let created = nodeclaims(&self.client)
            .create(&PostParams::default(), &claim)
            .await;
        if created.is_err() {
            self.state().unseen.remove(name);
        }
        created?;
        Ok(())
    }

    /// Launches the NodeClaims pending pods need, whenever what they depend on changes.
    async fn provision(self) {
        loop {
            self.dirty.notified().await;
            let (pods, nodes, claims) = (
                self.pods.state(),
                self.node_store.state(),
                self.claims.state(),
            );
            let pools = self.pools.state();
            let (unseen, pods_per_node) = {
                let state = self.state();
                (state.unseen.clone(), state.pods_per_node)
            };
            let view = provisioning::View {
                pods: &pods,
                nodes: &nodes,
                claims: &claims,
                unseen: &unseen,
                pools: pools.len(),
                pods_per_node,
            };
            let live = pools
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none());
            for pool in live {
                for _ in 0..provisioning::needed(pool, &view) {
                    let name = self.claim_name(&pool.name_any());
                    // Counted as unseen from here on, before the next round of arithmetic.
                    (self.state().unseen).insert(name.clone(), pool.name_any());
                    self.state().launched.push(name.clone());
                    let (sim, pool) = (self.clone(), pool.clone());
                    tokio::spawn(async move {
                        if let Err(e) = sim.create_claim(&pool, &name).await {
                            eprintln!("karpenter-sim: creating NodeClaim {name} failed: {e}");
                            sim.state().launched.retain(|n| *n != name);
                        }
                    });
                }
            }
        }
    }

    /// Starts the lifecycle of a NodeClaim first seen, and signals its deletion.
    fn on_claim(&self, event: watcher::Event<DynamicObject>) {
        self.dirty.notify_one();
        let (claim, gone) = match event {
            watcher::Event::Apply(c) | watcher::Event::InitApply(c) => (c, false),
            watcher::Event::Delete(c) => (c, true),
            _ => return,
        };
        let name = claim.name_any();
        let deleting = gone || claim.metadata.deletion_timestamp.is_some();
        let mut state = self.state();
        state.unseen.remove(&name);
        if let Some(signal) = state.lifecycles.get(&name) {
            if deleting {
                signal.send_replace(true);
            }
            if gone {
                state.lifecycles.remove(&name);
            }
            return;
        }
        // A NodeClaim already deleted when first seen never launches; one still held by the
        // finalizer is terminated.
        if gone
            || (deleting
                && !claim
                    .finalizers()
                    .iter()
                    .any(|f| f == TERMINATION_FINALIZER))
        {
            return;
        }
        let (signal, deleted) = watch::channel(deleting);
        state.lifecycles.insert(name, signal);
        drop(state);
        tokio::spawn(self.clone().lifecycle(claim, deleted));
    }
}

fn condition_true(claim: &DynamicObject, type_: &str) -> bool {
    (claim.data["status"]["conditions"].as_array().into_iter())
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}
