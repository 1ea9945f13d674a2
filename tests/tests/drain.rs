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
use rollout_ext_e2e::workloads::{
    blocking_budget, budget, create_namespace, replica_set, replica_set_with,
};
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

/// Collects events and wakes a waiter at the first event it awaits.
struct Awaited {
    events: Collect,
    happened: tokio::sync::Notify,
    awaited: Box<dyn Fn(&Event) -> bool + Send + Sync>,
}

impl Awaited {
    fn new(awaited: impl Fn(&Event) -> bool + Send + Sync + 'static) -> Arc<Awaited> {
        Arc::new(Awaited {
            events: Collect::default(),
            happened: tokio::sync::Notify::new(),
            awaited: Box::new(awaited),
        })
    }

    /// A first refused eviction.
    fn first_block() -> Arc<Awaited> {
        Awaited::new(|e| matches!(e, Event::EvictionBlocked { .. }))
    }
}

impl Reporter for Awaited {
    fn report(&self, event: Event) {
        if (self.awaited)(&event) {
            self.happened.notify_one();
        }
        self.events.report(event);
    }
}

/// Starts draining `node` in the background and returns once a budget holds it.
async fn held_drain(
    live: &Cluster,
    node: &str,
    version: &'static str,
    watcher: &Arc<Awaited>,
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
    tokio::time::timeout(WAIT, watcher.happened.notified())
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
    let watcher = Awaited::first_block();
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
    let watcher = Awaited::first_block();
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

/// The pods of one side of the sidecar comparison, all with a sidecar (an init container that
/// restarts Always, Kubernetes 1.29+), pinned to the node of `group` (its namespace): a
/// ReplicaSet, a ReplicaSet whose pods keep an emptyDir, a DaemonSet, and a pod of no controller.
async fn sidecar_workloads(client: &Client, group: &str) {
    let sidecar = json!([{"name": "shipper", "image": "registry.invalid/shipper:1", "restartPolicy": "Always"}]);
    let pinned =
        json!({"nodeSelector": {"kops.k8s.io/instancegroup": group}, "initContainers": sidecar});
    replica_set_with(client, group, "web", 2, json!({}), pinned.clone()).await;
    let mut cache = pinned.clone();
    cache["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    replica_set_with(client, group, "cache", 1, json!({}), cache).await;
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"nodeSelector": {"kops.k8s.io/instancegroup": group},
                                       "initContainers": sidecar,
                                       "containers": [{"name": "main", "image": "registry.invalid/agent:1"}]}}}
    }))
    .unwrap();
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), group)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let mut solo = pinned;
    solo["containers"] = json!([{"name": "sh", "image": "registry.invalid/sh:1"}]);
    let solo: Pod = serde_json::from_value(
        json!({"metadata": {"name": "solo", "labels": {"app": "solo"}}, "spec": solo}),
    )
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), group);
    pods.create(&PostParams::default(), &solo).await.unwrap();
    let running = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            == Some("Running")
    };
    tokio::time::timeout(WAIT, await_condition(pods, "solo", running))
        .await
        .expect("the pod of no controller runs")
        .unwrap();
    let ds_ready = |d: Option<&k8s_openapi::api::apps::v1::DaemonSet>| {
        d.and_then(|d| d.status.as_ref())
            .is_some_and(|s| s.number_ready == 1)
    };
    let sets = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), group);
    tokio::time::timeout(WAIT, await_condition(sets, "agent", ds_ready))
        .await
        .expect("the DaemonSet's pod runs")
        .unwrap();
}

/// The apps of the pods on `node` (of namespace `group`), sorted: what a drain left there.
async fn apps_on(client: &Client, group: &str, node: &str) -> Vec<String> {
    let mut apps: Vec<String> = (pods_on(client, group, node).await.iter())
        .map(|p| p.labels()["app"].clone())
        .collect();
    apps.sort();
    apps
}

/// A node whose pods carry sidecars drains as the real `kubectl drain` of the installed kubectl
/// drains a twin node: both refuse while a pod of no controller is there (evicting nothing),
/// then both evict the ReplicaSets' pods (the emptyDir's too, as told) and leave the DaemonSet's.
#[tokio::test]
async fn a_node_with_sidecar_pods_drains_as_kubectl_drain_drains_it() {
    let cluster = TestCluster::shared();
    let (client, live, ours) = setup("side-ours", 1).await;
    let (_, _, theirs) = setup("side-kubectl", 1).await;
    sidecar_workloads(&client, "side-ours").await;
    sidecar_workloads(&client, "side-kubectl").await;
    let version = live.policy_version().await.unwrap();
    let options = DrainOptions {
        delete_emptydir_data: true,
        ..Default::default()
    };
    let kubectl_drain = |node: &str| {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args([
                "drain",
                node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=60s",
            ])
            .output()
            .expect("kubectl runs")
    };
    let everything = ["agent", "cache", "solo", "web", "web"];

    // The pod of no controller: both refuse, naming it, and evict nothing.
    let reporter = Collect::default();
    live.cordon(&ours[0], cordon(), false, &reporter)
        .await
        .unwrap();
    let err = live
        .drain(
            &ours[0],
            &settings(version, WAIT, options.clone()),
            &reporter,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DrainError::Refused { pods, .. } if pods.len() == 1 && pods[0].contains("side-ours/solo")),
        "{err}"
    );
    let out = kubectl_drain(&theirs[0]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("side-kubectl/solo"),
        "{stderr}"
    );
    assert_eq!(apps_on(&client, "side-ours", &ours[0]).await, everything);
    assert_eq!(
        apps_on(&client, "side-kubectl", &theirs[0]).await,
        everything
    );

    // Without it: both leave the DaemonSet's pod and nothing else.
    for group in ["side-ours", "side-kubectl"] {
        Api::<Pod>::namespaced(client.clone(), group)
            .delete("solo", &kube::api::DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    live.drain(&ours[0], &settings(version, WAIT, options), &reporter)
        .await
        .expect("our drain finishes");
    let out = kubectl_drain(&theirs[0]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = apps_on(&client, "side-kubectl", &theirs[0]).await;
    assert_eq!(
        left,
        ["agent"],
        "kubectl drain left the DaemonSet's pod only"
    );
    assert_eq!(apps_on(&client, "side-ours", &ours[0]).await, left);
    let evicted = (reporter.events().iter())
        .filter(|e| matches!(e, Event::Evicted { .. }))
        .count();
    assert_eq!(evicted, 3, "the two web pods and the cache pod");
}

/// While it exists, the API server refuses to delete pods labelled `hold: "true"` in namespaces
/// labelled `hold-pods: <namespace>`: a namespace whose deletion cannot reach a pod yet.
async fn hold_pods_of(client: &Client, namespace: &str) -> impl AsyncFnOnce() {
    use kube::api::DeleteParams;
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": format!("hold-pods-{namespace}")},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                     "operations": ["DELETE"], "resources": ["pods"]}]},
                 "validations": [{"expression": "!has(oldObject.metadata.labels) || !('hold' in oldObject.metadata.labels)",
                                  "message": "held by the test"}]}
    }))
    .unwrap();
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": format!("hold-pods-{namespace}")},
        "spec": {"policyName": format!("hold-pods-{namespace}"), "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"hold-pods": namespace}}}}
    }))
    .unwrap();
    let resource = |kind: &str| {
        let gvk = kube::api::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        Api::<DynamicObject>::all_with(client.clone(), &kube::api::ApiResource::from_gvk(&gvk))
    };
    let (policies, bindings) = (
        resource("ValidatingAdmissionPolicy"),
        resource("ValidatingAdmissionPolicyBinding"),
    );
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"hold-pods": namespace}}})),
        )
        .await
        .unwrap();
    // The policy is enforced once the API server has loaded it: a held pod's deletion is
    // refused (tried on a pod of no node, made for it).
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {"name": "hold-probe", "labels": {"hold": "true"}},
        "spec": {"nodeSelector": {"no-such-node": "x"}, "containers": [{"name": "c", "image": "registry.invalid/c:1"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.create(&PostParams::default(), &probe).await.unwrap();
    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let enforced = tokio::time::timeout(WAIT, async {
        while pods.delete("hold-probe", &dry).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    enforced.await.expect("the API server enforces the policy");
    let name = format!("hold-pods-{namespace}");
    async move || {
        bindings
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        policies
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        // Released once the API server has unloaded it: the probe's deletion is allowed.
        let released = tokio::time::timeout(WAIT, async {
            while pods.delete("hold-probe", &dry).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        released.await.expect("the API server lets the policy go");
    }
}

/// An eviction in a namespace being deleted, as README says: a pod the deletion has not reached
/// stops the drain at once, naming the namespace (the server's 403 NamespaceTerminating is not
/// retried); a pod it has reached is waited for until it is gone, as `kubectl drain` does.
#[tokio::test]
async fn an_eviction_in_a_namespace_being_deleted_stops_or_waits_as_the_pod_says() {
    let cluster = TestCluster::shared();
    let (client, live, nodes) = setup("ns-gone", 1).await;
    let version = live.policy_version().await.unwrap();
    let held = json!({"labels": {"hold": "true"}});
    let pinned = json!({"nodeSelector": {"kops.k8s.io/instancegroup": "ns-gone"}});
    replica_set_with(&client, "ns-gone", "kept", 1, held, pinned).await;
    let release = hold_pods_of(&client, "ns-gone").await;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    namespaces
        .delete("ns-gone", &Default::default())
        .await
        .unwrap();
    let terminating = |n: Option<&k8s_openapi::api::core::v1::Namespace>| {
        n.and_then(|n| n.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            == Some("Terminating")
    };
    tokio::time::timeout(WAIT, await_condition(namespaces, "ns-gone", terminating))
        .await
        .unwrap()
        .unwrap();
    let kept = pods_on(&client, "ns-gone", &nodes[0]).await;
    assert_eq!(kept.len(), 1, "the held pod stays, not being deleted");

    let reporter = Collect::default();
    live.cordon(&nodes[0], cordon(), false, &reporter)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = live
        .drain(
            &nodes[0],
            &settings(version, WAIT, DrainOptions::default()),
            &reporter,
        )
        .await
        .unwrap_err();
    let pod = format!("ns-gone/{}", kept[0].name_any());
    assert!(
        matches!(&err, DrainError::NamespaceTerminating { namespace, pod: p, .. } if namespace == "ns-gone" && *p == pod),
        "{err}"
    );
    assert!(
        started.elapsed() < WAIT / 2,
        "refused at once, not after the drain's timeout"
    );

    // The deletion reaches the pod while its node's kubelet is stopped: the pod stays
    // terminating, and the drain waits for it until the kubelet is back and it is gone.
    cluster.nodes.set_ready(&nodes[0], false).await.unwrap();
    release().await;
    Api::<Pod>::namespaced(client.clone(), "ns-gone")
        .delete(&kept[0].name_any(), &Default::default())
        .await
        .unwrap();
    let waiting = {
        let pod = pod.clone();
        Awaited::new(
            move |e| matches!(e, Event::Warning { message } if message.contains("is being deleted and pod") && message.contains(&pod)),
        )
    };
    let on_node = ListParams::default().fields(&format!("spec.nodeName={}", nodes[0]));
    let drain = {
        let (live, node, waiting) = (live.clone(), nodes[0].clone(), waiting.clone());
        let pods = Api::<Pod>::namespaced(client.clone(), "ns-gone");
        tokio::spawn(async move {
            let settings = settings(version, WAIT, DrainOptions::default());
            let drained = live.drain(&node, &settings, waiting.as_ref()).await;
            // What was on the node when the drain returned, terminating pods too.
            let left = pods.list(&on_node).await.unwrap().items;
            (
                drained,
                left.iter().map(|p| p.name_any()).collect::<Vec<_>>(),
            )
        })
    };
    tokio::time::timeout(WAIT, waiting.happened.notified())
        .await
        .expect("the drain says it waits for the pod the deletion reached");
    cluster.nodes.set_ready(&nodes[0], true).await.unwrap();
    let (drained, left) = tokio::time::timeout(WAIT, drain)
        .await
        .expect("the drain finishes once the pod is gone")
        .unwrap();
    drained.expect("the drain succeeds");
    assert!(left.is_empty(), "the drain returned before {left:?} went");
    let events = waiting.events.events();
    assert!(
        !events.iter().any(|e| matches!(e, Event::Evicted { .. })),
        "{events:?}"
    );
}
