//! What a live rotation costs the API server as the cluster around it grows: the same 4-node
//! group (two pods per node) rotated on a fresh test cluster beside 0, 3,000 and 10,000
//! unrelated pods (pending, in a namespace of their own), read from the apiserver itself:
//! `apiserver_response_sizes` for LISTs of pods (bytes and count) before and after, and the
//! requests the rotation's user made, from the apiserver's audit log. Beside each, the same
//! figures for the previous release (`--baseline-binary`) on a second group, and for
//! `kubectl drain` of the four nodes of a third.
//!
//! And the view's memory at 150,000 pods: the `view-memory` helper fills the live view's stores
//! with the synthetic 5,000-node cluster of the plan section and counts the bytes they hold,
//! beside what the offline plan's snapshot of the same file holds.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, PostParams};
use rollout_ext_e2e::cluster::{OPERATOR_TOKEN, OPERATOR_USER, TestCluster};
use rollout_ext_e2e::workloads::{create_namespace, replica_set};
use rollout_ext_e2e::{helper_binary, plugin_binary};
use serde_json::json;

use crate::Row;
use crate::measure::show;

const UNRELATED: &[usize] = &[0, 3_000, 10_000];
const NODES: usize = 4;
const PODS_PER_NODE: i32 = 2;
/// Concurrent creations of unrelated pods.
const CREATORS: usize = 16;

/// The audit policy: every request of the operator, nobody else's.
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: [operator]
  - level: None
";

/// What one measured run cost.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    pod_list_bytes: f64,
    pod_lists: f64,
    requests: usize,
    wall: Duration,
}

/// The apiserver's own counters of LIST responses of pods: bytes and count.
pub async fn pod_lists(client: &kube::Client) -> anyhow::Result<(f64, f64)> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let mut sums = (0.0, 0.0);
    for line in text.lines() {
        let pods = line.contains("resource=\"pods\"")
            && line.contains("verb=\"LIST\"")
            && line.contains("subresource=\"\"");
        if !pods {
            continue;
        }
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        if line.starts_with("apiserver_response_sizes_sum{") {
            sums.0 += value;
        } else if line.starts_with("apiserver_response_sizes_count{") {
            sums.1 += value;
        }
    }
    Ok(sums)
}

/// The operator's requests the audit log recorded as received between `from` and `to`.
pub fn audited(log: &Path, from: SystemTime, to: SystemTime) -> anyhow::Result<usize> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (from, to) = (
        jiff::Timestamp::try_from(from)?,
        jiff::Timestamp::try_from(to)?,
    );
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == OPERATOR_USER)
        .filter_map(|e| {
            e["requestReceivedTimestamp"]
                .as_str()?
                .parse::<jiff::Timestamp>()
                .ok()
        })
        .filter(|t| *t >= from && *t <= to)
        .count())
}

/// Runs `work` and returns what it cost the apiserver.
async fn measured(
    client: &kube::Client,
    audit_log: &Path,
    work: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Cost> {
    let before = pod_lists(client).await?;
    let (from, started) = (SystemTime::now(), Instant::now());
    tokio::task::block_in_place(work)?;
    let (to, wall) = (SystemTime::now(), started.elapsed());
    let after = pod_lists(client).await?;
    // The audit log is written as requests complete: a watch that ended with the run is in it
    // within moments.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(Cost {
        pod_list_bytes: after.0 - before.0,
        pod_lists: after.1 - before.1,
        requests: audited(audit_log, from, to)?,
        wall,
    })
}

/// Makes the operator (whose requests the audit log records) a cluster admin.
pub async fn make_operator_admin(client: &kube::Client) -> anyhow::Result<()> {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bench-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": OPERATOR_USER, "apiGroup": "rbac.authorization.k8s.io"}]
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// A group of four outdated nodes carrying two pods each, in a namespace of the group's name.
async fn group(cluster: &TestCluster, client: &kube::Client, name: &str) -> anyhow::Result<()> {
    cluster.outdated_group(name, NODES).await?;
    create_namespace(client, name).await;
    replica_set(client, name, "web", PODS_PER_NODE * NODES as i32).await;
    Ok(())
}

/// `count` pods no node can run (their nodeSelector matches none): pending for good.
async fn unrelated(client: &kube::Client, count: usize) -> anyhow::Result<()> {
    create_namespace(client, "unrelated").await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "unrelated");
    let creations = futures::stream::iter(0..count).map(|i| {
        let api = api.clone();
        async move {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("idle-{i}"), "labels": {"app": "idle"}},
                "spec": {"nodeSelector": {"bench": "nowhere"},
                         "containers": [{"name": "main", "image": "registry.invalid/idle:1"}]}
            }))?;
            api.create(&PostParams::default(), &pod).await?;
            anyhow::Ok(())
        }
    });
    let results: Vec<anyhow::Result<()>> = creations.buffer_unordered(CREATORS).collect().await;
    results.into_iter().collect()
}

/// The rotation of `group` by `binary`, as the operator.
fn rotate(
    cluster: &TestCluster,
    binary: &Path,
    kubeconfig: &Path,
    dir: &Path,
    group: &str,
) -> anyhow::Result<()> {
    let mut args = cluster.rotate_one_at_a_time(dir, group, "", &[]);
    let at = args
        .iter()
        .position(|a| a == "--kubeconfig")
        .map(|i| i + 1)
        .ok_or_else(|| anyhow::anyhow!("the rotation's arguments name a kubeconfig"))?;
    args[at] = kubeconfig.display().to_string();
    let out = Command::new(binary).args(&args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "rotation of {group} by {} failed:\n{}",
        binary.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `kubectl drain` of each node of `group` in turn, as the operator.
fn kubectl_drain(kubeconfig: &Path, group: &str) -> anyhow::Result<()> {
    for i in 1..=NODES {
        let node = format!("{group}-{i}");
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=120s",
            ])
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl drain {node} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// One cluster with `count` unrelated pods: the cost of each tool on its own group.
fn one_size(
    count: usize,
    work: &Path,
    baseline: Option<&Path>,
) -> anyhow::Result<BTreeMap<&'static str, Cost>> {
    let dir = work.join(format!("live-{count}"));
    std::fs::create_dir_all(&dir)?;
    let policy = dir.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY)?;
    let audit_log = dir.join("audit.log");
    let cluster = TestCluster::start_with_apiserver_flags(&[
        &format!("--audit-policy-file={}", policy.display()),
        &format!("--audit-log-path={}", audit_log.display()),
    ])?;
    let kubeconfig = dir.join("operator.kubeconfig");
    cluster.kubeconfig_for(&kubeconfig, OPERATOR_TOKEN, OPERATOR_USER)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = cluster.client().await;
        make_operator_admin(&client).await?;
        let mut groups = vec!["current", "kubectl"];
        if baseline.is_some() {
            groups.push("previous");
        }
        for g in &groups {
            group(&cluster, &client, g).await?;
        }
        eprintln!("bench: live-scale: {count} unrelated pods…");
        unrelated(&client, count).await?;
        let mut costs = BTreeMap::new();
        let current = plugin_binary();
        let run_dir = dir.join("current");
        std::fs::create_dir_all(&run_dir)?;
        costs.insert(
            "current",
            measured(&client, &audit_log, || {
                rotate(&cluster, &current, &kubeconfig, &run_dir, "current")
            })
            .await?,
        );
        if let Some(base) = baseline {
            let run_dir = dir.join("previous");
            std::fs::create_dir_all(&run_dir)?;
            costs.insert(
                "previous",
                measured(&client, &audit_log, || {
                    rotate(&cluster, base, &kubeconfig, &run_dir, "previous")
                })
                .await?,
            );
        }
        costs.insert(
            "kubectl",
            measured(&client, &audit_log, || {
                kubectl_drain(&kubeconfig, "kubectl")
            })
            .await?,
        );
        Ok(costs)
    })
}

fn mb(bytes: f64) -> String {
    format!("{:.2} MB", bytes / 1e6)
}

/// One tool's rows: pod LIST bytes and requests per node at each size, against its own cost
/// beside no unrelated pods.
fn rows_of(tool: &str, what: &str, costs: &[(usize, Cost)], targets: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let Some((_, alone)) = costs.iter().find(|(n, _)| *n == 0) else {
        return rows;
    };
    for (count, cost) in costs {
        let growth = cost.pod_list_bytes / alone.pod_list_bytes.max(1.0);
        let mut row = Row {
            figure: format!("Pod LIST bytes of {what} beside {count} unrelated pods ({tool})"),
            value: format!(
                "{} in {} LISTs; {} wall",
                mb(cost.pod_list_bytes),
                cost.pod_lists,
                show(cost.wall)
            ),
            peer: "the same beside no unrelated pods".into(),
            peer_value: format!("{} in {} LISTs", mb(alone.pod_list_bytes), alone.pod_lists),
            ratio: format!("{growth:.2}×"),
            target: "—".into(),
            met: None,
        };
        if targets && *count > 0 {
            row = row.target("≤ 1.5×", growth <= 1.5);
        }
        rows.push(row);
        let per_node = cost.requests as f64 / NODES as f64;
        let alone_per_node = alone.requests as f64 / NODES as f64;
        let mut row = Row {
            figure: format!(
                "Requests per node of {what} beside {count} unrelated pods ({tool}; audit log)"
            ),
            value: format!("{per_node:.1} ({} in all)", cost.requests),
            peer: "the same beside no unrelated pods".into(),
            peer_value: format!("{alone_per_node:.1}"),
            ratio: format!("{:.2}×", per_node / alone_per_node.max(1.0)),
            target: "—".into(),
            met: None,
        };
        if targets && *count > 0 {
            row = row.target("does not grow (≤ 1.1×)", per_node <= alone_per_node * 1.1);
        }
        rows.push(row);
    }
    rows
}

/// The view's stores and the offline snapshot of the 5,000-node synthetic cluster, as the
/// `view-memory` helper counts them.
fn memory(work: &Path) -> anyhow::Result<Row> {
    let file = work.join("cluster-5000-view.json");
    let out = std::fs::File::create(&file)?;
    let status = Command::new(helper_binary("gen-snapshot"))
        .args(["--nodes", "5000", "--groups", "10", "--zones", "3"])
        .args(["--pods-per-node", "30", "--pdbs", "2000", "--seed", "1"])
        .stdout(out)
        .status()?;
    anyhow::ensure!(status.success(), "gen-snapshot failed: {status}");
    let output = Command::new(helper_binary("view-memory"))
        .arg(&file)
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "view-memory failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let mib = |key: &str| report[key].as_f64().unwrap_or(0.0) / (1024.0 * 1024.0);
    let (view, snapshot) = (mib("view_bytes"), mib("snapshot_bytes"));
    Ok(Row {
        figure:
            "Memory of the live view, 5,000 nodes and 150,000 pods in view (bytes its stores hold)"
                .into(),
        value: format!("{view:.0} MiB"),
        peer: "the offline plan's snapshot of the same cluster (bytes it holds)".into(),
        peer_value: format!("{snapshot:.0} MiB"),
        ratio: format!("{:.2}×", view / snapshot),
        target: String::new(),
        met: None,
    }
    .target("≤ 230 MiB (the offline plan's peak RSS)", view <= 230.0))
}

pub fn run(work: &Path, baseline: Option<&Path>) -> anyhow::Result<Vec<Row>> {
    let mut by_tool: BTreeMap<&'static str, Vec<(usize, Cost)>> = BTreeMap::new();
    for count in UNRELATED {
        for (tool, cost) in one_size(*count, work, baseline)? {
            by_tool.entry(tool).or_default().push((*count, cost));
        }
    }
    let what = format!("rotating {NODES} nodes");
    let mut rows = Vec::new();
    for (tool, label, targets, what) in [
        ("current", "this build", true, what.as_str()),
        ("previous", "previous release", false, what.as_str()),
        (
            "kubectl",
            "`kubectl drain`",
            false,
            "draining the same 4 nodes",
        ),
    ] {
        if let Some(costs) = by_tool.get(tool) {
            rows.extend(rows_of(label, what, costs, targets));
        }
    }
    rows.push(memory(work)?);
    Ok(rows)
}
