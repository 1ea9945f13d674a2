//! Runs handed to the cluster (`nodes --yes --in-cluster`), on a control plane of their own:
//! the Job's pods run as local processes with their ServiceAccount's token (the harness's
//! stand-in kubelet, see `RunnerPods`). A rotation whose runner sits on a node of the group
//! completes, its runner evicted with the node and resumed by the Job's next pod, with the
//! usual invariants; missing RBAC is named before anything is created; and an abort from the
//! terminal stops the run in the cluster.

use std::collections::BTreeSet;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use rollout_ext_e2e::cluster::{GROUP_LABEL, RUNNER_LABEL, RunnerPods, TestCluster};
use rollout_ext_e2e::invariants::{Budget, Pdb};
use rollout_ext_e2e::observer::{Observer, cloud_calls};
use rollout_ext_e2e::workloads::{create_namespace, replica_set};
use rollout_ext_e2e::{plugin_binary, run_plugin};
use serde_json::json;

/// One run at a time: they share the rotation's lock.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a handed-over run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(240);

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `args` handed to the cluster: the runner's image (never pulled: the stand-in kubelet runs
/// the plugin binary itself), and `extra`.
fn in_cluster(mut args: Vec<String>, extra: &[&str]) -> Vec<String> {
    args.extend(["--in-cluster", "--runner-image", "site/rollout-ext:test"].map(String::from));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The Job the command said it created (its `handed-over` event, `-o json`): namespace, name.
fn job_of(out: &Output) -> (String, String) {
    let event = handed_over(out);
    let field = |key: &str| event[key].as_str().unwrap_or_default().to_string();
    (field("namespace"), field("job"))
}

/// The `handed-over` event a command printed (`-o json`).
fn handed_over(out: &Output) -> serde_json::Value {
    let said = String::from_utf8_lossy(&out.stdout);
    (said.lines())
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "handed-over")
        .unwrap_or_else(|| panic!("the command names its Job: {said}"))
}

/// Waits for Job `name` to succeed or fail; whether it succeeded. `runners` tell what its pods
/// printed when it does not end in time.
async fn finished(client: &Client, ns: &str, name: &str, runners: &RunnerPods) -> bool {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let done = |job: Option<&Job>| {
        let status = job.and_then(|j| j.status.as_ref());
        status.is_some_and(|s| s.succeeded.unwrap_or(0) + s.failed.unwrap_or(0) > 0)
    };
    tokio::time::timeout(RUN_TIMEOUT, await_condition(jobs.clone(), name, done))
        .await
        .unwrap_or_else(|_| panic!("the handed-over run ends in time:\n{}", runners.output()))
        .unwrap();
    let job = jobs.get(name).await.unwrap();
    job.status.and_then(|s| s.succeeded).unwrap_or(0) > 0
}

/// Marks every node outside `group` unschedulable (`true`) or schedulable again.
async fn cordon_others(client: &Client, group: &str, cordon: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let others = ListParams::default().labels(&format!("{GROUP_LABEL}!={group}"));
    let patch = json!({"spec": {"unschedulable": cordon}});
    for node in nodes.list(&others).await.unwrap() {
        let params = PatchParams::default();
        nodes
            .patch(&node.name_any(), &params, &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_whose_runner_is_on_a_node_it_replaces_completes_after_moving_its_runner() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let runners = cluster.run_runner_pods().await;
    let client = cluster.client().await;
    let group = "own";
    let outdated: BTreeSet<String> = cluster
        .outdated_group(group, 3)
        .await
        .unwrap()
        .into_iter()
        .collect();
    create_namespace(&client, group).await;
    replica_set(&client, group, "web", 3).await;
    let budget = Budget {
        outdated: outdated.clone(),
        max_unavailable: 1,
        max_surge: 0,
        cloud_only: false,
        set_aside: Default::default(),
    };
    let pdb = Pdb {
        name: format!("{group}/web"),
        match_labels: [("app".to_string(), "web".to_string())].into(),
        min_available: 0,
    };
    let nodes = format!("{GROUP_LABEL}={group}");
    let calls = cloud_calls(cluster, group);
    let observer = Observer::start(cluster, &nodes, group, budget, vec![pdb], calls).await;

    // The runner can only land on a node of the group: its drain will evict it.
    cordon_others(&client, group, true).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = cluster.rotate_args(&policy, group);
    args.extend(["--max-surge", "0", "--max-unavailable", "1"].map(String::from));
    let out = run_plugin(in_cluster(args, &["--create-rbac"])).await;
    assert!(out.status.success(), "{}", text(&out));
    let (ns, name) = job_of(&out);
    assert_eq!(ns, "kube-system");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = format!("{RUNNER_LABEL}={name}");
    let bound = tokio::time::timeout(RUN_TIMEOUT, async {
        loop {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .unwrap();
            let node = (list.items.iter()).find_map(|p| p.spec.as_ref()?.node_name.clone());
            if let Some(node) = node {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the runner pod is scheduled");
    assert!(outdated.contains(&bound), "{bound} is a node of the group");
    // Its next pod, and the drained pods, may go elsewhere.
    cordon_others(&client, group, false).await;

    let succeeded = finished(&client, &ns, &name, &runners).await;
    let output = runners.output();
    assert!(succeeded, "the run completes:\n{output}");
    assert!(
        runners.started() >= 2,
        "the runner was evicted with its node and resumed by the Job's next pod:\n{output}"
    );
    assert!(
        output.contains(&format!("this run's pod runs on node {bound}")),
        "the runner says it will be moved:\n{output}"
    );
    // `logs` prints the output of each pod of the Job still there (an evicted pod is gone with
    // its output, as with kubectl), through the API server and the pod's kubelet.
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let logs = ["logs", "--kubeconfig", &kubeconfig, &name]
        .map(String::from)
        .to_vec();
    let printed = run_plugin(logs).await;
    assert!(printed.status.success(), "{}", text(&printed));
    let left = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let headers = String::from_utf8_lossy(&printed.stderr)
        .matches("--- job/")
        .count();
    assert_eq!(headers, left.items.len(), "{}", text(&printed));
    let said = String::from_utf8_lossy(&printed.stdout);
    assert!(
        said.contains(r#""event":"done""#),
        "the resumed pod finished the run: {said}"
    );
    let made: Vec<String> = (cluster.cloud.calls().iter())
        .filter(|c| c.target.starts_with("own-") && c.effective && c.verb == "terminate")
        .map(|c| format!("{} {}", c.verb, c.target))
        .collect();
    assert_eq!(made.len(), 3, "each node terminated once: {made:?}");
    let (report, _) = observer
        .finish(cluster, made, cluster.nodes.nodes_of(group))
        .await;
    assert_eq!(
        report, None,
        "budget kept, drained before termination, lock released"
    );
}

#[tokio::test]
async fn a_runner_account_without_rbac_is_named_before_anything_is_created() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    create_namespace(&client, "runnerless").await;
    cluster.outdated_group("bare", 1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let args = in_cluster(cluster.rotate_args(&policy, "bare"), &["-n", "runnerless"]);
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("the ServiceAccount runnerless/rollout-ext that in-cluster runs use is missing permissions: get on nodes (cluster-wide);")
            && said.contains("nothing was created"),
        "{said}"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), "runnerless");
    assert!(
        jobs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "runnerless");
    let ours = ListParams::default().labels(RUNNER_LABEL);
    assert!(maps.list(&ours).await.unwrap().items.is_empty());

    // An image is needed, and --in-cluster hands over a run (--yes), not a plan.
    let plan: Vec<String> = ["nodes", "--in-cluster", "--image", "x"]
        .map(String::from)
        .to_vec();
    assert_eq!(run_plugin(plan).await.status.code(), Some(2));
    let no_image = vec!["nodes".to_string(), "--yes".into(), "--in-cluster".into()];
    assert_eq!(run_plugin(no_image).await.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_from_the_terminal_stops_the_run_in_the_cluster() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let runners = cluster.run_runner_pods().await;
    let client = cluster.client().await;
    let outdated = cluster.outdated_group("held", 4).await.unwrap();
    // Each replacement takes a while to boot: the run is still going when it is aborted.
    cluster.cloud.set_boot_delay(Duration::from_secs(4));
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let mut args = cluster.rotate_args(&policy, "held");
    args.extend(["--max-surge", "0", "--max-unavailable", "1"].map(String::from));
    let out = run_plugin(in_cluster(args, &["--create-rbac"])).await;
    assert!(out.status.success(), "{}", text(&out));
    let (ns, name) = job_of(&out);

    // `logs -f` follows the run from the start, and ends when it does.
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let follow = ["logs", "-f", "--kubeconfig", &kubeconfig]
        .map(String::from)
        .to_vec();
    let followed = tokio::spawn(run_plugin(follow));
    // Once the runner holds the lock, the operator aborts from here.
    tokio::time::timeout(RUN_TIMEOUT, async {
        loop {
            let status = std::process::Command::new(plugin_binary())
                .args(["status", "--kubeconfig", &kubeconfig, "-o", "json"])
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&status.stdout);
            if said.contains(&format!("job/{ns}/{name}/pod-")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the runner takes the lock");
    let abort = [
        "abort",
        "--kubeconfig",
        &kubeconfig,
        "--reason",
        "stop the handed-over run",
    ];
    let out = run_plugin(abort.map(String::from).to_vec()).await;
    assert!(out.status.success(), "{}", text(&out));

    let succeeded = finished(&client, &ns, &name, &runners).await;
    cluster.cloud.set_boot_delay(Duration::ZERO);
    let output = runners.output();
    assert!(
        !succeeded,
        "an aborted run's Job fails (and is not run again):\n{output}"
    );
    assert!(output.contains("stop the handed-over run"), "{output}");
    let followed = tokio::time::timeout(RUN_TIMEOUT, followed)
        .await
        .expect("logs -f ends with the run")
        .unwrap();
    assert_eq!(
        followed.status.code(),
        Some(3),
        "logs -f ends with the run's own exit code (aborted): {}",
        text(&followed)
    );
    assert!(
        text(&followed).contains(&format!("the run of job/{name} ended with exit code 3")),
        "{}",
        text(&followed)
    );
    let said = String::from_utf8_lossy(&followed.stdout);
    assert!(said.contains("stop the handed-over run"), "{said}");
    let terminated = (cluster.cloud.calls().iter())
        .filter(|c| c.target.starts_with("held-") && c.effective && c.verb == "terminate")
        .count();
    assert!(
        terminated < outdated.len(),
        "the run stopped before replacing every node ({terminated})"
    );
    let job = Api::<Job>::namespaced(client, &ns)
        .get(&name)
        .await
        .unwrap();
    let failed = job.status.and_then(|s| s.failed).unwrap_or(0);
    assert_eq!(failed, 1, "one pod ran it, and failed with the abort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_handed_to_the_cluster_completes_in_its_namespace() {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let runners = cluster.run_runner_pods().await;
    let client = cluster.client().await;
    let ns = "handed";
    cluster.outdated_group(ns, 1).await.unwrap();
    create_namespace(&client, ns).await;
    replica_set(&client, ns, "web", 2).await;
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let args = [
        "rolling-update",
        "rs/web",
        "web-v2",
        "--image=registry.invalid/app:2",
        "--update-period=1s",
        "--poll-interval=1s",
        "--timeout=60s",
        "--kubeconfig",
        &kubeconfig,
        "-n",
        ns,
        "-o",
        "json",
        "--in-cluster",
        "--runner-image",
        "site/rollout-ext:test",
        "--create-rbac",
    ];
    let out = run_plugin(args.map(String::from).to_vec()).await;
    assert!(out.status.success(), "{}", text(&out));
    let command = handed_over(&out)["command"].to_string();
    assert!(
        command.contains(r#""--namespace","handed""#),
        "the runner is told the namespace: {command}"
    );
    let (job_ns, name) = job_of(&out);
    assert_eq!(job_ns, "kube-system");
    assert!(
        finished(&client, &job_ns, &name, &runners).await,
        "{}",
        runners.output()
    );
    let sets: Api<ReplicaSet> = Api::namespaced(client, ns);
    assert!(
        sets.get_opt("web").await.unwrap().is_none(),
        "the old controller is gone"
    );
    let next = serde_json::to_value(sets.get("web-v2").await.unwrap()).unwrap();
    let spec = &next["spec"];
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["image"],
        "registry.invalid/app:2"
    );
    assert_eq!(spec["replicas"], 2, "{next}");
}
