//! `nodes --yes --provider cluster-api` on the real test cluster, against the Cluster API
//! stand-in (MachineDeployment, MachineSet and Machine controllers): each old Machine is
//! removed once, through its MachineDeployment, never more nodes unavailable than the budget
//! (watched by the independent observer), with and without a surge; a Machine whose Node never
//! registered is replaced too, but not a replacement still booting when a stopped run is
//! resumed; a lagging MachineSet controller still removes each Machine of a batch; plans read
//! the Machines.

use rollout_ext_e2e::capi_rotation::{
    NEW, assert_back_at_size, assert_each_replaced_once, observed, outdated_deployment, removed,
    rotate_args,
};
use std::time::Duration;

use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::{events, events_named, plugin_binary, run_plugin, run_until};

/// One rotation at a time: they share the cluster's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Rotates `md` (`n` Machines) with `flags`, watched, and checks the run: every old Machine
/// removed once with its drain left to us, the budget used and never passed, the
/// MachineDeployment back at its size with nothing owed. Returns the run's events.
async fn rotate_watched(
    cluster: &TestCluster,
    ns: &str,
    md: &str,
    n: usize,
    (max_unavailable, max_surge): (usize, usize),
    flags: &[&str],
) -> Vec<serde_json::Value> {
    let outdated = outdated_deployment(cluster, ns, md, n).await;
    let observer = observed(cluster, ns, md, &outdated, max_unavailable, max_surge).await;
    let out = run_plugin(rotate_args(cluster, md, flags)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = assert_back_at_size(cluster, ns, md, n).await;
    let (report, fewest_available) = observer
        .finish(cluster, cluster.capi.calls_made(ns), now)
        .await;
    assert!(report.is_none(), "{}", report.unwrap());
    assert_eq!(
        fewest_available,
        Some(n - max_unavailable),
        "the budget was used and never passed"
    );
    assert_each_replaced_once(cluster, ns, md, &outdated);
    events(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_rotates_each_machine_once_within_its_budget() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let events = rotate_watched(
        cluster,
        "capi-roll",
        "workers",
        6,
        (2, 0),
        &["--max-unavailable", "2"],
    )
    .await;
    let batches: Vec<usize> = events
        .iter()
        .filter(|e| e["event"] == "batch-started")
        .map(|e| e["nodes"].as_array().unwrap().len())
        .collect();
    // A canary of one, then waves of two.
    assert_eq!(batches, [1, 2, 2, 1], "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deployment_surges_before_it_drains() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let events = rotate_watched(
        cluster,
        "capi-surge",
        "surgers",
        3,
        (0, 1),
        &["--max-surge", "1", "--max-unavailable", "0"],
    )
    .await;
    let surged: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "surging").collect();
    assert!(!surged.is_empty(), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_node_never_registered_is_replaced_without_a_drain() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let (ns, md) = ("capi-lost", "lost");
    let capi = &cluster.capi;
    capi.create_deployment(ns, md, 2, NEW).await.unwrap();
    let healthy = capi.wait_machines(ns, md, 2, NEW).await.unwrap();
    capi.set_never_joins(ns, md, true);
    capi.scale(ns, md, 3).await.unwrap();
    // Provisioning: the stand-in has decided it never joins (changing the setting now does
    // not change that).
    let known = healthy.clone();
    let stuck = capi
        .wait_for(ns, md, "a third Machine, provisioning", move |machines| {
            machines.len() == 3
                && machines.iter().any(|m| {
                    m.metadata.name.as_ref().is_some_and(|n| !known.contains(n))
                        && m.data["status"]["phase"] == "Provisioning"
                })
        })
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.metadata.name.unwrap())
        .find(|m| !healthy.contains(m))
        .unwrap();
    capi.set_never_joins(ns, md, false);

    // Just created, it is booting: the plan leaves it alone and says so.
    let plan_of = |flags: &[&str]| {
        let args: Vec<String> = rotate_args(cluster, md, flags)
            .into_iter()
            .filter(|a| a != "--yes")
            .collect();
        async move {
            let plan = run_plugin(args).await;
            let stderr = String::from_utf8_lossy(&plan.stderr).to_string();
            assert!(plan.status.success(), "{stderr}");
            serde_json::from_slice::<serde_json::Value>(&plan.stdout).unwrap()
        }
    };
    let updated = |plan: &serde_json::Value| -> Vec<(String, String)> {
        plan["groups"][0]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["update"] == true)
            .map(|i| (i["name"].to_string(), i["reason"].to_string()))
            .collect()
    };
    let fresh = plan_of(&[]).await;
    assert!(updated(&fresh).is_empty(), "{fresh}");
    let warned = fresh["warnings"].as_array().unwrap().iter().any(|w| {
        w.as_str()
            .unwrap()
            .contains(&format!("{stuck} has not registered"))
    });
    assert!(warned, "{fresh}");

    // Given no time to register, it is broken: the plan shows it, and says why.
    let impatient = ["--node-startup-timeout", "0s"];
    let broken = plan_of(&impatient).await;
    let want = (
        format!("{stuck:?}"),
        "\"not registered as a node\"".to_string(),
    );
    assert_eq!(updated(&broken), [want]);

    let out = run_plugin(rotate_args(cluster, md, &impatient)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = capi.wait_machines(ns, md, 3, NEW).await.unwrap();
    assert!(healthy.iter().all(|m| now.contains(m)), "{now:?}");
    assert!(!now.contains(&stuck));
    let removed: Vec<String> = removed(cluster, ns)
        .into_iter()
        .map(|d| d.machine)
        .collect();
    assert_eq!(removed, [stuck.as_str()]);
    let drained: Vec<serde_json::Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "cordoned" || e["event"] == "drained")
        .collect();
    assert!(drained.is_empty(), "nothing to drain: {drained:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stopped_while_a_replacement_boots_does_not_replace_it_again() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let (ns, md) = ("capi-resume", "resumed");
    let capi = &cluster.capi;
    let outdated = outdated_deployment(cluster, ns, md, 2).await;
    // Long enough for the next run to read the group before the replacement joins.
    capi.set_boot_delay(Duration::from_secs(5));
    let args = rotate_args(cluster, md, &[]);

    // Stopped as its first Machine is gone: its replacement is booting, with no Node yet.
    let plain: Vec<&String> = args.iter().filter(|a| *a != "-o" && *a != "json").collect();
    let mut first = std::process::Command::new(plugin_binary());
    first.args(plain);
    let lines = run_until(first, "terminated ").await;
    assert!(lines.last().unwrap().contains("terminated "), "{lines:?}");
    let machines = capi
        .wait_for(ns, md, "a replacement without a Node", |machines| {
            machines
                .iter()
                .any(|m| m.data["status"]["nodeRef"].is_null())
        })
        .await
        .unwrap();
    let names: Vec<String> = machines
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    let left: Vec<&String> = outdated.iter().filter(|m| names.contains(m)).collect();
    assert_eq!(left.len(), 1, "{names:?}");

    // The next run waits for it to join, and replaces the other old Machine only.
    let out = run_plugin(args).await;
    capi.set_boot_delay(Duration::from_millis(500));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = events_named(&out, "group-started");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(
        started[0]["instances"],
        serde_json::json!(left),
        "{names:?}"
    );
    assert_back_at_size(cluster, ns, md, 2).await;
    assert_each_replaced_once(cluster, ns, md, &outdated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_machine_set_still_removes_each_machine_of_a_batch() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let (ns, md) = ("capi-lag", "laggard");
    let outdated = outdated_deployment(cluster, ns, md, 3).await;
    // The second Machine of a batch is scaled down right after the first one's replica is given
    // back: a controller that sees both at once has nothing to add or remove, unless the
    // scale-down waits for the given-back replica's Machine.
    cluster.capi.set_lag(Duration::from_secs(1));
    let args = rotate_args(cluster, md, &["--max-unavailable", "2"]);
    let run = tokio::time::timeout(Duration::from_secs(90), run_plugin(args)).await;
    cluster.capi.set_lag(Duration::ZERO);
    let out = run.expect("the rotation finishes (a Machine that stays holds it for 10m)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batches: Vec<usize> = events_named(&out, "batch-started")
        .iter()
        .map(|e| e["nodes"].as_array().unwrap().len())
        .collect();
    assert_eq!(batches, [1, 2], "a batch of two");
    assert_back_at_size(cluster, ns, md, 3).await;
    assert_each_replaced_once(cluster, ns, md, &outdated);
}
