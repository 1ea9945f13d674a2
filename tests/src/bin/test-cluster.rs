//! `test-cluster`: starts a test cluster, prints its kubeconfig path and the pids of its
//! processes as one JSON line, then runs until stdin closes. Handy by hand, and used by the test
//! that proves a killed test leaves no process behind.
//!
//! `--outdated-group NAME=N` also adds N nodes of group NAME running an old kubelet (the
//! simulated cloud replaces them with v1.20.2 ones) and a ReplicaSet with two pods per node, so
//! that `nodes --kubelet-version v1.20.2 --yes` has a rotation to show.

use std::io::Read;

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::{Api, PostParams};
use rollout_ext_e2e::cluster::TestCluster;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outdated = match args.as_slice() {
        [] => None,
        [flag, spec] if flag == "--outdated-group" => {
            let (name, n) = spec
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("expected --outdated-group NAME=N"))?;
            Some((name.to_string(), n.parse::<usize>()?))
        }
        _ => anyhow::bail!("usage: test-cluster [--outdated-group NAME=N]"),
    };
    let cluster = TestCluster::start()?;
    if let Some((group, n)) = outdated {
        cluster.block_on(add_outdated_group(&cluster, &group, n))?;
    }
    let pids: Vec<u32> = cluster
        .processes
        .pids()
        .into_iter()
        .map(|(_, pid)| pid)
        .collect();
    println!(
        "{}",
        serde_json::json!({"kubeconfig": cluster.kubeconfig, "cloudSocket": cluster.cloud.socket, "pids": pids})
    );
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}

async fn add_outdated_group(cluster: &TestCluster, group: &str, n: usize) -> anyhow::Result<()> {
    cluster.outdated_group(group, n).await?;
    let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{group}-web")},
        "spec": {"replicas": 2 * n, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.invalid/web:1"}]}}}
    }))?;
    Api::<ReplicaSet>::namespaced(cluster.client().await, "default")
        .create(&PostParams::default(), &rs)
        .await?;
    Ok(())
}
