//! Providers on the real test bed: `exec` drives the simulated cloud through its command line,
//! `deleteNode` removes the Node object; failures name the command and what it said.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::wait::{await_condition, conditions};
use rollout_ext::cluster::Cluster;
use rollout_ext::provider::{ExecSpec, Provider, ProviderError, ProviderSpec, Target};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::helper_binary;

const WAIT: Duration = Duration::from_secs(60);

/// One rotation at a time: they share the test cluster's rotation lock.
static ROTATIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn live(cluster: &TestCluster) -> Cluster {
    cluster.live().await
}

fn sim_cloud(cluster: &TestCluster, verb: &str) -> Vec<String> {
    vec![
        helper_binary("sim-cloud").display().to_string(),
        "--socket".into(),
        cluster.cloud.socket.display().to_string(),
        verb.into(),
        "{node}".into(),
    ]
}

fn target(node: &str, group: &str) -> Target {
    Target {
        node: node.into(),
        provider_id: format!("sim:///{group}/{node}"),
        group: group.into(),
        machine: None,
    }
}

#[tokio::test]
async fn exec_terminates_and_detaches_through_the_cloud() {
    let cluster = TestCluster::shared();
    for name in ["exec-1", "exec-2"] {
        cluster
            .nodes
            .add(NodeSpec::new(name, "exec"))
            .await
            .unwrap();
    }
    let provider = Provider::from_spec(&ProviderSpec::Exec(ExecSpec {
        terminate: sim_cloud(cluster, "terminate"),
        detach: Some(sim_cloud(cluster, "detach")),
        timeout: Some("30s".into()),
    }))
    .unwrap();
    assert!(provider.can_surge());
    let live = live(cluster).await;

    let answer = provider
        .terminate(&live, &target("exec-1", "exec"))
        .await
        .unwrap();
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let replacement = answer["replacement"].as_str().unwrap().to_string();
    let nodes: Api<Node> = Api::all(cluster.client().await);
    tokio::time::timeout(
        WAIT,
        await_condition(nodes.clone(), &replacement, |n: Option<&Node>| n.is_some()),
    )
    .await
    .expect("the cloud boots a replacement")
    .unwrap();
    assert!(nodes.get_opt("exec-1").await.unwrap().is_none());

    provider
        .detach(&live, &target("exec-2", "exec"))
        .await
        .unwrap();
    let verbs: Vec<(String, String)> = cluster
        .cloud
        .calls()
        .into_iter()
        .filter(|c| c.target.starts_with("exec-"))
        .map(|c| (c.verb, c.target))
        .collect();
    assert_eq!(
        verbs,
        [
            ("terminate".to_string(), "exec-1".to_string()),
            ("detach".into(), "exec-2".into())
        ]
    );

    // An instance the cloud does not know: the error names the command and the cloud's answer.
    match provider.terminate(&live, &target("ghost", "exec")).await {
        Err(ProviderError::Failed {
            command, output, ..
        }) => {
            assert!(command.ends_with("terminate ghost"), "{command}");
            assert!(output.contains("no instance \"ghost\""), "{output}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn delete_node_removes_the_node_object_and_cannot_surge() {
    let cluster = TestCluster::shared();
    cluster
        .nodes
        .add(NodeSpec::new("del-1", "del"))
        .await
        .unwrap();
    let live = live(cluster).await;
    let provider = Provider::from_spec(&ProviderSpec::DeleteNode {}).unwrap();
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let uid = nodes.get("del-1").await.unwrap().metadata.uid.unwrap();
    provider
        .terminate(&live, &target("del-1", "del"))
        .await
        .unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(nodes, "del-1", conditions::is_deleted(&uid)),
    )
    .await
    .expect("the node object goes")
    .unwrap();
    assert!(matches!(
        provider.detach(&live, &target("del-1", "del")).await,
        Err(ProviderError::CannotSurge("deleteNode"))
    ));
}

#[tokio::test]
async fn a_template_for_another_cloud_stops_the_run_before_the_group_is_touched() {
    let _one = ROTATIONS.lock().await;
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("wrongcloud", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  provider:\n    exec:\n      terminate: [aws, ec2, terminate-instances, --instance-ids, \"{aws.instanceID}\"]\n",
    )
    .unwrap();
    let out = rollout_ext_e2e::run_plugin(cluster.rotate_args(&policy, "wrongcloud")).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the provider command uses {{aws.instanceID}}, but node {} has providerID \"sim:///wrongcloud/{}\", not of the shape aws:///ZONE/INSTANCE-ID",
            originals[0], originals[0]
        )),
        "{stderr}"
    );
    // Before the group's first change: no taint, no cordon, nothing terminated.
    let nodes: Api<Node> = Api::all(cluster.client().await);
    for name in &originals {
        let node = nodes.get(name).await.unwrap();
        let spec = node.spec.unwrap_or_default();
        // The run's taint (PreferNoSchedule) is its first change; the node lifecycle
        // controller's own taints do not count.
        let taints = spec.taints.unwrap_or_default();
        assert!(
            taints.iter().all(|t| t.effect != "PreferNoSchedule"),
            "{name}: {taints:?}"
        );
        assert_ne!(spec.unschedulable, Some(true), "{name}");
    }
    assert!(cluster.cloud.terminated("wrongcloud").is_empty());
}

#[tokio::test]
async fn a_group_uses_its_own_provider_and_a_group_without_one_stops_the_run_before_any_change() {
    let _one = ROTATIONS.lock().await;
    let cluster = TestCluster::shared();
    let mixa = cluster.outdated_group("mixa", 2).await.unwrap();
    let mixb = cluster.outdated_group("mixb", 2).await.unwrap();
    let cloud = |verb: &str| {
        let words: Vec<String> = sim_cloud(cluster, verb)
            .iter()
            .map(|w| format!("{w:?}"))
            .collect();
        format!("[{}]", words.join(", "))
    };
    let group_a = format!(
        "  groups:\n  - name: mixa\n    provider:\n      exec:\n        terminate: {}\n        detach: {}\n",
        cloud("terminate"),
        cloud("detach")
    );
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");

    // Without spec.provider, the group lacking one stops the run before any group is touched.
    std::fs::write(
        &policy,
        format!("apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n{group_a}"),
    )
    .unwrap();
    let mut args = cluster.rotate_args(&policy, "mixa");
    let at = args.iter().position(|a| a == "mixa").unwrap();
    args[at] = "mixa,mixb".into();
    let out = rollout_ext_e2e::run_plugin(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("group mixb has no provider"), "{stderr}");
    assert!(cluster.cordoned("mixa").await.is_empty());
    assert!(cluster.cloud.terminated("mixa").is_empty());

    // With a policy-wide provider for another cloud, mixa still goes through its own.
    std::fs::write(
        &policy,
        format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  provider:\n    exec:\n      terminate: [aws, ec2, terminate-instances, --instance-ids, \"{{aws.instanceID}}\"]\n{group_a}"
        ),
    )
    .unwrap();
    let out = rollout_ext_e2e::run_plugin(cluster.rotate_args(&policy, "mixa")).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut terminated = cluster.cloud.terminated("mixa");
    terminated.sort();
    assert_eq!(terminated, mixa);
    // mixb falls to the policy-wide provider, whose template does not fit its nodes.
    let out = rollout_ext_e2e::run_plugin(cluster.rotate_args(&policy, "mixb")).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("{aws.instanceID}"), "{stderr}");
    assert!(cluster.cloud.terminated("mixb").is_empty(), "{mixb:?}");
}
