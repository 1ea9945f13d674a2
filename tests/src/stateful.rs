//! StatefulSets for tests: one created and waited for; and a pod watcher (for DaemonSets too)
//! that records the order pods were updated in, how many were unavailable at once, and whether
//! any was updated twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::{GROUP_LABEL, TERMINATION_LABEL};

const WAIT: Duration = Duration::from_secs(120);

/// Creates the StatefulSet `name` running `image` on the nodes of the group named as its
/// namespace `ns` (each test adds its own: another test's nodes may go away under its pods,
/// which the controller would then start again) and waits until its `replicas` pods are
/// Ready. Returns the update strategy the server stored, its defaults filled in (a current
/// server adds `maxUnavailable`): the strategy a run must leave as it found it.
pub async fn create_sts(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
    image: &str,
    strategy: Value,
) -> Value {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {
                // Its pods take their grace period (a second) to go, as a slow container does.
                "metadata": {"labels": {"app": name, TERMINATION_LABEL: "after-grace"}},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "nodeSelector": {GROUP_LABEL: ns},
                         "containers": [{"name": "main", "image": image}]}
            }
        }
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &set).await.unwrap();
    wait_all_on(&api, name, replicas).await;
    serde_json::to_value(created).unwrap()["spec"]["updateStrategy"].take()
}

/// Waits until every pod of `name` is Ready on its update revision, as its controller says.
pub async fn wait_all_on(api: &Api<StatefulSet>, name: &str, n: i32) {
    // Not currentRevision: an OnDelete StatefulSet's does not move.
    let done = move |obj: Option<&StatefulSet>| {
        obj.is_some_and(|o| {
            let generation = o.metadata.generation;
            o.status.as_ref().is_some_and(|s| {
                s.observed_generation >= generation
                    && s.ready_replicas == Some(n)
                    && s.updated_replicas == Some(n)
            })
        })
    };
    tokio::time::timeout(WAIT, await_condition(api.clone(), name, done))
        .await
        .unwrap_or_else(|_| panic!("{name} did not get {n} ready updated pods within {WAIT:?}"))
        .unwrap();
}

pub fn image_of(pod: &Pod) -> &str {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref()
        .unwrap_or_default()
}

/// Watches the pods labelled `app=<app>` for the move to `image`, one per name.
pub fn watch_pods(
    client: &Client,
    ns: &str,
    app: &str,
    replicas: usize,
    image: &str,
) -> Arc<Mutex<PodHistory>> {
    watch_updates(client, ns, app, replicas, image, |p| p.name_any())
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What a pod watcher saw from its start, by the key it watches (a pod's name, a node).
#[derive(Default, Debug, Clone)]
pub struct PodHistory {
    /// The most of the `expected` keys without a Ready pod at once.
    pub most_unavailable: usize,
    /// Keys in the order they first had a Ready pod of the new image.
    pub updated: Vec<String>,
    /// The uids of the new image's pods under each key, each with its node: one, unless it
    /// was updated twice.
    pub new_uids: BTreeMap<String, BTreeSet<String>>,
}

impl PodHistory {
    /// Whether some key ran the new image under two uids.
    pub fn updated_twice(&self) -> bool {
        self.new_uids.values().any(|uids| uids.len() > 1)
    }
}

/// Watches the pods labelled `app=<app>`, each under `key(pod)` (of `expected` keys), for the
/// move to `image`.
pub fn watch_updates(
    client: &Client,
    ns: &str,
    app: &str,
    expected: usize,
    image: &str,
    key: fn(&Pod) -> String,
) -> Arc<Mutex<PodHistory>> {
    let seen = Arc::new(Mutex::new(PodHistory::default()));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let record = seen.clone();
    let image = image.to_string();
    tokio::spawn(async move {
        // Per pod uid: its key and whether it is Ready.
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
                    let at = key(&p);
                    let uid = p.uid().unwrap_or_default();
                    if image_of(&p) == image && ready(&p) {
                        if !seen.updated.contains(&at) {
                            seen.updated.push(at.clone());
                        }
                        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                        seen.new_uids
                            .entry(at.clone())
                            .or_default()
                            .insert(format!("{uid} on {}", node.unwrap_or("no node")));
                    }
                    up.insert(uid, (at, ready(&p)));
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
                up.values().filter(|(_, r)| *r).map(|(k, _)| k).collect();
            seen.most_unavailable = seen
                .most_unavailable
                .max(expected.saturating_sub(covered.len()));
        }
    });
    seen
}
