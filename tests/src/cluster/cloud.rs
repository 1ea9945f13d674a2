//! The simulated cloud: instance groups whose instances are the simulator's nodes.
//!
//! Terminating an instance removes its node and, unless it was detached, boots a replacement of
//! the same group with the group's current spec after the boot delay (as an autoscaling group
//! would). Detaching keeps the instance but boots a replacement (a surge); surging a group boots
//! one more. Terminating and detaching are idempotent, as the plugin's provider contract asks.
//! Every call is recorded. The `sim-cloud` binary speaks to it over a Unix socket with
//! one JSON line per request, so the plugin's `exec` provider drives it for real.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

use super::nodes::{NodeSim, NodeSpec};

/// One request to the cloud, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudCall {
    pub verb: String,
    pub target: String,
    /// When it was received.
    #[serde(skip, default = "SystemTime::now")]
    pub at: SystemTime,
    /// Whether its instance existed: a repeated termination of an instance already gone
    /// succeeds (as a cloud's terminate does) but changes nothing.
    #[serde(default)]
    pub effective: bool,
}

#[derive(Debug, Deserialize)]
struct Request {
    verb: String,
    #[serde(default)]
    target: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Instance {
    pub name: String,
    pub group: String,
    pub detached: bool,
}

/// What a new instance of a group looks like.
#[derive(Debug, Clone, Default)]
pub struct GroupSpec {
    pub kubelet_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// New instances boot but never join the cluster (no Node appears).
    pub never_joins: bool,
}

#[derive(Default)]
struct State {
    calls: Vec<CloudCall>,
    detached: HashSet<String>,
    /// Instances terminated so far.
    terminated: HashSet<String>,
    specs: BTreeMap<String, GroupSpec>,
    boot_delay: Duration,
    launched: u32,
}

/// Handle to the simulated cloud; clones share it.
#[derive(Clone)]
pub struct SimCloud {
    pub socket: PathBuf,
    nodes: NodeSim,
    state: Arc<Mutex<State>>,
    /// Every call as it arrives, for observers that watch rather than poll.
    feed: tokio::sync::broadcast::Sender<CloudCall>,
}

impl SimCloud {
    /// Listens on `socket` on the current runtime.
    pub async fn start(socket: PathBuf, nodes: NodeSim) -> anyhow::Result<SimCloud> {
        let listener = UnixListener::bind(&socket)?;
        let cloud = SimCloud {
            socket,
            nodes,
            state: Arc::new(Mutex::new(State {
                boot_delay: Duration::from_millis(500),
                ..Default::default()
            })),
            feed: tokio::sync::broadcast::channel(1024).0,
        };
        let server = cloud.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let cloud = server.clone();
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let answer = match serde_json::from_str::<Request>(&line) {
                            Ok(req) => cloud.handle(req).await,
                            Err(e) => Err(format!("bad request: {e}")),
                        };
                        let reply = match answer {
                            Ok(value) => serde_json::json!({"ok": value}),
                            Err(message) => serde_json::json!({"error": message}),
                        };
                        if write
                            .write_all(format!("{reply}\n").as_bytes())
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                });
            }
        });
        Ok(cloud)
    }

    /// How long a new instance takes to register as a Ready node.
    pub fn set_boot_delay(&self, delay: Duration) {
        self.state.lock().unwrap().boot_delay = delay;
    }

    /// The spec new instances of `group` get (the "last `kops update cluster`").
    pub fn set_group_spec(&self, group: &str, spec: GroupSpec) {
        self.state.lock().unwrap().specs.insert(group.into(), spec);
    }

    /// Every call from now on, as it arrives (before the cloud acts on it).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<CloudCall> {
        self.feed.subscribe()
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<CloudCall> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The instances of `group` the cloud was asked to terminate, in order.
    pub fn terminated(&self, group: &str) -> Vec<String> {
        let prefix = format!("{group}-");
        self.calls()
            .into_iter()
            .filter(|c| c.verb == "terminate" && c.target.starts_with(&prefix))
            .map(|c| c.target)
            .collect()
    }

    async fn handle(&self, req: Request) -> Result<serde_json::Value, String> {
        let call = CloudCall {
            verb: req.verb.clone(),
            target: req.target.clone(),
            at: SystemTime::now(),
            effective: self.nodes.spec_of(&req.target).is_some(),
        };
        self.state.lock().unwrap().calls.push(call.clone());
        // Nobody listening is fine.
        let _ = self.feed.send(call);
        match req.verb.as_str() {
            "terminate" => self.terminate(&req.target).await,
            "detach" => self.detach(&req.target),
            "surge" => {
                let zone = None;
                let name = self.launch(&req.target, zone);
                Ok(serde_json::json!({"launching": name}))
            }
            "list" => Ok(serde_json::to_value(self.list(&req.target)).unwrap()),
            other => Err(format!(
                "unknown verb {other:?}: expected terminate, detach, surge or list"
            )),
        }
    }

    fn list(&self, group: &str) -> Vec<Instance> {
        let detached = self.state.lock().unwrap().detached.clone();
        let groups: Vec<String> = if group.is_empty() {
            self.state.lock().unwrap().specs.keys().cloned().collect()
        } else {
            vec![group.to_string()]
        };
        groups
            .iter()
            .flat_map(|g| {
                self.nodes.nodes_of(g).into_iter().map(|name| Instance {
                    detached: detached.contains(&name),
                    name,
                    group: g.clone(),
                })
            })
            .collect()
    }

    async fn terminate(&self, node: &str) -> Result<serde_json::Value, String> {
        let Some(spec) = self.nodes.spec_of(node) else {
            // Terminating is idempotent, as in a real cloud: a caller that crashed before it
            // knew the outcome may ask again.
            if self.state.lock().unwrap().terminated.contains(node) {
                return Ok(serde_json::json!({"terminated": node, "alreadyGone": true}));
            }
            return Err(format!("no instance {node:?}"));
        };
        self.state
            .lock()
            .unwrap()
            .terminated
            .insert(node.to_string());
        self.nodes.remove(node).await.map_err(|e| e.to_string())?;
        let was_detached = self.state.lock().unwrap().detached.remove(node);
        let replacement = (!was_detached).then(|| self.launch(&spec.group, spec.zone.clone()));
        Ok(serde_json::json!({"terminated": node, "replacement": replacement}))
    }

    fn detach(&self, node: &str) -> Result<serde_json::Value, String> {
        let spec = self
            .nodes
            .spec_of(node)
            .ok_or_else(|| format!("no instance {node:?}"))?;
        // A caller that crashed before it recorded the outcome may ask again, and gets no
        // second replacement.
        if !self.state.lock().unwrap().detached.insert(node.to_string()) {
            return Ok(serde_json::json!({"detached": node, "alreadyDetached": true}));
        }
        let replacement = self.launch(&spec.group, spec.zone.clone());
        Ok(serde_json::json!({"detached": node, "replacement": replacement}))
    }

    /// Boots a new instance of `group` after the boot delay; returns its name.
    fn launch(&self, group: &str, zone: Option<String>) -> String {
        let (name, spec, delay) = {
            let mut state = self.state.lock().unwrap();
            state.launched += 1;
            let name = format!("{group}-new-{}", state.launched);
            (
                name,
                state.specs.get(group).cloned().unwrap_or_default(),
                state.boot_delay,
            )
        };
        let mut node = NodeSpec::new(&name, group);
        node.zone = zone;
        if let Some(v) = spec.kubelet_version {
            node.kubelet_version = v;
        }
        node.labels = spec.labels;
        if spec.never_joins {
            return name;
        }
        let nodes = self.nodes.clone();
        let launched = name.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Err(e) = nodes.add(node).await {
                eprintln!("sim-cloud: booting {launched} failed: {e}");
            }
        });
        name
    }
}
