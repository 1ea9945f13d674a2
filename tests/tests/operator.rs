//! The on-call engineer's controls on the real test bed: a soak between batches, and a run that
//! stops, resumably and before the next batch, when a batch's replacements never join.

use std::process::Command;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use rollout_ext_e2e::cluster::{GroupSpec, TestCluster};
use rollout_ext_e2e::{events, plugin_binary, run_plugin};
use serde_json::Value;

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What `status -o json` says, from a process of its own.
fn status(cluster: &TestCluster) -> Value {
    let out = Command::new(plugin_binary())
        .args([
            "status",
            "--kubeconfig",
            cluster.kubeconfig.to_str().unwrap(),
        ])
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `nodes --yes` of `group` one node at a time, with `extra` flags.
fn rotate_args(
    cluster: &TestCluster,
    dir: &std::path::Path,
    group: &str,
    extra: &[&str],
) -> Vec<String> {
    let policy = cluster.exec_policy(dir, "");
    let mut args = cluster.rotate_args(&policy, group);
    args.extend(
        ["--max-unavailable", "1"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    args
}

#[tokio::test]
async fn a_soak_holds_between_batches_as_the_plan_said() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("soaked", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = rotate_args(cluster, dir.path(), "soaked", &["--soak", "1s"]);

    let plan_args: Vec<String> = args.iter().filter(|a| *a != "--yes").cloned().collect();
    let printed = run_plugin(plan_args).await;
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let soaks: Vec<&Value> = plan["groups"][0]["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["soakSeconds"])
        .collect();
    assert_eq!(
        soaks,
        [&Value::from(1), &Value::Null],
        "after every batch but the last"
    );

    let out = run_plugin(args).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds: Vec<String> = events(&out)
        .iter()
        .filter_map(|e| match e["event"].as_str()? {
            "batch-started" => Some("batch".to_string()),
            "waiting" if e["reason"].as_str()?.starts_with("soak after batch") => {
                Some(format!("soak {}", e["seconds"]))
            }
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["batch", "soak 1", "batch"]);
}

#[tokio::test]
async fn replacements_that_never_join_stop_the_run_before_the_next_batch() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("nojoin", 3).await.unwrap();
    cluster.cloud.set_group_spec(
        "nojoin",
        GroupSpec {
            kubelet_version: Some("v1.20.2".into()),
            never_joins: true,
            ..Default::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let mut args = rotate_args(cluster, dir.path(), "nojoin", &[]);
    let at = args
        .iter()
        .position(|a| a == "--replacement-timeout")
        .unwrap();
    args[at + 1] = "3s".into();
    let out = run_plugin(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("group nojoin: 1 replacement(s) not Ready after 3s")
            && stderr.contains("run the same command to resume"),
        "{stderr}"
    );
    let terminated = cluster.cloud.terminated("nojoin");
    assert_eq!(terminated.len(), 1, "{terminated:?}");
    // The stopped run's record says what it was waiting for.
    let stopped = status(cluster);
    assert_eq!(stopped["lock"]["holder"], "", "{stopped}");
    let what = stopped["holding"]["what"].as_str().unwrap_or_default();
    assert!(
        what.starts_with("waiting for group nojoin to have 3 Ready nodes"),
        "{stopped}"
    );
    // No node of the next batch was cordoned.
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let left = nodes
        .list(&ListParams::default().labels("kops.k8s.io/instancegroup=nojoin"))
        .await
        .unwrap()
        .items;
    assert_eq!(left.len(), originals.len() - 1);
    for node in &left {
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
        assert!(!cordoned, "{:?} was cordoned", node.metadata.name);
    }
}

#[tokio::test]
async fn status_says_what_holds_the_run_while_it_waits() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("held", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = rotate_args(cluster, dir.path(), "held", &["--soak", "8s"]);
    let (during, code) = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut child = Command::new(plugin_binary())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut during = None;
        for line in lines {
            let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
            let soaking = event["event"] == "waiting"
                && event["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("soak after batch 1"));
            if soaking && during.is_none() {
                // The run is in its soak: ask another process what holds it.
                during = Some(status(cluster));
            }
        }
        (during, child.wait().unwrap().code())
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0));
    let during = during.expect("the run soaked");
    assert!(
        !during["lock"]["holder"].as_str().unwrap().is_empty(),
        "{during}"
    );
    let what = during["holding"]["what"].as_str().unwrap();
    assert!(
        what.starts_with("waiting 8s: soak after batch 1 of group held"),
        "{during}"
    );
    assert!(
        during["holding"]["since"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .is_ok()
    );
}
