//! The live view: one watched picture of the cluster that a live run reads every state question
//! from, so that a batch costs the API server what it touches, not what the cluster holds.
//!
//! Started once per run, it lists each kind the run needs once and then watches it: every node,
//! every PodDisruptionBudget, kube-system's pods (validation reads them), Cluster API Machines
//! and Karpenter NodePools when the providers use them, DaemonSets (for kured's lock) and
//! NodeMaintenances when others' disruptions are counted. Pods elsewhere are kept only where the
//! run looks: on the nodes of the groups it rotates (and replacements that join them) and in
//! namespaces it names (a batch's evicted pods' controllers), each scope listed when it comes
//! into view, all of them kept current by one watch of bound pods. It keeps the planner's
//! compact objects, never full API objects.
//!
//! What needs the server's word (the Lease, an eviction, a write's result) still goes to the
//! server. Before a decision the executor asks the view to catch up ([`LiveView::caught_up`]):
//! every write of the run's shown, every scope listed; a wait is a predicate over the view, woken
//! by its changes ([`LiveView::wait_until`]).

mod feed;
mod object;
mod selected;
pub mod store;
mod wait;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource};
use kube::runtime::watcher;
use tokio::task::JoinSet;

use super::writes::{Change, Kind, Written};
use super::{Cluster, ClusterError, Others};
use crate::keys;
use crate::plan::drain::DrainOptions;
use crate::plan::health::{Index, summarize};
use crate::plan::hook::HealthSummary;
use crate::snapshot::{
    Machine, Node, NodeMaintenance, NodePool, Pdb, PdbBody, Pod, Snapshot, kured,
};
use object::{Watched, api_resource};
pub use selected::SelectedPods;
pub use store::Scope;
use store::{Entry, Key, Scoped, Whole, in_namespace, merged};
pub use wait::{Deadline, WaitError};

/// Which nodes' pods the run looks at, also as nodes join.
type Follow = Arc<dyn Fn(&Node) -> bool + Send + Sync>;

/// Everything the view holds.
pub struct State {
    nodes: Whole<Node>,
    /// kube-system's pods, every one (validation reads them).
    system: Whole<Pod>,
    /// Bound pods where the run looks.
    pods: Scoped,
    /// The version the watch of bound pods last (re)started from, once it is open: a scope's
    /// list is read at a version no older, so that the two leave no gap between them.
    pods_from: Option<String>,
    pdbs: Whole<Pdb>,
    machines: Whole<Machine>,
    node_pools: Whole<NodePool>,
    /// Every DaemonSet, read as kured's or not.
    daemon_sets: Whole<kured::DaemonSet>,
    node_maintenances: Whole<NodeMaintenance>,
    watches_machines: bool,
    watches_node_pools: bool,
    watches_others: Others,
    failed: Option<Arc<ClusterError>>,
    follow: Option<Follow>,
    /// A task brings the nodes `follow` accepts into view as they join.
    following: bool,
}

impl State {
    /// The scopes of those of `nodes` whose pods the run follows.
    fn followed<'a>(&self, nodes: impl Iterator<Item = &'a Node>) -> Vec<Scope> {
        let Some(follow) = &self.follow else {
            return Vec::new();
        };
        nodes
            .filter(|n| n.registered && follow(n))
            .map(|n| Scope::Node(n.name.clone()))
            .collect()
    }

    fn synced(&self) -> bool {
        self.nodes.synced
            && self.system.synced
            && self.pods_from.is_some()
            && self.pdbs.synced
            && (!self.watches_machines || self.machines.synced)
            && (!self.watches_node_pools || self.node_pools.synced)
            && (!self.watches_others.daemon_sets || self.daemon_sets.synced)
            && (!self.watches_others.node_maintenances || self.node_maintenances.synced)
    }

    /// Whether the view reflects `written`.
    fn shows(&self, written: &Written) -> bool {
        let key = (written.namespace.clone(), written.name.clone());
        match written.kind {
            Kind::Node => shows(
                &self.nodes.objects,
                self.nodes.newest,
                &key,
                &written.change,
            ),
            Kind::Machine => shows(
                &self.machines.objects,
                self.machines.newest,
                &key,
                &written.change,
            ),
            Kind::Pod => {
                let newest = self.pods.newest.max(self.system.newest);
                shows(&self.pods.objects, newest, &key, &written.change)
                    && shows(&self.system.objects, newest, &key, &written.change)
            }
        }
    }

    /// The view as the planner reads a cluster.
    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot {
            nodes: self.nodes.values().map(|n| Node::clone(n)).collect(),
            pods: merged(&self.pods.objects, &self.system.objects),
            pdbs: self.pdbs.values().map(|p| Pdb::clone(p)).collect(),
            machines: self.machines.values().map(|m| Machine::clone(m)).collect(),
            node_pools: self
                .node_pools
                .values()
                .map(|p| NodePool::clone(p))
                .collect(),
            kured: (self.daemon_sets.values())
                .filter_map(|d| d.kured.clone())
                .collect(),
            node_maintenances: (self.node_maintenances.values())
                .map(|m| NodeMaintenance::clone(m))
                .collect(),
        };
        snapshot.link_machines();
        snapshot
    }
}

fn shows<T>(
    objects: &std::collections::BTreeMap<Key, Entry<T>>,
    newest: u64,
    key: &Key,
    change: &Change,
) -> bool {
    match (change, objects.get(key)) {
        (Change::Now(version), Some(held)) => held.version >= *version,
        // Deleted since, if the watch went past the write.
        (Change::Now(version), None) => newest >= *version,
        (Change::Gone(_), None) => true,
        (Change::Gone(uid), Some(held)) => uid.as_ref().is_some_and(|u| *u != held.uid),
    }
}

/// What the watch tasks share with the view.
pub struct Shared {
    state: Mutex<State>,
    /// Counts the view's changes: readers wait on it.
    changed: tokio::sync::watch::Sender<u64>,
    server: String,
    /// How long a request failing transiently is retried: a watch failing longer fails the view.
    retry_for: Duration,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the state; `f` says whether what a reader sees changed.
    fn change(&self, f: impl FnOnce(&mut State) -> bool) {
        self.change_then(|state| (f(state), ()));
    }

    fn change_then<R>(&self, f: impl FnOnce(&mut State) -> (bool, R)) -> R {
        let (changed, value) = f(&mut self.lock());
        if changed {
            self.changed.send_modify(|n| *n += 1);
        }
        value
    }

    /// A watch cannot go on: every read of the view fails with `error` from now on.
    fn fail(&self, error: ClusterError) {
        self.change(|state| {
            state.failed.get_or_insert_with(|| Arc::new(error));
            true
        });
    }
}

fn pods_resource() -> ApiResource {
    api_resource("", "v1", "Pod", "pods")
}

/// A live run's watched view of the cluster. Dropping it stops its watches.
pub struct LiveView {
    shared: Arc<Shared>,
    pods: Api<Watched<Pod>>,
    writes: super::writes::Writes,
    tasks: Mutex<JoinSet<()>>,
    /// The last snapshot read, and the change count it was read at.
    cache: Mutex<Option<(u64, Arc<Snapshot>)>>,
    /// How long the view may take to show the run's own writes.
    catch_up: Duration,
}

impl Drop for LiveView {
    fn drop(&mut self) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .abort_all();
    }
}

impl LiveView {
    /// Lists and starts watching what a run of `cluster` reads; returns once every kind is
    /// listed.
    pub async fn start(cluster: &Cluster) -> Result<LiveView, ClusterError> {
        let policy = cluster.policy_version().await?;
        let state = State {
            nodes: Whole::default(),
            system: Whole::default(),
            pods: Scoped::leaving(keys::SYSTEM_NAMESPACES),
            pods_from: None,
            pdbs: Whole::default(),
            machines: Whole::default(),
            node_pools: Whole::default(),
            daemon_sets: Whole::default(),
            node_maintenances: Whole::default(),
            watches_machines: cluster.machines,
            watches_node_pools: cluster.node_pools,
            watches_others: cluster.others,
            failed: None,
            follow: None,
            following: false,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            changed: tokio::sync::watch::Sender::new(0),
            server: cluster.server.clone(),
            retry_for: cluster.retry_for,
        });
        let client = cluster.client.clone();
        fn all<T>(client: &kube::Client, r: &ApiResource) -> Api<Watched<T>> {
            Api::all_with(client.clone(), r)
        }
        let config = watcher::Config::default;
        let mut tasks = JoinSet::new();
        let nodes = api_resource("", "v1", "Node", "nodes");
        tasks.spawn(feed::whole(
            shared.clone(),
            all(&client, &nodes),
            config(),
            "nodes",
            |s| &mut s.nodes,
            |n: crate::snapshot::Decoded<Node>| n.value,
        ));
        let system =
            Api::namespaced_with(client.clone(), keys::SYSTEM_NAMESPACES[0], &pods_resource());
        tasks.spawn(feed::whole(
            shared.clone(),
            system,
            config(),
            "pods",
            |s| &mut s.system,
            |p: crate::snapshot::Decoded<Pod>| p.value,
        ));
        let pdbs = api_resource(
            "policy",
            policy,
            "PodDisruptionBudget",
            "poddisruptionbudgets",
        );
        let v1beta1 = policy == "v1beta1";
        tasks.spawn(feed::whole(
            shared.clone(),
            all(&client, &pdbs),
            config(),
            "poddisruptionbudgets.policy",
            |s| &mut s.pdbs,
            move |p: crate::snapshot::Decoded<PdbBody>| p.value.into_pdb(v1beta1),
        ));
        if cluster.machines {
            let machines = api_resource("cluster.x-k8s.io", "v1beta1", "Machine", "machines");
            tasks.spawn(feed::whole(
                shared.clone(),
                all(&client, &machines),
                config(),
                "machines.cluster.x-k8s.io",
                |s| &mut s.machines,
                |m: crate::snapshot::Decoded<Machine>| m.value,
            ));
        }
        if cluster.node_pools {
            let pools = api_resource("karpenter.sh", "v1", "NodePool", "nodepools");
            tasks.spawn(feed::whole(
                shared.clone(),
                all(&client, &pools),
                config(),
                "nodepools.karpenter.sh",
                |s| &mut s.node_pools,
                |p: crate::snapshot::Decoded<NodePool>| p.value,
            ));
        }
        if cluster.others.daemon_sets {
            let daemon_sets = api_resource("apps", "v1", "DaemonSet", "daemonsets");
            tasks.spawn(feed::whole(
                shared.clone(),
                all(&client, &daemon_sets),
                config(),
                "daemonsets.apps",
                |s| &mut s.daemon_sets,
                |d: crate::snapshot::Decoded<kured::DaemonSet>| d.value,
            ));
        }
        if cluster.others.node_maintenances {
            let maintenances = api_resource(
                "nodemaintenance.medik8s.io",
                "v1beta1",
                "NodeMaintenance",
                "nodemaintenances",
            );
            tasks.spawn(feed::whole(
                shared.clone(),
                all(&client, &maintenances),
                config(),
                "nodemaintenances.nodemaintenance.medik8s.io",
                |s| &mut s.node_maintenances,
                |m: crate::snapshot::Decoded<NodeMaintenance>| m.value,
            ));
        }
        let pods = all(&client, &pods_resource());
        tasks.spawn(feed::bound_pods(shared.clone(), pods.clone()));
        let view = LiveView {
            shared,
            pods,
            writes: cluster.writes.clone(),
            tasks: Mutex::new(tasks),
            cache: Mutex::new(None),
            catch_up: cluster.retry_for + CATCH_UP_MARGIN,
        };
        view.settled(|_| Vec::new(), "its first lists").await?;
        Ok(view)
    }

    /// From now on the pods of every node `follow` accepts, and of nodes it accepts as they
    /// join, are in view. A node that joins is brought into view as soon as it registers, so
    /// that its pods are listed while it boots, not when the run next reads the view.
    pub fn follow(&self, follow: impl Fn(&Node) -> bool + Send + Sync + 'static) {
        let first = {
            let mut state = self.shared.lock();
            state.follow = Some(Arc::new(follow));
            !std::mem::replace(&mut state.following, true)
        };
        // One task brings joining nodes into view, whatever `follow` is now; the nodes a new
        // `follow` accepts already are brought in when the view is next caught up.
        if !first {
            return;
        }
        let (shared, api) = (self.shared.clone(), self.pods.clone());
        self.spawn(async move {
            let mut changes = shared.changed.subscribe();
            let mut lists = JoinSet::new();
            // The node version last looked at: pod changes alone do not bring nodes in.
            let mut seen = None;
            loop {
                let new = shared.change_then(|state| {
                    let newest = state.nodes.newest;
                    if seen == Some(newest) {
                        return (false, Vec::new());
                    }
                    seen = Some(newest);
                    let followed = state.followed(state.nodes.values().map(|n| &**n));
                    (false, state.pods.claim(followed))
                });
                for scope in new {
                    let (shared, api) = (shared.clone(), api.clone());
                    lists.spawn(async move { feed::list_scope(&shared, &api, &scope).await });
                }
                // Lists that are done are let go, so that a long run holds only those under way.
                while lists.try_join_next().is_some() {}
                if changes.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .spawn(task);
    }

    /// Brings `scopes` into view (each is listed once, then kept current).
    pub fn look_at(&self, scopes: impl IntoIterator<Item = Scope>) {
        let new = self
            .shared
            .change_then(|state| (false, state.pods.claim(scopes)));
        for scope in new {
            let (shared, api) = (self.shared.clone(), self.pods.clone());
            self.spawn(async move { feed::list_scope(&shared, &api, &scope).await });
        }
    }

    /// The view now, as the planner reads a cluster. It may not show the run's last writes yet:
    /// before a decision, read it through [`LiveView::caught_up`].
    pub fn current(&self) -> Result<Arc<Snapshot>, ClusterError> {
        let count = *self.shared.changed.borrow();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, snapshot)) = cache.as_ref()
            && *at == count
        {
            return Ok(snapshot.clone());
        }
        let state = self.shared.lock();
        if let Some(failed) = &state.failed {
            return Err(ClusterError::ViewFailed(failed.clone()));
        }
        let snapshot = Arc::new(state.snapshot());
        *cache = Some((count, snapshot.clone()));
        Ok(snapshot)
    }

    /// The view once it shows every write of this run's, every followed node's pods and every
    /// scope listed: the cluster as it is after the run's last step.
    pub async fn caught_up(&self) -> Result<Arc<Snapshot>, ClusterError> {
        self.settled(|snapshot| self.followed(snapshot), "this run's last change")
            .await?;
        self.current()
    }

    /// The nodes of `snapshot` whose pods the run follows.
    fn followed(&self, snapshot: &Snapshot) -> Vec<Scope> {
        self.shared.lock().followed(snapshot.nodes.iter())
    }

    /// Waits until the view is listed, shows every pending write and has no scope to list
    /// (`scopes` names more, read from the view as it is).
    async fn settled(
        &self,
        scopes: impl Fn(&Snapshot) -> Vec<Scope>,
        what: &str,
    ) -> Result<(), ClusterError> {
        let deadline = Instant::now() + self.catch_up;
        let mut changes = self.shared.changed.subscribe();
        loop {
            changes.borrow_and_update();
            let ready = {
                let state = self.shared.lock();
                if let Some(failed) = &state.failed {
                    return Err(ClusterError::ViewFailed(failed.clone()));
                }
                state.synced()
            };
            let behind = if ready {
                let wanted = scopes(&*self.current()?);
                self.look_at(wanted);
                let state = self.shared.lock();
                let pending = self.writes.settle(|w| state.shows(w));
                match pending.first() {
                    Some(w) => Some(w.describe()),
                    None if state.pods.listing > 0 => {
                        Some("the pods of the nodes it looks at".into())
                    }
                    None => None,
                }
            } else {
                Some(what.to_string())
            };
            let Some(behind) = behind else {
                return Ok(());
            };
            if tokio::time::timeout_at(deadline.into(), changes.changed())
                .await
                .is_err()
            {
                return Err(ClusterError::Behind {
                    what: behind,
                    waited: crate::duration::human_duration(self.catch_up.as_secs() as i64),
                });
            }
        }
    }

    /// Health as the built-in validation judges it: every node, and kube-system's pods.
    pub fn health(&self, cordoned_by_run: &HashSet<&str>) -> Result<HealthSummary, ClusterError> {
        let snapshot = {
            let state = self.shared.lock();
            if let Some(failed) = &state.failed {
                return Err(ClusterError::ViewFailed(failed.clone()));
            }
            Snapshot {
                nodes: state.nodes.values().map(|n| Node::clone(n)).collect(),
                pods: in_namespace(&state.system.objects, keys::SYSTEM_NAMESPACES[0])
                    .map(|e| e.value.clone())
                    .collect(),
                ..Snapshot::default()
            }
        };
        let index = Index::new(&snapshot);
        Ok(summarize(
            &snapshot,
            &index,
            &[],
            cordoned_by_run,
            &DrainOptions::default(),
        ))
    }

    /// A receiver of the view's changes.
    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.shared.changed.subscribe()
    }
}

/// Time the view gets beyond the client's retries to show a write: its watch may be resuming
/// after the API server came back.
const CATCH_UP_MARGIN: Duration = Duration::from_secs(30);
