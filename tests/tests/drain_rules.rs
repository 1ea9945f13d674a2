//! The policy's drain rules on the real test bed: a pod that asks not to be disrupted keeps its
//! node last and undrained until it goes, Job pods are left to complete, pods leave in the turns
//! of `drain.order` (critical ones last), the escalation ladder deletes an unready pod that
//! holds its own budget at 0, and a node whose drain cannot finish is set aside while the group
//! goes on. Each test asserts the cluster's state.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};
use rollout_ext_e2e::workloads::{budgets, create_namespace, replica_set, replica_set_with};
use rollout_ext_e2e::{events, run_plugin, run_watching};
use serde_json::{Value, json};

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The names of the pods of `namespace` labelled `app=app`.
async fn pods_of(pods: &Api<Pod>, app: &str) -> Vec<String> {
    let selector = format!("app={app}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// Whether the run reported `event` about `pod`.
fn reported(out: &[Value], event: &str, pod: &str) -> bool {
    out.iter().any(|e| e["event"] == event && e["pod"] == pod)
}

/// A ReplicaSet of one pod on node `node` that asks not to be disrupted.
async fn undisruptable(client: &kube::Client, namespace: &str, node: &str) -> String {
    let metadata = json!({"annotations": {"karpenter.sh/do-not-disrupt": "true"}});
    let spec = json!({"nodeSelector": {"kubernetes.io/hostname": node}});
    replica_set_with(client, namespace, "keep", 1, metadata, spec).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    format!("{namespace}/{}", pods_of(&pods, "keep").await[0])
}

#[tokio::test]
async fn a_pod_that_asks_not_to_be_disrupted_keeps_its_node_last_and_undrained_until_it_goes() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("dnd", 2).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "dnd").await;
    replica_set(&client, "dnd", "web", 2).await;
    let held = undisruptable(&client, "dnd", "dnd-1").await;
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "dnd", "", &[]);

    // The plan drains dnd-1 last, though its name comes first, and says what holds it.
    let plan_args = rollout_ext_e2e::plan_of(&args);
    let printed = run_plugin(plan_args).await;
    assert!(printed.status.success(), "{printed:?}");
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let batches = &plan["groups"][0]["batches"];
    assert_eq!(batches[0]["instances"], json!(["dnd-2"]), "{plan}");
    assert_eq!(batches[1]["instances"], json!(["dnd-1"]), "{plan}");
    assert_eq!(
        batches[1]["forecast"]["doNotDisrupt"],
        json!([held]),
        "{plan}"
    );

    // The run holds dnd-1's drain on the pod until the test deletes it.
    let handle = tokio::runtime::Handle::current();
    let seen = Arc::new(Mutex::new(None));
    let during = seen.clone();
    let held_pod = held.clone();
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "dnd");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "dnd");
    let watched = pods.clone();
    let all = Arc::new(Mutex::new(Vec::new()));
    let log = all.clone();
    let (code, stderr) = run_watching(args, move |event| {
        log.lock().unwrap().push(event.clone());
        if event["event"] != "pod-held" || event["pod"] != held_pod.as_str() {
            return;
        }
        // dnd-2 is already replaced; dnd-1 is cordoned, and the pod still runs there.
        let terminated = cluster.cloud.terminated("dnd");
        let name = held_pod.split_once('/').unwrap().1;
        let still = handle.block_on(watched.get(name)).unwrap();
        *during.lock().unwrap() = Some((terminated, still.metadata.deletion_timestamp.is_none()));
        handle
            .block_on(replica_sets.delete("keep", &DeleteParams::background()))
            .unwrap();
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let (terminated_then, running_then) = seen.lock().unwrap().take().expect("the pod was held");
    assert_eq!(terminated_then, ["dnd-2"]);
    assert!(running_then, "the held pod was not evicted");
    // It went because the test deleted it: the run never evicted it, nor gave up waiting.
    let all = all.lock().unwrap().clone();
    assert!(reported(&all, "pod-gone", &held), "{all:?}");
    for event in ["evicted", "hold-expired", "drain-escalated"] {
        assert!(!reported(&all, event, &held), "{event}: {all:?}");
    }
    assert_eq!(cluster.cloud.terminated("dnd"), ["dnd-2", "dnd-1"]);
    assert!(pods_of(&pods, "keep").await.is_empty());
}

#[tokio::test]
async fn a_pod_still_there_when_its_wait_ends_stops_the_run_naming_it() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("dndwait", 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "dndwait").await;
    let held = undisruptable(&client, "dndwait", "dndwait-1").await;
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(
        dir.path(),
        "dndwait",
        "",
        &["--do-not-disrupt-timeout", "2s"],
    );
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "pod {held} asks not to be disrupted (karpenter.sh/do-not-disrupt)"
        )),
        "{stderr}"
    );
    assert!(cluster.cloud.terminated("dndwait").is_empty());
    let pods: Api<Pod> = Api::namespaced(client, "dndwait");
    let name = held.split_once('/').unwrap().1;
    let pod = pods.get(name).await.unwrap();
    assert!(pod.metadata.deletion_timestamp.is_none(), "never evicted");
}

#[tokio::test]
async fn with_after_timeout_evict_a_pod_still_there_is_evicted_and_the_run_goes_on() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("dndevict", 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "dndevict").await;
    let held = undisruptable(&client, "dndevict", "dndevict-1").await;
    let dir = tempfile::tempdir().unwrap();
    let drain = "  drain:\n    doNotDisruptTimeout: 2s\n    afterTimeout: Evict\n";
    let out = run_plugin(cluster.rotate_one_at_a_time(dir.path(), "dndevict", drain, &[])).await;
    assert!(out.status.success(), "{out:?}");
    let seen = events(&out);
    assert!(reported(&seen, "pod-held", &held), "{seen:?}");
    assert!(reported(&seen, "hold-expired", &held), "{seen:?}");
    assert!(reported(&seen, "evicted", &held), "{seen:?}");
    assert_eq!(cluster.cloud.terminated("dndevict"), ["dndevict-1"]);
}

#[tokio::test]
async fn fail_on_drain_error_false_never_terminates_a_node_with_a_pod_that_asks_not_to_go() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("dndforce", 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "dndforce").await;
    let held = undisruptable(&client, "dndforce", "dndforce-1").await;
    // Beside it, pods a budget holds: the drain times out on them while it waits for the first.
    replica_set(&client, "dndforce", "web", 2).await;
    let version = cluster.live().await.policy_version().await.unwrap();
    rollout_ext_e2e::workloads::blocking_budget(&client, "dndforce", version, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = cluster.rotate_one_at_a_time(
        dir.path(),
        "dndforce",
        "",
        &["--fail-on-drain-error", "false"],
    );
    let at = args.iter().position(|a| a == "--drain-timeout").unwrap();
    args[at + 1] = "3s".into();
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = format!(
        "pod {held} on node dndforce-1 asks not to be disrupted: --fail-on-drain-error=false does not apply"
    );
    let warned = events(&out)
        .iter()
        .any(|e| e["event"] == "warning" && e["message"] == said.as_str());
    assert!(warned, "{out:?}");
    assert!(cluster.cloud.terminated("dndforce").is_empty());
}

/// A Job of one pod pinned to `node`, once its pod runs; returns the pod's name.
async fn running_job(client: &kube::Client, namespace: &str, name: &str, node: &str) -> String {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": name}}, "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "registry.invalid/batch:1"}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let running = |j: Option<&Job>| {
        j.and_then(|j| j.status.as_ref())
            .and_then(|s| s.active)
            .unwrap_or(0)
            == 1
    };
    tokio::time::timeout(WAIT, await_condition(jobs, name, running))
        .await
        .expect("the job runs")
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let name = pods_of(&pods, name).await.remove(0);
    let is_running = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.as_deref())
            == Some("Running")
    };
    tokio::time::timeout(WAIT, await_condition(pods, &name, is_running))
        .await
        .expect("the job's pod runs")
        .unwrap();
    name
}

#[tokio::test]
async fn a_running_job_pod_is_left_to_complete_and_a_completed_one_never_holds_the_drain() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("jobs", 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "jobs").await;
    let done = running_job(&client, "jobs", "done", "jobs-1").await;
    cluster.nodes.complete_pod("jobs", &done).await.unwrap();
    let running = running_job(&client, "jobs", "report", "jobs-1").await;
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "jobs", "", &[]);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "jobs");
    let handle = tokio::runtime::Handle::current();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let during = seen.clone();
    let (held, watched) = (format!("jobs/{running}"), pods.clone());
    let name = running.clone();
    let (code, stderr) = run_watching(args, move |event| {
        during.lock().unwrap().push(event.clone());
        if event["event"] != "pod-held" || event["pod"] != held.as_str() {
            return;
        }
        // Held, not evicted: the pod still runs; then it completes.
        let pod = handle.block_on(watched.get(&name)).unwrap();
        assert!(pod.metadata.deletion_timestamp.is_none());
        handle
            .block_on(cluster.nodes.complete_pod("jobs", &name))
            .unwrap();
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let seen = seen.lock().unwrap().clone();
    assert!(reported(&seen, "pod-held", &format!("jobs/{running}")));
    // The pod was removed only once it had completed: the Job succeeded, it did not fail.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "jobs");
    let report = jobs.get("report").await.unwrap();
    let status = report.status.unwrap();
    assert_eq!(status.succeeded, Some(1), "{status:?}");
    assert_eq!(status.failed, None, "{status:?}");
    // The completed pod never held the drain.
    assert!(!reported(&seen, "pod-held", &format!("jobs/{done}")));
    assert!(!reported(
        &seen,
        "eviction-blocked",
        &format!("jobs/{done}")
    ));
    assert_eq!(cluster.cloud.terminated("jobs"), ["jobs-1"]);
}

/// What a watch of pods saw, in order: a pod's deletion starting, and the pod gone.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Deleting(String),
    Gone(String),
}

/// Records, in order, each pod of `pods` starting to leave and being gone.
fn watch_deletions(pods: &Api<Pod>) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Vec<Seen>>>) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let watch = tokio::spawn(watcher(pods.clone(), watcher::Config::default()).for_each(
        move |event| {
            let mut log = log.lock().unwrap();
            match event {
                Ok(watcher::Event::Apply(p)) if p.metadata.deletion_timestamp.is_some() => {
                    log.push(Seen::Deleting(p.metadata.name.unwrap()))
                }
                Ok(watcher::Event::Delete(p)) => log.push(Seen::Gone(p.metadata.name.unwrap())),
                _ => {}
            }
            std::future::ready(())
        },
    ));
    (watch, seen)
}

/// Asserts that no pod of a turn started leaving before every pod of the turns before it was
/// gone.
fn left_in_turns(seen: &[Seen], turns: &[Vec<String>]) {
    for (t, turn) in turns.iter().enumerate() {
        for pod in turn {
            let starts = seen
                .iter()
                .position(|s| *s == Seen::Deleting(pod.clone()))
                .unwrap_or_else(|| panic!("{pod} was never deleted: {seen:?}"));
            for earlier in turns[..t].iter().flatten() {
                let gone = seen
                    .iter()
                    .position(|s| *s == Seen::Gone(earlier.clone()))
                    .unwrap_or_else(|| panic!("{earlier} never went: {seen:?}"));
                assert!(
                    gone < starts,
                    "{pod} left before {earlier} was gone: {seen:?}"
                );
            }
        }
    }
}

/// One outdated node of `group` running two pods of each of `sets` (name, pod labels, extra
/// pod spec); returns the names of each set's pods.
async fn tiers_on_one_node(
    cluster: &TestCluster,
    group: &str,
    sets: &[(&str, Value, Value)],
) -> (Api<Pod>, Vec<Vec<String>>) {
    cluster.outdated_group(group, 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, group).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), group);
    let mut names = Vec::new();
    for (name, metadata, spec) in sets {
        let mut on_node = json!({"nodeSelector": {"kops.k8s.io/instancegroup": group}});
        on_node
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        replica_set_with(&client, group, name, 2, metadata.clone(), on_node).await;
        names.push(pods_of(&pods, name).await);
    }
    (pods, names)
}

#[tokio::test]
async fn pods_leave_in_the_turns_of_drain_order_and_critical_ones_last() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let critical = json!({"priorityClassName": "system-cluster-critical"});
    let sets = [
        ("crit", json!({}), critical),
        ("back", json!({}), json!({})),
        ("front", json!({"labels": {"tier": "frontend"}}), json!({})),
    ];
    let (pods, names) = tiers_on_one_node(cluster, "order", &sets).await;
    let (watch, seen) = watch_deletions(&pods);
    let drain = "  drain:\n    order:\n      - {order: 1, podSelector: \"tier=frontend\"}\n";
    let dir = tempfile::tempdir().unwrap();
    let out = run_plugin(cluster.rotate_one_at_a_time(dir.path(), "order", drain, &[])).await;
    assert!(out.status.success(), "{out:?}");
    watch.abort();
    // front (the rule), then back (no rule), then crit (critical, no rule).
    let turns = [names[2].clone(), names[1].clone(), names[0].clone()];
    left_in_turns(&seen.lock().unwrap(), &turns);
}

#[tokio::test]
async fn a_drain_order_hook_decides_the_turns_once_per_node() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let tier = |t: &str| json!({"labels": {"tier": t}});
    let sets = [
        ("front", tier("frontend"), json!({})),
        ("back", tier("backend"), json!({})),
        ("misc", json!({}), json!({})),
    ];
    let (pods, names) = tiers_on_one_node(cluster, "tiers", &sets).await;
    let module = rollout_ext_e2e::wasm_module("drain-tiers");
    let hooks = format!(
        "  hooks:\n    - name: tiers\n      module: {}\n      config: {{tiers: [backend, frontend]}}\n",
        module.display()
    );
    let (watch, seen) = watch_deletions(&pods);
    let dir = tempfile::tempdir().unwrap();
    let out = run_plugin(cluster.rotate_one_at_a_time(dir.path(), "tiers", &hooks, &[])).await;
    assert!(out.status.success(), "{out:?}");
    watch.abort();
    // back (the hook's first turn), then front (its second), then misc (left out).
    let turns = [names[1].clone(), names[0].clone(), names[2].clone()];
    left_in_turns(&seen.lock().unwrap(), &turns);
    let decided: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "decided" && e["point"] == "drain-order")
        .collect();
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(decided[0]["decided_by"], "hook/tiers", "{decided:?}");
    let decision = decided[0]["decision"].as_str().unwrap();
    assert!(
        decision.starts_with("node tiers-1: turns tiers/back-"),
        "{decision}"
    );
}

/// A budget `web` (minAvailable 2) over two pods: `web-a` on node `node`, `web-b` on `spare`.
/// `web-a`'s pod is then made not Ready, which holds the budget at 0 for its own eviction.
async fn held_by_an_unready_pod(cluster: &TestCluster, group: &str) -> String {
    cluster.outdated_group(group, 1).await.unwrap();
    let spare = format!("{group}-spare");
    cluster
        .nodes
        .add(NodeSpec::new(&spare, group))
        .await
        .unwrap();
    let client = cluster.client().await;
    create_namespace(&client, group).await;
    let node = format!("{group}-1");
    for (name, on) in [("web-a", &node), ("web-b", &spare)] {
        let labels = json!({"labels": {"budget": "web"}});
        let spec = json!({"nodeSelector": {"kubernetes.io/hostname": on}});
        replica_set_with(&client, group, name, 1, labels, spec).await;
    }
    let version = cluster.live().await.policy_version().await.unwrap();
    let pdbs = budgets(&client, group, version);
    let pdb: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("policy/{version}"), "kind": "PodDisruptionBudget",
        "metadata": {"name": "unready"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"budget": "web"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, group);
    let unready = pods_of(&pods, "web-a").await.remove(0);
    cluster
        .nodes
        .set_pod_ready(group, &unready, false)
        .await
        .unwrap();
    let held_at_zero = |p: Option<&kube::api::DynamicObject>| {
        p.is_some_and(|p| {
            p.data["status"]["currentHealthy"] == 1 && p.data["status"]["disruptionsAllowed"] == 0
        })
    };
    tokio::time::timeout(WAIT, await_condition(pdbs, "unready", held_at_zero))
        .await
        .expect("the unready pod holds the budget at 0")
        .unwrap();
    format!("{group}/{unready}")
}

#[tokio::test]
async fn the_escalation_ladder_deletes_an_unready_pod_that_holds_its_budget_at_zero() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();

    // Without a ladder the drain waits out its timeout, as kubectl's does, and the run stops.
    let stuck = held_by_an_unready_pod(cluster, "noladder").await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = cluster.rotate_one_at_a_time(dir.path(), "noladder", "", &[]);
    let at = args.iter().position(|a| a == "--drain-timeout").unwrap();
    args[at + 1] = "3s".into();
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(reported(&events(&out), "eviction-blocked", &stuck));
    assert!(cluster.cloud.terminated("noladder").is_empty());

    // With one, after a short retry the unready pod is deleted and the drain completes.
    let unready = held_by_an_unready_pod(cluster, "ladder").await;
    let ladder = "  drain:\n    escalation:\n      - {rung: Retry, wait: 2s}\n      - {rung: DeleteUnready, wait: 1m}\n";
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "ladder", ladder, &[]);
    // The server's dry run names the refusal and the rungs the ladder would take.
    let mut dry_run = rollout_ext_e2e::plan_of(&args);
    dry_run.push("--dry-run=server".into());
    let checked = run_plugin(dry_run).await;
    assert_eq!(checked.status.code(), Some(1), "{checked:?}");
    let refusals: Value = serde_json::from_slice(&checked.stdout).unwrap();
    let refusal = &refusals[0];
    assert_eq!(refusal["call"], format!("evict {unready}"), "{refusals}");
    assert!(
        refusal["reason"].as_str().unwrap().ends_with(
            "escalation ladder: retry the eviction (2s), delete the pod if it is not Ready (1m), stop"
        ),
        "{refusals}"
    );
    let out = run_plugin(args).await;
    assert!(out.status.success(), "{out:?}");
    let seen = events(&out);
    let escalated = seen
        .iter()
        .find(|e| e["event"] == "drain-escalated" && e["pod"] == unready.as_str())
        .unwrap_or_else(|| panic!("no escalation: {seen:?}"));
    assert_eq!(escalated["rung"], "DeleteUnready");
    assert!(
        escalated["reason"]
            .as_str()
            .unwrap()
            .contains("PodDisruptionBudget ladder/unready"),
        "{escalated}"
    );
    assert_eq!(cluster.cloud.terminated("ladder"), ["ladder-1"]);
}

/// A ReplicaSet of one pod `db` on node `node` under a budget `db` that allows no disruption
/// (maxUnavailable 0), once the budget's status is computed.
async fn pinned_under_a_closed_budget(
    cluster: &TestCluster,
    namespace: &str,
    node: &str,
) -> Api<kube::api::DynamicObject> {
    let client = cluster.client().await;
    create_namespace(&client, namespace).await;
    let spec = json!({"nodeSelector": {"kubernetes.io/hostname": node}});
    replica_set_with(&client, namespace, "db", 1, json!({}), spec).await;
    let version = cluster.live().await.policy_version().await.unwrap();
    let pdbs = budgets(&client, namespace, version);
    let pdb: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("policy/{version}"), "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let computed = |p: Option<&kube::api::DynamicObject>| {
        p.is_some_and(|p| p.data["status"]["expectedPods"] == 1)
    };
    tokio::time::timeout(WAIT, await_condition(pdbs.clone(), "db", computed))
        .await
        .expect("the budget's status is computed")
        .unwrap();
    pdbs
}

/// `nodes --yes` of `group`, two at a time, with a short drain timeout and `spec` in the policy.
fn quarantine_args(
    cluster: &TestCluster,
    dir: &std::path::Path,
    group: &str,
    spec: &str,
) -> Vec<String> {
    let policy = cluster.exec_policy(dir, spec);
    let mut args = cluster.rotate_args(&policy, group);
    let at = args.iter().position(|a| a == "--drain-timeout").unwrap();
    args[at + 1] = "3s".into();
    args.extend(["--max-unavailable".to_string(), "2".into()]);
    args
}

#[tokio::test]
async fn a_node_whose_drain_cannot_finish_is_set_aside_and_the_group_goes_on() {
    use k8s_openapi::api::core::v1::Node;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    let names = cluster.outdated_group("quar", 3).await.unwrap();
    let stuck = &names[1];
    let pdbs = pinned_under_a_closed_budget(cluster, "quar", stuck).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = "  drain:\n    undrainable: {action: Quarantine, maxQuarantined: 1}\n";
    let args = quarantine_args(cluster, dir.path(), "quar", spec);

    // The plan says which node the run would likely set aside.
    let planned = run_plugin(rollout_ext_e2e::plan_of(&args)).await;
    assert!(planned.status.success(), "{planned:?}");
    let plan: Value = serde_json::from_slice(&planned.stdout).unwrap();
    assert_eq!(plan["undrainable"]["action"], "Quarantine", "{plan}");
    let likely: Vec<&Value> = (plan["groups"][0]["batches"].as_array().unwrap().iter())
        .flat_map(|b| b["likelySetAside"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(likely, [stuck.as_str()], "{plan}");

    // The run sets it aside, replaces the others, and ends with exit code 6 naming it.
    let out = run_plugin(args.clone()).await;
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("set aside 1 node(s)")
            && stderr.contains(&format!("{stuck} (draining node {stuck} did not finish")),
        "{stderr}"
    );
    let seen = events(&out);
    assert!(
        seen.iter()
            .any(|e| e["event"] == "quarantined" && e["node"] == stuck.as_str()),
        "{seen:?}"
    );
    let mut others: Vec<String> = names.iter().filter(|n| *n != stuck).cloned().collect();
    others.sort();
    let mut terminated = cluster.cloud.terminated("quar");
    terminated.sort();
    assert_eq!(
        terminated, others,
        "the others are replaced, the one set aside is not"
    );
    let node = Api::<Node>::all(client.clone()).get(stuck).await.unwrap();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(node.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
    assert_eq!(
        labels.get("rollout-ext.io/quarantined").map(String::as_str),
        Some("true")
    );
    assert!(
        !labels.contains_key("node.kubernetes.io/exclude-from-external-load-balancers"),
        "its pods still serve: our load-balancer label is removed"
    );
    assert_eq!(
        annotations.get("rollout-ext.io/phase").map(String::as_str),
        Some("quarantined")
    );
    let record: Value = serde_json::from_str(&annotations["rollout-ext.io/quarantined"]).unwrap();
    assert!(
        record["reason"].as_str().unwrap().contains("quar/db-"),
        "{record}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "quar");
    let db = pods_of(&pods, "db").await;
    let on = pods.get(&db[0]).await.unwrap().spec.unwrap().node_name;
    assert_eq!(
        on.as_deref(),
        Some(stuck.as_str()),
        "its pod is left running"
    );

    // `status` lists it with why.
    let status = run_plugin(vec![
        "status".into(),
        "--kubeconfig".into(),
        cluster.kubeconfig.to_str().unwrap().into(),
        "-o".into(),
        "json".into(),
    ])
    .await;
    assert!(status.status.success(), "{status:?}");
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        status["quarantined"][stuck.as_str()]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("did not finish")),
        "{status}"
    );

    // With the budget fixed, the same command drains it first and replaces it.
    pdbs.patch(
        "db",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"maxUnavailable": 1}})),
    )
    .await
    .unwrap();
    let again = run_plugin(args).await;
    assert!(again.status.success(), "{again:?}");
    let cordoned: Vec<Value> = (events(&again).into_iter())
        .filter(|e| e["event"] == "cordoned")
        .map(|e| e["node"].clone())
        .collect();
    assert_eq!(
        cordoned,
        [json!(stuck)],
        "only the node set aside is left to replace"
    );
    assert!(cluster.cloud.terminated("quar").contains(stuck));
}

/// An undrainable node stops the run with `maxQuarantined: 0`, as without the setting; set
/// aside by a later run, `--release-quarantined --yes` uncordons it and removes what we put on
/// it (without `--yes` it only lists it).
#[tokio::test]
async fn with_max_quarantined_zero_an_undrainable_node_stops_the_run_as_by_default() {
    use k8s_openapi::api::core::v1::Node;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let names = cluster.outdated_group("quar0", 1).await.unwrap();
    pinned_under_a_closed_budget(cluster, "quar0", &names[0]).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = "  drain:\n    undrainable: {action: Quarantine, maxQuarantined: 0}\n";
    let out = run_plugin(quarantine_args(cluster, dir.path(), "quar0", spec)).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("draining node {} did not finish", names[0])),
        "{stderr}"
    );
    assert!(cluster.cloud.terminated("quar0").is_empty());
    let node = Api::<Node>::all(cluster.client().await)
        .get(&names[0])
        .await
        .unwrap();
    assert!(
        !node
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("rollout-ext.io/quarantined")
    );
}
