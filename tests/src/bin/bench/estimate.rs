//! How close a plan's estimate comes to the run it plans: a group of the test cluster (3 nodes,
//! boot 2 s) rotated once to record its history, then `runs` times made outdated again, planned
//! and rotated; the figure is the plan's `estimate.seconds` over the run's wall time, beside
//! the run itself.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::plugin_binary;

use crate::Row;
use crate::measure::show;

const GROUP: &str = "bench-estimate";
const NODES: usize = 3;
const BOOT: Duration = Duration::from_secs(2);

fn plugin(args: &[String]) -> anyhow::Result<std::process::Output> {
    let out = Command::new(plugin_binary()).args(args).output()?;
    if !out.status.success() {
        anyhow::bail!("{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out)
}

pub fn run(runs: usize, work: &Path) -> anyhow::Result<Vec<Row>> {
    let cluster = TestCluster::shared();
    cluster.cloud.set_boot_delay(BOOT);
    let dir = work.join("estimate");
    std::fs::create_dir_all(&dir)?;
    let policy = cluster.exec_policy(&dir, "");
    let rotate = cluster.rotate_args(&policy, GROUP);
    let plan: Vec<String> = rotate.iter().filter(|a| *a != "--yes").cloned().collect();
    cluster.block_on(cluster.outdated_group(GROUP, NODES))?;
    // The first run records the history every later plan estimates from.
    plugin(&rotate)?;
    let (mut ratios, mut walls, mut estimates) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        cluster.block_on(cluster.outdated_group(GROUP, NODES))?;
        let planned: serde_json::Value = serde_json::from_slice(&plugin(&plan)?.stdout)?;
        let seconds = planned["estimate"]["seconds"].as_f64().unwrap_or(0.0);
        let started = Instant::now();
        plugin(&rotate)?;
        let wall = started.elapsed();
        ratios.push(seconds / wall.as_secs_f64());
        walls.push(wall);
        estimates.push(Duration::from_secs_f64(seconds));
    }
    ratios.sort_by(f64::total_cmp);
    walls.sort();
    estimates.sort();
    let (low, high) = (ratios[0], ratios[ratios.len() - 1]);
    let median = |d: &[Duration]| d[d.len() / 2];
    Ok(vec![
        Row {
            figure: format!(
                "Plan estimate of a {NODES}-node rotation (boot 2 s) from the group's history, {runs} runs"
            ),
            value: format!("{} (median)", show(median(&estimates))),
            peer: "the run's wall time".into(),
            peer_value: show(median(&walls)),
            ratio: format!("{low:.2}–{high:.2}"),
            target: "0.67–1.5 (issue 34)".into(),
            met: None,
        }
        .target("0.67–1.5 (issue 34)", low >= 0.67 && high <= 1.5),
    ])
}
