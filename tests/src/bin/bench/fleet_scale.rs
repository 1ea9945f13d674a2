//! A rotation at fleet scale: a test cluster of 1,000 kwok nodes in 20 groups running 30,000
//! pods of 300 ReplicaSets, each under a PodDisruptionBudget (sizes and budgets generated from a
//! fixed seed), where one 100-node group is rotated ten nodes at a time, and beside it, in the
//! same cluster and run, a 10-node group one node at a time is the peer. Each rotation waits a
//! simulated boot per replacement, as in the rotation section.
//!
//! Measured per rotation: the tool's overhead (wall time outside the drains and boots it waited
//! for, as the rotation section splits it), the requests its user made (audit log), the pod LIST
//! bytes the apiserver served (its own metrics), the plugin's peak RSS (`wait4`) and the CPU
//! seconds the kube-apiserver process spent meanwhile (`/proc`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use rollout_ext_e2e::cluster::{ExtraFlags, NodeSpec, OPERATOR_TOKEN, OPERATOR_USER, TestCluster};
use rollout_ext_e2e::plugin_binary;
use rollout_ext_e2e::workloads::{budgets, create_namespace};
use serde_json::json;

use crate::Row;
use crate::live_scale::{AUDIT_POLICY, audited, make_operator_admin, pod_lists};
use crate::measure::show;
use crate::rotation::{self, Rotation, Run, Seen};

const NODES: usize = 1_000;

/// A group rotated whole, `batch` nodes at a time.
#[derive(Clone, Copy)]
struct Rotated {
    group: &'static str,
    nodes: usize,
    batch: usize,
}

/// The rotated group, then its peer, rotated one node at a time.
const BIG: Rotated = Rotated {
    group: "fleet-big",
    nodes: 100,
    batch: 10,
};
const SMALL: Rotated = Rotated {
    group: "fleet-small",
    nodes: 10,
    batch: 1,
};
/// The other 890 nodes, in 18 groups.
const OTHER_GROUPS: usize = 18;
const REPLICA_SETS: usize = 300;
const PODS: usize = 30_000;
const SEED: u64 = 1;
const BOOT: Duration = Duration::from_secs(2);
/// Concurrent node registrations and object creations.
const CONCURRENCY: usize = 32;
const NAMESPACE: &str = "fleet";

/// What one rotation cost.
struct Cost {
    nodes: usize,
    run: Run,
    requests: usize,
    pod_list_bytes: f64,
    apiserver_cpu: Duration,
}

/// A small deterministic generator (xorshift), so that every run builds the same cluster.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The group of node `i`: the rotated group's first, then the peer's, then the others in turn.
fn group_of(i: usize) -> String {
    if i < BIG.nodes {
        BIG.group.into()
    } else if i < BIG.nodes + SMALL.nodes {
        SMALL.group.into()
    } else {
        format!("fleet-{:02}", i % OTHER_GROUPS)
    }
}

/// The replicas of each ReplicaSet: pairs around the mean, one `d` below and one `d` above
/// (`d` under half the mean), so that they add up to [`PODS`].
fn sizes(rng: &mut Seeded) -> Vec<usize> {
    let mean = PODS / REPLICA_SETS;
    (0..REPLICA_SETS / 2)
        .flat_map(|_| {
            let d = rng.below(mean as u64 / 2) as usize;
            [mean - d, mean + d]
        })
        .collect()
}

/// CPU seconds `pid` has spent (user and system), from `/proc/<pid>/stat`.
fn cpu_of(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command (which may hold spaces) in parentheses.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat: {stat}"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the command.
    let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_secs_f64(ticks as f64 / per_second as f64))
}

async fn build(cluster: &TestCluster, client: &kube::Client) -> anyhow::Result<()> {
    let started = Instant::now();
    let registrations = futures::stream::iter(0..NODES).map(|i| {
        let spec = NodeSpec::new(&format!("{}-{i:04}", group_of(i)), &group_of(i))
            .zone(["a", "b", "c"][i % 3])
            .label("rev", "0");
        cluster.nodes.add(spec)
    });
    let added: Vec<anyhow::Result<()>> =
        registrations.buffer_unordered(CONCURRENCY).collect().await;
    added.into_iter().collect::<anyhow::Result<()>>()?;
    eprintln!(
        "bench: fleet-scale: {NODES} nodes Ready in {}",
        show(started.elapsed())
    );

    create_namespace(client, NAMESPACE).await;
    let mut rng = seeded();
    let sizes = sizes(&mut rng);
    let shapes: Vec<u64> = (0..REPLICA_SETS).map(|_| rng.below(3)).collect();
    let rss: Api<ReplicaSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pdbs = budgets(client, NAMESPACE, "v1");
    let creations = futures::stream::iter(sizes.iter().enumerate()).map(|(i, replicas)| {
        // Budgets of three shapes, as sites write them.
        let budget = match shapes[i] {
            0 => json!({"maxUnavailable": "10%"}),
            1 => json!({"minAvailable": "80%"}),
            _ => json!({"maxUnavailable": 2}),
        };
        let (rss, pdbs) = (rss.clone(), pdbs.clone());
        async move {
            let name = format!("app-{i:03}");
            let rs: ReplicaSet = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}}
            }))?;
            rss.create(&PostParams::default(), &rs).await?;
            let mut spec = budget;
            spec["selector"] = json!({"matchLabels": {"app": name}});
            let pdb: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name}, "spec": spec
            }))?;
            pdbs.create(&PostParams::default(), &pdb).await?;
            anyhow::Ok(())
        }
    });
    let created: Vec<anyhow::Result<()>> = creations.buffer_unordered(CONCURRENCY).collect().await;
    created.into_iter().collect::<anyhow::Result<()>>()?;

    // Every pod Ready: the ReplicaSets' own counts, read every few seconds with progress.
    let deadline = Instant::now() + Duration::from_secs(40 * 60);
    loop {
        let ready: i32 = (rss.list(&ListParams::default()).await?.items.iter())
            .filter_map(|r| r.status.as_ref().and_then(|s| s.ready_replicas))
            .sum();
        eprintln!(
            "bench: fleet-scale: {ready} of {PODS} pods Ready after {}",
            show(started.elapsed())
        );
        if ready as usize >= PODS {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {ready} of {PODS} pods Ready after 40 minutes"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// The generator of [`SEED`].
fn seeded() -> Seeded {
    Seeded(SEED.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
}

/// The fleet's cluster and what a rotation in it runs with.
struct Fleet<'a> {
    cluster: &'a TestCluster,
    client: &'a kube::Client,
    /// The exec provider's policy.
    policy: &'a Path,
    /// The operator's, whose requests the audit log records.
    kubeconfig: &'a Path,
    audit_log: &'a Path,
    work: &'a Path,
}

/// One measured rotation of a whole group.
fn measured(fleet: &Fleet, rotated: Rotated, seen: &Mutex<Seen>) -> anyhow::Result<Cost> {
    let Fleet {
        cluster,
        client,
        policy,
        kubeconfig,
        audit_log,
        work,
    } = *fleet;
    let Rotated {
        group,
        nodes,
        batch,
    } = rotated;
    let apiserver = (cluster.processes.pids().into_iter())
        .find(|(name, _)| name == "kube-apiserver")
        .map(|(_, pid)| pid)
        .ok_or_else(|| anyhow::anyhow!("no kube-apiserver process"))?;
    let lists_before = cluster.block_on(pod_lists(client))?;
    let (cpu_before, from) = (cpu_of(apiserver)?, SystemTime::now());
    let binary = plugin_binary();
    let rotation = Rotation {
        group,
        nodes,
        max_unavailable: batch,
        binary: &binary,
        policy,
        kubeconfig,
    };
    let run = rotation::rotate(cluster, seen, &rotation, "1", work)?;
    let (cpu_after, to) = (cpu_of(apiserver)?, SystemTime::now());
    let lists_after = cluster.block_on(pod_lists(client))?;
    // The audit log is written as requests complete: a watch that ended with the run is in it
    // within moments.
    std::thread::sleep(Duration::from_secs(2));
    Ok(Cost {
        nodes,
        run,
        requests: audited(audit_log, from, to)?,
        pod_list_bytes: lists_after.0 - lists_before.0,
        apiserver_cpu: cpu_after.saturating_sub(cpu_before),
    })
}

fn rows(big: &Cost, small: &Cost) -> Vec<Row> {
    let share = |c: &Cost| 1.0 - crate::measure::ratio(c.run.split.covered, c.run.wall);
    let overhead = |c: &Cost| c.run.wall.saturating_sub(c.run.split.covered);
    let per_node = |c: &Cost| c.requests as f64 / c.nodes as f64;
    let mib = |c: &Cost| c.run.max_rss_kib as f64 / 1024.0;
    let what = format!(
        "{} nodes of {NODES} ({PODS} pods, {REPLICA_SETS} budgets), {} at a time",
        BIG.nodes, BIG.batch
    );
    let peer = format!(
        "the {}-node rotation, one at a time, same cluster",
        SMALL.nodes
    );
    vec![
        Row {
            figure: format!(
                "Tool overhead, rotating {what} (boot {} s, waits 0)",
                BOOT.as_secs()
            ),
            value: format!(
                "{} of {} ({:.2} %)",
                show(overhead(big)),
                show(big.run.wall),
                share(big) * 100.0
            ),
            peer: peer.clone(),
            peer_value: format!(
                "{} of {} ({:.2} %)",
                show(overhead(small)),
                show(small.run.wall),
                share(small) * 100.0
            ),
            ratio: format!("{:.4}", share(big)),
            target: String::new(),
            met: None,
        }
        .target("< 1 % of wall time", share(big) < 0.01),
        Row {
            figure: format!("Requests per rotated node, rotating {what} (audit log)"),
            value: format!("{:.1} ({} in all)", per_node(big), big.requests),
            peer: peer.clone(),
            peer_value: format!("{:.1} ({} in all)", per_node(small), small.requests),
            ratio: format!(
                "{:.2}×",
                per_node(big) / per_node(small).max(f64::MIN_POSITIVE)
            ),
            target: String::new(),
            met: None,
        }
        .target(
            "≤ 1.2× the 10-node figure",
            per_node(big) <= 1.2 * per_node(small),
        ),
        Row {
            figure: format!("Pod LIST bytes, rotating {what} (apiserver metrics)"),
            value: format!("{:.2} MB", big.pod_list_bytes / 1e6),
            peer: peer.clone(),
            peer_value: format!("{:.2} MB", small.pod_list_bytes / 1e6),
            ratio: format!("{:.2}×", big.pod_list_bytes / small.pod_list_bytes.max(1.0)),
            target: "—".into(),
            met: None,
        },
        Row {
            figure: format!("Plugin peak RSS, rotating {what}"),
            value: format!("{:.0} MiB", mib(big)),
            peer: peer.clone(),
            peer_value: format!("{:.0} MiB", mib(small)),
            ratio: format!("{:.2}×", mib(big) / mib(small).max(1.0)),
            target: String::new(),
            met: None,
        }
        .target("< 300 MiB", mib(big) < 300.0),
        Row {
            figure: format!("kube-apiserver CPU during the rotation of {what}"),
            value: format!(
                "{:.1} s ({:.2} s per rotated node)",
                big.apiserver_cpu.as_secs_f64(),
                big.apiserver_cpu.as_secs_f64() / big.nodes as f64
            ),
            peer,
            peer_value: format!(
                "{:.1} s ({:.2} s per rotated node)",
                small.apiserver_cpu.as_secs_f64(),
                small.apiserver_cpu.as_secs_f64() / small.nodes as f64
            ),
            ratio: format!(
                "{:.2}× per node",
                (big.apiserver_cpu.as_secs_f64() / big.nodes as f64)
                    / (small.apiserver_cpu.as_secs_f64() / small.nodes as f64).max(1e-9)
            ),
            target: "—".into(),
            met: None,
        },
    ]
}

pub fn run(work: &Path) -> anyhow::Result<Vec<Row>> {
    let dir = work.join("fleet-scale");
    std::fs::create_dir_all(&dir)?;
    let policy_file = dir.join("audit-policy.yaml");
    std::fs::write(&policy_file, AUDIT_POLICY)?;
    let audit_log = dir.join("audit.log");
    // The controllers and the scheduler at the request rates a cluster of this size is run with.
    let rates = vec![
        "--kube-api-qps=500".to_string(),
        "--kube-api-burst=1000".into(),
    ];
    let cluster = TestCluster::start_with(ExtraFlags {
        apiserver: vec![
            format!("--audit-policy-file={}", policy_file.display()),
            format!("--audit-log-path={}", audit_log.display()),
        ],
        controller_manager: rates.clone(),
        scheduler: rates,
    })?;
    let kubeconfig = dir.join("operator.kubeconfig");
    cluster.kubeconfig_for(&kubeconfig, OPERATOR_TOKEN, OPERATOR_USER)?;
    let client = cluster.block_on(cluster.client());
    cluster.block_on(make_operator_admin(&client))?;
    cluster.block_on(build(&cluster, &client))?;
    cluster.cloud.set_boot_delay(BOOT);
    let policy = cluster.exec_policy(&dir, "");
    let fleet = Fleet {
        cluster: &cluster,
        client: &client,
        policy: &policy,
        kubeconfig: &kubeconfig,
        audit_log: &audit_log,
        work: &dir,
    };

    let mut costs = BTreeMap::new();
    for rotated in [SMALL, BIG] {
        let Rotated {
            group,
            nodes,
            batch,
        } = rotated;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let watcher = cluster.spawn(rotation::watch(client.clone(), group.into(), seen.clone()));
        eprintln!("bench: fleet-scale: rotating {group} ({nodes} nodes, {batch} at a time)…");
        let cost = measured(&fleet, rotated, &seen)?;
        watcher.abort();
        eprintln!(
            "bench: fleet-scale: {group}: {} wall, {} requests, peak RSS {} KiB",
            show(cost.run.wall),
            cost.requests,
            cost.run.max_rss_kib
        );
        costs.insert(group, cost);
    }
    Ok(rows(&costs[BIG.group], &costs[SMALL.group]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_fleet_has_its_size() {
        let groups: std::collections::BTreeSet<String> = (0..NODES).map(group_of).collect();
        assert_eq!(groups.len(), 20);
        let count = |g: Rotated| (0..NODES).filter(|i| group_of(*i) == g.group).count();
        assert_eq!(count(BIG), BIG.nodes);
        assert_eq!(count(SMALL), SMALL.nodes);
        let sizes = sizes(&mut seeded());
        assert_eq!(sizes.len(), REPLICA_SETS);
        assert_eq!(sizes.iter().sum::<usize>(), PODS);
        assert!(sizes.iter().all(|s| *s >= 1));
    }
}
