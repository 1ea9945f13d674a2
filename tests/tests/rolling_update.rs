//! `rolling-update` on the real test bed: the controller-manager creates the pods, the scheduler
//! places them on simulated nodes, and the plugin rolls ReplicationControllers and ReplicaSets
//! within their budgets, resumes after SIGKILL, finishes legacy rollouts and rolls back.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{plugin_binary, run_until, wasm_module, without_timestamp};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
const V1: &str = "registry.invalid/app:1";
const V2: &str = "registry.invalid/app:2";
/// Short waits: the loop's pace is set by the pods, not by timers.
const FAST: &[&str] = &["--update-period=1s", "--poll-interval=1s", "--timeout=90s"];

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

fn template(app: &str, image: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": image}]}
    })
}

async fn create_rc(client: &Client, ns: &str, name: &str, replicas: i32) -> ReplicationController {
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"app": name}, "template": template(name, V1)}
    }))
    .unwrap();
    api.create(&PostParams::default(), &rc).await.unwrap();
    wait_ready(&api, name, replicas).await;
    api.get(name).await.unwrap()
}

/// Waits until the controller `name` reports `n` ready replicas.
async fn wait_ready<K>(api: &Api<K>, name: &str, n: i32)
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + 'static,
{
    let ready = move |obj: Option<&K>| {
        obj.is_some_and(|o| {
            let v = serde_json::to_value(o).unwrap();
            v["status"]["readyReplicas"].as_i64().unwrap_or(0) == i64::from(n)
                && v["status"]["replicas"].as_i64().unwrap_or(0) == i64::from(n)
        })
    };
    tokio::time::timeout(WAIT, await_condition(api.clone(), name, ready))
        .await
        .unwrap_or_else(|_| panic!("{name} did not get {n} ready replicas within {WAIT:?}"))
        .unwrap();
}

/// `rolling-update ARGS` against `ns`, with short waits.
fn plugin(cluster: &TestCluster, ns: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(plugin_binary());
    cmd.arg("rolling-update").args(args).args(FAST).args([
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "-n",
        ns,
    ]);
    cmd
}

async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// The progress lines (on stderr), without their timestamps.
fn messages(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| without_timestamp(l).to_string())
        .collect()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn available(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Records the fewest available pods labelled `app=<app>` seen from now on.
fn watch_available(
    client: &Client,
    ns: &str,
    app: &str,
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let fewest = Arc::new(Mutex::new(usize::MAX));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let record = fewest.clone();
    let task = tokio::spawn(async move {
        let mut state: HashMap<String, bool> = HashMap::new();
        let mut initialized = false;
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                    state.insert(p.name_any(), available(&p));
                }
                Ok(watcher::Event::Delete(p)) => {
                    state.remove(&p.name_any());
                }
                Ok(watcher::Event::InitDone) => initialized = true,
                _ => {}
            }
            if initialized {
                let count = state.values().filter(|a| **a).count();
                let mut f = record.lock().unwrap();
                *f = (*f).min(count);
            }
        }
    });
    (fewest, task)
}

async fn controller_names(api: &Api<ReplicationController>) -> Vec<String> {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items.iter().map(|c| c.name_any()).collect()
}

async fn pods_of(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn image_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

fn owner_uid(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// The update ended on the new template under the old name, and the pods the next controller
/// created were adopted, not replaced.
async fn assert_renamed(client: &Client, ns: &str, name: &str, replicas: i32, next_prefix: &str) {
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    wait_ready(&api, name, replicas).await;
    let rc = api.get(name).await.unwrap();
    let annotations = rc.annotations();
    assert!(
        !annotations
            .keys()
            .any(|k| k.starts_with("kubectl.kubernetes.io/")),
        "update annotations are cleared: {annotations:?}"
    );
    let image = rc
        .spec
        .as_ref()
        .unwrap()
        .template
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some(V2));
    let pods = pods_of(client, ns, name).await;
    assert_eq!(pods.len(), replicas as usize, "{pods:?}");
    for pod in &pods {
        assert_eq!(image_of(pod), V2);
        assert_eq!(
            owner_uid(pod).as_deref(),
            rc.metadata.uid.as_deref(),
            "{} is adopted",
            pod.name_any()
        );
        assert!(
            pod.name_any().starts_with(next_prefix),
            "{} was created by the next controller ({next_prefix}…), then adopted",
            pod.name_any()
        );
    }
    assert_eq!(
        controller_names(&api).await,
        [name],
        "no controller left over"
    );
}

#[tokio::test]
async fn a_replication_controller_rolls_within_its_budget_and_keeps_its_name() {
    let cluster = TestCluster::shared();
    let ns = "ru-rename";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "foo", 3).await;
    let (fewest, watcher) = watch_available(&client, ns, "foo");

    let out = run(plugin(cluster, ns, &["foo", &format!("--image={V2}")])).await;
    assert!(out.status.success(), "{}", text(&out));
    watcher.abort();
    // maxSurge 1, maxUnavailable 0: never fewer than 3 available pods.
    assert_eq!(*fewest.lock().unwrap(), 3, "{}", text(&out));
    let lines = messages(&out);
    let next = lines
        .iter()
        .find_map(|l| l.strip_prefix("Created "))
        .expect("the next controller is created")
        .to_string();
    assert!(
        next.starts_with("foo-") && next.len() == "foo-".len() + 32,
        "{next}"
    );
    assert!(
        lines.contains(&format!("Renaming {next} to foo")),
        "{lines:?}"
    );
    assert_renamed(&client, ns, "foo", 3, &format!("{next}-")).await;
    // Kubernetes Events on the controllers tell the same story.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let reasons = |name: &str| {
        let events = events.clone();
        let selector = format!("regarding.name={name}");
        async move {
            let list = events.list(&ListParams::default().fields(&selector)).await;
            // The controller manager's own Events (pods created, deleted) are there too.
            let items = list.unwrap().items.into_iter();
            let ours = items.filter(|e| e.reporting_controller.as_deref() == Some("rollout-ext"));
            ours.filter_map(|e| e.reason).collect::<Vec<_>>()
        }
    };
    let on_next = reasons(&next).await;
    assert!(
        on_next.contains(&"Created".to_string()) && on_next.contains(&"Scaled".to_string()),
        "{on_next:?}"
    );
    let on_foo = reasons("foo").await;
    for reason in [
        "RollingUpdateStarted",
        "Scaled",
        "Renamed",
        "RollingUpdated",
    ] {
        assert!(on_foo.iter().any(|r| r == reason), "{on_foo:?}");
    }
}

#[tokio::test]
async fn a_replica_set_rolls_in_the_two_name_form() {
    let cluster = TestCluster::shared();
    let ns = "ru-replicaset";
    let client = setup(cluster, ns).await;
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": template("web", V1)}
    }))
    .unwrap();
    api.create(&PostParams::default(), &rs).await.unwrap();
    wait_ready(&api, "web", 4).await;
    let (fewest, watcher) = watch_available(&client, ns, "web");

    let out = run(plugin(
        cluster,
        ns,
        &[
            "rs/web",
            "web-v2",
            &format!("--image={V2}"),
            "--max-surge=0",
            "--max-unavailable=50%",
        ],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));
    watcher.abort();
    assert!(
        *fewest.lock().unwrap() >= 2,
        "never below 4 - 50%: {}",
        text(&out)
    );
    assert!(
        api.get_opt("web").await.unwrap().is_none(),
        "the old ReplicaSet is deleted"
    );
    wait_ready(&api, "web-v2", 4).await;
    let next = api.get("web-v2").await.unwrap();
    assert!(
        next.annotations()
            .get("kubectl.kubernetes.io/desired-replicas")
            .is_none()
    );
    let pods = pods_of(&client, ns, "web").await;
    assert_eq!(pods.len(), 4);
    assert!(
        pods.iter()
            .all(|p| image_of(p) == V2 && owner_uid(p) == next.metadata.uid)
    );
}

#[tokio::test]
async fn a_killed_update_resumes_and_a_killed_rename_completes() {
    let cluster = TestCluster::shared();
    let ns = "ru-resume";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "app", 3).await;
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);

    // Killed right after its first scale-down.
    let first = plugin(cluster, ns, &["app", &format!("--image={V2}")]);
    let lines = run_until(first, " up to 2").await;
    let next = lines
        .iter()
        .find_map(|l| l.strip_prefix("Created "))
        .expect("created before the kill")
        .to_string();
    let old = api.get("app").await.unwrap();
    assert_eq!(old.spec.as_ref().unwrap().replicas, Some(2), "{lines:?}");
    assert_eq!(
        old.annotations()
            .get("kubectl.kubernetes.io/next-controller-id"),
        Some(&next)
    );

    // Rerun: continues with the same next controller, killed again while renaming.
    let second = plugin(cluster, ns, &["app", &format!("--image={V2}")]);
    let lines = run_until(second, "Renaming").await;
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("Continuing update with existing controller {next}.")),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("Created ")),
        "{lines:?}"
    );

    // Third run finishes whatever the rename left.
    let third = plugin(cluster, ns, &["app", &format!("--image={V2}")]);
    let out = run(third).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_renamed(&client, ns, "app", 3, &format!("{next}-")).await;
    let records = pods_of(&client, ns, "app")
        .await
        .iter()
        .filter(|p| p.annotations().contains_key("rollout-ext.io/rename"))
        .count();
    assert_eq!(records, 0, "the rename records are removed");
}

#[tokio::test]
async fn an_orphaned_rename_is_finished_from_its_record() {
    let cluster = TestCluster::shared();
    let ns = "ru-orphans";
    let client = setup(cluster, ns).await;
    // The state a kill between deleting the next controller and creating the final one leaves:
    // no controller, orphaned pods carrying the record.
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let labels = json!({"app": "svc", "deployment": "h2"});
    let next: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "svc-h2"},
        "spec": {"replicas": 2, "selector": labels,
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "main", "image": V2}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &next).await.unwrap();
    wait_ready(&api, "svc-h2", 2).await;
    let mut final_object = serde_json::to_value(&next).unwrap();
    final_object["metadata"]["name"] = json!("svc");
    final_object["apiVersion"] = json!("v1");
    final_object["kind"] = json!("ReplicationController");
    let record = json!({"kind": "ReplicationController", "name": "svc", "object": final_object});
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods = pods_of(&client, ns, "svc").await;
    let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    pods_api
        .patch(
            &names[0],
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"rollout-ext.io/rename": record.to_string()}}}),
            ),
        )
        .await
        .unwrap();
    let uid = api.get("svc-h2").await.unwrap().metadata.uid.unwrap();
    api.delete("svc-h2", &DeleteParams::orphan()).await.unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(
            api.clone(),
            "svc-h2",
            kube::runtime::conditions::is_deleted(&uid),
        ),
    )
    .await
    .expect("the next controller is deleted")
    .unwrap();

    let out = run(plugin(cluster, ns, &["svc", &format!("--image={V2}")])).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        messages(&out)
            .iter()
            .any(|l| l.starts_with("Finishing an interrupted rename")),
        "{}",
        text(&out)
    );
    wait_ready(&api, "svc", 2).await;
    let svc = api.get("svc").await.unwrap();
    let mut adopted: Vec<String> = pods_of(&client, ns, "svc")
        .await
        .iter()
        .filter(|p| owner_uid(p) == svc.metadata.uid)
        .map(|p| p.name_any())
        .collect();
    adopted.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(adopted, expected, "the same pods, adopted");
}

#[tokio::test]
async fn a_rollout_started_by_legacy_kubectl_is_finished() {
    let cluster = TestCluster::shared();
    let ns = "ru-legacy";
    let client = setup(cluster, ns).await;
    let old = create_rc(&client, ns, "foo", 3).await;
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    // What kubectl 1.17 left after one step: the old controller labelled and shrunk, the next
    // one annotated with its source and desired size.
    let old_labels = json!({"app": "foo", "deployment": "0ld-orig"});
    api.patch(
        "foo",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {
                "kubectl.kubernetes.io/next-controller-id": "foo-next",
                "kubectl.kubernetes.io/original-replicas": "3"}},
            "spec": {"template": {"metadata": {"labels": old_labels}}}
        })),
    )
    .await
    .unwrap();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for pod in pods_of(&client, ns, "foo").await {
        pods_api
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"deployment": "0ld-orig"}}})),
            )
            .await
            .unwrap();
    }
    api.patch(
        "foo",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2, "selector": old_labels}})),
    )
    .await
    .unwrap();
    let next_labels = json!({"app": "foo", "deployment": "n3w"});
    let next: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "foo-next", "annotations": {
            "kubectl.kubernetes.io/update-source-id": format!("foo:{}", old.metadata.uid.unwrap()),
            "kubectl.kubernetes.io/desired-replicas": "3"}},
        "spec": {"replicas": 1, "selector": next_labels,
                 "template": {"metadata": {"labels": next_labels},
                              "spec": {"containers": [{"name": "main", "image": V2}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &next).await.unwrap();
    wait_ready(&api, "foo-next", 1).await;

    let cmd = plugin(cluster, ns, &["foo", &format!("--image={V2}")]);
    let out = run(cmd).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        messages(&out)
            .iter()
            .any(|l| l == "Continuing update with existing controller foo-next."),
        "{}",
        text(&out)
    );
    assert_renamed(&client, ns, "foo", 3, "foo-next-").await;
}

#[tokio::test]
async fn rollback_restores_the_original_and_a_gate_abort_stops_or_rolls_back() {
    let cluster = TestCluster::shared();
    let ns = "ru-rollback";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "api", 3).await;
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let dir = tempfile::tempdir().unwrap();
    let policy = rollout_ext_e2e::aborting_gate_policy(dir.path());
    let policy = policy.to_str().unwrap().to_string();

    // A gate abort stops after the first step, resumable, exit 3.
    let cmd = plugin(
        cluster,
        ns,
        &[
            "api",
            "api-v2",
            &format!("--image={V2}"),
            "--policy",
            &policy,
        ],
    );
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hook/stopper") && stderr.contains("hostile gate says stop"),
        "{stderr}"
    );
    let next = api.get("api-v2").await.unwrap();
    assert_eq!(
        next.spec.as_ref().unwrap().replicas,
        Some(1),
        "stopped after one step"
    );
    assert_eq!(
        api.get("api")
            .await
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .replicas,
        Some(3)
    );

    // --rollback: the next controller goes, the old one is back at its original size.
    let out = run(plugin(cluster, ns, &["api", "api-v2", "--rollback"])).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(api.get_opt("api-v2").await.unwrap().is_none());
    wait_ready(&api, "api", 3).await;
    let old = api.get("api").await.unwrap();
    assert!(
        !old.annotations()
            .keys()
            .any(|k| k.starts_with("kubectl.kubernetes.io/")),
        "{:?}",
        old.annotations()
    );
    assert!(
        pods_of(&client, ns, "api")
            .await
            .iter()
            .all(|p| image_of(p) == V1)
    );

    // --on-abort=rollback does the same by itself after the gate's abort.
    let cmd = plugin(
        cluster,
        ns,
        &[
            "api",
            "api-v3",
            &format!("--image={V2}"),
            "--policy",
            &policy,
            "--on-abort=rollback",
        ],
    );
    let out = run(cmd).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rolled back"),
        "{}",
        text(&out)
    );
    assert!(api.get_opt("api-v3").await.unwrap().is_none());
    wait_ready(&api, "api", 3).await;
    assert!(
        pods_of(&client, ns, "api")
            .await
            .iter()
            .all(|p| image_of(p) == V1)
    );
}

/// The events of kind `kind` in a `-o json` stream.
fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

#[tokio::test]
async fn a_live_update_with_json_output_reports_every_step_and_decision_as_an_event() {
    let cluster = TestCluster::shared();
    let ns = "ru-events";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "ev", 3).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasm_module("maintenance-window"),
        dir.path().join("window.wasm"),
    )
    .unwrap();
    std::fs::copy(wasm_module("error-budget"), dir.path().join("budget.wasm")).unwrap();
    let policy = dir.path().join("policy.yaml");
    // A window open all week sizes every step 1; the gate holds (1s) while a pod is not Ready.
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  \
         - {name: window, module: window.wasm, points: [batch], config: {windows: [{days: [mon, tue, wed, thu, fri, sat, sun], start: \"00:00\", end: \"00:00\"}], maxBatch: 1}}\n  \
         - {name: budget, module: budget.wasm, points: [gate], config: {maxPodsNotReady: 0, retrySeconds: 1, maxFailedChecks: 120}}\n",
    )
    .unwrap();
    let out = run(plugin(
        cluster,
        ns,
        &[
            "ev",
            &format!("--image={V2}"),
            "--policy",
            policy.to_str().unwrap(),
            "-o",
            "json",
        ],
    ))
    .await;
    assert!(out.status.success(), "{}", text(&out));

    // Nothing but events on stdout.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| {
            let event: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}\n{}", text(&out)));
            assert!(event["event"].is_string(), "no event field: {l}");
            event
        })
        .collect();
    let created = of_kind(&events, "controller-created");
    assert_eq!(created.len(), 1, "{stdout}");
    let next = created[0]["controller"].as_str().unwrap().to_string();
    let started = of_kind(&events, "update-started");
    assert_eq!(started.len(), 1, "{stdout}");
    assert_eq!(
        (
            &started[0]["old"],
            &started[0]["next"],
            &started[0]["desired"],
            &started[0]["max_total"]
        ),
        (&json!("ev"), &json!(next), &json!(3), &json!(4))
    );

    // Each step: started (sized by the hook), scaled, let through by the gate, done; in order,
    // numbered from 0, one replica at a time, 3 up and 3 down.
    let mut steps: i64 = 0;
    let mut replicas = HashMap::from([("ev".to_string(), 3), (next.clone(), 0)]);
    let mut rest = events.as_slice();
    while let Some(at) = rest.iter().position(|e| e["event"] == "step-started") {
        let step = &rest[at];
        assert_eq!(step["step"], steps, "{stdout}");
        assert_eq!(step["decided_by"], "hook/window", "{step}");
        let sized = rest[..at]
            .iter()
            .rev()
            .find(|e| e["event"] == "decided")
            .unwrap_or_else(|| panic!("step {steps} was sized: {stdout}"));
        assert_eq!(
            (&sized["point"], &sized["batch"], &sized["decided_by"]),
            (&json!("batch"), &json!(steps), &json!("hook/window")),
            "{stdout}"
        );
        // The decision carries the hook's reason for the size.
        let decision = sized["decision"].as_str().unwrap_or_default();
        assert!(
            decision.starts_with("size 1: ") && decision.len() > "size 1: ".len(),
            "{stdout}"
        );
        let controller = step["controller"].as_str().unwrap().to_string();
        let before = replicas[&controller];
        assert_eq!(step["from"], before, "{step}");
        assert_eq!((step["to"].as_i64().unwrap() - before).abs(), 1, "{step}");
        let done = rest[at..]
            .iter()
            .position(|e| e["event"] == "step-done")
            .unwrap_or_else(|| panic!("step {steps} is done: {stdout}"))
            + at;
        let within = &rest[at + 1..done];
        let scaled = of_kind(within, "scaled");
        assert_eq!(scaled.len(), 1, "{within:?}");
        assert_eq!(
            (
                &scaled[0]["controller"],
                &scaled[0]["from"],
                &scaled[0]["to"]
            ),
            (&json!(controller), &json!(before), &step["to"])
        );
        replicas.insert(controller, step["to"].as_i64().unwrap());
        let gates = of_kind(within, "decided");
        assert!(!gates.is_empty(), "the gate was asked after step {steps}");
        for (attempt, gate) in gates.iter().enumerate() {
            assert_eq!(
                (
                    &gate["point"],
                    &gate["phase"],
                    &gate["batch"],
                    &gate["attempt"]
                ),
                (
                    &json!("gate"),
                    &json!("after-batch"),
                    &json!(steps),
                    &json!(attempt)
                ),
                "{gate}"
            );
            assert_eq!(gate["decided_by"], "hook/budget", "{gate}");
        }
        let (last, holds) = gates.split_last().unwrap();
        assert_eq!(last["decision"], "proceed", "{last}");
        for hold in holds {
            assert!(
                hold["decision"].as_str().unwrap().starts_with("wait 1s: "),
                "{hold}"
            );
        }
        assert_eq!(
            of_kind(within, "waiting").len(),
            holds.len(),
            "each hold is waited out"
        );
        let done = &rest[done];
        assert_eq!(done["step"], steps);
        assert_eq!(
            (&done["old_replicas"], &done["next_replicas"]),
            (&json!(replicas["ev"]), &json!(replicas[&next]))
        );
        steps += 1;
        rest = &rest[at + 1..];
    }
    assert_eq!(steps, 6, "{stdout}");
    assert_eq!((replicas["ev"], replicas[&next]), (0, 3));
    assert!(
        !events.iter().any(|e| e["point"] == "select"),
        "no hook serves selection: nothing to report"
    );

    // Then the rename, and the end.
    let renaming = of_kind(&events, "renaming");
    assert_eq!(renaming.len(), 1, "{stdout}");
    assert_eq!(
        (&renaming[0]["from"], &renaming[0]["to"]),
        (&json!(next), &json!("ev"))
    );
    assert_eq!(
        events.last().unwrap(),
        &json!({"event": "update-done", "controller": "rc/ev"})
    );
    assert_renamed(&client, ns, "ev", 3, &format!("{next}-")).await;
}

#[tokio::test]
async fn bad_requests_fail_with_a_usage_error_and_change_nothing() {
    let cluster = TestCluster::shared();
    let ns = "ru-errors";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "db", 2).await;
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let before = api.get("db").await.unwrap().metadata.resource_version;
    let dir = tempfile::tempdir().unwrap();
    let same_selector = dir.path().join("same.yaml");
    std::fs::write(
        &same_selector,
        format!("apiVersion: v1\nkind: ReplicationController\nmetadata: {{name: db-v2}}\nspec:\n  replicas: 2\n  selector: {{app: db}}\n  template:\n    metadata: {{labels: {{app: db}}}}\n    spec: {{containers: [{{name: main, image: \"{V2}\"}}]}}\n"),
    )
    .unwrap();
    let file = same_selector.to_str().unwrap();
    let image = format!("--image={V2}");
    let same_image = format!("--image={V1}");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["db"], "exactly one of --image or -f"),
        (vec!["db", &image, "-f", file], "cannot be used with"),
        (vec!["db", "--rollback", &image], "cannot be used with"),
        (vec!["db", "db", &image], "same name"),
        (vec!["db", &same_image], "--image-pull-policy"),
        (vec!["db", "-f", file], "different value"),
        (vec!["nope", &image], "not found"),
        (vec!["db", "--rollback"], "no rollout in progress"),
        (vec!["deploy/db", &image], "cannot be rolled"),
        (
            vec!["db", &image, "--max-surge=150%"],
            "percentage from 0% to 100%",
        ),
        (
            vec!["db", &image, "--now=2026-11-02T09:00:00Z"],
            "--now sets the time of a plan",
        ),
    ];
    for (args, expected) in cases {
        let out = run(plugin(cluster, ns, &args)).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(expected),
            "{args:?}: expected {expected:?} in {stderr}"
        );
    }
    assert_eq!(controller_names(&api).await, ["db"], "nothing was created");
    assert_eq!(
        api.get("db").await.unwrap().metadata.resource_version,
        before,
        "db unchanged"
    );
}

#[tokio::test]
async fn a_dry_run_plans_from_the_cluster_and_from_a_snapshot_alike() {
    let cluster = TestCluster::shared();
    let ns = "ru-plan";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "big", 4).await;
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let plan_args = [
        "big",
        "--image",
        V2,
        "--max-surge=0",
        "--max-unavailable=50%",
        // Both plans as of one instant, so that their estimates agree to the second.
        "--now=2026-11-02T09:00:00Z",
        "-o",
        "json",
    ];
    let live = run({
        let mut c = plugin(cluster, ns, &plan_args);
        c.arg("--dry-run=server");
        c
    })
    .await;
    assert!(live.status.success(), "{}", text(&live));
    let live_plan: Value = serde_json::from_slice(&live.stdout).unwrap();
    let steps: Vec<(String, i64)> = live_plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["controller"].as_str().unwrap().to_string(),
                s["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = [("old", 2), ("next", 2), ("old", 0), ("next", 4)]
        .iter()
        .map(|(s, n)| (s.to_string(), *n))
        .collect();
    assert_eq!(steps, expected);
    assert_eq!(live_plan["cleanup"], "rename");
    assert_eq!(live_plan["next"]["exists"], false);
    let ends = live_plan["estimate"]["endsAt"].as_str().unwrap_or_default();
    assert!(
        ends.starts_with("2026-11-02T09:"),
        "{}",
        live_plan["estimate"]
    );
    assert_eq!(
        controller_names(&api).await,
        ["big"],
        "a dry run creates nothing"
    );

    // The same objects as a v1 List give the same plan.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut items = vec![serde_json::to_value(api.get("big").await.unwrap()).unwrap()];
    items[0]["kind"] = json!("ReplicationController");
    items[0]["apiVersion"] = json!("v1");
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let mut v = serde_json::to_value(pod).unwrap();
        v["kind"] = json!("Pod");
        items.push(v);
    }
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("list.json");
    std::fs::write(
        &snapshot,
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    let offline = Command::new(plugin_binary())
        .arg("rolling-update")
        .args(plan_args)
        .args(["-n", ns, "--from-snapshot", snapshot.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(offline.status.success(), "{}", text(&offline));
    let offline_plan: Value = serde_json::from_slice(&offline.stdout).unwrap();
    assert_eq!(offline_plan, live_plan);

    // Drawn, the plan is a row a step, each bar ending where the step's estimate ends.
    let picture = dir.path().join("plan.svg");
    let mut drawn = plan_args.to_vec();
    drawn.pop();
    drawn.extend(["svg", "--output-file", picture.to_str().unwrap()]);
    let out = Command::new(plugin_binary())
        .arg("rolling-update")
        .args(drawn)
        .args(["-n", ns, "--from-snapshot", snapshot.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let svg = std::fs::read_to_string(picture).unwrap();
    let ends: Vec<i64> = (rollout_ext_e2e::browser::svg_bars(&svg).iter())
        .map(|bar| bar["data-to"].parse().unwrap())
        .collect();
    let planned: Vec<i64> = (live_plan["steps"].as_array().unwrap().iter())
        .map(|s| {
            let at = s["estimate"]["endsAt"].as_str().unwrap();
            at.parse::<jiff::Timestamp>().unwrap().as_second()
        })
        .collect();
    assert_eq!(ends, planned, "one bar per step, where its estimate ends");
}

#[tokio::test]
async fn the_update_performs_the_steps_its_plan_printed() {
    let cluster = TestCluster::shared();
    let ns = "ru-mirror";
    let client = setup(cluster, ns).await;
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    create_rc(&client, ns, "mirror", 4).await;
    wait_ready(&rcs, "mirror", 4).await;
    let args = [
        "mirror",
        &format!("--image={V2}"),
        // No pod unavailable: a scale-down waits for the new pod rather than going smaller, so
        // the live steps do not depend on how fast pods become Ready.
        "--max-surge=1",
        "--max-unavailable=0",
        "-o",
        "json",
    ];
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let planned = run(plugin(cluster, ns, &dry)).await;
    assert!(planned.status.success(), "{}", text(&planned));
    let plan: Value = serde_json::from_slice(&planned.stdout).unwrap();
    let steps: Vec<(String, i64)> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let side = s["controller"].as_str().unwrap();
            let name = if side == "old" { "mirror" } else { "next" };
            (name.to_string(), s["replicas"].as_i64().unwrap())
        })
        .collect();
    assert!(steps.len() >= 4, "{plan}");

    let done = run(plugin(cluster, ns, &args)).await;
    assert!(done.status.success(), "{}", text(&done));
    let events: Vec<Value> = String::from_utf8_lossy(&done.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let performed: Vec<(String, i64)> = of_kind(&events, "step-started")
        .into_iter()
        .map(|e| {
            let name = if e["controller"] == "mirror" {
                "mirror"
            } else {
                "next"
            };
            (name.to_string(), e["to"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(performed, steps, "the run scales as its plan said");
}

#[tokio::test]
async fn a_rolling_update_is_paused_and_aborted_from_another_terminal_then_resumed() {
    let cluster = TestCluster::shared();
    let ns = "ru-controls";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "ctl", 3).await;
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let control = move |args: &[&str]| {
        Command::new(plugin_binary())
            .args(args)
            .args(["--kubeconfig", &kubeconfig, "-n", ns])
            .output()
            .unwrap()
    };
    let refused = control(&["abort", "ctl"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("no rolling update of rc/ctl is under way"),
        "{refused:?}"
    );

    // Paused after its first step, then aborted while it holds.
    let mut cmd = plugin(cluster, ns, &["ctl", &format!("--image={V2}")]);
    let asked = control.clone();
    let (lines, code) = tokio::task::spawn_blocking(move || {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = without_timestamp(&line.unwrap()).to_string();
            if line.starts_with("scaled ")
                && !lines.iter().any(|l: &String| l.starts_with("scaled "))
            {
                assert!(
                    asked(&["pause", "ctl", "--reason", "hold on"])
                        .status
                        .success()
                );
            }
            if line.starts_with("paused before step ") {
                assert!(
                    asked(&["abort", "ctl", "--reason", "bad canary"])
                        .status
                        .success()
                );
            }
            lines.push(line);
        }
        (lines, child.wait().unwrap().code())
    })
    .await
    .unwrap();
    assert_eq!(code, Some(3), "{lines:?}");
    let paused = lines
        .iter()
        .position(|l| l.starts_with("paused before step 2 of the update of "))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(lines[paused].contains(": hold on"), "{}", lines[paused]);
    assert!(
        !lines[paused..].iter().any(|l| l.starts_with("scaled ")),
        "nothing scaled while paused: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("aborted by ") && l.contains(": bad canary; stopped before step 2")),
        "{lines:?}"
    );

    // The pause still stands until withdrawn; then the same command finishes the update.
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), ns);
    let annotations = rcs
        .get("ctl")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(annotations.contains_key("rollout-ext.io/pause"));
    assert!(!annotations.contains_key("rollout-ext.io/abort"));
    assert!(control(&["resume", "ctl"]).status.success());
    let out = run(plugin(cluster, ns, &["ctl", &format!("--image={V2}")])).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        messages(&out).iter().any(|l| l.contains("rolling updated")),
        "{}",
        text(&out)
    );
}

/// A gate's wait is held by the executor kernel, as a rotation's is: an abort cuts it short at
/// once, where before it stood until the wait was over (an hour here).
#[tokio::test]
async fn an_abort_during_a_gate_wait_stops_the_update_at_once() {
    let cluster = TestCluster::shared();
    let ns = "ru-abort-wait";
    let client = setup(cluster, ns).await;
    create_rc(&client, ns, "held", 2).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(wasm_module("hostile-hook"), dir.path().join("hostile.wasm")).unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: slow, module: hostile.wasm, points: [gate], config: {gate: wait-an-hour}}\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap().to_string();
    let mut cmd = plugin(
        cluster,
        ns,
        &["held", &format!("--image={V2}"), "--policy", &policy],
    );
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let (lines, code, after_abort) = tokio::task::spawn_blocking(move || {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = Vec::new();
        let mut aborted = None;
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = without_timestamp(&line.unwrap()).to_string();
            if line.starts_with("waiting 1h") && aborted.is_none() {
                let out = Command::new(plugin_binary())
                    .args(["abort", "held", "--reason", "no more waiting"])
                    .args(["--kubeconfig", &kubeconfig, "-n", ns])
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{out:?}");
                aborted = Some(std::time::Instant::now());
            }
            lines.push(line);
        }
        let code = child.wait().unwrap().code();
        (lines, code, aborted.map(|at| at.elapsed()))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(3), "{lines:?}");
    let after_abort = after_abort.unwrap_or_else(|| panic!("the gate's wait was held: {lines:?}"));
    assert!(
        lines.iter().any(|l| l.contains("aborted by ")
            && l.contains(": no more waiting; stopped while waiting 1h")),
        "{lines:?}"
    );
    assert!(
        after_abort < Duration::from_secs(1),
        "the run stopped {after_abort:?} after the abort, within a second of it: {lines:?}"
    );
}
