//! DaemonSets for tests: one created on a group's nodes and waited for, and a pod watcher that
//! records how many of its pods were unavailable at once and which nodes got a new pod twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::GROUP_LABEL;
use crate::stateful::image_of;

const WAIT: Duration = Duration::from_secs(120);

/// Creates the DaemonSet `name` running `image` on the nodes of `group` and waits until its
/// `nodes` pods are Ready.
pub async fn create_ds(
    client: &Client,
    ns: &str,
    name: &str,
    group: &str,
    nodes: i32,
    image: &str,
    strategy: Value,
) {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "nodeSelector": {GROUP_LABEL: group},
                         "containers": [{"name": "main", "image": image}]}
            }
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &set).await.unwrap();
    wait_ds(&api, name, nodes).await;
}

/// Waits until each of the `n` nodes of `name` runs a Ready pod of its current template.
pub async fn wait_ds(api: &Api<DaemonSet>, name: &str, n: i32) {
    let done = move |obj: Option<&DaemonSet>| {
        obj.and_then(|s| s.status.as_ref()).is_some_and(|s| {
            s.desired_number_scheduled == n
                && s.number_ready == n
                && s.updated_number_scheduled == Some(n)
        })
    };
    tokio::time::timeout(WAIT, await_condition(api.clone(), name, done))
        .await
        .unwrap_or_else(|_| panic!("{name} did not get {n} ready updated pods within {WAIT:?}"))
        .unwrap();
}

/// What a DaemonSet pod watcher saw from its start.
#[derive(Default, Debug, Clone)]
pub struct NodeHistory {
    /// The most of its nodes without a Ready pod at once.
    pub most_unavailable: usize,
    /// Nodes in the order they first ran a Ready pod of the new image.
    pub updated: Vec<String>,
    /// The uids of the new image's pods each node ran: one, unless a node was updated twice.
    pub new_uids: BTreeMap<String, BTreeSet<String>>,
}

impl NodeHistory {
    pub fn updated_twice(&self) -> bool {
        self.new_uids.values().any(|uids| uids.len() > 1)
    }
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Watches the pods labelled `app=<app>` on `nodes` nodes for the move to `image`.
pub fn watch_nodes(
    client: &Client,
    ns: &str,
    app: &str,
    nodes: usize,
    image: &str,
) -> Arc<Mutex<NodeHistory>> {
    let seen = Arc::new(Mutex::new(NodeHistory::default()));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let record = seen.clone();
    let image = image.to_string();
    tokio::spawn(async move {
        // Per pod uid: its node and whether it is Ready.
        let mut up: BTreeMap<String, (String, bool)> = BTreeMap::new();
        let mut listed = false;
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(event) = events.next().await {
            let mut seen = record.lock().unwrap();
            match event {
                Ok(watcher::Event::Init) => {
                    up.clear();
                    listed = false;
                    continue;
                }
                Ok(watcher::Event::InitDone) => listed = true,
                Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                    let node = p
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_default();
                    let uid = p.uid().unwrap_or_default();
                    if image_of(&p) == image && ready(&p) {
                        if !seen.updated.contains(&node) {
                            seen.updated.push(node.clone());
                        }
                        seen.new_uids
                            .entry(node.clone())
                            .or_default()
                            .insert(uid.clone());
                    }
                    up.insert(uid, (node, ready(&p)));
                }
                Ok(watcher::Event::Delete(p)) => {
                    up.remove(&p.uid().unwrap_or_default());
                }
                Err(_) => continue,
            }
            if !listed {
                continue;
            }
            let covered: BTreeSet<&String> =
                up.values().filter(|(_, r)| *r).map(|(n, _)| n).collect();
            seen.most_unavailable = seen
                .most_unavailable
                .max(nodes.saturating_sub(covered.len()));
        }
    });
    seen
}
