//! The Karpenter stand-in against the real control plane: deleting a NodeClaim drains and removes
//! its node, and its pods, Pending for want of room, get a new NodeClaim whose node takes them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use rollout_ext_e2e::cluster::{
    NODEPOOL_LABEL, NodeClaimDeletion, TERMINATION_FINALIZER, TestCluster, nodeclaims, nodepools,
};
use rollout_ext_e2e::workloads::create_namespace;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);
const POOL: &str = "karp-standin";

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} within {WAIT:?}"))
}

/// A Deployment of `replicas` pods for the pool, each asking 3 of a node's 8 CPUs: two fit on a
/// node.
async fn deployment(client: &Client, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), POOL);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {NODEPOOL_LABEL: POOL},
                                       "terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                                       "resources": {"requests": {"cpu": "3"}}}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &deployment)
        .await
        .unwrap();
}

/// How many of `pods` that are Ready and not terminating each node runs.
fn ready_per_node(pods: &[Arc<Pod>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let ready = (pod.status.as_ref().and_then(|s| s.conditions.as_ref()))
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if let (Some(node), true) = (node, ready) {
            *counts.entry(node).or_default() += 1;
        }
    }
    counts
}

/// Watches the namespace's pods until `done` holds of their Ready pods per node; returns those.
async fn until_ready(
    client: &Client,
    done: impl Fn(&BTreeMap<String, usize>) -> bool,
) -> BTreeMap<String, usize> {
    let (store, writer) = reflector::store();
    let api: Api<Pod> = Api::namespaced(client.clone(), POOL);
    let mut events = watcher(api, watcher::Config::default())
        .reflect(writer)
        .boxed();
    let watching = async {
        while let Some(event) = events.next().await {
            event.unwrap();
            let counts = ready_per_node(&store.state());
            if store.wait_until_ready().now_or_never().is_some() && done(&counts) {
                return counts;
            }
        }
        panic!("the pod watch ended");
    };
    within("the pods are placed", watching).await
}

fn condition(claim: &DynamicObject, type_: &str) -> serde_json::Value {
    let conditions = claim.data["status"]["conditions"].as_array().unwrap();
    let found = conditions.iter().find(|c| c["type"] == type_);
    found.unwrap_or_else(|| panic!("{type_} in {conditions:?}"))["status"].clone()
}

#[tokio::test]
async fn a_deleted_nodeclaim_is_drained_and_its_pending_pods_get_a_new_one() {
    let cluster = TestCluster::shared();
    let karpenter = &cluster.karpenter;
    let client = cluster.client().await;
    let labels = BTreeMap::from([("team".to_string(), "web".to_string())]);
    karpenter.create_pool(POOL, labels, None).await.unwrap();
    let nodes = karpenter.add_nodes(POOL, 2, "v1.19.7").await.unwrap();
    karpenter.set_version(POOL, "v1.20.2");
    create_namespace(&client, POOL).await;
    deployment(&client, 4).await;
    let two_each: BTreeMap<String, usize> = nodes.iter().map(|n| (n.clone(), 2)).collect();
    until_ready(&client, |counts| *counts == two_each).await;
    assert!(karpenter.launched().is_empty(), "nothing was pending");

    // What the stand-in wrote, as Karpenter would.
    let claims = nodeclaims(&client);
    let old_claim = nodes[0].strip_suffix("-node").unwrap();
    let claim = claims.get(old_claim).await.unwrap();
    assert_eq!(claim.labels()[NODEPOOL_LABEL], POOL);
    assert_eq!(claim.labels()["team"], "web");
    assert_eq!(claim.finalizers(), [TERMINATION_FINALIZER]);
    let owner = &claim.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("NodePool", POOL)
    );
    assert_eq!(claim.data["spec"]["nodeClassRef"]["kind"], "KWOKNodeClass");
    let status = &claim.data["status"];
    assert_eq!(status["providerID"], format!("kwok-sim://{old_claim}"));
    assert_eq!(status["nodeName"], nodes[0]);
    for type_ in ["Launched", "Registered", "Initialized"] {
        assert_eq!(condition(&claim, type_), "True", "{type_}");
    }
    let node = Api::<Node>::all(client.clone())
        .get(&nodes[0])
        .await
        .unwrap();
    let node_labels = node.labels();
    assert_eq!(node_labels[NODEPOOL_LABEL], POOL);
    assert_eq!(node_labels["karpenter.sh/initialized"], "true");
    assert_eq!(node_labels["team"], "web");
    assert!(!node_labels.contains_key("kops.k8s.io/instancegroup"));
    let node_spec = node.spec.as_ref().unwrap();
    assert_eq!(
        node_spec.provider_id.as_deref(),
        Some(format!("kwok-sim://{old_claim}").as_str())
    );
    let node_info = node.status.as_ref().unwrap().node_info.as_ref().unwrap();
    assert_eq!(node_info.kubelet_version, "v1.19.7");
    assert_eq!(node.owner_references()[0].name, old_claim);

    let mut deletions = karpenter.subscribe();
    claims
        .delete(old_claim, &DeleteParams::default())
        .await
        .unwrap();
    let seen = within("the deletion is seen", deletions.recv())
        .await
        .unwrap();
    let expected = NodeClaimDeletion {
        nodeclaim: old_claim.to_string(),
        node: Some(nodes[0].clone()),
    };
    assert_eq!(seen, expected);
    let gone = |o: Option<&Node>| o.is_none();
    let node_api = Api::<Node>::all(client.clone());
    within("the node goes", await_condition(node_api, &nodes[0], gone))
        .await
        .unwrap();
    let released = |o: Option<&DynamicObject>| o.is_none();
    within(
        "the finalizer is removed",
        await_condition(claims.clone(), old_claim, released),
    )
    .await
    .unwrap();
    assert!(karpenter.deletions().contains(&expected));

    // The two evicted pods fit on no node left: one new NodeClaim takes them.
    let after = until_ready(&client, |counts| counts.values().sum::<usize>() == 4).await;
    let launched = karpenter.launched();
    assert_eq!(launched.len(), 1, "one new NodeClaim: {launched:?}");
    let new_node = format!("{}-node", launched[0]);
    assert_eq!(
        after,
        BTreeMap::from([(nodes[1].clone(), 2), (new_node.clone(), 2)]),
    );
    let node = Api::<Node>::all(client.clone())
        .get(&new_node)
        .await
        .unwrap();
    let version = &node.status.unwrap().node_info.unwrap().kubelet_version;
    assert_eq!(version, "v1.20.2", "the pool's current version");
    let claim = claims.get(&launched[0]).await.unwrap();
    assert_eq!(condition(&claim, "Initialized"), "True");

    let two = |p: Option<&DynamicObject>| p.is_some_and(|p| p.data["status"]["nodes"] == 2);
    within(
        "the pool counts its nodes",
        await_condition(nodepools(&client), POOL, two),
    )
    .await
    .unwrap();
    let pool = nodepools(&client).get(POOL).await.unwrap();
    assert_eq!(
        pool.data["spec"]["disruption"]["budgets"],
        json!([{"nodes": "10%"}])
    );
}
