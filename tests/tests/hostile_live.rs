//! Hostile hooks in a live rotation: `nodes --yes` against the real test cluster, once per
//! misbehaviour of the hostile test hook (and once per module that must never run). Each run ends
//! in its own named error with the usage or failure exit code, within its limit, and leaves the
//! cluster exactly as it found it: nodes, pods, controllers, the lock and the cloud's calls.
//!
//! The sandbox's own tests (tests/tests/hooks_sandbox.rs) check the same faults against the host
//! directly; these prove that a rotation acts on none of them.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, TestCluster};
use rollout_ext_e2e::fingerprint::{Fingerprint, wait_settled};
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{FAST_ROTATION, plugin_binary, wasm_module};
use serde_json::json;

const GROUP: &str = "hostile";
/// Per hook call. Low, so that a spinning hook ends quickly.
const TIMEOUT: &str = "300ms";
const MEMORY: &str = "32Mi";
/// A whole run, from start to exit: loading (a cold compile included) and one failing call.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// One hostile run: which module, at which point, in which mode, and how it must end.
struct Case {
    module: &'static str,
    point: &'static str,
    mode: &'static str,
    sha256: Option<&'static str>,
    code: i32,
    error: &'static str,
}

const fn fault(point: &'static str, mode: &'static str, error: &'static str) -> Case {
    Case {
        module: "hostile.wasm",
        point,
        mode,
        sha256: None,
        code: 1,
        error,
    }
}

const fn refused(module: &'static str, sha256: Option<&'static str>, error: &'static str) -> Case {
    Case {
        module,
        point: "select",
        mode: "none",
        sha256,
        code: 2,
        error,
    }
}

const CASES: &[Case] = &[
    fault(
        "select",
        "loop",
        "failed at the select point: timed out after 300ms",
    ),
    fault(
        "gate",
        "loop",
        "failed at the gate point: timed out after 300ms",
    ),
    // Spinning through host calls (reading the pending instances) is held to the same limit.
    fault(
        "batch",
        "hammer",
        "failed at the batch point: timed out after 300ms",
    ),
    fault(
        "select",
        "recursion",
        "failed at the select point: trapped: ",
    ),
    fault("select", "oom", "ran out of memory (limit 32 MiB)"),
    fault("select", "trap", "hostile hook panics on purpose"),
    fault("select", "refuse", "returned an error: refusing on purpose"),
    fault("select", "huge", "exceeds the 1048576-byte limit"),
    fault("select", "unknown", "no-such-node"),
    fault("select", "duplicate", "twice"),
    // Batch sizes are u32 in the WIT contract: a negative size cannot even be expressed, so
    // zero and the largest u32 are the extremes a module can answer.
    fault("batch", "zero", "gave an invalid answer: batch size 0"),
    fault("batch", "over-budget", "exceeds the budget"),
    fault("batch", "huge", "exceeds the budget"),
    fault("batch", "pause-forever", "outside"),
    fault("gate", "wait-forever", "outside"),
    // Escape attempts: the module reports what it could reach as its error.
    fault("select", "file", "returned an error: file:denied"),
    fault("select", "env", "returned an error: env:empty"),
    fault("select", "clock", "returned an error: clock:frozen"),
    fault("select", "socket", "returned an error: socket:denied"),
    // Modules that must never run: refused while loading, a policy error.
    refused("wrong_version.wasm", None, "rollout-ext:policy@0.1.0"),
    refused(
        "core.wasm",
        None,
        "is a core WebAssembly module, not a component",
    ),
    refused("truncated.wasm", None, "cannot compile"),
    refused("notes.wasm", None, "is not a WebAssembly file"),
    refused(
        "hostile.wasm",
        Some("0000000000000000000000000000000000000000000000000000000000000000"),
        "sha256 mismatch",
    ),
];

/// The hostile module, and the modules that must not run, side by side in `dir`.
fn modules(dir: &Path) {
    let hostile = std::fs::read(wasm_module("hostile-hook")).unwrap();
    std::fs::write(dir.join("hostile.wasm"), &hostile).unwrap();
    std::fs::write(dir.join("truncated.wasm"), &hostile[..hostile.len() / 2]).unwrap();
    std::fs::copy(
        wasm_module("wrong-version-hook"),
        dir.join("wrong_version.wasm"),
    )
    .unwrap();
    std::fs::write(dir.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    std::fs::write(dir.join("notes.wasm"), "this is not wasm").unwrap();
}

/// Two outdated nodes of `GROUP` and two pods on them, owned by a ReplicaSet.
async fn outdated_group_with_pods(cluster: &TestCluster) {
    cluster.cloud.set_group_spec(
        GROUP,
        GroupSpec {
            kubelet_version: Some("v1.20.2".into()),
            ..Default::default()
        },
    );
    for i in 1..=2 {
        let node = NodeSpec::new(&format!("{GROUP}-{i}"), GROUP)
            .zone(["a", "b"][i % 2])
            .kubelet("v1.19.7");
        cluster.nodes.add(node).await.unwrap();
    }
    let client = cluster.client().await;
    create_namespace(&client, GROUP).await;
    let rss: Api<ReplicaSet> = Api::namespaced(client, GROUP);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"nodeSelector": {"kops.k8s.io/instancegroup": GROUP},
                                       "containers": [{"name": "main", "image": "registry.invalid/app:1"}]}}}
    }))
    .unwrap();
    rss.create(&PostParams::default(), &rs).await.unwrap();
    let ready = |rs: Option<&ReplicaSet>| {
        rs.and_then(|r| r.status.as_ref())
            .and_then(|s| s.ready_replicas)
            == Some(2)
    };
    tokio::time::timeout(Duration::from_secs(120), await_condition(rss, "web", ready))
        .await
        .expect("the pods become Ready")
        .unwrap();
}

/// `nodes --yes` on `GROUP` with the hostile hook of `case`; its exit code, stderr and duration.
async fn rotate(cluster: &TestCluster, dir: &Path, case: &Case) -> (Option<i32>, String, Duration) {
    let pin = case
        .sha256
        .map(|s| format!(", sha256: \"{s}\""))
        .unwrap_or_default();
    let hook = format!(
        "  hooks:\n  - {{name: hostile, module: {}, points: [{}], timeout: {TIMEOUT}, memory: {MEMORY}{pin}, config: {{{}: {}}}}}\n",
        case.module, case.point, case.point, case.mode
    );
    let policy = cluster.exec_policy(dir, &hook);
    let mut command = tokio::process::Command::new(plugin_binary());
    command
        .args(["nodes", "--yes", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .arg("--policy")
        .arg(&policy)
        .args(["--instance-group", GROUP, "--kubelet-version", "v1.20.2"])
        .args(FAST_ROTATION)
        .kill_on_drop(true);
    let started = Instant::now();
    let out = tokio::time::timeout(RUN_LIMIT, command.output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}={} did not end within {RUN_LIMIT:?}",
                case.point, case.mode
            )
        })
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), stderr, started.elapsed())
}

#[tokio::test]
async fn every_hostile_hook_stops_a_live_rotation_with_its_own_error_and_changes_nothing() {
    let cluster = TestCluster::shared();
    outdated_group_with_pods(cluster).await;
    let dir = tempfile::tempdir().unwrap();
    modules(dir.path());
    wait_settled(cluster, &[&format!("{GROUP}-1"), &format!("{GROUP}-2")]).await;
    let before = Fingerprint::take(cluster).await;
    for case in CASES {
        let what = format!("{} {}={}", case.module, case.point, case.mode);
        let (code, stderr, elapsed) = rotate(cluster, dir.path(), case).await;
        assert_eq!(code, Some(case.code), "{what}: {stderr}");
        assert!(stderr.contains(case.error), "{what}: {stderr}");
        if case.code == 1 {
            // A hook fault names the hook, and stops before the step it was asked about.
            assert!(
                stderr.contains("hook hostile failed at the")
                    && stderr.contains("nothing was changed by this step"),
                "{what}: {stderr}"
            );
        } else {
            // A module that must not run is a policy error naming the file and the hook's line.
            assert!(stderr.contains("policy.yaml:"), "{what}: {stderr}");
        }
        eprintln!("{what}: exit {code:?} after {elapsed:?}");
        before.assert_unchanged(cluster, &what).await;
    }

    // The fingerprint does see a change: a cordon of one of the group's nodes.
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let cordon = json!({"spec": {"unschedulable": true}});
    nodes
        .patch(
            &format!("{GROUP}-1"),
            &PatchParams::default(),
            &Patch::Merge(&cordon),
        )
        .await
        .unwrap();
    let changes = before.changes(&Fingerprint::take(cluster).await);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].starts_with(&format!("node {GROUP}-1: ")),
        "{changes:?}"
    );
}
