//! DaemonSets for tests: one created on a group's nodes and waited for, and its pods watched by
//! node.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};

use crate::cluster::{GROUP_LABEL, TERMINATION_LABEL};
use crate::stateful::{PodHistory, watch_updates};

const WAIT: Duration = Duration::from_secs(120);

/// Creates the DaemonSet `name` running `image` on the nodes of `group` and waits until its
/// `nodes` pods are Ready. Returns the update strategy the server stored, its defaults filled
/// in (a current server adds `maxSurge`): the strategy a run must leave as it found it.
pub async fn create_ds(
    client: &Client,
    ns: &str,
    name: &str,
    group: &str,
    nodes: i32,
    image: &str,
    strategy: Value,
) -> Value {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {
                // Its pods take their grace period (a second) to go, as a slow container does.
                "metadata": {"labels": {"app": name, TERMINATION_LABEL: "after-grace"}},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "nodeSelector": {GROUP_LABEL: group},
                         "containers": [{"name": "main", "image": image}]}
            }
        }
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &set).await.unwrap();
    wait_ds(&api, name, nodes).await;
    serde_json::to_value(created).unwrap()["spec"]["updateStrategy"].take()
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

/// Watches the pods labelled `app=<app>` on `nodes` nodes for the move to `image`, by node.
pub fn watch_nodes(
    client: &Client,
    ns: &str,
    app: &str,
    nodes: usize,
    image: &str,
) -> Arc<Mutex<PodHistory>> {
    watch_updates(client, ns, app, nodes, image, |p| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default()
    })
}
