//! A plan's drain forecast against the run on the same cluster: a rotation stalls where its
//! plan said it would (a budget that blocks, one that serializes the evictions) and the pods
//! forecast pending are the ones the scheduler cannot place until the replacement comes.

use kube::api::Api;
use rollout_ext_e2e::cluster::{NodeSpec, READINESS_LABEL, TestCluster};
use rollout_ext_e2e::workloads::{
    blocked_group, budget, budgets, create_namespace, replica_set, replica_set_with,
};
use rollout_ext_e2e::{events, run_plugin};
use serde_json::{Value, json};

const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The forecast of the first batch of the plan the run `args` would follow (the same command
/// without `--yes`).
async fn first_forecast(args: &[String]) -> Value {
    let plan_args = rollout_ext_e2e::plan_of(args);
    let printed = run_plugin(plan_args).await;
    assert!(printed.status.success(), "{printed:?}");
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    plan["groups"][0]["batches"][0]["forecast"].clone()
}

/// The `ns/pod` names of a forecast entry, sorted.
fn pods_of(entry: &Value) -> Vec<String> {
    let mut pods: Vec<String> = entry["pods"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of pods: {entry}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    pods.sort();
    pods
}

/// The pods whose evictions the run refused, each once, sorted; every refusal names `pdb`.
fn refused_by(out: &std::process::Output, pdb: &str) -> Vec<String> {
    let mut refused: Vec<String> = Vec::new();
    for event in events(out) {
        if event["event"] == "eviction-blocked" {
            let reason = event["reason"].as_str().unwrap();
            assert!(
                reason.contains(&format!("PodDisruptionBudget {pdb}")),
                "{reason}"
            );
            let pod = event["pod"].as_str().unwrap().to_string();
            if !refused.contains(&pod) {
                refused.push(pod);
            }
        }
    }
    refused.sort();
    refused
}

#[tokio::test]
async fn a_rotation_stalls_where_its_plan_forecast_a_blocked_drain() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    blocked_group(cluster, "stall").await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = cluster.rotate_one_at_a_time(dir.path(), "stall", "", &[]);
    let at = args.iter().position(|a| a == "--drain-timeout").unwrap();
    args[at + 1] = "3s".into();

    // The plan of the live cluster forecasts the block...
    let forecast = first_forecast(&args).await;
    assert_eq!(forecast["blocks"][0]["pdb"], "stall/web", "{forecast}");
    let forecast_pods = pods_of(&forecast["blocks"][0]);

    // ...and the run stalls there: the same budget refuses the same pods, and it stops in
    // that batch's drain.
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(refused_by(&out, "stall/web"), forecast_pods);
    assert!(cluster.cloud.terminated("stall").is_empty());
}

#[tokio::test]
async fn a_rotation_waits_on_a_budget_where_its_plan_forecast_the_wait() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("serial", 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "serial").await;
    // Its pods start slowly: an evicted pod's replacement is not Ready when the next eviction
    // comes, so the budget refuses it.
    let slow = json!({"labels": {READINESS_LABEL: "slow"}});
    let pinned = json!({"nodeSelector": {"kops.k8s.io/instancegroup": "serial"}});
    replica_set_with(&client, "serial", "web", 2, slow, pinned).await;
    let version = cluster.live().await.policy_version().await.unwrap();
    budget(&client, "serial", version, 2, 1).await;
    // Both pods run on the outdated node; an up-to-date node of the group, added after them,
    // has room for what the drain evicts.
    cluster
        .nodes
        .add(NodeSpec::new("serial-spare", "serial"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "serial", "", &[]);

    // The plan forecasts that the budget lets the batch's two evictions go one at a time...
    let forecast = first_forecast(&args).await;
    assert_eq!(forecast["waits"][0]["pdb"], "serial/web", "{forecast}");
    assert!(forecast.get("blocks").is_none(), "{forecast}");
    assert!(forecast.get("pending").is_none(), "{forecast}");
    let forecast_pods = pods_of(&forecast["waits"][0]);
    assert_eq!(forecast_pods.len(), 2, "{forecast}");

    // ...and the run does so: the budget refuses the eviction beyond the one it allows, and lets
    // it go once the first pod runs again elsewhere.
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let refused = refused_by(&out, "serial/web");
    assert_eq!(
        refused.len(),
        1,
        "{refused:?} {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        forecast_pods.contains(&refused[0]),
        "{refused:?} {forecast_pods:?}"
    );
    assert_eq!(cluster.cloud.terminated("serial"), ["serial-1"]);
}

#[tokio::test]
async fn pods_the_plan_forecast_pending_wait_for_the_replacement() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::{WatchStreamExt, watcher};
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("homeless", 1).await.unwrap();
    let client = cluster.client().await;
    create_namespace(&client, "homeless").await;
    replica_set(&client, "homeless", "web", 2).await;
    let dir = tempfile::tempdir().unwrap();
    let args = cluster.rotate_one_at_a_time(dir.path(), "homeless", "", &[]);

    // The plan forecasts that the pods of the group's only node fit nowhere until its
    // replacement is Ready...
    let forecast = first_forecast(&args).await;
    assert!(forecast.get("blocks").is_none(), "{forecast}");
    assert!(forecast.get("waits").is_none(), "{forecast}");
    let pending = forecast["pending"].as_array().expect("pods pending");
    let forecast_count: usize = pending.iter().map(|p| pods_of(p).len()).sum();
    assert_eq!(forecast_count, 2, "{forecast}");

    // ...and in the run, as many pods are found unschedulable by the scheduler, until they run
    // on the replacement.
    let pods: Api<Pod> = Api::namespaced(client, "homeless");
    let (seen, mut state) = tokio::sync::watch::channel(PodsSeen::default());
    let watch = tokio::spawn(
        watcher(pods, watcher::Config::default())
            .applied_objects()
            .for_each(move |pod| {
                seen.send_modify(|s| s.saw(&pod.unwrap()));
                std::future::ready(())
            }),
    );
    let out = run_plugin(args).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let replacement = cluster.nodes.nodes_of("homeless");
    assert!(
        !replacement.contains(&"homeless-1".to_string()),
        "{replacement:?}"
    );
    let settled = state.wait_for(|s| {
        s.ready_on
            .values()
            .filter(|node| replacement.contains(node))
            .count()
            == 2
    });
    let seen = tokio::time::timeout(std::time::Duration::from_secs(60), settled)
        .await
        .expect("the evicted pods run on the replacement")
        .unwrap()
        .clone();
    watch.abort();
    assert_eq!(seen.unschedulable.len(), forecast_count, "{seen:?}");
}

/// What a watch of pods saw: those the scheduler found no room for, and where pods run Ready.
#[derive(Debug, Clone, Default)]
struct PodsSeen {
    unschedulable: std::collections::BTreeSet<String>,
    ready_on: std::collections::BTreeMap<String, String>,
}

impl PodsSeen {
    fn saw(&mut self, pod: &k8s_openapi::api::core::v1::Pod) {
        let name = pod.metadata.name.clone().unwrap();
        let conditions = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let has = |kind: &str, status: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == kind && c.status == status)
        };
        if has("PodScheduled", "False")
            .is_some_and(|c| c.reason.as_deref() == Some("Unschedulable"))
        {
            self.unschedulable.insert(name.clone());
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        match node {
            Some(node)
                if has("Ready", "True").is_some() && pod.metadata.deletion_timestamp.is_none() =>
            {
                self.ready_on.insert(name, node);
            }
            _ => {
                self.ready_on.remove(&name);
            }
        }
    }
}

/// What the server decides for a Running pod that is not Ready under a budget that allows no
/// disruption, by the budget's `unhealthyPodEvictionPolicy`: `AlwaysAllow` evicts it,
/// `IfHealthyBudget` (and the field absent, its default) refuses it while the budget is not met.
/// The plan forecast the same, and each pod the run evicted carries the `DisruptionTarget`
/// condition the server sets on an eviction.
#[tokio::test]
async fn an_unready_pod_goes_as_its_budgets_unhealthy_pod_eviction_policy_says() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::api::{ListParams, PostParams};
    use kube::runtime::wait::await_condition;
    use kube::runtime::watcher;
    use std::collections::BTreeSet;
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    for (group, policy) in [
        ("unhealthy-always", Some("AlwaysAllow")),
        ("unhealthy-ifhealthy", Some("IfHealthyBudget")),
        ("unhealthy-default", None),
    ] {
        cluster.outdated_group(group, 1).await.unwrap();
        create_namespace(&client, group).await;
        replica_set(&client, group, "web", 2).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), group);
        let mut names: Vec<String> = (pods.list(&ListParams::default()).await.unwrap().items)
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        names.sort();
        let (unready, ready) = (
            format!("{group}/{}", names[0]),
            format!("{group}/{}", names[1]),
        );
        cluster
            .nodes
            .set_pod_ready(group, &names[0], false)
            .await
            .unwrap();

        let pdbs = budgets(&client, group, "v1");
        let mut spec =
            serde_json::json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}});
        if let Some(policy) = policy {
            spec["unhealthyPodEvictionPolicy"] = policy.into();
        }
        let pdb = serde_json::from_value(serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"}, "spec": spec}))
        .unwrap();
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        // One healthy pod of the two the budget wants: it allows no disruption.
        let unmet = |p: Option<&kube::api::DynamicObject>| {
            p.is_some_and(|p| {
                p.data["status"]["observedGeneration"] == p.metadata.generation.unwrap_or(0)
                    && p.data["status"]["expectedPods"] == 2
                    && p.data["status"]["currentHealthy"] == 1
                    && p.data["status"]["disruptionsAllowed"] == 0
            })
        };
        tokio::time::timeout(WAIT, await_condition(pdbs.clone(), "web", unmet))
            .await
            .expect("the budget sees one healthy pod of two")
            .unwrap();

        let dir = tempfile::tempdir().unwrap();
        let mut args = cluster.rotate_one_at_a_time(dir.path(), group, "", &[]);
        let at = args.iter().position(|a| a == "--drain-timeout").unwrap();
        args[at + 1] = "3s".into();
        let forecast = first_forecast(&args).await;
        assert_eq!(
            forecast["blocks"][0]["pdb"],
            format!("{group}/web"),
            "{forecast}"
        );
        let forecast_blocked = pods_of(&forecast["blocks"][0]);

        // Pods the server marks as disrupted by an eviction, as they go (watched from before
        // the run: the simulated kubelet removes an evicted pod within a second).
        let (marked_tx, marked) = tokio::sync::watch::channel(BTreeSet::<String>::new());
        let listed = std::sync::Arc::new(tokio::sync::Notify::new());
        let listed_tx = listed.clone();
        let watch = tokio::spawn(watcher(pods.clone(), watcher::Config::default()).for_each(
            move |event| {
                match event.unwrap() {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)
                        if marked_by_eviction(&pod) =>
                    {
                        let name = format!("{}/{}", pod.namespace().unwrap(), pod.name_any());
                        marked_tx.send_modify(|m| {
                            m.insert(name);
                        });
                    }
                    watcher::Event::InitDone => listed_tx.notify_one(),
                    _ => {}
                }
                std::future::ready(())
            },
        ));
        tokio::time::timeout(WAIT, listed.notified())
            .await
            .expect("the pods are listed");
        let out = run_plugin(args).await;
        // The ready pod is refused in every case: the drain times out in the first batch.
        assert_eq!(out.status.code(), Some(1), "{group}: {out:?}");
        let refused = refused_by(&out, &format!("{group}/web"));
        let evicted: BTreeSet<String> = events(&out)
            .into_iter()
            .filter(|e| e["event"] == "evicted")
            .map(|e| e["pod"].as_str().unwrap().to_string())
            .collect();
        if policy == Some("AlwaysAllow") {
            assert_eq!(forecast_blocked, [ready.as_str()], "{group}: {forecast}");
            assert_eq!(refused, [ready.as_str()], "{group}");
            assert_eq!(evicted, BTreeSet::from([unready]), "{group}");
        } else {
            let both = vec![unready, ready];
            assert_eq!(forecast_blocked, both, "{group}: {forecast}");
            assert_eq!(refused, both, "{group}");
            assert!(evicted.is_empty(), "{group}: {evicted:?}");
        }
        // The run's evictions are the server's: each evicted pod was marked by the eviction API.
        let mut marked = marked;
        let seen = tokio::time::timeout(WAIT, marked.wait_for(|m| evicted.is_subset(m)))
            .await
            .unwrap_or_else(|_| panic!("{group}: evicted pods {evicted:?} marked DisruptionTarget"))
            .unwrap()
            .clone();
        watch.abort();
        assert_eq!(seen, evicted, "{group}: only evicted pods are marked");
        assert!(cluster.cloud.terminated(group).is_empty(), "{group}");
    }
}

/// Whether the server marked `pod` as disrupted by the eviction API (the `DisruptionTarget`
/// condition it sets before deleting an evicted pod).
fn marked_by_eviction(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    (pod.status.as_ref().and_then(|s| s.conditions.as_ref())).is_some_and(|conditions| {
        conditions.iter().any(|c| {
            c.type_ == "DisruptionTarget"
                && c.status == "True"
                && c.reason.as_deref() == Some("EvictionByEvictionAPI")
        })
    })
}

/// A live cluster's plan as a page for change review: opened in a real browser, it shows every
/// batch of the same plan in JSON where its estimate puts it, says in words that the drain is
/// blocked and by which budget, and loads nothing from anywhere.
#[tokio::test]
async fn a_live_plan_draws_as_a_page_that_shows_its_forecast() {
    use rollout_ext_e2e::browser;

    let cluster = TestCluster::shared();
    blocked_group(cluster, "drawn").await;
    let dir = tempfile::tempdir().unwrap();
    let at = ["--now", "2026-11-27T12:00:00Z"];
    let args = cluster.rotate_one_at_a_time(dir.path(), "drawn", "", &at);
    let mut args = rollout_ext_e2e::plan_of(&args);
    let printed = run_plugin(args.clone()).await;
    assert!(printed.status.success(), "{printed:?}");
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();

    let page = dir.path().join("plan.html");
    let o = args.iter().position(|a| a == "-o").unwrap();
    args[o + 1] = "html".into();
    args.extend(["--output-file".into(), page.to_str().unwrap().to_string()]);
    let drawn = run_plugin(args).await;
    assert!(drawn.status.success(), "{drawn:?}");
    let page = std::fs::read_to_string(page).unwrap();
    assert!(
        page.contains("<dt>Cluster</dt><dd>context "),
        "the page names the cluster"
    );

    let opened = tokio::task::spawn_blocking(move || browser::open(&page, None))
        .await
        .unwrap();
    browser::assert_only_the_page(&opened);
    browser::assert_page_shows_plan(&opened.dom, &plan);
    let blocked = browser::elements(&opened.dom, "g", "batch");
    assert_eq!(blocked[0]["data-drain"], "blocks", "{blocked:?}");
    assert!(
        opened.dom.contains("PodDisruptionBudget drawn/web"),
        "the budget in the way is named"
    );
}
