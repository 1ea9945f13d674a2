//! kured, as the tests play it: a DaemonSet that runs kured's image (its pods run nowhere) and
//! carries kured's reboot lock, written in the format kured's own lock code writes. kured itself
//! does not run: it reboots machines.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// kured's DaemonSet and the lock's place (`kube-system/kured`, kured's defaults).
pub const KURED: &str = "kured";
/// kured's default lock annotation.
pub const LOCK: &str = "weave.works/kured-node-lock";

/// kured's DaemonSet, made on first use.
pub async fn daemon_set(client: Client) -> Api<DaemonSet> {
    let api: Api<DaemonSet> = Api::namespaced(client, "kube-system");
    if api.get_opt(KURED).await.unwrap().is_none() {
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": KURED},
            "spec": {"selector": {"matchLabels": {"name": KURED}},
                     "template": {"metadata": {"labels": {"name": KURED}},
                                  "spec": {"nodeSelector": {"rollout-ext.test/nowhere": "true"},
                                           "containers": [{"name": "kured", "image": "ghcr.io/kubereboot/kured:1.17.1",
                                                           "command": ["/usr/bin/kured"]}]}}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &ds).await.unwrap();
    }
    api
}

/// Takes kured's lock for `node` as kured does (a single lock, no TTL); `None` lets it go.
pub async fn hold_for(client: Client, node: Option<&str>) {
    hold_with_ttl(client, node, Duration::ZERO).await
}

/// Takes kured's lock for `node` from now for `ttl` (kured's `--lock-ttl`; zero for as long as
/// it is there); `None` lets it go.
pub async fn hold_with_ttl(client: Client, node: Option<&str>, ttl: Duration) {
    let value = node.map(|node| {
        json!({"nodeID": node, "metadata": {"unschedulable": false},
               "created": jiff::Timestamp::now().to_string(), "TTL": ttl.as_nanos() as u64})
        .to_string()
    });
    let patch = json!({"metadata": {"annotations": {LOCK: value}}});
    daemon_set(client)
        .await
        .patch(KURED, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The lock as it is now, parsed; `None` when no one holds it.
pub async fn lock(client: Client) -> Option<Value> {
    let ds = daemon_set(client).await.get(KURED).await.unwrap();
    let value = ds.metadata.annotations?.get(LOCK)?.clone();
    Some(serde_json::from_str(&value).expect("the lock is JSON"))
}

/// The holders of kured's lock that are runs (`rollout-ext/…`), when kured's DaemonSet is there.
pub async fn run_holders(client: Client) -> Vec<String> {
    let api: Api<DaemonSet> = Api::namespaced(client, "kube-system");
    let Some(ds) = api.get_opt(KURED).await.unwrap() else {
        return Vec::new();
    };
    let Some(value) = ds.metadata.annotations.and_then(|a| a.get(LOCK).cloned()) else {
        return Vec::new();
    };
    let lock: Value = serde_json::from_str(&value).expect("the lock is JSON");
    let holders = match lock["locks"].as_array() {
        Some(locks) => locks.clone(),
        None => vec![lock],
    };
    (holders.iter())
        .filter_map(|h| h["nodeID"].as_str())
        .filter(|id| id.starts_with("rollout-ext/"))
        .map(String::from)
        .collect()
}
