//! Gates that read service health from a real Prometheus: the `slo-gate` example holds a
//! rotation and a rolling update while the error ratio of an endpoint the test controls is
//! high, lets them go on when it falls, aborts when it never does; a Prometheus that stops
//! mid-run is the hook's failure for its `failurePolicy`; hostile and broken sources are named
//! errors that change nothing.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::Api;
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::metrics::{AppMetrics, ERROR_RATIO, Prometheus, huge_source, slow_source};
use rollout_ext_e2e::workloads::{create_namespace, replica_set};
use rollout_ext_e2e::{plan_of, run_plugin, run_watching, wasm_module};
use serde_json::Value;

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Errors per scrape that put the ratio at 0.5, far above the gate's 0.1.
const HIGH: u64 = 5;

/// An application endpoint at `errors` per scrape and a Prometheus that has scraped it.
async fn metrics(errors: u64) -> (AppMetrics, Prometheus) {
    tokio::task::spawn_blocking(move || {
        let app = AppMetrics::start(errors).unwrap();
        let prometheus = Prometheus::start(app.addr).unwrap();
        // The ratio needs two scrapes of both counters before it has a value.
        prometheus
            .wait_for(ERROR_RATIO, |v| (v > 0.1) == (errors >= 2))
            .unwrap();
        (app, prometheus)
    })
    .await
    .unwrap()
}

/// Policy lines (under `spec:`) with source `prom` at `url` and the slo-gate hook, granted it
/// unless `granted` is false.
fn slo_policy(url: &str, max_checks: u32, extra_hook_lines: &str, granted: bool) -> String {
    let module = wasm_module("slo-gate");
    let metrics = if granted {
        "      metrics: [prom]\n"
    } else {
        ""
    };
    format!(
        "  metricsSources:\n    - {{name: prom, url: \"{url}\", timeout: 10s}}\n  hooks:\n    - name: slo\n      module: {}\n      points: [gate]\n{metrics}{extra_hook_lines}      config: {{source: prom, query: \"{ERROR_RATIO}\", threshold: 0.1, for: 2, intervalSeconds: 1, maxChecks: {max_checks}}}\n",
        module.display()
    )
}

fn gate_waits(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| e["event"] == "decided" && e["point"] == "gate")
        .filter(|e| e["decision"].as_str().unwrap_or("").starts_with("wait"))
        .count()
}

#[tokio::test]
async fn a_rotation_holds_while_errors_rise_and_goes_on_when_they_fall() {
    let (app, prometheus) = metrics(HIGH).await;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("gated", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = slo_policy(&prometheus.url(), 600, "", true);
    let args = cluster.rotate_one_at_a_time(dir.path(), "gated", &spec, &[]);

    // The plan asks the gate for real (a query is a read) and shows its verdict.
    let printed = run_plugin(plan_of(&args)).await;
    assert!(printed.status.success(), "{printed:?}");
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let gate = &plan["groups"][0]["gate"];
    assert_eq!(gate["decidedBy"], "hook/slo", "{plan}");
    assert_eq!(gate["verdict"], "wait", "{plan}");
    let reason = gate["reason"].as_str().unwrap();
    assert!(reason.contains("is 0.5 (above 0.1)"), "{plan}");

    // The run holds before the group while the ratio is high: at every wait, nothing is
    // cordoned. After the third wait the errors stop, and the run goes on to the end.
    let handle = tokio::runtime::Handle::current();
    let errors = app.errors();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let cordoned_at_waits = Arc::new(Mutex::new(Vec::new()));
    let at_waits = cordoned_at_waits.clone();
    let (code, stderr) = run_watching(args, move |event| {
        let mut log = log.lock().unwrap();
        log.push(event.clone());
        if event["event"] == "decided"
            && event["decision"].as_str().unwrap_or("").starts_with("wait")
        {
            at_waits
                .lock()
                .unwrap()
                .push(handle.block_on(cluster.cordoned("gated")));
            if gate_waits(&log) == 3 {
                errors.store(0, Ordering::SeqCst);
            }
        }
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    assert!(gate_waits(&seen) >= 3, "{seen:?}");
    let at_waits = cordoned_at_waits.lock().unwrap().clone();
    assert!(
        at_waits.iter().all(Vec::is_empty),
        "cordoned while held: {at_waits:?}"
    );
    let first_wait = seen
        .iter()
        .position(|e| e["event"] == "decided" && e["point"] == "gate")
        .unwrap();
    let first_cordon = seen.iter().position(|e| e["event"] == "cordoned").unwrap();
    assert!(first_wait < first_cordon);
    assert_eq!(cluster.cloud.terminated("gated"), originals);
}

#[tokio::test]
async fn a_gate_whose_errors_never_fall_aborts_with_its_reason_and_cordons_nothing() {
    let (_app, prometheus) = metrics(HIGH).await;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("neverfalls", 1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = slo_policy(&prometheus.url(), 3, "", true);
    let args = cluster.rotate_one_at_a_time(dir.path(), "neverfalls", &spec, &[]);
    let out = run_plugin(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("hook/slo"), "{stderr}");
    assert!(
        stderr.contains("is 0.5 (above 0.1) after 3 checks"),
        "{stderr}"
    );
    assert_eq!(gate_waits(&rollout_ext_e2e::events(&out)), 2);
    assert!(cluster.cordoned("neverfalls").await.is_empty());
    assert!(cluster.cloud.terminated("neverfalls").is_empty());
}

#[tokio::test]
async fn a_rolling_update_holds_after_a_step_while_errors_rise() {
    let (app, prometheus) = metrics(HIGH).await;
    let cluster = TestCluster::shared();
    let ns = "slo-ru";
    let client = cluster.client().await;
    cluster
        .nodes
        .add(NodeSpec::new("slo-ru-node", ns))
        .await
        .unwrap();
    create_namespace(&client, ns).await;
    replica_set(&client, ns, "web", 2).await;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n{}",
            slo_policy(&prometheus.url(), 600, "", true)
        ),
    )
    .unwrap();
    let args: Vec<String> = [
        "rolling-update",
        "rs/web",
        "web-v2",
        "--image=registry.invalid/app:2",
        "--max-surge=1",
        "--max-unavailable=0",
        "--update-period=1s",
        "--poll-interval=1s",
        "--timeout=120s",
        "--policy",
        policy.to_str().unwrap(),
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "-n",
        ns,
        "-o",
        "json",
    ]
    .map(String::from)
    .to_vec();

    // The plan asks the gate after its first step, for real.
    let mut plan_args = args.clone();
    plan_args.push("--dry-run=client".into());
    let printed = run_plugin(plan_args).await;
    assert!(printed.status.success(), "{printed:?}");
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let gate = &plan["steps"][0]["gate"];
    assert_eq!(gate["verdict"], "wait", "{plan}");
    assert!(
        gate["reason"]
            .as_str()
            .unwrap()
            .contains("is 0.5 (above 0.1)"),
        "{plan}"
    );
    assert!(replica_sets.get_opt("web-v2").await.unwrap().is_none());

    // At every wait the next controller holds at its first step's size.
    let handle = tokio::runtime::Handle::current();
    let errors = app.errors();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let at_waits = sizes.clone();
    let mut waits = 0;
    let (code, stderr) = run_watching(args, move |event| {
        if event["event"] == "decided"
            && event["point"] == "gate"
            && event["decision"].as_str().unwrap_or("").starts_with("wait")
        {
            let next = handle.block_on(replica_sets.get("web-v2")).unwrap();
            at_waits.lock().unwrap().push(next.spec.unwrap().replicas);
            waits += 1;
            if waits == 3 {
                errors.store(0, Ordering::SeqCst);
            }
        }
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let sizes = sizes.lock().unwrap().clone();
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert!(
        sizes.iter().all(|s| *s == Some(1)),
        "held after the first step: {sizes:?}"
    );
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client, ns);
    let next = replica_sets.get("web-v2").await.unwrap();
    assert_eq!(next.spec.unwrap().replicas, Some(2));
    assert!(replica_sets.get_opt("web").await.unwrap().is_none());
}

#[tokio::test]
async fn a_prometheus_that_stops_mid_run_is_the_hooks_failure_for_its_failure_policy() {
    let (_app, prometheus) = metrics(0).await;
    let prometheus = Arc::new(prometheus);
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();

    for (group, extra, finishes) in [
        ("downfail", "", false),
        ("downignore", "      failurePolicy: Ignore\n", true),
    ] {
        let originals = cluster.outdated_group(group, 2).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let spec = slo_policy(&prometheus.url(), 600, extra, true);
        let args = cluster.rotate_one_at_a_time(dir.path(), group, &spec, &[]);
        // Prometheus goes away while the first batch is drained: its after-batch gate, and
        // every one after it, find the source unreachable.
        let stopper = prometheus.clone();
        let said = Arc::new(Mutex::new(String::new()));
        let log = said.clone();
        let (code, stderr) = run_watching(args.clone(), move |event| {
            log.lock().unwrap().push_str(&format!("{event}\n"));
            if event["event"] == "cordoned" {
                stopper.stop();
            }
        })
        .await;
        // Said on stderr when it stops the run, as a warning event when it is ignored.
        let said = format!("{stderr}{}", said.lock().unwrap());
        let named = said.contains("metrics source prom (") && said.contains("unreachable");
        assert!(named, "{group}: {said}");
        if finishes {
            assert_eq!(code, Some(0), "{group}: {stderr}");
            assert!(said.contains("failurePolicy: Ignore"), "{said}");
            assert_eq!(cluster.cloud.terminated(group), originals);
            continue;
        }
        // A hook's failure under Fail: exit 1, resumable.
        assert_eq!(code, Some(1), "{group}: {stderr}");
        assert!(
            stderr.contains("run the same command again to resume"),
            "{stderr}"
        );
        assert_eq!(
            cluster.cloud.terminated(group),
            originals[..1],
            "stopped after batch 1"
        );

        // The same command, once Prometheus is back, finishes the rotation.
        let restarted = prometheus.clone();
        tokio::task::spawn_blocking(move || restarted.restart().unwrap())
            .await
            .unwrap();
        let out = run_plugin(args).await;
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            cluster.cloud.terminated(group),
            originals,
            "each replaced once"
        );
    }
}

#[tokio::test]
async fn hostile_and_broken_sources_are_named_errors_and_change_nothing() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("hostilesrc", 1).await.unwrap();
    let huge = format!("http://{}", huge_source(100 << 20).unwrap());
    let slow = format!("http://{}", slow_source(Duration::from_secs(30)).unwrap());
    // A name no resolver answers quickly here: the lookup must not outlive the hook's second.
    let unresolvable = "http://prometheus.monitoring.svc.invalid:9090";
    let cases = [
        (
            slo_policy(&huge, 3, "", false),
            1,
            "hook slo failed at the gate point: asked metrics source \"prom\", which the policy does not grant it",
        ),
        (
            slo_policy(&huge, 3, "", true),
            1,
            "the answer is larger than the 4 MiB the host reads",
        ),
        (
            slo_policy(&slow, 3, "      timeout: 1s\n", true),
            1,
            "timed out after 1s waiting on metrics source prom",
        ),
        (
            slo_policy(unresolvable, 3, "      timeout: 1s\n", true),
            1,
            "metrics source prom",
        ),
        (
            slo_policy("file:///etc/passwd", 3, "", true),
            2,
            "the scheme \"file\" is not allowed",
        ),
    ];
    for (spec, exit, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let args = cluster.rotate_one_at_a_time(dir.path(), "hostilesrc", &spec, &[]);
        let started = std::time::Instant::now();
        let out = run_plugin(args).await;
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(exit), "{says}: {stderr}");
        // Each fails at the first gate, within the hook's second: never the source's 10s
        // timeout, nor the slow source's 30s.
        assert!(took < Duration::from_secs(5), "{says}: took {took:?}");
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(cluster.cordoned("hostilesrc").await.is_empty(), "{says}");
        assert!(cluster.cloud.terminated("hostilesrc").is_empty(), "{says}");
    }
    // A policy error says where: the source's url line.
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(
        dir.path(),
        "hostilesrc",
        &slo_policy("file:///etc/passwd", 3, "", true),
        &[],
    );
    let out = run_plugin(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("policy.yaml:9:"), "{stderr}");
}
