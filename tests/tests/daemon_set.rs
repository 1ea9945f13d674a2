//! `rolling-update ds/NAME` on the real test bed: the controller-manager's DaemonSet
//! controller starts a new pod on each node whose old one the plugin deleted, in the order the
//! zone-spread hook gives, and a pod watcher checks the unavailability budget.

use std::collections::BTreeSet;
use std::process::Command;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::Client;
use kube::api::{Api, ListParams};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::daemon::{create_ds, wait_ds, watch_nodes};
use rollout_ext_e2e::stateful::image_of;
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{
    described as text, events_named as events, output as run, plugin_binary, rolling_update,
    wasm_module,
};

fn plugin(cluster: &TestCluster, ns: &str, args: &[&str]) -> Command {
    rolling_update(&cluster.kubeconfig, ns, args)
}
use serde_json::{Value, json};

const V1: &str = "registry.invalid/agent:1";
const V2: &str = "registry.invalid/agent:2";
const STRATEGY: &str = "rollout-ext.io/original-update-strategy";

/// `nodes` simulated nodes of group `ns`, named `ns-<zone><i>`, `per_zone` in each of `zones`.
async fn setup(cluster: &TestCluster, ns: &str, zones: &[&str], per_zone: usize) -> Client {
    let client = cluster.client().await;
    for zone in zones {
        for i in 1..=per_zone {
            let spec = NodeSpec::new(&format!("{ns}-{zone}{i}"), ns).zone(&format!("zone-{zone}"));
            cluster.nodes.add(spec).await.unwrap();
        }
    }
    create_namespace(&client, ns).await;
    client
}

async fn get(client: &Client, ns: &str, name: &str) -> Value {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

/// The image of each live pod of `app`, by node.
async fn images(client: &Client, ns: &str, app: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .unwrap()
                .node_name
                .clone()
                .unwrap_or_default();
            (node, image_of(p).to_string())
        })
        .collect();
    out.sort();
    out
}

fn zone_spread(dir: &std::path::Path) -> String {
    std::fs::copy(wasm_module("zone-spread"), dir.join("zone-spread.wasm")).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: zone-spread, module: zone-spread.wasm, config: {maxPerZone: 1}}\n",
    )
    .unwrap();
    policy.to_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn six_nodes_in_three_zones_roll_two_at_a_time_in_zone_spread_order() {
    let cluster = TestCluster::shared();
    let ns = "ds-zones";
    let client = setup(cluster, ns, &["a", "b", "c"], 2).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}});
    let original = create_ds(&client, ns, "agent", ns, 6, V1, original).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = zone_spread(dir.path());
    let image = format!("--image={V2}");
    let args = [
        "ds/agent",
        &image,
        "--max-unavailable=2",
        "--policy",
        &policy,
    ];
    let expected = [
        ["ds-zones-a1", "ds-zones-b1"],
        ["ds-zones-c1", "ds-zones-a2"],
        ["ds-zones-b2", "ds-zones-c2"],
    ];

    // The plan: each node running an old pod exactly once, two zones a step.
    let before = get(&client, ns, "agent").await;
    let out = run(plugin(
        cluster,
        ns,
        &[&args[..], &["--dry-run", "-o", "json"]].concat(),
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        plan["target"],
        json!({"kind": "DaemonSet", "name": "agent", "nodes": 6})
    );
    let planned: Vec<Value> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["nodes"].clone())
        .collect();
    assert_eq!(planned, expected.map(|s| json!(s)), "{plan}");
    assert_eq!(plan["steps"][0]["orderedBy"], "hook/zone-spread");
    let out = run(plugin(
        cluster,
        ns,
        &[&args[..], &["--dry-run=server"]].concat(),
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server dry run: the API server accepts"),
        "{}",
        text(&out)
    );
    assert_eq!(
        get(&client, ns, "agent").await["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"],
        "a plan changes nothing"
    );

    // The run does what the plan said, within the budget.
    let seen = watch_nodes(&client, ns, "agent", 6, V2);
    let out = run(plugin(cluster, ns, &[&args[..], &["-o", "json"]].concat())).await;
    assert!(out.status.success(), "{}", text(&out));
    let replaced: Vec<Value> = events(&out, "nodes-replacing")
        .iter()
        .map(|e| e["nodes"].clone())
        .collect();
    assert_eq!(replaced, expected.map(|s| json!(s)), "{}", text(&out));
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    wait_ds(&api, "agent", 6).await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        (1..=2).contains(&seen.most_unavailable),
        "at most 2 nodes without a Ready pod, and the watcher saw the update: {seen:?}"
    );
    assert!(!seen.updated_twice(), "{seen:?}");
    assert_eq!(seen.updated.len(), 6, "{seen:?}");
    let after = get(&client, ns, "agent").await;
    assert_eq!(after["spec"]["updateStrategy"], original);
    assert!(
        after["metadata"]["annotations"][STRATEGY].is_null(),
        "{after}"
    );
    assert!(
        images(&client, ns, "agent")
            .await
            .iter()
            .all(|(_, i)| i == V2)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gate_abort_leaves_it_on_delete_and_rollback_restores_template_and_strategy() {
    let cluster = TestCluster::shared();
    let ns = "ds-abort";
    let client = setup(cluster, ns, &["a"], 3).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}});
    let original = create_ds(&client, ns, "probe", ns, 3, V1, original).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = rollout_ext_e2e::aborting_gate_policy(dir.path());
    let policy = policy.to_str().unwrap();
    let image = format!("--image={V2}");

    // One node (the DaemonSet's own maxUnavailable), then the gate aborts: OnDelete, so
    // nothing else moves.
    let out = run(plugin(
        cluster,
        ns,
        &["ds/probe", &image, "--policy", policy],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hook/stopper") && stderr.contains("2 nodes left"),
        "{stderr}"
    );
    let stopped = get(&client, ns, "probe").await;
    assert_eq!(
        stopped["spec"]["updateStrategy"],
        json!({"type": "OnDelete"})
    );
    assert!(!stopped["metadata"]["annotations"][STRATEGY].is_null());
    let now = images(&client, ns, "probe").await;
    assert_eq!(now.iter().filter(|(_, i)| i == V2).count(), 1, "{now:?}");

    // --rollback: the old template on every node, the strategy as it was.
    let out = run(plugin(
        cluster,
        ns,
        &["ds/probe", "--rollback", "-o", "json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(events(&out, "rolled-back").len(), 1, "{}", text(&out));
    let replaced: Vec<Value> = events(&out, "nodes-replacing");
    assert_eq!(
        replaced.len(),
        1,
        "only the updated node goes back: {}",
        text(&out)
    );
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    wait_ds(&api, "probe", 3).await;
    let back = get(&client, ns, "probe").await;
    assert_eq!(back["spec"]["updateStrategy"], original);
    assert!(
        back["metadata"]["annotations"][STRATEGY].is_null(),
        "{back}"
    );
    assert!(
        images(&client, ns, "probe")
            .await
            .iter()
            .all(|(_, i)| i == V1)
    );

    // Requests that cannot work: exit 2, the object as it was.
    let version = back["metadata"]["resourceVersion"].clone();
    for (args, says) in [
        (vec!["ds/probe", "--rollback"], "no update in progress"),
        (vec!["ds/probe", "--image", V1], "nothing to update"),
        (
            vec!["ds/probe", image.as_str(), "--canary=1"],
            "cannot take --canary",
        ),
        (
            vec!["ds/probe", image.as_str(), "--container", "nope"],
            "container \"nope\" not found",
        ),
        (
            vec!["ds/gone", image.as_str()],
            "daemonset \"gone\" not found",
        ),
    ] {
        let out = run(plugin(cluster, ns, &args)).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(
        get(&client, ns, "probe").await["metadata"]["resourceVersion"],
        version
    );
}

#[test]
fn a_plan_from_a_snapshot_names_only_the_nodes_on_an_old_revision() {
    let owner = json!([{"uid": "ds-uid", "controller": true, "kind": "DaemonSet", "name": "agent", "apiVersion": "apps/v1"}]);
    let pod = |node: &str, hash: &str| {
        json!({"kind": "Pod", "metadata": {"name": format!("agent-{node}"), "namespace": "default",
                "labels": {"app": "agent", "controller-revision-hash": hash}, "ownerReferences": owner},
               "spec": {"nodeName": node, "containers": [{"name": "main"}]},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let revision = |hash: &str, number: i64, image: &str| {
        json!({"kind": "ControllerRevision", "apiVersion": "apps/v1", "revision": number,
               "metadata": {"name": format!("agent-{hash}"), "namespace": "default",
                            "labels": {"controller-revision-hash": hash}, "ownerReferences": owner},
               "data": {"spec": {"template": {"$patch": "replace",
                   "metadata": {"labels": {"app": "agent"}},
                   "spec": {"containers": [{"name": "main", "image": image}]}}}}})
    };
    let node = |name: &str, zone: &str| {
        json!({"kind": "Node", "apiVersion": "v1",
               "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let set = json!({
        "kind": "DaemonSet", "apiVersion": "apps/v1",
        "metadata": {"name": "agent", "namespace": "default", "uid": "ds-uid", "generation": 2,
                     "annotations": {STRATEGY: r#"{"type":"RollingUpdate"}"#}},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "main", "image": V2}]}}},
        "status": {"observedGeneration": 2, "desiredNumberScheduled": 4}
    });
    let list = json!({"kind": "List", "apiVersion": "v1", "items": [
        set, revision("old", 1, V1), revision("new", 2, V2),
        node("n1", "z1"), node("n2", "z1"), node("n3", "z2"), node("n4", "z2"),
        pod("n1", "new"), pod("n2", "old"), pod("n3", "old"), pod("n4", "old")]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let plan = |extra: &[&str]| {
        let out = Command::new(plugin_binary())
            .args(["rolling-update", "ds/agent", "--from-snapshot"])
            .arg(&file)
            .args(["-o", "json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let nodes = |plan: &Value| -> Vec<Vec<String>> {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| serde_json::from_value(s["nodes"].clone()).unwrap())
            .collect()
    };
    let image = format!("--image={V2}");
    // Resumed: n1 runs the new revision already; the rest go two at a time.
    let resumed = plan(&[&image, "--max-unavailable=2"]);
    assert_eq!(nodes(&resumed), [vec!["n2", "n3"], vec!["n4"]]);
    let all: BTreeSet<String> = nodes(&resumed).into_iter().flatten().collect();
    assert_eq!(all.len(), 3, "each node once");
    // Rolled back: only n1 goes back.
    let back = plan(&["--rollback"]);
    assert_eq!(nodes(&back), [vec!["n1"]]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_pod_is_down_is_replaced_within_a_budget_of_one() {
    let cluster = TestCluster::shared();
    let ns = "ds-down";
    let client = setup(cluster, ns, &["a"], 2).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}});
    create_ds(&client, ns, "fix", ns, 2, V1, original).await;
    // The pod on the first node fails its readiness probe: the update is the fix.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels("app=fix"))
        .await
        .unwrap();
    let down = list
        .items
        .iter()
        .find(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("ds-down-a1"))
        .unwrap();
    let name = down.metadata.name.clone().unwrap();
    cluster.nodes.set_pod_ready(ns, &name, false).await.unwrap();

    // Its own pod counts once against the budget: the step that replaces it goes.
    let image = format!("--image={V2}");
    let out = run(plugin(cluster, ns, &["ds/fix", &image, "-o", "json"])).await;
    assert!(out.status.success(), "{}", text(&out));
    let replaced: Vec<Value> = events(&out, "nodes-replacing")
        .iter()
        .map(|e| e["nodes"].clone())
        .collect();
    assert_eq!(replaced, [json!(["ds-down-a1"]), json!(["ds-down-a2"])]);
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    wait_ds(&api, "fix", 2).await;
}
