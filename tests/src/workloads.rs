//! Workloads for tests: a namespace, a ReplicaSet pinned to a group's nodes, and a budget over
//! its pods.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// Creates namespace `name`.
pub async fn create_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// A ReplicaSet whose pods may only run on nodes of `group`.
pub async fn replica_set(
    client: &Client,
    group: &str,
    name: &str,
    replicas: i32,
) -> Api<ReplicaSet> {
    let spec = json!({"nodeSelector": {"kops.k8s.io/instancegroup": group}});
    replica_set_with(client, group, name, replicas, json!({}), spec).await
}

/// A ReplicaSet `name` in `namespace` whose pods carry `app: name`, the pod `metadata` given
/// (more labels, annotations) and the pod `spec` given (where they run, their priority), once
/// its pods are Ready.
pub async fn replica_set_with(
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i32,
    metadata: serde_json::Value,
    spec: serde_json::Value,
) -> Api<ReplicaSet> {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let mut template = json!({"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1"}]}});
    merge(&mut template["metadata"], metadata);
    merge(&mut template["spec"], spec);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}
    }))
    .unwrap();
    api.create(&PostParams::default(), &rs).await.unwrap();
    let ready = move |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0)
            == replicas
    };
    tokio::time::timeout(WAIT, await_condition(api.clone(), name, ready))
        .await
        .expect("the replica set becomes ready")
        .unwrap();
    api
}

/// Adds `extra`'s keys into `into`, recursively for objects (labels merge with labels).
fn merge(into: &mut serde_json::Value, extra: serde_json::Value) {
    match (into, extra) {
        (serde_json::Value::Object(into), serde_json::Value::Object(extra)) => {
            for (key, value) in extra {
                merge(into.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (into, extra) => *into = extra,
    }
}

/// A PodDisruptionBudget `web` over the `pods` pods `app=web` of `namespace` that allows no
/// disruption, once the disruption controller has computed its status.
pub async fn blocking_budget(
    client: &Client,
    namespace: &str,
    version: &str,
    pods: i32,
) -> Api<DynamicObject> {
    budget(client, namespace, version, pods, 0).await
}

/// A PodDisruptionBudget `web` over the `pods` pods `app=web` of `namespace` with
/// `maxUnavailable`, once the disruption controller has computed its status.
pub async fn budget(
    client: &Client,
    namespace: &str,
    version: &str,
    pods: i32,
    max_unavailable: i32,
) -> Api<DynamicObject> {
    let pdbs = budgets(client, namespace, version);
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("policy/{version}"), "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let computed = |p: Option<&DynamicObject>| {
        p.is_some_and(|p| {
            p.data["status"]["expectedPods"] == pods
                && p.data["status"]["observedGeneration"] == p.metadata.generation.unwrap_or(0)
        })
    };
    tokio::time::timeout(WAIT, await_condition(pdbs.clone(), "web", computed))
        .await
        .expect("the budget's status is computed")
        .unwrap();
    pdbs
}

/// The PodDisruptionBudgets of `namespace`, in the server's policy API `version`.
pub fn budgets(client: &Client, namespace: &str, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", version, "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// One outdated node of `group`, running two pods `web` (in namespace `group`) under a budget
/// that lets none of them go; returns the budgets' API, to relax it.
pub async fn blocked_group(
    cluster: &crate::cluster::TestCluster,
    group: &str,
) -> Api<DynamicObject> {
    cluster.outdated_group(group, 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, group).await;
    replica_set(&client, group, "web", 2).await;
    let version = cluster.live().await.policy_version().await.unwrap();
    blocking_budget(&client, group, version, 2).await
}
