//! `rolling-update sts/NAME` on the real test bed: the controller-manager's StatefulSet
//! controller updates the pods as the plugin lowers the partition, the scheduler places them
//! on a simulated node, and a pod watcher checks the order and the unavailability budget.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Client, ResourceExt};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::stateful::{create_sts, image_of, wait_all_on, watch_pods};
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{
    described as text, events_named as events, output as run, plugin_binary, rolling_update,
    run_until,
};

fn plugin(cluster: &TestCluster, ns: &str, args: &[&str]) -> Command {
    rolling_update(&cluster.kubeconfig, ns, args)
}
use serde_json::{Value, json};

const V1: &str = "registry.invalid/db:1";
const V2: &str = "registry.invalid/db:2";
const STRATEGY: &str = "rollout-ext.io/original-update-strategy";

/// A namespace with a simulated node of its own.
async fn setup(cluster: &TestCluster, ns: &str) -> Client {
    let client = cluster.client().await;
    cluster
        .nodes
        .add(NodeSpec::new(&format!("{ns}-node"), ns))
        .await
        .unwrap();
    create_namespace(&client, ns).await;
    client
}

async fn get(client: &Client, ns: &str, name: &str) -> Value {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

async fn images(client: &Client, ns: &str, app: &str) -> BTreeMap<String, String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&kube::api::ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap();
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), image_of(p).to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn five_replicas_roll_through_partitions_four_two_zero_highest_ordinals_first() {
    let cluster = TestCluster::shared();
    let ns = "sts-roll";
    let client = setup(cluster, ns).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
    let original = create_sts(&client, ns, "web", 5, V1, original).await;

    // The plan first: what the run will do, with nothing changed.
    let before = get(&client, ns, "web").await;
    let image = format!("--image={V2}");
    let out = run(plugin(
        cluster,
        ns,
        &[
            "sts/web",
            &image,
            "--max-unavailable=2",
            "--dry-run",
            "-o",
            "json",
        ],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        plan["target"],
        json!({"kind": "StatefulSet", "name": "web", "replicas": 5})
    );
    let planned: Vec<(Value, Value)> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["partition"].clone(), s["pods"].clone()))
        .collect();
    assert_eq!(
        planned,
        [
            (json!(4), json!(["web-4"])),
            (json!(2), json!(["web-3", "web-2"])),
            (json!(0), json!(["web-1", "web-0"])),
        ]
    );
    assert_eq!(plan["steps"][0]["canary"], true);
    // The API server accepts the write that starts the update, as a dry run.
    let out = run(plugin(
        cluster,
        ns,
        &["sts/web", &image, "--max-unavailable=2", "--dry-run=server"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server dry run: the API server accepts"),
        "{}",
        text(&out)
    );
    let after_plan = get(&client, ns, "web").await;
    assert_eq!(
        before["metadata"]["resourceVersion"],
        after_plan["metadata"]["resourceVersion"]
    );

    // The run does what the plan said, watched.
    let seen = watch_pods(&client, ns, "web", 5, V2);
    let out = run(plugin(
        cluster,
        ns,
        &["sts/web", &image, "--max-unavailable=2", "-o", "json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let set: Vec<(Value, Value, Value)> = events(&out, "partition-set")
        .iter()
        .map(|e| (e["to"].clone(), e["pods"].clone(), e["canary"].clone()))
        .collect();
    assert_eq!(
        set,
        [
            (json!(4), json!(["web-4"]), json!(true)),
            (json!(2), json!(["web-3", "web-2"]), json!(false)),
            (json!(0), json!(["web-1", "web-0"]), json!(false)),
        ]
    );
    assert_eq!(events(&out, "pods-updated").len(), 3, "{}", text(&out));
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    wait_all_on(&api, "web", 5).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.updated,
        ["web-4", "web-3", "web-2", "web-1", "web-0"],
        "ordinals updated highest first"
    );
    assert!(
        (1..=2).contains(&seen.most_unavailable),
        "at most 2 pods unavailable, and the watcher saw the update: {seen:?}"
    );
    assert!(!seen.updated_twice(), "{seen:?}");
    let after = get(&client, ns, "web").await;
    assert_eq!(after["spec"]["updateStrategy"], original);
    assert!(
        after["metadata"]["annotations"][STRATEGY].is_null(),
        "{after}"
    );
    assert!(images(&client, ns, "web").await.values().all(|i| i == V2));
    // The update's lock is gone with it.
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    assert!(
        leases
            .get_opt("rollout-ext-sts-web")
            .await
            .unwrap()
            .is_none(),
        "the lock was released"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gate_abort_stops_at_its_partition_and_rollback_restores_the_old_template() {
    let cluster = TestCluster::shared();
    let ns = "sts-abort";
    let client = setup(cluster, ns).await;
    create_sts(&client, ns, "db", 3, V1, json!({"type": "OnDelete"})).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = rollout_ext_e2e::aborting_gate_policy(dir.path());
    let policy = policy.to_str().unwrap();
    let image = format!("--image={V2}");

    // The canary goes, then the gate aborts: exit 3, the partition stays where it was.
    let out = run(plugin(cluster, ns, &["sts/db", &image, "--policy", policy])).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hook/stopper") && stderr.contains("with the partition at 2"),
        "{stderr}"
    );
    // OnDelete stays: the tool deleted the canary's pod itself, and nothing else moves.
    let stopped = get(&client, ns, "db").await;
    assert_eq!(
        stopped["spec"]["updateStrategy"],
        json!({"type": "OnDelete"})
    );
    assert_eq!(
        stopped["metadata"]["annotations"][STRATEGY],
        r#"{"type":"OnDelete"}"#
    );
    let now = images(&client, ns, "db").await;
    assert_eq!(now["db-2"], V2, "{now:?}");
    assert_eq!((now["db-0"].as_str(), now["db-1"].as_str()), (V1, V1));

    // --rollback: the old template back on every pod, OnDelete again.
    let out = run(plugin(cluster, ns, &["sts/db", "--rollback", "-o", "json"])).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(events(&out, "rolled-back").len(), 1, "{}", text(&out));
    let back = get(&client, ns, "db").await;
    assert_eq!(back["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    assert!(
        back["metadata"]["annotations"][STRATEGY].is_null(),
        "{back}"
    );
    assert_eq!(
        back["spec"]["template"]["spec"]["containers"][0]["image"],
        V1
    );
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    wait_all_on(&api, "db", 3).await;
    assert!(images(&client, ns, "db").await.values().all(|i| i == V1));

    // Requests that cannot work: exit 2, the object as it was (what a client writes: its spec,
    // labels and annotations; its controller goes on reporting status).
    let written = |set: &Value| {
        let meta = &set["metadata"];
        json!([
            meta["generation"],
            meta["labels"],
            meta["annotations"],
            set["spec"]
        ])
    };
    let before = written(&get(&client, ns, "db").await);
    for (args, says) in [
        (vec!["sts/db", "--rollback"], "no update in progress"),
        (vec!["sts/db", "--image", V1], "nothing to update"),
        (
            vec!["sts/db", image.as_str(), "--container", "nope"],
            "container \"nope\" not found",
        ),
        (
            vec!["sts/db", image.as_str(), "--max-surge", "1"],
            "cannot take --max-surge",
        ),
        (vec!["sts/db", "db-next", image.as_str()], "keeps its name"),
        (
            vec!["sts/gone", image.as_str()],
            "statefulset \"gone\" not found",
        ),
    ] {
        let out = run(plugin(cluster, ns, &args)).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(written(&get(&client, ns, "db").await), before);

    // The whole roll of an OnDelete StatefulSet: the tool deletes each step's pods, highest
    // ordinal first; OnDelete all along.
    let seen = watch_pods(&client, ns, "db", 3, V2);
    let out = run(plugin(
        cluster,
        ns,
        &["sts/db", &image, "--max-unavailable=2", "-o", "json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let steps: Vec<Value> = events(&out, "partition-set")
        .iter()
        .map(|e| e["pods"].clone())
        .collect();
    assert_eq!(steps, [json!(["db-2"]), json!(["db-1", "db-0"])]);
    wait_all_on(&api, "db", 3).await;
    // Within a step the controller starts the deleted pods again in its own order.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.updated.first().map(String::as_str),
        Some("db-2"),
        "{seen:?}"
    );
    assert_eq!(seen.updated.len(), 3, "{seen:?}");
    assert!((1..=2).contains(&seen.most_unavailable), "{seen:?}");
    let done = get(&client, ns, "db").await;
    assert_eq!(done["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    assert!(
        done["metadata"]["annotations"][STRATEGY].is_null(),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_after_its_first_step_the_same_command_goes_on_from_the_partition() {
    let cluster = TestCluster::shared();
    let ns = "sts-resume";
    let client = setup(cluster, ns).await;
    create_sts(&client, ns, "kv", 4, V1, json!({"type": "RollingUpdate"})).await;
    let original = get(&client, ns, "kv").await["spec"]["updateStrategy"].clone();
    let seen = watch_pods(&client, ns, "kv", 4, V2);
    let image = format!("--image={V2}");
    let lines = run_until(plugin(cluster, ns, &["sts/kv", &image]), "step 1 done").await;
    assert!(lines.iter().any(|l| l.contains("step 1 done")), "{lines:?}");
    // Killed after the canary's pod was up: the next step may have been sent already.
    let killed = get(&client, ns, "kv").await;
    let at = killed["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
        .as_i64()
        .unwrap();
    assert!((2..=3).contains(&at), "{killed}");

    // The lock of the killed run is taken over; the update goes on from that partition.
    let out = run(plugin(cluster, ns, &["sts/kv", &image, "-o", "json"])).await;
    assert!(out.status.success(), "{}", text(&out));
    let started = events(&out, "partition-update-started");
    assert_eq!(started[0]["partition"], at, "{}", text(&out));
    let set: Vec<i64> = events(&out, "partition-set")
        .iter()
        .map(|e| e["to"].as_i64().unwrap())
        .collect();
    let rest: Vec<i64> = (0..at).rev().collect();
    assert_eq!(set, rest, "one pod a step, no canary on resume");
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    wait_all_on(&api, "kv", 4).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.updated, ["kv-3", "kv-2", "kv-1", "kv-0"]);
    assert!(!seen.updated_twice(), "no pod updated twice: {seen:?}");
    let after = get(&client, ns, "kv").await;
    assert_eq!(after["spec"]["updateStrategy"], original);
    assert!(
        after["metadata"]["annotations"][STRATEGY].is_null(),
        "{after}"
    );
}

#[test]
fn a_plan_from_a_snapshot_resumes_from_the_partition_on_the_object() {
    let pod = |i: i32, revision: &str| {
        json!({"kind": "Pod", "metadata": {"name": format!("web-{i}"), "namespace": "default",
                "labels": {"app": "web", "controller-revision-hash": revision}},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let set = json!({
        "kind": "StatefulSet", "apiVersion": "apps/v1",
        "metadata": {"name": "web", "namespace": "default", "generation": 2,
                     "annotations": {STRATEGY: r#"{"type":"RollingUpdate"}"#}},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": V2}]}}},
        "status": {"observedGeneration": 2, "currentRevision": "web-a", "updateRevision": "web-b"}
    });
    let list = json!({"kind": "List", "apiVersion": "v1",
        "items": [set, pod(0, "web-a"), pod(1, "web-a"), pod(2, "web-b"), pod(3, "web-b")]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let plan = |extra: &[&str]| {
        let out = Command::new(plugin_binary())
            .args(["rolling-update", "sts/web", "--from-snapshot"])
            .arg(&file)
            .args(["-o", "json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let image = format!("--image={V2}");
    let resumed = plan(&[&image]);
    let steps: Vec<Value> = resumed["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([s["partition"], s["pods"]]))
        .collect();
    assert_eq!(steps, [json!([1, ["web-1"]]), json!([0, ["web-0"]])]);
    // A rollback reverts the two updated ordinals, then settles the rest.
    let back = plan(&["--rollback", "--canary=0"]);
    let steps: Vec<Value> = back["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([s["partition"], s["pods"]]))
        .collect();
    assert_eq!(steps, [json!([3, ["web-3"]]), json!([2, ["web-2"]])]);
    assert_eq!(back["settle"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_pauses_aborts_and_resumes_a_stateful_set_update_held_by_its_lock() {
    let cluster = TestCluster::shared();
    let ns = "sts-ops";
    let client = setup(cluster, ns).await;
    create_sts(&client, ns, "q", 2, V1, json!({"type": "RollingUpdate"})).await;
    let control = |args: &[&str]| {
        Command::new(plugin_binary())
            .args(args)
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args(["-n", ns])
            .output()
            .unwrap()
    };
    let out = control(&["abort", "sts/q"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no rolling update of sts/q is under way")
    );
    let out = control(&["pause", "sts/q", "--reason", "db maintenance"]);
    assert!(out.status.success(), "{}", text(&out));

    // The run starts the update, holds before its first step, and stops on the abort.
    let mut args: Vec<String> = [
        "rolling-update",
        "sts/q",
        &format!("--image={V2}"),
        "-o",
        "json",
    ]
    .map(String::from)
    .to_vec();
    args.extend(
        [
            "--poll-interval=1s",
            "--kubeconfig",
            cluster.kubeconfig.to_str().unwrap(),
            "-n",
            ns,
        ]
        .map(String::from),
    );
    let kubeconfig = cluster.kubeconfig.clone();
    let (code, stderr) = rollout_ext_e2e::run_watching(args.clone(), move |event| {
        if event["event"] == "paused" {
            assert_eq!(event["reason"], "db maintenance", "{event}");
            // Held here, the run keeps its lock: a second run of the same StatefulSet is refused.
            let second = Command::new(plugin_binary())
                .args([
                    "rolling-update",
                    "sts/q",
                    &format!("--image={V2}"),
                    "-n",
                    "sts-ops",
                ])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&second.stderr);
            assert_eq!(second.status.code(), Some(4), "{said}");
            assert!(
                said.contains("another run holds the lock sts-ops/rollout-ext-sts-q"),
                "{said}"
            );
            let out = Command::new(plugin_binary())
                .args(["abort", "sts/q", "--reason", "bad night", "-n", "sts-ops"])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    })
    .await;
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("bad night") && stderr.contains("before step 1"),
        "{stderr}"
    );
    let held = get(&client, ns, "q").await;
    assert_eq!(
        held["spec"]["updateStrategy"]["rollingUpdate"]["partition"], 2,
        "nothing moved"
    );
    assert!(
        held["metadata"]["annotations"]["rollout-ext.io/abort"].is_null(),
        "{held}"
    );
    assert!(images(&client, ns, "q").await.values().all(|i| i == V1));

    // Resumed, the same command finishes.
    let out = control(&["resume", "sts/q"]);
    assert!(out.status.success(), "{}", text(&out));
    let (code, stderr) = rollout_ext_e2e::run_watching(args, |_| {}).await;
    assert_eq!(code, Some(0), "{stderr}");
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    wait_all_on(&api, "q", 2).await;
    assert!(images(&client, ns, "q").await.values().all(|i| i == V2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_run_asks_the_gate_about_what_moved_before_moving_more() {
    let cluster = TestCluster::shared();
    let ns = "sts-regate";
    let client = setup(cluster, ns).await;
    create_sts(&client, ns, "rg", 4, V1, json!({"type": "RollingUpdate"})).await;
    let image = format!("--image={V2}");
    let lines = run_until(plugin(cluster, ns, &["sts/rg", &image]), "step 1 done").await;
    assert!(lines.iter().any(|l| l.contains("step 1 done")), "{lines:?}");
    let at = get(&client, ns, "rg").await["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
        .clone();

    // Rerun with a gate that aborts: it is asked about the pods that moved before anything
    // else moves, so the partition stays where the killed run left it.
    let dir = tempfile::tempdir().unwrap();
    let policy = rollout_ext_e2e::aborting_gate_policy(dir.path());
    let out = run(plugin(
        cluster,
        ns,
        &[
            "sts/rg",
            &image,
            "--policy",
            policy.to_str().unwrap(),
            "-o",
            "json",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(events(&out, "partition-set").is_empty(), "{}", text(&out));
    let after = get(&client, ns, "rg").await;
    assert_eq!(
        after["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        at
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abort_while_new_pods_are_awaited_stops_the_update_at_once() {
    let cluster = TestCluster::shared();
    let ns = "sts-abort-await";
    let client = setup(cluster, ns).await;
    create_sts(
        &client,
        ns,
        "stuck",
        2,
        V1,
        json!({"type": "RollingUpdate"}),
    )
    .await;
    // The new template asks for a node there is none of: its pod is never scheduled, so the
    // update waits for it (an hour between looks, an hour without progress allowed) until the
    // abort.
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("stuck.yaml");
    let template = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "stuck"},
        "spec": {"template": {
            "metadata": {"labels": {"app": "stuck"}},
            "spec": {"terminationGracePeriodSeconds": 1, "nodeSelector": {"rollout-ext.test/none": "here"},
                     "containers": [{"name": "main", "image": V2}]}
        }}
    });
    std::fs::write(&manifest, template.to_string()).unwrap();
    let args = [
        "rolling-update",
        "sts/stuck",
        "-f",
        manifest.to_str().unwrap(),
        "-o=json",
        "--poll-interval=1h",
        "--timeout=1h",
        "-n",
        ns,
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
    ];
    let kubeconfig = cluster.kubeconfig.clone();
    let aborted = Arc::new(Mutex::new(None));
    let at = aborted.clone();
    let args = args.map(String::from).to_vec();
    let (code, stderr) = rollout_ext_e2e::run_watching(args, move |event| {
        if event["event"] == "partition-set" && at.lock().unwrap().is_none() {
            let out = Command::new(plugin_binary())
                .args([
                    "abort",
                    "sts/stuck",
                    "--reason",
                    "not scheduling",
                    "-n",
                    "sts-abort-await",
                ])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out));
            *at.lock().unwrap() = Some(Instant::now());
        }
    })
    .await;
    let after_abort = aborted
        .lock()
        .unwrap()
        .unwrap_or_else(|| panic!("the update set no partition: {stderr}"))
        .elapsed();
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("not scheduling")
            && stderr.contains("while waiting for the pods of statefulset/stuck from ordinal 1"),
        "{stderr}"
    );
    assert!(
        after_abort < Duration::from_secs(1),
        "the run stopped {after_abort:?} after the abort, within a second of it: {stderr}"
    );
    let held = get(&client, ns, "stuck").await;
    assert_eq!(
        held["spec"]["updateStrategy"]["rollingUpdate"]["partition"], 1,
        "the update stops where it was: {held}"
    );
}

/// A StatefulSet with its own `rollingUpdate.maxUnavailable`, planned from a snapshot: its steps
/// take that many pods, unless `--max-unavailable` says otherwise (live: the next test).
#[test]
fn a_plan_takes_the_sets_own_max_unavailable_unless_told_otherwise() {
    let pod = |i: i32| {
        json!({"kind": "Pod", "metadata": {"name": format!("web-{i}"), "namespace": "default",
                "labels": {"app": "web", "controller-revision-hash": "web-a"}},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let set = json!({
        "kind": "StatefulSet", "apiVersion": "apps/v1",
        "metadata": {"name": "web", "namespace": "default", "generation": 1},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "main", "image": V1}]}}},
        "status": {"observedGeneration": 1, "currentRevision": "web-a", "updateRevision": "web-a"}
    });
    let mut items = vec![set];
    items.extend((0..5).map(pod));
    let list = json!({"kind": "List", "apiVersion": "v1", "items": items});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("snapshot.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let steps = |extra: &[&str]| {
        let out = Command::new(plugin_binary())
            .args(["rolling-update", "sts/web", "--from-snapshot"])
            .arg(&file)
            .args(["-o", "json", &format!("--image={V2}"), "--canary=0"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        (plan["steps"].as_array().unwrap().iter())
            .map(|s| s["pods"].as_array().unwrap().len())
            .collect::<Vec<_>>()
    };
    assert_eq!(steps(&[]), [2, 2, 1]);
    assert_eq!(steps(&["--max-unavailable=1"]), [1, 1, 1, 1, 1]);
}

/// A StatefulSet with its own `rollingUpdate.maxUnavailable: 2`, which a 1.37 server honours
/// (MaxUnavailableStatefulSet, on by default): the plan, with no `--max-unavailable`, takes its
/// steps two pods at a time after the canary; the run sets the same partitions, and the server's
/// controller replaces the two pods of a step at once (two unavailable, never more).
#[tokio::test(flavor = "multi_thread")]
async fn a_sets_own_max_unavailable_rolls_as_its_plan_said() {
    let cluster = TestCluster::shared();
    let ns = "sts-own-budget";
    let client = setup(cluster, ns).await;
    let original =
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 2}});
    let original = create_sts(&client, ns, "web", 5, V1, original).await;
    assert_eq!(original["rollingUpdate"]["maxUnavailable"], 2, "{original}");
    let image = format!("--image={V2}");
    let out = run(plugin(
        cluster,
        ns,
        &["sts/web", &image, "--dry-run", "-o", "json"],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let planned: Vec<(Value, Value)> = (plan["steps"].as_array().unwrap().iter())
        .map(|s| (s["partition"].clone(), s["pods"].clone()))
        .collect();
    let expected = [
        (json!(4), json!(["web-4"])),
        (json!(2), json!(["web-3", "web-2"])),
        (json!(0), json!(["web-1", "web-0"])),
    ];
    assert_eq!(planned, expected);

    let seen = watch_pods(&client, ns, "web", 5, V2);
    let out = run(plugin(cluster, ns, &["sts/web", &image, "-o", "json"])).await;
    assert!(out.status.success(), "{}", text(&out));
    let set: Vec<(Value, Value)> = (events(&out, "partition-set").iter())
        .map(|e| (e["to"].clone(), e["pods"].clone()))
        .collect();
    assert_eq!(set, expected, "the run set the partitions its plan said");
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    wait_all_on(&api, "web", 5).await;
    let seen = seen.lock().unwrap().clone();
    // Step by step; within a step, the two pods in the order they became Ready.
    let mut steps: Vec<Vec<&str>> = [0..1, 1..3, 3..5]
        .into_iter()
        .map(|at| seen.updated[at].iter().map(String::as_str).collect())
        .collect();
    steps.iter_mut().for_each(|step| step.sort());
    assert_eq!(
        steps,
        [
            vec!["web-4"],
            vec!["web-2", "web-3"],
            vec!["web-0", "web-1"]
        ],
        "{seen:?}"
    );
    assert_eq!(
        seen.most_unavailable, 2,
        "the controller replaced a step's two pods at once, never more: {seen:?}"
    );
    assert!(!seen.updated_twice(), "{seen:?}");
    assert_eq!(
        get(&client, ns, "web").await["spec"]["updateStrategy"],
        original
    );
}

/// An update records each step on the cluster; the plan of the next update of the StatefulSet
/// estimates from it, and comes within 0.67–1.5 times the run's actual wall time.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_updates_plan_estimates_from_what_an_update_measured() {
    let cluster = TestCluster::shared();
    let ns = "sts-estimated";
    let client = setup(cluster, ns).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
    create_sts(&client, ns, "db", 3, V1, original).await;
    // The second round's hooks trace what they are told (contract 0.3.5), with `-v`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        rollout_ext_e2e::wasm_module("hostile-hook"),
        dir.path().join("h.wasm"),
    )
    .unwrap();
    let tracer = dir.path().join("policy.yaml");
    std::fs::write(
        &tracer,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: tracer, module: h.wasm, points: [batch, gate], config: {batch: trace, gate: trace}}\n",
    )
    .unwrap();
    let traced = ["--policy", tracer.to_str().unwrap(), "-v"];
    let estimate = |image: &str, extra: &[&str]| {
        let image = format!("--image={image}");
        let mut args = vec!["sts/db", &image, "--dry-run", "-o", "json"];
        args.extend_from_slice(extra);
        let out = plugin(cluster, ns, &args);
        async move {
            let out = run(out).await;
            assert!(out.status.success(), "{}", text(&out));
            let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
            plan["estimate"].clone()
        }
    };
    let update = |image: &str, extra: &[&str]| {
        let image = format!("--image={image}");
        let mut args = vec!["sts/db", &image];
        args.extend_from_slice(extra);
        run(plugin(cluster, ns, &args))
    };

    let first = estimate(V2, &[]).await;
    assert!(
        !first["basis"].as_str().unwrap().starts_with("history of"),
        "{first}"
    );
    let out = update(V2, &[]).await;
    assert!(out.status.success(), "{}", text(&out));

    let planned = estimate("registry.invalid/db:3", &traced).await;
    assert_eq!(planned["basis"], "history of 1 run", "{planned}");
    let seconds = planned["seconds"].as_f64().unwrap();
    let started = Instant::now();
    let out = update("registry.invalid/db:3", &traced).await;
    assert!(out.status.success(), "{}", text(&out));
    let actual = started.elapsed().as_secs_f64();
    // Each step's size is asked with the step's estimate and the steps left (three: the
    // canary, then one at a time), down to the last step alone; each gate with what is left.
    let told: Vec<(String, Option<u64>, u64)> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| {
            l.split_once("[hook tracer] trace ")
                .map(|(_, t)| t.to_string())
        })
        .map(|t| {
            let told = t.split(' ').find_map(|w| w.strip_prefix("told=")).unwrap();
            let (step, left) = told.split_once('/').unwrap();
            let point = t.split(' ').next().unwrap().to_string();
            (point, step.parse().ok(), left.parse().unwrap())
        })
        .collect();
    let sized: Vec<&(String, Option<u64>, u64)> = told.iter().filter(|t| t.0 == "batch").collect();
    assert_eq!(sized.len(), 3, "{told:?}");
    // Whole seconds, each rounded: three steps are three times one, give or take the rounding.
    let step = sized[0].1.expect("a step's estimate");
    assert!(sized[0].2.abs_diff(3 * step) <= 1, "{told:?}");
    // Never more after a step; less in all (steps of about a second can round alike).
    assert!(
        sized[1].2 <= sized[0].2 && sized[2].2 < sized[0].2,
        "{told:?}"
    );
    assert_eq!(sized[2].2, step, "{told:?}");
    assert!(
        told.iter().filter(|t| t.0 == "gate").all(|t| t.1.is_none()),
        "{told:?}"
    );
    assert_eq!(
        told.last().map(|t| t.2),
        Some(0),
        "nothing left after the last step: {told:?}"
    );
    let ratio = seconds / actual;
    println!("estimated {seconds}s, took {actual:.1}s: ratio {ratio:.2} ({planned})");
    assert!(
        (0.67..=1.5).contains(&ratio),
        "estimated {seconds}s, took {actual:.1}s (ratio {ratio:.2}): {planned}"
    );
}

/// The write that starts an update, made from a read its controller has since overtaken (a
/// status report): written again onto the set as it is now, and said. Had its spec, labels or
/// annotations moved instead, it is the server's 409, and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_overtaken_by_a_status_report_is_written_again_and_a_spec_change_is_a_conflict() {
    use rollout_ext::cluster::controllers::Write;
    let cluster = TestCluster::shared();
    let ns = "sts-overtaken";
    let client = setup(cluster, ns).await;
    let original = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}});
    create_sts(&client, ns, "db", 1, V1, original).await;
    let live = cluster.live().await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let with_label = |value: &'static str| {
        move |s: &rollout_ext::plan::rolling_update::stateful_set::StatefulSet| {
            let mut s = s.clone();
            s.object["metadata"]["labels"]["touched"] = json!(value);
            s
        }
    };
    let overtake = |patch: Value, status: bool| {
        let sets = sets.clone();
        async move {
            let params = kube::api::PatchParams::default();
            let patch = kube::api::Patch::Merge(patch);
            if status {
                sets.patch_status("db", &params, &patch).await.unwrap();
            } else {
                sets.patch("db", &params, &patch).await.unwrap();
            }
        }
    };

    let read = live.get_stateful_set(ns, "db").await.unwrap().unwrap();
    overtake(json!({"status": {"collisionCount": 7}}), true).await;
    let changed = (live.change_stateful_set(ns, &read, with_label("once"), Write::Apply))
        .await
        .expect("a status report is no conflict");
    assert!(changed.rewritten);
    let now = get(&client, ns, "db").await;
    assert_eq!(now["metadata"]["labels"]["touched"], "once");
    assert_eq!(now["status"]["collisionCount"], 7, "the status as reported");

    let read = live.get_stateful_set(ns, "db").await.unwrap().unwrap();
    overtake(
        json!({"metadata": {"annotations": {"someone": "else"}}}),
        false,
    )
    .await;
    let err = (live.change_stateful_set(ns, &read, with_label("twice"), Write::Apply))
        .await
        .err()
        .expect("a change by someone else is a conflict");
    assert!(err.to_string().contains("409"), "{err}");
    assert_eq!(
        get(&client, ns, "db").await["metadata"]["labels"]["touched"],
        "once"
    );
}
