//! The API server: connecting the way kubectl does, reading the snapshot the planner needs, and
//! discovering which policy API version this server serves. Everything that talks to the
//! cluster lives under this module; nothing here decides what to do.

pub mod access;
pub mod controllers;
pub mod controls;
pub mod drain;
pub mod eviction;
pub mod fleet_record;
pub mod follow;
pub mod history;
pub mod kured;
pub mod lock;
pub mod machines;
pub mod node_claims;
pub mod node_pools;
pub mod nodes;
mod objects;
pub mod recorder;
pub mod retry;
pub mod runner;
pub mod transport;
pub mod validate;
pub mod view;
pub mod workloads;
pub mod writes;

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use crate::snapshot::{Snapshot, SnapshotError};

pub use objects::LiveObjects;

/// How to reach the cluster: kubectl's flags.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub cluster: Option<String>,
    pub user: Option<String>,
    pub as_user: Option<String>,
    pub as_groups: Vec<String>,
    pub request_timeout: Option<Duration>,
    /// How long a request failing transiently is retried ([`retry::DEFAULT_RETRY_FOR`] when
    /// unset; zero: never).
    pub retry_for: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error(
        "cannot reach the API server at {server}: {message} (check --kubeconfig/--context, and that the cluster is up)"
    )]
    Unreachable { server: String, message: String },
    #[error(
        "forbidden: this user may not {verb} {resource}{scope}: {message} (grant it in the user's Role or ClusterRole)"
    )]
    Forbidden {
        verb: String,
        resource: String,
        scope: String,
        message: String,
    },
    #[error("{verb} {resource}: the API server answered {code}: {message}")]
    Api {
        verb: String,
        resource: String,
        code: u16,
        message: String,
    },
    #[error("{resource} from the API server: {source}")]
    Decode {
        resource: String,
        #[source]
        source: SnapshotError,
    },
    /// A watch of the live view could not go on; every read after says why.
    #[error("the live view of the cluster stopped: {0}")]
    ViewFailed(std::sync::Arc<ClusterError>),
    #[error("the live view of the cluster is gone")]
    ViewStopped,
    #[error(
        "the live view of the cluster did not show {what} within {waited} (its watch may be stuck); stopping here"
    )]
    Behind { what: String, waited: String },
    /// Something we keep on the cluster that cannot be read (edited by hand, or by another
    /// version): named, never guessed at.
    #[error("{what} cannot be read: {message} (remove it to start afresh)")]
    Invalid { what: String, message: String },
}

impl ClusterError {
    /// Whether the server answered that the object is not there (404): removed by someone else.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClusterError::Api { code: 404, .. })
    }
}

/// The API request a [`ClusterError`] is about.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub verb: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
}

impl Request<'_> {
    /// Classifies a client error: unreachable, forbidden (naming verb and resource), or other.
    pub fn error(&self, server: &str, err: kube::Error) -> ClusterError {
        match err {
            kube::Error::Api(status) if status.code == 403 => ClusterError::Forbidden {
                verb: self.verb.to_string(),
                resource: self.resource.to_string(),
                scope: self
                    .namespace
                    .map(|n| format!(" in namespace {n}"))
                    .unwrap_or_else(|| " at cluster scope".into()),
                message: status.message,
            },
            kube::Error::Api(status) => ClusterError::Api {
                verb: self.verb.to_string(),
                resource: self.resource.to_string(),
                code: status.code,
                message: status.message,
            },
            other => ClusterError::Unreachable {
                server: server.to_string(),
                message: error_chain(&other),
            },
        }
    }
}

pub(crate) use crate::error_chain::error_chain;

/// A connected client and the server it talks to.
#[derive(Clone)]
pub struct Cluster {
    pub client: Client,
    pub server: String,
    pub default_namespace: String,
    /// The policy API version, discovered once per process (see [`Cluster::policy_version`]).
    policy_version: std::sync::Arc<tokio::sync::OnceCell<&'static str>>,
    /// One eviction request at a time per namespace (see [`eviction`]).
    evictions: eviction::Turns,
    /// Snapshots include Cluster API Machines (see [`Cluster::with_machines`]).
    machines: bool,
    /// Snapshots include Karpenter NodePools (see [`Cluster::with_node_pools`]).
    node_pools: bool,
    /// Snapshots include what other disruptors mark besides nodes (see [`Cluster::with_others`]).
    others: Others,
    /// This process's writes that a live view has yet to show (see [`view::LiveView`]).
    pub(crate) writes: writes::Writes,
    /// How long a request failing transiently is retried.
    retry_for: Duration,
}

impl Cluster {
    /// Connects as kubectl would: `--kubeconfig`, else `$KUBECONFIG` (several paths merged), else
    /// `~/.kube/config`; then context, cluster, user and impersonation overrides.
    pub async fn connect(options: &ConnectOptions) -> Result<Cluster, ClusterError> {
        let kubeconfig = match &options.kubeconfig {
            Some(path) => Kubeconfig::read_from(path).map_err(|e| {
                ClusterError::Kubeconfig(format!("{}: {}", path.display(), error_chain(&e)))
            })?,
            None => Kubeconfig::read().map_err(|e| ClusterError::Kubeconfig(error_chain(&e)))?,
        };
        if let Some(context) = &options.context
            && !kubeconfig.contexts.iter().any(|c| &c.name == context)
        {
            let known: Vec<&str> = kubeconfig
                .contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(ClusterError::Kubeconfig(format!(
                "context {context:?} does not exist; contexts: {}",
                known.join(", ")
            )));
        }
        let kube_options = KubeConfigOptions {
            context: options.context.clone(),
            cluster: options.cluster.clone(),
            user: options.user.clone(),
        };
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &kube_options)
            .await
            .map_err(|e| ClusterError::Kubeconfig(error_chain(&e)))?;
        if let Some(user) = &options.as_user {
            config.auth_info.impersonate = Some(user.clone());
        }
        if !options.as_groups.is_empty() {
            config.auth_info.impersonate_groups = Some(options.as_groups.clone());
        }
        if let Some(timeout) = options.request_timeout.filter(|t| !t.is_zero()) {
            config.read_timeout = Some(timeout);
            config.write_timeout = Some(timeout);
            config.connect_timeout = Some(timeout);
        }
        // Never retry silently: kube's retry is off, and the retry layer reports every retry (and
        // leaves a 429 from an eviction, a PodDisruptionBudget speaking, to the drain).
        config.default_retry = false;
        let server = config.cluster_url.to_string();
        let default_namespace = config.default_namespace.clone();
        let retry_for = options.retry_for.unwrap_or(retry::DEFAULT_RETRY_FOR);
        let retry = retry::RetryLayer::new(retry_for, retry::to_stderr());
        let client = transport::client(config, &retry)
            .map_err(|e| ClusterError::Kubeconfig(error_chain(&e)))?;
        Ok(Cluster {
            client,
            server,
            default_namespace,
            policy_version: Default::default(),
            evictions: Default::default(),
            machines: false,
            node_pools: false,
            others: Others::default(),
            writes: Default::default(),
            retry_for,
        })
    }

    /// Snapshots of this cluster include its Cluster API Machines, so that Nodes take their
    /// Machine's group and Machines without a Node are instances (a `cluster-api` provider
    /// asks for it; other clusters need not grant the read).
    pub fn with_machines(mut self) -> Cluster {
        self.machines = true;
        self
    }

    /// Snapshots of this cluster include its Karpenter NodePools, whose own disruption budgets
    /// a plan warns of (a `karpenter` provider asks for it).
    pub fn with_node_pools(mut self) -> Cluster {
        self.node_pools = true;
        self
    }

    /// Snapshots of this cluster include what other disruptors mark besides nodes, for the
    /// ledger: kured's DaemonSet (every DaemonSet is read, kured's kept) and, where the server
    /// serves them, medik8s' NodeMaintenances.
    pub async fn with_others(mut self) -> Result<Cluster, ClusterError> {
        let served = self.serves_group(NODE_MAINTENANCE_GROUP).await?;
        self.others = Others {
            daemon_sets: true,
            node_maintenances: served,
        };
        Ok(self)
    }

    /// What other disruptors' objects this cluster's snapshots include.
    pub fn others(&self) -> Others {
        self.others
    }

    /// Whether the server serves API group `group` (discovery).
    async fn serves_group(&self, group: &str) -> Result<bool, ClusterError> {
        let request = Request {
            verb: "get",
            resource: "API discovery",
            namespace: None,
        };
        match self.get(&format!("/apis/{group}"), &request).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// GETs a path, returning the body.
    pub async fn get(&self, path: &str, request: &Request<'_>) -> Result<String, ClusterError> {
        let req = http::Request::get(path)
            .body(Vec::new())
            .expect("a GET request with a valid path");
        self.client
            .request_text(req)
            .await
            .map_err(|e| request.error(&self.server, e))
    }

    /// The version of the `policy` API group to use: v1 when served, else v1beta1.
    pub async fn policy_version(&self) -> Result<&'static str, ClusterError> {
        self.policy_version
            .get_or_try_init(|| self.discover_policy_version())
            .await
            .copied()
    }

    async fn discover_policy_version(&self) -> Result<&'static str, ClusterError> {
        let body = self
            .get(
                "/apis/policy",
                &Request {
                    verb: "get",
                    resource: "the policy API group (discovery)",
                    namespace: None,
                },
            )
            .await?;
        let group: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let served = |v: &str| {
            group["versions"]
                .as_array()
                .is_some_and(|vs| vs.iter().any(|x| x["version"] == v))
        };
        Ok(if served("v1") { "v1" } else { "v1beta1" })
    }

    /// Lists every object at `path`, page by page, handing each page's body to `page`, which
    /// returns the page's `continue` token.
    async fn list_pages(
        &self,
        path: &str,
        resource: &str,
        mut page: impl FnMut(&str) -> Result<Option<String>, SnapshotError>,
    ) -> Result<(), ClusterError> {
        let request = Request {
            verb: "list",
            resource,
            namespace: None,
        };
        let mut token: Option<String> = None;
        loop {
            let url = match &token {
                Some(t) => format!("{path}?limit=500&continue={}", urlencode(t)),
                None => format!("{path}?limit=500"),
            };
            let body = self.get(&url, &request).await?;
            token = page(&body).map_err(|source| ClusterError::Decode {
                resource: resource.to_string(),
                source,
            })?;
            if token.is_none() {
                return Ok(());
            }
        }
    }

    /// The lists a snapshot is made of: API path and resource name.
    async fn snapshot_lists(&self) -> Result<Vec<(String, &'static str)>, ClusterError> {
        let policy = self.policy_version().await?;
        let mut lists = vec![
            ("/api/v1/nodes".to_string(), "nodes"),
            ("/api/v1/pods".to_string(), "pods"),
            (
                format!("/apis/policy/{policy}/poddisruptionbudgets"),
                "poddisruptionbudgets.policy",
            ),
        ];
        if self.machines {
            lists.push(machines_list());
        }
        if self.node_pools {
            lists.push((
                "/apis/karpenter.sh/v1/nodepools".to_string(),
                "nodepools.karpenter.sh",
            ));
        }
        if self.others.daemon_sets {
            lists.push(("/apis/apps/v1/daemonsets".to_string(), "daemonsets.apps"));
        }
        if self.others.node_maintenances {
            lists.push(node_maintenances_list());
        }
        Ok(lists)
    }

    /// Reads nodes, pods and PodDisruptionBudgets: the planner's view of the cluster.
    pub async fn snapshot(&self) -> Result<Snapshot, ClusterError> {
        let mut snapshot = Snapshot::default();
        for (path, resource) in self.snapshot_lists().await? {
            self.list_pages(&path, resource, |body| {
                snapshot.extend_from_json(body.as_bytes())
            })
            .await?;
        }
        snapshot.link_machines();
        Ok(snapshot)
    }

    /// Only the instances (nodes, and Machines with [`Cluster::with_machines`]): what `status`
    /// and a DaemonSet's update read of them.
    pub async fn snapshot_nodes(&self) -> Result<Snapshot, ClusterError> {
        let mut snapshot = Snapshot::default();
        let mut lists = vec![("/api/v1/nodes".to_string(), "nodes")];
        if self.machines {
            lists.push(machines_list());
        }
        for (path, resource) in lists {
            self.list_pages(&path, resource, |body| {
                snapshot.extend_from_json(body.as_bytes())
            })
            .await?;
        }
        snapshot.link_machines();
        Ok(snapshot)
    }

    /// The same objects as a `v1` `List`, each item with its kind and apiVersion: the file
    /// `--from-snapshot` reads, as `kubectl get nodes,pods,poddisruptionbudgets -A -o json`
    /// prints it.
    pub async fn snapshot_list(&self) -> Result<serde_json::Value, ClusterError> {
        let mut items = Vec::new();
        for (path, resource) in self.snapshot_lists().await? {
            self.list_pages(&path, resource, |body| {
                let mut list: serde_json::Value =
                    serde_json::from_str(body).map_err(SnapshotError::Json)?;
                let kind = list["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_end_matches("List")
                    .to_string();
                let api_version = list["apiVersion"].clone();
                if let Some(page) = list["items"].as_array_mut() {
                    for mut item in page.drain(..) {
                        item["kind"] = kind.clone().into();
                        item["apiVersion"] = api_version.clone();
                        items.push(item);
                    }
                }
                Ok(list["metadata"]["continue"]
                    .as_str()
                    .filter(|t| !t.is_empty())
                    .map(String::from))
            })
            .await?;
        }
        Ok(serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": ""},
            "items": items,
        }))
    }
}

/// The Cluster API Machines, as a snapshot lists them.
/// The API group of medik8s' NodeMaintenance.
const NODE_MAINTENANCE_GROUP: &str = "nodemaintenance.medik8s.io";

/// Other disruptors' objects a cluster's snapshots include.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Others {
    /// Every DaemonSet, for kured's.
    pub daemon_sets: bool,
    /// NodeMaintenances (the server serves them).
    pub node_maintenances: bool,
}

fn node_maintenances_list() -> (String, &'static str) {
    (
        format!("/apis/{NODE_MAINTENANCE_GROUP}/v1beta1/nodemaintenances"),
        "nodemaintenances.nodemaintenance.medik8s.io",
    )
}

fn machines_list() -> (String, &'static str) {
    (
        "/apis/cluster.x-k8s.io/v1beta1/machines".to_string(),
        "machines.cluster.x-k8s.io",
    )
}

/// Percent-encodes a query value.
pub fn urlencode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
