//! On a real test cluster: the drain of a node carrying 100 pods by rollout-ext against
//! `kubectl drain --ignore-daemonsets` on an identical node, and a live plan against
//! `kubectl get nodes,pods,poddisruptionbudgets -A -o json`.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use rollout_ext::cluster::drain::DrainSettings;
use rollout_ext::cluster::{Cluster, ConnectOptions};
use rollout_ext::progress::Collect;
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::plugin_binary;
use serde_json::json;

use crate::Row;
use crate::measure::{self, median, median_of};

/// A cordon as a rotation does it by default (out of external load balancers too).
fn cordon() -> rollout_ext::cluster::drain::Cordon {
    rollout_ext::cluster::drain::Cordon::of(None, &Default::default())
}

const NAMESPACE: &str = "bench-drain";
const PODS: i32 = 100;
const SETTLE: Duration = Duration::from_secs(120);

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other.map(|_| ()).map_err(Into::into),
    }
}

/// A DaemonSet, so that both drains have a pod to leave alone on every node.
async fn daemon_set(client: &kube::Client) -> anyhow::Result<()> {
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "agent", "image": "registry.invalid/agent:1"}]}}}
    }))?;
    Api::<DaemonSet>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &ds)
        .await?;
    Ok(())
}

/// A node carrying 100 Ready pods of one ReplicaSet pinned to it.
async fn loaded_node(
    cluster: &TestCluster,
    client: &kube::Client,
    node: &str,
) -> anyhow::Result<()> {
    cluster
        .nodes
        .add(NodeSpec::new(node, "bench-drain"))
        .await?;
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": node},
        "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": node}},
                 "template": {"metadata": {"labels": {"app": node}},
                              "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                       "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}}
    }))?;
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NAMESPACE);
    api.create(&PostParams::default(), &rs).await?;
    let ready = |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(PODS)
    };
    tokio::time::timeout(SETTLE, await_condition(api, node, ready)).await??;
    Ok(())
}

/// Removes a drained node's ReplicaSet (its replacements wait, unschedulable) and the node.
async fn clear(cluster: &TestCluster, client: &kube::Client, node: &str) -> anyhow::Result<()> {
    Api::<ReplicaSet>::namespaced(client.clone(), NAMESPACE)
        .delete(node, &DeleteParams::background())
        .await?;
    cluster.nodes.remove(node).await
}

/// rollout-ext's drain as a rotation runs it: connect, cordon, evict in parallel, watch the pods
/// go.
async fn ours(kubeconfig: &Path, node: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let live = Cluster::connect(&ConnectOptions {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        ..Default::default()
    })
    .await?;
    let settings = DrainSettings {
        options: Default::default(),
        grace_period: -1,
        timeout: SETTLE,
        policy_version: live.policy_version().await?,
    };
    let reporter = Collect(Mutex::new(Vec::new()));
    live.cordon(node, cordon(), false, &reporter).await?;
    live.drain(node, &settings, &reporter).await?;
    Ok(started.elapsed())
}

fn kubectl(kubeconfig: &Path, args: &[&str], work: &Path) -> anyhow::Result<Duration> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    Ok(measure::run(&mut cmd, &work.join("kubectl-stderr.txt"))?.wall)
}

pub fn run(runs: usize, work: &Path) -> anyhow::Result<Vec<Row>> {
    let cluster = TestCluster::shared();
    let kubeconfig = cluster.kubeconfig.clone();
    let client = cluster.block_on(cluster.client());
    cluster.block_on(async {
        create_namespace(&client, NAMESPACE).await?;
        daemon_set(&client).await
    })?;

    let mut ours_times = Vec::new();
    let mut kubectl_times = Vec::new();
    let mut live_plan = Duration::ZERO;
    let mut kubectl_get = Duration::ZERO;
    for rep in 0..runs {
        let (mine, theirs) = (format!("ours-{rep}"), format!("kubectl-{rep}"));
        cluster.block_on(async {
            loaded_node(cluster, &client, &mine).await?;
            loaded_node(cluster, &client, &theirs).await
        })?;
        if rep == 0 {
            // Two nodes and 200 pods: the live plan reads what `kubectl get` reads.
            let plugin = plugin_binary();
            live_plan = median_of(runs, || {
                let mut cmd = Command::new(&plugin);
                cmd.arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["nodes", "-o", "json"]);
                Ok(measure::run(&mut cmd, &work.join("plan-stderr.txt"))?.wall)
            })?;
            kubectl_get = median_of(runs, || {
                kubectl(
                    &kubeconfig,
                    &["get", "nodes,pods,poddisruptionbudgets", "-A", "-o", "json"],
                    work,
                )
            })?;
        }
        // Alternate who goes first, so neither always drains on the quieter cluster.
        let mut drain_ours = || -> anyhow::Result<()> {
            ours_times.push(cluster.block_on(ours(&kubeconfig, &mine))?);
            cluster.block_on(clear(cluster, &client, &mine))
        };
        let mut drain_kubectl = || -> anyhow::Result<()> {
            let timeout = format!("--timeout={}s", SETTLE.as_secs());
            kubectl_times.push(kubectl(
                &kubeconfig,
                &["drain", &theirs, "--ignore-daemonsets", &timeout],
                work,
            )?);
            cluster.block_on(clear(cluster, &client, &theirs))
        };
        if rep % 2 == 0 {
            drain_ours()?;
            drain_kubectl()?;
        } else {
            drain_kubectl()?;
            drain_ours()?;
        }
    }
    let (ours, theirs) = (median(&ours_times), median(&kubectl_times));
    Ok(vec![
        Row::timed(
            format!("Drain of a node carrying {PODS} pods (connect, cordon, evict, wait)"),
            ours,
            "`kubectl drain --ignore-daemonsets`, identical node",
            theirs,
        )
        .target("≤ 0.8× kubectl drain", measure::ratio(ours, theirs) <= 0.8),
        Row::timed(
            "Live plan, 2 nodes and 200 pods (`nodes -o json`)".into(),
            live_plan,
            "`kubectl get nodes,pods,poddisruptionbudgets -A -o json`",
            kubectl_get,
        )
        .target("no slower than kubectl get", live_plan <= kubectl_get),
    ])
}
