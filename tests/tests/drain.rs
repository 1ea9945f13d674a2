//! The drain library against the real control plane: managed pods move (the real scheduler
//! places their replacements), DaemonSet pods stay, unmanaged pods stop the drain before anything
//! is evicted, and a PodDisruptionBudget holds it, visibly, until relaxed or until the timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use rollout_ext::cluster::Cluster;
use rollout_ext::cluster::drain::{DrainError, DrainSettings};
use rollout_ext::plan::drain::DrainOptions;
use rollout_ext::progress::{Collect, Event, Reporter};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::workloads::{blocking_budget, budget, create_namespace, replica_set};
use serde_json::json;

/// A cordon as a rotation does it by default (out of external load balancers too).
fn cordon() -> rollout_ext::cluster::drain::Cordon {
    rollout_ext::cluster::drain::Cordon::of(None, &Default::default())
}

const WAIT: Duration = Duration::from_secs(60);

async fn setup(group: &str, nodes: usize) -> (Client, Cluster, Vec<String>) {
    let cluster = TestCluster::shared();
    let mut names = Vec::new();
    for i in 1..=nodes {
        let name = format!("{group}-{i}");
        cluster
            .nodes
            .add(NodeSpec::new(&name, group))
            .await
            .unwrap();
        names.push(name);
    }
    let client = cluster.client().await;
    create_namespace(&client, group).await;
    let live = cluster.live().await;
    (client, live, names)
}

fn settings(live_version: &'static str, timeout: Duration, options: DrainOptions) -> DrainSettings {
    DrainSettings {
        options,
        grace_period: -1,
        timeout,
        policy_version: live_version,
    }
}

/// Makes a node schedulable again, as `kubectl uncordon` does.
async fn uncordon(client: &Client, node: &str) {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
}

async fn pods_on(client: &Client, namespace: &str, node: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    api.list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test]
async fn managed_pods_move_and_daemon_pods_stay() {
    let (client, live, nodes) = setup("drain-move", 2).await;
    let version = live.policy_version().await.unwrap();
    let reporter = Collect::default();
    // Everything starts on the first node.
    live.cordon(&nodes[1], cordon(), false, &reporter)
        .await
        .unwrap();
    let rss = replica_set(&client, "drain-move", "web", 3).await;
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"nodeSelector": {"kops.k8s.io/instancegroup": "drain-move"},
                                       "containers": [{"name": "main", "image": "registry.invalid/agent:1"}]}}}
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), "drain-move")
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "drain-move");
    let config =
        kube::runtime::watcher::Config::default().fields(&format!("spec.nodeName={}", nodes[0]));
    let mut stream = kube::runtime::watcher(pods, config)
        .applied_objects()
        .boxed();
    let agent_on_first = tokio::time::timeout(WAIT, async {
        while let Some(pod) = stream.next().await {
            if pod.unwrap().labels().get("app").map(String::as_str) == Some("agent") {
                return;
            }
        }
    });
    agent_on_first
        .await
        .expect("the DaemonSet runs a pod on the first node");

    // Swap: the second node takes new pods, the first is cordoned and drained.
    uncordon(&client, &nodes[1]).await;
    live.cordon(&nodes[0], cordon(), false, &reporter)
        .await
        .unwrap();
    live.drain(
        &nodes[0],
        &settings(version, WAIT, DrainOptions::default()),
        &reporter,
    )
    .await
    .expect("the drain finishes");

    let left: Vec<String> = pods_on(&client, "drain-move", &nodes[0])
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(
        left.iter().all(|p| p.starts_with("agent-")),
        "only the DaemonSet pod stays: {left:?}"
    );
    assert_eq!(left.len(), 1);
    let ready = |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(3)
    };
    tokio::time::timeout(WAIT, await_condition(rss, "web", ready))
        .await
        .unwrap()
        .unwrap();
    let moved = pods_on(&client, "drain-move", &nodes[1]).await;
    assert_eq!(
        moved.iter().filter(|p| p.labels()["app"] == "web").count(),
        3,
        "the scheduler placed the replacements"
    );

    let events = reporter.events();
    let evicted = events
        .iter()
        .filter(|e| matches!(e, Event::Evicted { .. }))
        .count();
    assert_eq!(evicted, 3);
    assert!(events.iter().any(|e| matches!(e, Event::DrainStarted { pods: 3, skipped, .. } if skipped.len() == 1 && skipped[0].contains("DaemonSet"))));
    assert!(events.contains(&Event::Drained {
        node: nodes[0].clone()
    }));
}

#[tokio::test]
async fn an_unmanaged_pod_stops_the_drain_before_anything_is_evicted() {
    let (client, live, nodes) = setup("drain-bare", 1).await;
    let version = live.policy_version().await.unwrap();
    replica_set(&client, "drain-bare", "web", 2).await;
    let bare: Pod = serde_json::from_value(json!({
        "metadata": {"name": "debug-shell"},
        "spec": {"nodeName": nodes[0], "containers": [{"name": "sh", "image": "registry.invalid/sh:1"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "drain-bare")
        .create(&PostParams::default(), &bare)
        .await
        .unwrap();

    let reporter = Collect::default();
    let err = live
        .drain(
            &nodes[0],
            &settings(version, WAIT, DrainOptions::default()),
            &reporter,
        )
        .await
        .unwrap_err();
    match &err {
        DrainError::Refused { pods, .. } => {
            assert_eq!(pods.len(), 1);
            assert!(
                pods[0].contains("drain-bare/debug-shell") && pods[0].contains("--drain-force"),
                "{err}"
            );
        }
        other => panic!("expected a refusal, got {other}"),
    }
    assert!(reporter.events().is_empty(), "nothing was evicted");
    assert_eq!(pods_on(&client, "drain-bare", &nodes[0]).await.len(), 3);

    let forced = DrainOptions {
        force: true,
        ..Default::default()
    };
    // Cordoned, as a drain expects: the replacements of the web pods have nowhere to go, and
    // the node is left empty.
    live.cordon(&nodes[0], cordon(), false, &reporter)
        .await
        .unwrap();
    live.drain(&nodes[0], &settings(version, WAIT, forced), &reporter)
        .await
        .unwrap();
    assert!(pods_on(&client, "drain-bare", &nodes[0]).await.is_empty());
    assert!(
        reporter
            .events()
            .iter()
            .any(|e| matches!(e, Event::Warning { message } if message.contains("no controller")))
    );
}

/// Collects events and wakes a waiter at the first refused eviction.
#[derive(Default)]
struct FirstBlock {
    events: Collect,
    blocked: tokio::sync::Notify,
}

impl Reporter for FirstBlock {
    fn report(&self, event: Event) {
        if matches!(event, Event::EvictionBlocked { .. }) {
            self.blocked.notify_one();
        }
        self.events.report(event);
    }
}

/// Starts draining `node` in the background and returns once a budget holds it.
async fn held_drain(
    live: &Cluster,
    node: &str,
    version: &'static str,
    watcher: &Arc<FirstBlock>,
) -> tokio::task::JoinHandle<Result<(), DrainError>> {
    let drain = {
        let (live, node, watcher) = (live.clone(), node.to_string(), watcher.clone());
        tokio::spawn(async move {
            live.drain(
                &node,
                &settings(version, WAIT, DrainOptions::default()),
                watcher.as_ref(),
            )
            .await
        })
    };
    tokio::time::timeout(WAIT, watcher.blocked.notified())
        .await
        .expect("a budget holds the drain");
    drain
}

/// Lets the budget allow `max_unavailable` disruptions and waits for the held drain to finish.
async fn relax_and_finish(
    pdbs: &Api<DynamicObject>,
    max_unavailable: i32,
    drain: tokio::task::JoinHandle<Result<(), DrainError>>,
) {
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": max_unavailable}})),
    )
    .await
    .unwrap();
    drain
        .await
        .unwrap()
        .expect("the drain finishes once the budget allows it");
}

#[tokio::test]
async fn a_budget_holds_the_drain_visibly_until_relaxed_or_timed_out() {
    let (client, live, nodes) = setup("drain-pdb", 2).await;
    let version = live.policy_version().await.unwrap();
    let reporter = Collect::default();
    live.cordon(&nodes[1], cordon(), false, &reporter)
        .await
        .unwrap();
    replica_set(&client, "drain-pdb", "web", 2).await;

    let pdbs = blocking_budget(&client, "drain-pdb", version, 2).await;

    // A short timeout: the drain stops, names what is left, and evicted nothing.
    live.cordon(&nodes[0], cordon(), false, &reporter)
        .await
        .unwrap();
    let err = live
        .drain(
            &nodes[0],
            &settings(version, Duration::from_secs(3), DrainOptions::default()),
            &reporter,
        )
        .await
        .unwrap_err();
    match &err {
        DrainError::Timeout { remaining, .. } => assert_eq!(remaining.len(), 2, "{err}"),
        other => panic!("expected a timeout, got {other}"),
    }
    assert_eq!(pods_on(&client, "drain-pdb", &nodes[0]).await.len(), 2);
    let blocked: Vec<String> = reporter
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::EvictionBlocked { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert!(!blocked.is_empty());
    assert!(
        blocked
            .iter()
            .all(|r| r == "blocked by PodDisruptionBudget drain-pdb/web (0 disruptions allowed)"),
        "{blocked:?}"
    );

    // Again with time to spare: relaxing the budget lets the drain through.
    uncordon(&client, &nodes[1]).await;
    let watcher = Arc::new(FirstBlock::default());
    let drain = held_drain(&live, &nodes[0], version, &watcher).await;
    relax_and_finish(&pdbs, 1, drain).await;
    assert!(pods_on(&client, "drain-pdb", &nodes[0]).await.is_empty());
    let evicted = watcher
        .events
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Evicted { .. }))
        .count();
    assert_eq!(evicted, 2);
}

#[tokio::test]
async fn a_pod_bound_to_the_node_while_it_drains_is_drained_too() {
    let (client, live, nodes) = setup("drain-late", 1).await;
    let version = live.policy_version().await.unwrap();
    replica_set(&client, "drain-late", "web", 2).await;
    let pdbs = blocking_budget(&client, "drain-late", version, 2).await;
    let watcher = Arc::new(FirstBlock::default());
    live.cordon(&nodes[0], cordon(), false, watcher.as_ref())
        .await
        .unwrap();
    let drain = held_drain(&live, &nodes[0], version, &watcher).await;

    // While the drain waits, a pod is bound to the cordoned node (as a scheduler acting on a
    // cache that has not seen the cordon yet would). Its controller reference makes it one a
    // drain moves; a ConfigMap as the owner keeps anything from recreating it.
    let owners: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "drain-late");
    let owner = owners
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "late-owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let late: Pod = serde_json::from_value(json!({
        "metadata": {"name": "late", "labels": {"app": "late"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "late-owner",
                                          "uid": owner.uid().unwrap(), "controller": true}]},
        "spec": {"nodeName": nodes[0], "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "drain-late");
    pods.create(&PostParams::default(), &late).await.unwrap();

    relax_and_finish(&pdbs, 2, drain).await;
    assert!(pods_on(&client, "drain-late", &nodes[0]).await.is_empty());
    let events = watcher.events.events();
    assert!(
        events.iter().any(|e| matches!(e, Event::Warning { message }
            if message == "1 pod(s) came to node drain-late-1 while it drained: drain-late/late; draining them too")),
        "{events:?}"
    );
    let evicted: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Evicted { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(evicted.len(), 3, "{evicted:?}");
    assert_eq!(evicted.last(), Some(&"drain-late/late"));
}

#[tokio::test]
async fn a_server_dry_run_reports_refusals_and_changes_nothing() {
    let cluster = TestCluster::shared();
    cluster
        .nodes
        .add(NodeSpec::new("dry-1", "drain-dry").annotation("rollout-ext.io/needs-update", ""))
        .await
        .unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "drain-dry").await;
    replica_set(&client, "drain-dry", "web", 2).await;
    let live = cluster.live().await;
    let version = live.policy_version().await.unwrap();
    blocking_budget(&client, "drain-dry", version, 2).await;

    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(rollout_ext_e2e::plugin_binary())
            .args([
                "nodes",
                "--dry-run=server",
                "--kubeconfig",
                &kubeconfig,
                "--instance-group",
                "drain-dry",
                "-o",
                "json",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refusals: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let refusals = refusals.as_array().unwrap();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    for r in refusals {
        assert_eq!(r["node"], "dry-1");
        assert!(
            r["call"]
                .as_str()
                .unwrap()
                .starts_with("evict drain-dry/web-")
        );
        assert_eq!(
            r["reason"],
            format!("blocked by PodDisruptionBudget drain-dry/web (0 disruptions allowed)")
        );
    }
    // Nothing changed: the node is schedulable and both pods still run on it.
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get("dry-1")
        .await
        .unwrap();
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true));
    assert_eq!(pods_on(&client, "drain-dry", "dry-1").await.len(), 2);
}

#[tokio::test]
async fn a_pod_under_two_budgets_stops_the_drain_at_once_naming_both() {
    let (client, live, nodes) = setup("drain-two", 2).await;
    let version = live.policy_version().await.unwrap();
    let reporter = Collect::default();
    live.cordon(&nodes[1], cordon(), false, &reporter)
        .await
        .unwrap();
    replica_set(&client, "drain-two", "web", 2).await;
    // Two budgets that would each allow a disruption, both selecting the pods.
    let pdbs = budget(&client, "drain-two", version, 2, 1).await;
    let second: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("policy/{version}"), "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-too"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &second).await.unwrap();
    uncordon(&client, &nodes[1]).await;
    live.cordon(&nodes[0], cordon(), false, &reporter)
        .await
        .unwrap();

    // The server's 500 is its answer: not retried for the retry budget (two minutes), nor as a
    // budget's refusal until the drain timeout.
    let long = settings(version, Duration::from_secs(600), DrainOptions::default());
    let drain = live.drain(&nodes[0], &long, &reporter);
    let err = tokio::time::timeout(WAIT, drain)
        .await
        .expect("the drain stops before the retry budget ends")
        .unwrap_err();
    match &err {
        DrainError::MultipleBudgets { budgets, .. } => {
            assert_eq!(budgets, "drain-two/web, drain-two/web-too", "{err}")
        }
        other => panic!("expected a stop naming both budgets, got {other}"),
    }
    assert!(
        err.to_string().contains(
            "is selected by more than one PodDisruptionBudget (drain-two/web, drain-two/web-too)"
        ),
        "{err}"
    );
    assert_eq!(pods_on(&client, "drain-two", &nodes[0]).await.len(), 2);
    assert!(
        !reporter
            .events()
            .iter()
            .any(|e| matches!(e, Event::Evicted { .. } | Event::EvictionBlocked { .. })),
        "{:?}",
        reporter.events()
    );
}
