//! The live view on the real test bed: it holds the pods of the nodes it follows and none of
//! the others, resumes after the API server restarts without missing what changed meanwhile,
//! ends a wait at its deadline with the last progress, and says which watch was refused.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rollout_ext::cluster::view::{Deadline, LiveView, WaitError};
use rollout_ext::snapshot::Snapshot;
use rollout_ext_e2e::cluster::{NodeSpec, OPERATOR_TOKEN, OPERATOR_USER, TestCluster};
use rollout_ext_e2e::workloads::{create_namespace, replica_set};
use serde_json::json;

const GROUP_LABEL: &str = "kops.k8s.io/instancegroup";

/// Nodes `<group>-1` and `<group>-2`, and a ReplicaSet `web` of `replicas` pods pinned to them
/// in a namespace of the group's name.
async fn group_with_pods(cluster: &TestCluster, group: &str, replicas: i32) {
    for i in 1..=2 {
        let node = NodeSpec::new(&format!("{group}-{i}"), group);
        cluster.nodes.add(node).await.unwrap();
    }
    let client = cluster.client().await;
    create_namespace(&client, group).await;
    replica_set(&client, group, "web", replicas).await;
}

/// A view of `cluster` that follows the nodes of `group`.
async fn following(cluster: &TestCluster, group: &'static str) -> LiveView {
    let view = LiveView::start(&cluster.live().await).await.unwrap();
    view.follow(move |n| n.labels.get(GROUP_LABEL).map(String::as_str) == Some(group));
    view
}

fn pod_names(snapshot: &Snapshot, namespace: &str) -> Vec<String> {
    let mut names: Vec<String> = (snapshot.pods.iter())
        .filter(|p| p.namespace == namespace)
        .map(|p| p.name.clone())
        .collect();
    names.sort();
    names
}

async fn server_pod_names(client: &kube::Client, namespace: &str) -> Vec<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = (api.list(&ListParams::default()).await.unwrap().items)
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_holds_the_followed_nodes_pods_and_none_of_the_others() {
    let cluster = TestCluster::shared();
    group_with_pods(cluster, "lv-in", 2).await;
    group_with_pods(cluster, "lv-out", 2).await;
    let view = following(cluster, "lv-in").await;
    let snapshot = view.caught_up().await.unwrap();
    assert_eq!(pod_names(&snapshot, "lv-in").len(), 2);
    assert!(
        pod_names(&snapshot, "lv-out").is_empty(),
        "pods of nodes it does not follow are not read"
    );
    let nodes: Vec<&str> = (snapshot.nodes.iter())
        .map(|n| n.name.as_str())
        .filter(|n| n.starts_with("lv-"))
        .collect();
    assert_eq!(
        nodes,
        ["lv-in-1", "lv-in-2", "lv-out-1", "lv-out-2"],
        "every node is"
    );

    // A wait that cannot be met ends at its deadline with what it saw last.
    let never = |s: &Snapshot| match pod_names(s, "lv-in").len() {
        10 => Ok(()),
        n => Err(n),
    };
    match view
        .wait_until(Deadline::Within(Duration::from_millis(500)), never)
        .await
    {
        Err(WaitError::Expired(2)) => {}
        other => panic!("expected the wait to run out having seen 2 pods, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_resumes_after_an_api_server_restart_without_missing_a_change() {
    // Its own cluster: the restart would cut every other test's requests.
    let cluster = Arc::new(TestCluster::start().unwrap());
    group_with_pods(&cluster, "lv", 3).await;
    let view = following(&cluster, "lv").await;
    let client = cluster.client().await;
    assert_eq!(
        pod_names(&view.caught_up().await.unwrap(), "lv"),
        server_pod_names(&client, "lv").await
    );

    // The watches are cut; once the server is back, the cluster changes before the view's
    // watches are open again (they wait for their retries), and the server's watch cache
    // starts afresh, too new for the versions the view had.
    let restarted = cluster.clone();
    tokio::task::spawn_blocking(move || restarted.processes.restart("kube-apiserver").unwrap())
        .await
        .unwrap();
    cluster.ready().await.unwrap();
    let client = cluster.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "lv");
    let gone = server_pod_names(&client, "lv").await.remove(0);
    pods.delete(&gone, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let extra: Pod = serde_json::from_value(json!({
        "metadata": {"name": "extra"},
        "spec": {"nodeName": "lv-2", "containers": [{"name": "main", "image": "registry.invalid/x:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &extra).await.unwrap();
    Api::<Node>::all(client.clone())
        .patch(
            "lv-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();

    let shows_all = |s: &Snapshot| {
        let names = pod_names(s, "lv");
        let cordoned = s.nodes.iter().any(|n| n.name == "lv-1" && n.unschedulable);
        if !names.contains(&gone) && names.contains(&"extra".to_string()) && cordoned {
            Ok(())
        } else {
            Err(names)
        }
    };
    view.wait_until(Deadline::Within(Duration::from_secs(120)), shows_all)
        .await
        .expect("the view shows every change made while its watches were away");
    // And nothing else: once the ReplicaSet has replaced the deleted pod, the view holds the
    // server's pods.
    let replaced = |s: &Snapshot| match pod_names(s, "lv").len() {
        4 => Ok(()),
        n => Err(n),
    };
    view.wait_until(Deadline::Within(Duration::from_secs(60)), replaced)
        .await
        .expect("the replacement pod comes into view");
    assert_eq!(
        pod_names(&view.caught_up().await.unwrap(), "lv"),
        server_pod_names(&client, "lv").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_watch_is_named_and_fails_the_view() {
    let cluster = TestCluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("operator");
    cluster
        .kubeconfig_for(&kubeconfig, OPERATOR_TOKEN, OPERATOR_USER)
        .unwrap();
    let operator = rollout_ext::cluster::Cluster::connect(&rollout_ext::cluster::ConnectOptions {
        kubeconfig: Some(kubeconfig),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = LiveView::start(&operator)
        .await
        .err()
        .expect("a user without rights has no view");
    let message = err.to_string();
    assert!(
        message.contains("forbidden") && message.contains(OPERATOR_USER),
        "{message}"
    );
}
