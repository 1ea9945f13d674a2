//! Least privilege: a user with no rights is told which verb on which resource it lacks; bound to
//! the shipped ClusterRole, it plans, rotates and rolls a controller.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ReplicationController};
use kube::api::{Api, PostParams};
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, OPERATOR_TOKEN, OPERATOR_USER, TestCluster};
use rollout_ext_e2e::{FAST_ROTATION, plugin_binary, workspace_root};
use serde_json::json;

fn plugin(args: &[&str]) -> Output {
    Command::new(plugin_binary()).args(args).output().unwrap()
}

fn kubectl(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn the_shipped_cluster_role_is_enough_and_missing_rights_are_named() {
    let cluster = TestCluster::shared();
    cluster.cloud.set_group_spec(
        "least",
        GroupSpec {
            kubelet_version: Some("v1.20.2".into()),
            ..Default::default()
        },
    );
    cluster
        .nodes
        .add(NodeSpec::new("least-1", "least").kubelet("v1.19.7"))
        .await
        .unwrap();
    let operator = cluster.dir().join("operator.kubeconfig");
    cluster
        .kubeconfig_for(&operator, OPERATOR_TOKEN, OPERATOR_USER)
        .unwrap();
    let operator = operator.to_str().unwrap().to_string();
    let admin = cluster.kubeconfig.to_str().unwrap().to_string();

    // No rights: the error names the verb and the resource.
    let denied = plugin(&["nodes", "--kubeconfig", &operator]);
    assert_eq!(denied.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains("forbidden: this user may not list nodes at cluster scope"),
        "{stderr}"
    );

    // Bound to the shipped role.
    let role = workspace_root().join("deploy/clusterrole.yaml");
    let applied = kubectl(&admin, &["apply", "-f", role.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let bound = kubectl(
        &admin,
        &[
            "create",
            "clusterrolebinding",
            "rollout-ext-operator",
            "--clusterrole=rollout-ext",
            &format!("--user={OPERATOR_USER}"),
        ],
    );
    assert!(
        bound.status.success(),
        "{}",
        String::from_utf8_lossy(&bound.stderr)
    );
    // The authorizer sees the binding through its own informer: wait until it answers yes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubectl(
        &operator,
        &["auth", "can-i", "create", "pods", "--subresource=eviction"],
    )
    .status
    .success()
    {
        assert!(Instant::now() < deadline, "the binding never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let plan = plugin(&["nodes", "--kubeconfig", &operator, "-o", "json"]);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let rotated = plugin(
        &[
            "nodes",
            "--yes",
            "--kubeconfig",
            &operator,
            "--policy",
            policy.to_str().unwrap(),
            "--kubelet-version",
            "v1.20.2",
        ]
        .iter()
        .chain(FAST_ROTATION)
        .copied()
        .collect::<Vec<_>>(),
    );
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    let calls: Vec<String> = cluster
        .cloud
        .calls()
        .into_iter()
        .map(|c| c.target)
        .collect();
    assert_eq!(calls, ["least-1"]);

    // The same role rolls a ReplicationController.
    let client = cluster.client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "least-ru"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "least-ru");
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "ops"},
        "spec": {"replicas": 1, "selector": {"app": "ops"},
                 "template": {"metadata": {"labels": {"app": "ops"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.invalid/ops:1"}]}}}
    }))
    .unwrap();
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    let rolled = plugin(&[
        "rolling-update",
        "ops",
        "--image=registry.invalid/ops:2",
        "--update-period=1s",
        "--poll-interval=1s",
        "-n",
        "least-ru",
        "--kubeconfig",
        &operator,
    ]);
    assert!(
        rolled.status.success(),
        "{}",
        String::from_utf8_lossy(&rolled.stderr)
    );
    let ops = rcs.get("ops").await.unwrap();
    let image = ops.spec.unwrap().template.unwrap().spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("registry.invalid/ops:2"));
}
