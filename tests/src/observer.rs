//! The observer of a rotation: watches of the group's nodes and the workload's pods, and the
//! calls that replace instances, folded into the invariant [`Checker`] as they arrive. It only
//! sees what an independent observer sees, and never asks the plugin.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use crate::cluster::TestCluster;
use crate::invariants::{Budget, Checker, End, Pdb, Seen};

const WAIT: Duration = Duration::from_secs(120);
/// How long a termination's judgement waits for the node watch to deliver the node's deletion;
/// a build that terminates a node without deleting it first is judged after this.
const NODE_GONE_WAIT: Duration = Duration::from_secs(20);

pub fn node_seen(node: &Node) -> Seen {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Seen::Node {
        name: node.name_any(),
        ready,
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
    }
}

pub fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_seen(pod: &Pod) -> Seen {
    Seen::Pod {
        key: pod_key(pod),
        labels: pod.labels().clone(),
        ready: pod_ready(pod),
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
}

/// How one kind's watch events become observations.
struct Mapping<K> {
    key: fn(&K) -> String,
    seen: fn(&K) -> Seen,
    /// A deletion the watch delivered.
    gone: fn(String) -> Seen,
    /// An object missing when the watch listed again (see [`Seen::NodeLost`]).
    lost: fn(String) -> Seen,
    /// Sent when a listing starts, and when it is complete.
    listing: Seen,
    synced: Seen,
}

/// Forwards a watch as observations. A re-list (after the watch broke, e.g. while the API
/// server restarted) reports what disappeared in the meantime as lost.
async fn forward<K>(
    api: Api<K>,
    config: watcher::Config,
    mapping: Mapping<K>,
    tx: UnboundedSender<Seen>,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut known = BTreeSet::new();
    let mut relisted: Option<BTreeSet<String>> = None;
    let Mapping {
        key,
        seen,
        gone,
        lost,
        listing,
        synced,
    } = mapping;
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let sent = match event {
            watcher::Event::Init => {
                relisted = Some(BTreeSet::new());
                tx.send(listing.clone())
            }
            watcher::Event::InitApply(o) => {
                relisted.get_or_insert_default().insert(key(&o));
                known.insert(key(&o));
                tx.send(seen(&o))
            }
            watcher::Event::InitDone => {
                let listed = relisted.take().unwrap_or_default();
                // Only a listing after an interruption can miss a known object: it went while
                // the watch was away.
                for name in known.difference(&listed) {
                    let _ = tx.send(lost(name.clone()));
                }
                known = listed;
                tx.send(synced.clone())
            }
            watcher::Event::Apply(o) => {
                known.insert(key(&o));
                tx.send(seen(&o))
            }
            watcher::Event::Delete(o) => {
                known.remove(&key(&o));
                tx.send(gone(key(&o)))
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The pods still running on `node` (not terminating, not DaemonSet or mirror pods): what a
/// drain must have moved. Read from the API server (a consistent read), so it is exactly the
/// state when the cloud was asked to terminate, whatever the watches have delivered yet.
async fn pods_left_on(client: &Client, node: &str) -> Vec<String> {
    let api: Api<Pod> = Api::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    // The API server may be down for a moment in the fault tests: try again until it answers.
    let mut backoff = Duration::from_millis(50);
    let deadline = Instant::now() + WAIT;
    let pods = loop {
        match api.list(&params).await {
            Ok(list) => break list.items,
            Err(e) if Instant::now() < deadline => {
                eprintln!("observer: listing pods on {node}: {e}; again in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
            Err(e) => panic!("observer: cannot list pods on {node}: {e}"),
        }
    };
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !p.owner_references()
                .iter()
                .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
        })
        .filter(|p| !p.annotations().contains_key("kubernetes.io/config.mirror"))
        .map(pod_key)
        .collect()
}

/// A call to whatever replaces the group's instances (a cloud, a machine controller), as the
/// observer hears of it: before it acts.
#[derive(Debug, Clone)]
pub struct InstanceCall {
    pub verb: Verb,
    pub node: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Terminate,
    Detach,
}

/// The observer of one group's rotation: node and pod watches plus the calls that replace its
/// instances, folded into a [`Checker`] as they arrive.
pub struct Observer {
    checker: Arc<Mutex<Checker>>,
    calls_seen: tokio::sync::watch::Receiver<usize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    events: Arc<Mutex<Vec<Seen>>>,
    /// The label selector of the group's nodes.
    nodes: String,
}

impl Observer {
    /// Watches the nodes `nodes` (a label selector) and the pods of `namespace`, and hears
    /// `calls`, from now on.
    pub async fn start(
        cluster: &TestCluster,
        nodes: &str,
        namespace: &str,
        budget: Budget,
        pdbs: Vec<Pdb>,
        calls: impl futures::Stream<Item = InstanceCall> + Send + 'static,
    ) -> Observer {
        let client = cluster.client().await;
        let checker = Arc::new(Mutex::new(Checker::new(budget, pdbs)));
        let events = Arc::new(Mutex::new(Vec::new()));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Seen>();
        let (calls_tx, calls_seen) = tokio::sync::watch::channel(0usize);
        // Nodes whose deletion the checker has seen (see the cloud task below).
        let (gone_tx, gone) = tokio::sync::watch::channel(BTreeSet::<String>::new());
        let mut tasks = Vec::new();

        let record = checker.clone();
        let log = events.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(seen) = rx.recv().await {
                let call = matches!(seen, Seen::Terminate { .. } | Seen::Detach { .. });
                if let Seen::NodeGone { name } | Seen::NodeLost { name } = &seen {
                    gone_tx.send_modify(|g| {
                        g.insert(name.clone());
                    });
                }
                log.lock().unwrap().push(seen.clone());
                record.lock().unwrap().observe(seen);
                if call {
                    calls_tx.send_modify(|n| *n += 1);
                }
            }
        }));
        tasks.push(tokio::spawn(forward(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().labels(nodes),
            Mapping {
                key: |n| n.name_any(),
                seen: node_seen,
                gone: |name| Seen::NodeGone { name },
                lost: |name| Seen::NodeLost { name },
                listing: Seen::NodesListing,
                synced: Seen::NodesSynced,
            },
            tx.clone(),
        )));
        tasks.push(tokio::spawn(forward(
            Api::<Pod>::namespaced(client.clone(), namespace),
            watcher::Config::default(),
            Mapping {
                key: pod_key,
                seen: pod_seen,
                gone: |key| Seen::PodGone { key },
                lost: |key| Seen::PodGone { key },
                listing: Seen::PodsListing,
                synced: Seen::PodsSynced,
            },
            tx.clone(),
        )));
        tasks.push(tokio::spawn(async move {
            let mut calls = std::pin::pin!(calls);
            while let Some(call) = calls.next().await {
                let seen = match call.verb {
                    Verb::Terminate => {
                        let pods_left = pods_left_on(&client, &call.node).await;
                        // The rotation deletes a Node before it terminates the instance, and
                        // the node watch delivers everything up to that deletion in order, even
                        // across an API server restart (it resumes from where it was). Waiting
                        // for the deletion makes the checker judge the termination with the
                        // node's whole story, not with a watch that is still catching up.
                        let mut gone = gone.clone();
                        let _ = tokio::time::timeout(
                            NODE_GONE_WAIT,
                            gone.wait_for(|g| g.contains(&call.node)),
                        )
                        .await;
                        Seen::Terminate {
                            pods_left,
                            node: call.node,
                        }
                    }
                    Verb::Detach => Seen::Detach { node: call.node },
                };
                if tx.send(seen).is_err() {
                    return;
                }
            }
        }));
        Observer {
            checker,
            calls_seen,
            tasks,
            events,
            nodes: nodes.to_string(),
        }
    }

    /// Waits until the `calls` made (as the caller counts them: `described`, one line each) have
    /// all been heard, then checks the end state, with `instances` the group's instances left,
    /// and returns the checker's report and the fewest nodes available.
    pub async fn finish(
        self,
        cluster: &TestCluster,
        calls: Vec<String>,
        instances: Vec<String>,
    ) -> (Option<String>, Option<usize>) {
        let mut heard = self.calls_seen.clone();
        tokio::time::timeout(WAIT, heard.wait_for(|n| *n >= calls.len()))
            .await
            .expect("the observer hears every call")
            .unwrap();
        let client = cluster.client().await;
        let listed = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels(&self.nodes))
            .await
            .unwrap()
            .items;
        let marked = (listed.iter())
            .filter(|n| {
                let annotations = n.metadata.annotations.as_ref();
                annotations.is_some_and(|a| a.contains_key("rollout-ext.io/scale-down-disabled"))
            })
            .map(|n| n.name_any())
            .collect();
        let nodes = listed
            .iter()
            .map(|n| match node_seen(n) {
                Seen::Node {
                    name,
                    ready,
                    unschedulable,
                } => (name, ready, unschedulable),
                _ => unreachable!(),
            })
            .collect();
        let lock = Api::<Lease>::namespaced(client, "kube-system")
            .get_opt("rollout-ext")
            .await
            .unwrap()
            .map(|l| {
                // Who holds it, and the run state it still carries.
                let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                let state: Vec<String> = (l.metadata.annotations.unwrap_or_default().into_iter())
                    .filter(|(k, _)| k.starts_with("rollout-ext.io/"))
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                format!("{holder:?}, state: [{}]", state.join(", "))
            });
        let kured_holders = crate::kured::run_holders(cluster.client().await).await;
        let end = End {
            nodes,
            instances,
            lock,
            marked,
            kured_holders,
        };
        for task in &self.tasks {
            task.abort();
        }
        let mut checker = self.checker.lock().unwrap();
        checker.finish(&end);
        // What led up to a violation: the observations, as recorded.
        let report = checker.report().map(|report| {
            let events = self.events.lock().unwrap();
            let tail: Vec<String> = events
                .iter()
                .skip(events.len().saturating_sub(40))
                .map(|e| format!("  {e:?}"))
                .collect();
            format!(
                "{report}\ncalls: {}\nlast observations:\n{}",
                calls.join(", "),
                tail.join("\n")
            )
        });
        (report, checker.fewest_available)
    }
}

/// The simulated cloud's terminate and detach calls for `group` that changed something (a
/// repeated termination of an instance already gone does not), as they arrive.
pub fn cloud_calls(
    cluster: &TestCluster,
    group: &str,
) -> impl futures::Stream<Item = InstanceCall> + Send + 'static {
    let prefix = format!("{group}-");
    futures::stream::unfold(cluster.cloud.subscribe(), move |mut feed| {
        let prefix = prefix.clone();
        async move {
            loop {
                let call = match feed.recv().await {
                    Ok(call) => call,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        panic!("observer: missed {n} cloud calls")
                    }
                    Err(_) => return None,
                };
                if !call.target.starts_with(&prefix) || !call.effective {
                    continue;
                }
                let verb = match call.verb.as_str() {
                    "terminate" => Verb::Terminate,
                    "detach" => Verb::Detach,
                    _ => continue,
                };
                let heard = InstanceCall {
                    verb,
                    node: call.target,
                };
                return Some((heard, feed));
            }
        }
    })
}
