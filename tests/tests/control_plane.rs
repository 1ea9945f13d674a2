//! The test bed, proven: real controllers run workloads on simulated nodes, a PodDisruptionBudget
//! refuses an eviction until relaxed, the simulated cloud replaces instances, the live plan equals
//! the plan of a `kubectl get` snapshot, kubectl finds the plugin, and a killed test leaves no
//! process behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, ReplicationController};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::wait::await_condition;
use rollout_ext::cluster::eviction::Eviction;
use rollout_ext::plan::rolling_update::pods::PodRef;
use rollout_ext::snapshot::Pod;
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, TestCluster};
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{helper_binary, plugin_binary};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// Waits for `condition` on a named object, failing with a clear message after [`WAIT`].
async fn wait_for<K>(api: Api<K>, name: &str, what: &str, condition: impl Fn(&K) -> bool)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let check = move |obj: Option<&K>| obj.is_some_and(&condition);
    tokio::time::timeout(WAIT, await_condition(api, name, check))
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {name}: {what}"))
        .unwrap_or_else(|e| panic!("watching {name}: {e}"));
}

fn template(app: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1"}]}
    })
}

async fn add_nodes(cluster: &TestCluster, group: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 1..=n {
        let name = format!("{group}-{i}");
        cluster
            .nodes
            .add(NodeSpec::new(&name, group).zone(["a", "b"][i % 2]))
            .await
            .unwrap();
        names.push(name);
    }
    names
}

#[tokio::test]
async fn replication_controllers_and_replica_sets_run_on_simulated_nodes() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    add_nodes(cluster, "workloads", 2).await;
    create_namespace(&client, "workloads").await;

    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "workloads");
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "spec": {"replicas": 3, "selector": {"app": "legacy"}, "template": template("legacy")}
    }))
    .unwrap();
    rcs.create(&PostParams::default(), &rc).await.unwrap();

    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "workloads");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "modern"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "modern"}}, "template": template("modern")}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &rs).await.unwrap();

    wait_for(rcs, "legacy", "3 ready replicas", |rc| {
        rc.status.as_ref().and_then(|s| s.ready_replicas) == Some(3)
    })
    .await;
    wait_for(rss, "modern", "2 ready replicas", |rs| {
        rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
}

#[tokio::test]
async fn daemon_set_pods_run_on_every_simulated_node() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let names = add_nodes(cluster, "daemons", 2).await;
    create_namespace(&client, "daemons").await;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "daemons");
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")}
    }))
    .unwrap();
    dss.create(&PostParams::default(), &ds).await.unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "daemons");
    for node in names {
        let ready_on = node.clone();
        let mut stream = kube::runtime::watcher(pods.clone(), Default::default())
            .applied_objects()
            .boxed();
        let found = tokio::time::timeout(WAIT, async {
            while let Some(pod) = stream.next().await {
                let pod = pod.unwrap();
                let on_node =
                    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&ready_on);
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                if on_node && ready {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "a Ready agent pod on {node}");
    }
}

#[tokio::test]
async fn a_budget_refuses_an_eviction_until_it_is_relaxed() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let node = add_nodes(cluster, "guarded", 1).await.remove(0);
    create_namespace(&client, "guarded").await;

    let live = cluster.live().await;
    let version = live.policy_version().await.unwrap();
    assert_eq!(
        version, "v1",
        "a current server serves PodDisruptionBudget and Eviction as policy/v1 only"
    );

    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "guarded");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &rs).await.unwrap();
    wait_for(rss, "web", "2 ready replicas", |rs| {
        rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;

    let victim = live.pods_on(&node).await.unwrap();
    let victim = victim.iter().find(|p| p.namespace == "guarded").unwrap();
    // An eviction names the pod's uid: one meant for an earlier pod of that name is refused,
    // and the pod there now stays. (Before any budget: a budget's disruption is counted before
    // the uid is checked, and stays counted until the disruption controller lets it go.)
    let earlier = Pod {
        uid: "an-earlier-pod-of-that-name".into(),
        ..victim.clone()
    };
    let refused = live.evict(version, &earlier, None, false).await.unwrap();
    assert!(
        matches!(&refused, Eviction::Conflict { message } if message.contains("UID")),
        "{refused:?}"
    );
    // So is a deletion (an update's), which takes the refusal as the pod meant being gone.
    let earlier_ref = PodRef {
        name: victim.name.clone(),
        uid: earlier.uid.clone(),
    };
    live.delete_pod_object("guarded", &earlier_ref)
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "guarded");
    let still = pods.get(&victim.name).await.unwrap();
    assert_eq!(still.metadata.uid.as_deref(), Some(victim.uid.as_str()));
    assert!(still.metadata.deletion_timestamp.is_none());

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
    );
    let pdbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), "guarded", &resource);
    let pdb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let observed = |allowed: i64| {
        move |p: &DynamicObject| {
            p.data["status"]["observedGeneration"] == p.metadata.generation.unwrap_or(0)
                && p.data["status"]["expectedPods"] == 2
                && p.data["status"]["disruptionsAllowed"] == allowed
        }
    };
    wait_for(
        pdbs.clone(),
        "web",
        "the budget to allow 0 disruptions",
        observed(0),
    )
    .await;

    match live.evict(version, victim, None, false).await.unwrap() {
        Eviction::Blocked { message } => {
            assert!(message.contains("disruption budget"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 1}})),
    )
    .await
    .unwrap();
    wait_for(pdbs, "web", "the budget to allow 1 disruption", observed(1)).await;
    assert_eq!(
        live.evict(version, victim, None, false).await.unwrap(),
        Eviction::Evicted
    );
}

#[tokio::test]
async fn the_simulated_cloud_replaces_what_it_terminates() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let names = add_nodes(cluster, "cloudy", 2).await;
    cluster.cloud.set_group_spec(
        "cloudy",
        GroupSpec {
            kubelet_version: Some("v1.21.0".into()),
            ..Default::default()
        },
    );
    let sim_cloud = |verb: &str, target: &str| {
        let out = Command::new(helper_binary("sim-cloud"))
            .args([
                "--socket",
                cluster.cloud.socket.to_str().unwrap(),
                verb,
                target,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };

    let answer = sim_cloud("terminate", &names[0]);
    let replacement = answer["replacement"]
        .as_str()
        .expect("a replacement boots")
        .to_string();
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(
        nodes.clone(),
        &replacement,
        "the replacement to be Ready with the new spec",
        |n| {
            let status = n.status.as_ref();
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let version = status
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.kubelet_version.as_str());
            ready
                && version == Some("v1.21.0")
                && n.labels()["kops.k8s.io/instancegroup"] == "cloudy"
        },
    )
    .await;
    assert!(
        nodes.get_opt(&names[0]).await.unwrap().is_none(),
        "the terminated node is gone"
    );

    let detached = sim_cloud("detach", &names[1]);
    let surge = detached["replacement"].as_str().unwrap().to_string();
    wait_for(
        nodes.clone(),
        &surge,
        "the surge instance to register",
        |_| true,
    )
    .await;
    let gone = sim_cloud("terminate", &names[1]);
    assert!(
        gone["replacement"].is_null(),
        "a detached instance is not replaced: {gone}"
    );

    let surged = sim_cloud("surge", "cloudy");
    let extra = surged["launching"].as_str().unwrap().to_string();
    wait_for(
        nodes.clone(),
        &extra,
        "the surged instance to register",
        |_| true,
    )
    .await;

    let listed = sim_cloud("list", "cloudy");
    let mut listed: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut expected = vec![replacement.as_str(), surge.as_str(), extra.as_str()];
    expected.sort();
    assert_eq!(listed, expected);

    let calls: Vec<(String, String)> = cluster
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.target.starts_with("cloudy"))
        .map(|c| (c.verb, c.target))
        .collect();
    assert_eq!(
        calls,
        [
            ("terminate".to_string(), names[0].clone()),
            ("detach".into(), names[1].clone()),
            ("terminate".into(), names[1].clone()),
            ("surge".into(), "cloudy".into()),
            ("list".into(), "cloudy".into()),
        ]
    );
}

#[tokio::test]
async fn a_node_can_be_made_not_ready() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let names = add_nodes(cluster, "flaky", 1).await;
    cluster.nodes.set_ready(&names[0], false).await.unwrap();
    let ready = |want: &'static str| {
        move |n: &Node| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == want))
        }
    };
    let nodes: Api<Node> = Api::all(client);
    wait_for(nodes.clone(), &names[0], "NotReady", ready("False")).await;
    cluster.nodes.set_ready(&names[0], true).await.unwrap();
    wait_for(nodes, &names[0], "Ready again", ready("True")).await;
}

#[tokio::test]
async fn the_live_plan_equals_the_plan_of_a_kubectl_snapshot() {
    // A cluster of its own: the comparison reads the whole cluster.
    let cluster = tokio::task::spawn_blocking(TestCluster::start)
        .await
        .unwrap()
        .unwrap();
    let client = cluster.client().await;
    cluster
        .nodes
        .add(
            NodeSpec::new("cp-1", "control-plane-a")
                .zone("a")
                .control_plane(),
        )
        .await
        .unwrap();
    for (name, zone, version) in [
        ("a-1", "a", "v1.19.7"),
        ("a-2", "b", "v1.20.2"),
        ("a-3", "a", "v1.19.7"),
    ] {
        cluster
            .nodes
            .add(NodeSpec::new(name, "nodes-a").zone(zone).kubelet(version))
            .await
            .unwrap();
    }
    cluster
        .nodes
        .add(
            NodeSpec::new("b-1", "nodes-b")
                .zone("b")
                .annotation("kops.k8s.io/needs-update", ""),
        )
        .await
        .unwrap();
    create_namespace(&client, "shop").await;
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), "shop");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &rs).await.unwrap();
    wait_for(rss, "web", "4 ready replicas", |rs| {
        rs.status.as_ref().and_then(|s| s.ready_replicas) == Some(4)
    })
    .await;

    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let plan_args = [
        "nodes",
        "--kubelet-version",
        "v1.20.2",
        "--max-unavailable",
        "2",
        "--now",
        "2026-01-01T00:00:00Z",
        "-o",
        "json",
    ];
    let live = Command::new(plugin_binary())
        .args(plan_args)
        .args(["--kubeconfig", &kubeconfig])
        .output()
        .unwrap();
    assert!(
        live.status.success(),
        "{}",
        String::from_utf8_lossy(&live.stderr)
    );

    let dump = Command::new("kubectl")
        .args([
            "--kubeconfig",
            &kubeconfig,
            "get",
            "nodes,pods,poddisruptionbudgets",
            "-A",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let snapshot = cluster.dir().join("snapshot.json");
    std::fs::write(&snapshot, &dump.stdout).unwrap();
    let offline = Command::new(plugin_binary())
        .args(plan_args)
        .args(["--from-snapshot", snapshot.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        offline.status.success(),
        "{}",
        String::from_utf8_lossy(&offline.stderr)
    );

    // Our own snapshot command writes the same format.
    let own = cluster.dir().join("own-snapshot.json");
    let saved = Command::new(plugin_binary())
        .args([
            "snapshot",
            "-o",
            own.to_str().unwrap(),
            "--kubeconfig",
            &kubeconfig,
        ])
        .output()
        .unwrap();
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let from_own = Command::new(plugin_binary())
        .args(plan_args)
        .args(["--from-snapshot", own.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        from_own.status.success(),
        "{}",
        String::from_utf8_lossy(&from_own.stderr)
    );

    let live: Value = serde_json::from_slice(&live.stdout).unwrap();
    let offline: Value = serde_json::from_slice(&offline.stdout).unwrap();
    let from_own: Value = serde_json::from_slice(&from_own.stdout).unwrap();
    assert_eq!(live, offline);
    assert_eq!(live, from_own);
    let groups: Vec<&str> = live["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["control-plane-a", "nodes-a", "nodes-b"]);
    let a = &live["groups"][1];
    assert_eq!(a["selected"], 2, "a-1 and a-3 run an old kubelet");
    let pods: u64 = live["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["instances"].as_array().unwrap())
        .map(|i| i["pods"].as_u64().unwrap())
        .sum();
    assert_eq!(pods, 4, "the four web pods are counted on their nodes");
}

#[test]
fn kubectl_finds_the_plugin_and_passes_it_the_kubeconfig_flags() {
    let cluster = TestCluster::shared();
    // Only the binary on PATH, as krew installs it (the build directory holds other kubectl-* files).
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugin_binary(), bin_dir.path().join("kubectl-rollout_ext")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("PATH", &path)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    };
    let list = kubectl(&["plugin", "list"]);
    let stdout = String::from_utf8_lossy(&list.stdout);
    let stderr = String::from_utf8_lossy(&list.stderr);
    assert!(stdout.contains("kubectl-rollout_ext"), "{stdout}{stderr}");
    assert!(
        !stderr.contains("kubectl-rollout_ext"),
        "no warning about our plugin: {stderr}"
    );

    let help = kubectl(&["rollout-ext", "--help"]);
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("nodes"));
    let help = kubectl(&["rollout-ext", "nodes", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("--from-snapshot"));

    let plan = kubectl(&[
        "rollout-ext",
        "nodes",
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["kind"], "Plan");

    let bad = kubectl(&[
        "rollout-ext",
        "nodes",
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "--context",
        "nope",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("context \"nope\" does not exist"));
}

#[test]
fn an_unreachable_cluster_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:{port}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"),
    )
    .unwrap();
    let out = Command::new(plugin_binary())
        .args([
            "nodes",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--request-timeout",
            "5s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the API server at https://127.0.0.1:{port}"
        )),
        "{stderr}"
    );
}

#[test]
fn a_killed_test_leaves_no_control_plane_process_behind() {
    let mut child = Command::new(helper_binary("test-cluster"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let started: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    let pids: Vec<u32> = started["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler, kwok"
    );
    let alive = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.split_whitespace().nth(2).is_none_or(|state| state != "Z"))
            .unwrap_or(false)
    };
    assert!(pids.iter().all(alive));

    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while pids.iter().any(alive) {
        assert!(
            std::time::Instant::now() < deadline,
            "still running after SIGKILL of the owner: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `snapshot --policy` saves the kinds the policy grants its hooks (and `--include` any other),
/// and an offline plan warns for a granted kind its snapshot holds none of.
#[tokio::test]
async fn a_snapshot_holds_the_kinds_a_policy_grants_and_a_plan_warns_of_those_it_lacks() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    create_namespace(&client, "snapkinds").await;
    let map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "limits"}, "data": {"maxPods": "3"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client, "snapkinds")
        .create(&PostParams::default(), &map)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  contextResources:\n    - {apiVersion: v1, kind: ConfigMap, namespace: snapkinds}\n    - {apiVersion: apps/v1, kind: Deployment}\n",
    )
    .unwrap();
    let file = dir.path().join("snapshot.json");
    let kubeconfig = cluster.kubeconfig.to_str().unwrap();
    let saved = Command::new(plugin_binary())
        .args(["snapshot", "--kubeconfig", kubeconfig, "-o"])
        .arg(&file)
        .arg("--policy")
        .arg(&policy)
        .args(["--include", "v1/Namespace"])
        .output()
        .unwrap();
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let list: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let items = list["items"].as_array().unwrap();
    let has = |kind: &str, api_version: &str, name: &str| {
        items.iter().any(|i| {
            i["kind"] == kind && i["apiVersion"] == api_version && i["metadata"]["name"] == name
        })
    };
    assert!(
        has("ConfigMap", "v1", "limits"),
        "the granted ConfigMap is saved"
    );
    assert!(
        has("Namespace", "v1", "snapkinds"),
        "the included kind is saved"
    );

    // The cluster has no Deployment: the offline plan says its hooks would read none.
    let plan = Command::new(plugin_binary())
        .args(["nodes", "-o", "json", "--from-snapshot"])
        .arg(&file)
        .arg("--policy")
        .arg(&policy)
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let warnings: Vec<&str> = (plan["warnings"].as_array().unwrap().iter())
        .filter_map(Value::as_str)
        .filter(|w| w.starts_with("the snapshot holds no"))
        .collect();
    assert_eq!(warnings.len(), 1, "{plan}");
    assert!(
        warnings[0].starts_with("the snapshot holds no apps/v1 Deployment"),
        "{plan}"
    );
}
