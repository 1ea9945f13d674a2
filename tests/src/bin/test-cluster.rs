//! `test-cluster`: starts a test cluster, prints its kubeconfig path and the pids of its
//! processes as one JSON line, then runs until stdin closes. Handy by hand, and used by the test
//! that proves a killed test leaves no process behind.

use std::io::Read;

use rollout_ext_e2e::cluster::TestCluster;

fn main() -> anyhow::Result<()> {
    let cluster = TestCluster::start()?;
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
