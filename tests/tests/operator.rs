//! The on-call engineer's controls on the real test bed: a soak between batches, a run that
//! stops, resumably and before the next batch, when a batch's replacements never join, and
//! pause, resume and abort from another process.

use std::process::Command;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, TestCluster};
use rollout_ext_e2e::workloads::blocked_group;
use rollout_ext_e2e::{events, plugin_binary, run_plugin, run_watching};
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

/// Asserts that the finished run of `group` let go of the lock: no Lease, or one with no holder,
/// nothing it waits on, and no state of `group` (other tests' stopped runs keep theirs).
fn let_go(cluster: &TestCluster, group: &str) {
    let status = status(cluster);
    let lock = &status["lock"];
    if lock.is_null() {
        return;
    }
    assert_eq!(lock["holder"], "", "{status}");
    assert!(status["holding"].is_null(), "{status}");
    let state = lock["state"].as_object().cloned().unwrap_or_default();
    let suffix = format!(".{group}");
    assert!(
        state
            .keys()
            .all(|k| !k.ends_with(&suffix) && k != "rollout-ext.io/holding"),
        "{status}"
    );
}

/// Runs a control command (`pause`, `resume`, `abort`) against `cluster`.
fn control(cluster: &TestCluster, args: &[&str]) -> std::process::Output {
    Command::new(plugin_binary())
        .args(args)
        .args(["--kubeconfig", cluster.kubeconfig.to_str().unwrap()])
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_soak_holds_between_batches_as_the_plan_said() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("soaked", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "soaked", "", &["--soak", "1s"]);

    let plan_args = rollout_ext_e2e::plan_of(&args);
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
    let mut args = cluster.rotate_one_at_a_time(dir.path(), "nojoin", "", &[]);
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
    let args = cluster.rotate_one_at_a_time(dir.path(), "held", "", &["--soak", "8s"]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let during = seen.clone();
    let (code, stderr) = run_watching(args, move |event| {
        let soaking = event["event"] == "waiting"
            && event["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("soak after batch 1"));
        let mut during = during.lock().unwrap();
        if soaking && during.is_none() {
            // The run is in its soak: ask another process what holds it.
            *during = Some(status(cluster));
        }
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let during = seen.lock().unwrap().take().expect("the run soaked");
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

#[tokio::test]
async fn pause_holds_the_rotation_before_its_next_batch_and_resume_continues() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("paused", 3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "paused", "", &[]);
    let (tx, mut held) = tokio::sync::mpsc::unbounded_channel();
    let handle = tokio::runtime::Handle::current();
    let (code, stderr) = run_watching(args, move |event| {
        if event["event"] == "batch-started" && event["index"] == 0 {
            // Asked while the first batch is in flight, from another process.
            let out = control(cluster, &["pause", "--reason", "zone b maintenance"]);
            assert!(out.status.success(), "{out:?}");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                said.starts_with("pause requested: the rotation of "),
                "{said}"
            );
        }
        if event["event"] == "paused" {
            // The run holds: what the cluster looks like now is what it stays until resume.
            let terminated = cluster.cloud.terminated("paused").len();
            let cordons = handle.block_on(cluster.cordoned("paused"));
            let during = status(cluster);
            let out = control(cluster, &["resume"]);
            tx.send((event.clone(), terminated, cordons, during, out))
                .unwrap();
        }
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let (paused, terminated, cordons, during, resumed) = held.recv().await.expect("it paused");
    assert!(held.try_recv().is_err(), "it paused once");
    // The batch in flight finished; the next one had not started.
    assert_eq!(terminated, 1);
    assert!(cordons.is_empty(), "cordoned while paused: {cordons:?}");
    assert_eq!(paused["reason"], "zone b maintenance");
    // The next step after a batch is its after-batch gate.
    assert_eq!(paused["at"], "after batch 1 of group paused", "{paused}");
    assert_eq!(during["controls"]["pause"]["reason"], "zone b maintenance");
    let what = during["holding"]["what"].as_str().unwrap();
    assert!(
        what.starts_with("paused after batch 1 of group paused, by "),
        "{what}"
    );
    assert!(resumed.status.success(), "{resumed:?}");
    // Every node was replaced once resumed, and the run let go of the Lease.
    assert_eq!(cluster.cloud.terminated("paused").len(), 3);
    let_go(cluster, "paused");
}

#[tokio::test]
async fn a_run_started_while_paused_waits_for_resume_and_changes_nothing_before() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("waits", 2).await.unwrap();
    let refused = control(cluster, &["abort"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no rotation is running"),
        "{refused:?}"
    );
    let out = control(cluster, &["pause", "--reason", "change freeze"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("pause recorded"));
    let twice = control(cluster, &["pause"]);
    assert_eq!(twice.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&twice.stderr).contains("already paused by "),
        "{twice:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "waits", "", &[]);
    let (tx, mut held) = tokio::sync::mpsc::unbounded_channel();
    let handle = tokio::runtime::Handle::current();
    let (code, stderr) = run_watching(args, move |event| {
        if event["event"] == "paused" {
            let touched = cluster.cloud.terminated("waits").len();
            let cordons = handle.block_on(cluster.cordoned("waits"));
            let out = control(cluster, &["resume"]);
            tx.send((event.clone(), touched, cordons, out)).unwrap();
        }
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let (paused, touched, cordons, resumed) = held.recv().await.expect("it paused");
    assert_eq!(paused["reason"], "change freeze");
    assert_eq!(paused["at"], "before group waits starts", "{paused}");
    assert_eq!((touched, cordons.len()), (0, 0));
    assert!(resumed.status.success(), "{resumed:?}");
    assert_eq!(cluster.cloud.terminated("waits").len(), 2);
    // Nothing is paused any more.
    let again = control(cluster, &["resume"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not paused"));
}

#[tokio::test]
async fn abort_stops_the_run_after_its_step_and_the_same_command_finishes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("aborted", 3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "aborted", "", &[]);
    let (code, stderr) = run_watching(args.clone(), move |event| {
        if event["event"] == "batch-started" && event["index"] == 0 {
            let out = control(cluster, &["abort", "--reason", "error rate up"]);
            assert!(out.status.success(), "{out:?}");
        }
    })
    .await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("aborted by ")
            && stderr.contains(": error rate up; stopped ")
            && stderr.contains("run the same command again to resume"),
        "{stderr}"
    );
    // The batch in flight was carried out; no other node was touched.
    assert_eq!(cluster.cloud.terminated("aborted").len(), 1);
    assert!(cluster.cordoned("aborted").await.is_empty());
    let stopped = status(cluster);
    assert!(stopped["controls"]["abort"].is_null(), "{stopped}");
    let what = stopped["holding"]["what"].as_str().unwrap();
    assert!(what.starts_with("aborted by "), "{stopped}");

    let out = run_plugin(args).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let terminated = cluster.cloud.terminated("aborted");
    assert_eq!(terminated.len(), originals.len(), "{terminated:?}");
}

#[tokio::test]
async fn an_abort_stops_a_drain_a_budget_blocks_and_the_same_command_finishes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pdbs = blocked_group(cluster, "abortdrain").await;
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "abortdrain", "", &[]);
    let mut asked = false;
    let (code, stderr) = run_watching(args.clone(), move |event| {
        if event["event"] == "eviction-blocked" && !asked {
            asked = true;
            let out = control(cluster, &["abort", "--reason", "budget stuck"]);
            assert!(out.status.success(), "{out:?}");
        }
    })
    .await;
    // Stopped where the budget held it, long before the drain's own timeout.
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains(": budget stuck; stopped while draining node abortdrain-1: eviction of pod abortdrain/web-"),
        "{stderr}"
    );
    assert!(cluster.cloud.terminated("abortdrain").is_empty());

    // The budget relaxed, the same command finishes the drain and the rotation.
    relax_and_finish(cluster, &pdbs, args, "abortdrain").await;
}

#[tokio::test]
async fn a_run_stopped_in_its_last_wait_is_finished_by_the_next_which_waits_for_the_replacement() {
    use k8s_openapi::api::coordination::v1::Lease;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("lastwait", 1).await.unwrap();
    cluster.cloud.set_group_spec(
        "lastwait",
        GroupSpec {
            kubelet_version: Some("v1.20.2".into()),
            never_joins: true,
            ..Default::default()
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let mut args = cluster.rotate_one_at_a_time(dir.path(), "lastwait", "", &[]);
    let at = args
        .iter()
        .position(|a| a == "--replacement-timeout")
        .unwrap();
    args[at + 1] = "3s".into();
    // The only node is replaced; its replacement does not join in time.
    let first = run_plugin(args.clone()).await;
    assert_eq!(first.status.code(), Some(1));
    assert_eq!(cluster.cloud.terminated("lastwait").len(), 1);

    // Nothing is left to rotate, but the group is short of a Ready node: the next run waits
    // for it (a watch of the Lease sees it waiting) and finishes once it joins.
    args[at + 1] = "60s".into();
    let second = tokio::spawn(run_plugin(args));
    let leases: Api<Lease> = Api::namespaced(cluster.client().await, "kube-system");
    let waiting = |lease: Option<&Lease>| {
        lease
            .and_then(|l| l.metadata.annotations.as_ref())
            .and_then(|a| a.get("rollout-ext.io/holding"))
            .is_some_and(|h| h.contains("waiting for group lastwait to have 1 Ready nodes"))
            && lease
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.as_deref())
                .is_some_and(|h| !h.is_empty())
    };
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        kube::runtime::wait::await_condition(leases, "rollout-ext", waiting),
    )
    .await
    .expect("the second run waits for the replacement")
    .unwrap();
    cluster
        .nodes
        .add(NodeSpec::new("lastwait-late", "lastwait").kubelet("v1.20.2"))
        .await
        .unwrap();
    let second = second.await.unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let replaced = events(&second)
        .into_iter()
        .any(|e| e["event"] == "replaced" && e["group"] == "lastwait" && e["ready"] == 1);
    assert!(replaced, "{}", String::from_utf8_lossy(&second.stdout));
    let_go(cluster, "lastwait");
}

#[tokio::test]
async fn status_names_the_pod_and_budget_a_blocked_drain_waits_on() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Patch, PatchParams};
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pdbs = blocked_group(cluster, "guarded").await;
    let leases: Api<Lease> = Api::namespaced(cluster.client().await, "kube-system");
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "guarded", "", &[]);
    let handle = tokio::runtime::Handle::current();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let during = seen.clone();
    let (code, stderr) = run_watching(args, move |event| {
        if event["event"] != "eviction-blocked" || during.lock().unwrap().is_some() {
            return;
        }
        // The run records the blocked eviction on its Lease; status reads it from there.
        let recorded = |lease: Option<&Lease>| {
            lease
                .and_then(|l| l.metadata.annotations.as_ref())
                .and_then(|a| a.get("rollout-ext.io/holding"))
                .is_some_and(|h| h.contains("eviction of pod"))
        };
        handle.block_on(async {
            let wait =
                kube::runtime::wait::await_condition(leases.clone(), "rollout-ext", recorded);
            tokio::time::timeout(std::time::Duration::from_secs(30), wait)
                .await
                .expect("the blocked eviction is recorded")
                .unwrap();
        });
        *during.lock().unwrap() = Some(status(cluster));
        // Relaxed, the budget lets the drain go on.
        let relax = Patch::Merge(serde_json::json!({"spec": {"maxUnavailable": 2}}));
        handle
            .block_on(pdbs.patch("web", &PatchParams::default(), &relax))
            .unwrap();
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let during = seen
        .lock()
        .unwrap()
        .take()
        .expect("an eviction was blocked");
    let what = during["holding"]["what"].as_str().unwrap();
    assert!(
        what.starts_with("draining node guarded-1: eviction of pod guarded/web-")
            && what.contains("guarded/web"),
        "{during}"
    );
    let_go(cluster, "guarded");
}

/// Lets the budget of a blocked group allow its pods to go, runs `args` again and asserts that
/// it finished: the group's node replaced, the lock let go.
async fn relax_and_finish(
    cluster: &TestCluster,
    pdbs: &Api<kube::api::DynamicObject>,
    args: Vec<String>,
    group: &str,
) {
    use kube::api::{Patch, PatchParams};
    let relax = Patch::Merge(serde_json::json!({"spec": {"maxUnavailable": 2}}));
    pdbs.patch("web", &PatchParams::default(), &relax)
        .await
        .unwrap();
    let out = run_plugin(args).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cluster.cloud.terminated(group), [format!("{group}-1")]);
    let_go(cluster, group);
}

/// Runs `args` and asks `abort --uncordon` once a budget blocks the drain; returns the exit
/// code, stderr and the events printed.
async fn aborted_with_uncordon(
    cluster: &'static TestCluster,
    args: Vec<String>,
) -> (Option<i32>, String, Vec<Value>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let mut asked = false;
    let (code, stderr) = run_watching(args, move |event| {
        record.lock().unwrap().push(event.clone());
        if event["event"] == "eviction-blocked" && !asked {
            asked = true;
            let out = control(
                cluster,
                &["abort", "--uncordon", "--reason", "give it back"],
            );
            assert!(out.status.success(), "{out:?}");
        }
    })
    .await;
    let events = seen.lock().unwrap().clone();
    (code, stderr, events)
}

/// `abort --uncordon` stops the run and gives the cordoned node back: schedulable, without our
/// phase and our load-balancer label; a load-balancer label someone else set stays.
#[tokio::test]
async fn abort_with_uncordon_gives_the_cordoned_node_back_without_our_labels() {
    use kube::api::{Patch, PatchParams};
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let pdbs = blocked_group(cluster, "abortunc").await;
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "abortunc", "", &[]);
    const LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

    let (code, stderr, events) = aborted_with_uncordon(cluster, args.clone()).await;
    assert_eq!(code, Some(3), "{stderr}");
    // Cordoned with our label, then given back.
    let cordoned = events
        .iter()
        .position(|e| e["event"] == "cordoned" && e["excluded_from_load_balancers"] == true);
    let uncordoned = events
        .iter()
        .position(|e| e["event"] == "uncordoned" && e["node"] == "abortunc-1");
    assert!(cordoned.is_some() && uncordoned > cordoned, "{events:?}");
    let node = nodes.get("abortunc-1").await.unwrap();
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true));
    assert!(!node.metadata.labels.unwrap_or_default().contains_key(LB));
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("rollout-ext.io/phase"),
        "{annotations:?}"
    );
    assert!(cluster.cloud.terminated("abortunc").is_empty());

    // Someone else's load-balancer label stays through the cordon and the uncordon.
    let theirs = serde_json::json!({"metadata": {"labels": {LB: "ops"}}});
    nodes
        .patch(
            "abortunc-1",
            &PatchParams::default(),
            &Patch::Merge(&theirs),
        )
        .await
        .unwrap();
    let (code, stderr, _) = aborted_with_uncordon(cluster, args.clone()).await;
    assert_eq!(code, Some(3), "{stderr}");
    let node = nodes.get("abortunc-1").await.unwrap();
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true));
    let labels = node.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(LB).map(String::as_str), Some("ops"));

    // The budget relaxed, the same command finishes.
    relax_and_finish(cluster, &pdbs, args, "abortunc").await;
}
