//! Kubernetes Events for what a rotation does, on the real test bed: on its nodes and its Lease,
//! visible through kubectl's core view, bounded for a drain retried many times, and published
//! as core `v1` Events by a server that does not serve `events.k8s.io/v1`.

use std::process::Command;

use kube::api::{Api, ListParams};
use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::run_plugin;

/// The Events (events.k8s.io/v1) in `namespace` about the object named `name`.
async fn k8s_events(
    cluster: &TestCluster,
    namespace: &str,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client().await, namespace);
    let selector = format!("regarding.name={name}");
    api.list(&ListParams::default().fields(&selector))
        .await
        .unwrap()
        .items
}

fn reasons(events: &[k8s_openapi::api::events::v1::Event]) -> Vec<String> {
    events.iter().filter_map(|e| e.reason.clone()).collect()
}

#[tokio::test]
async fn a_rotation_leaves_kubernetes_events_on_its_nodes_and_its_lease() {
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("evented", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = cluster.exec_policy(dir.path(), "");
    let out = run_plugin(cluster.rotate_args(&policy, "evented")).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &originals {
        let events = k8s_events(cluster, "kube-system", node).await;
        let seen = reasons(&events);
        for reason in [
            "Tainted",
            "Cordoned",
            "DrainStarted",
            "Drained",
            "Terminated",
        ] {
            assert!(seen.iter().any(|r| r == reason), "{node}: {seen:?}");
        }
        for event in &events {
            assert_eq!(event.reporting_controller.as_deref(), Some("rollout-ext"));
            let note = event.note.as_deref().unwrap_or_default();
            assert!(note.contains(" (run "), "{note}");
        }
    }
    // kubectl's own view (core v1 Events) shows them under the node too.
    let listed = Command::new("kubectl")
        .args(["--kubeconfig", cluster.kubeconfig.to_str().unwrap()])
        .args(["get", "events", "-A", "--field-selector"])
        .arg(format!("involvedObject.name={}", originals[0]))
        .args(["-o", "jsonpath={.items[*].reason}"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("Cordoned") && listed.contains("Terminated"),
        "{listed}"
    );
    // The run as a whole is told on its Lease, from start to finish.
    let run = reasons(&k8s_events(cluster, "kube-system", "rollout-ext").await);
    for reason in [
        "Started",
        "GroupStarted",
        "BatchStarted",
        "ReplacementsReady",
        "GroupDone",
        "Finished",
    ] {
        assert!(run.iter().any(|r| r == reason), "{run:?}");
    }
}

#[tokio::test]
async fn a_drain_retried_twenty_times_leaves_one_event_that_counts_them() {
    use rollout_ext::cluster::recorder::{EventRecorder, Scope};
    use rollout_ext::events::{Collect, Event, Reporter};
    let cluster = TestCluster::shared();
    let live = cluster.live().await;
    let terminal = std::sync::Arc::new(Collect::default());
    let recorder = EventRecorder::start(&live, "a-test-run", Scope::Rotation, terminal.clone());
    for left in (0..20).rev() {
        recorder.report(Event::EvictionBlocked {
            node: "retried-1".into(),
            pod: "shop/web-1".into(),
            reason: "PodDisruptionBudget shop/web allows no disruption".into(),
            retry_seconds: 5,
            seconds_left: left * 5,
        });
    }
    recorder.finish(None).await;
    // Every event still reached the terminal, and publishing raised no warning.
    let shown = terminal.events();
    assert_eq!(shown.len(), 20, "{shown:?}");
    let events = k8s_events(cluster, "kube-system", "retried-1").await;
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event.reason.as_deref(), Some("EvictionBlocked"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.series.as_ref().map(|s| s.count), Some(20));
    let related = event.related.as_ref().unwrap();
    assert_eq!(
        (related.namespace.as_deref(), related.name.as_deref()),
        (Some("shop"), Some("web-1"))
    );
}

#[tokio::test]
async fn a_server_without_events_k8s_io_v1_gets_core_events_that_count_repeats() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use rollout_ext::cluster::recorder::{EventRecorder, Scope};
    use rollout_ext::events::{Collect, Event, Reporter};
    let cluster =
        TestCluster::start_with_apiserver_flags(&["--runtime-config=events.k8s.io/v1=false"])
            .unwrap();
    let client = cluster.client().await;
    assert!(
        client
            .list_api_group_resources("events.k8s.io/v1")
            .await
            .is_err(),
        "the server still serves events.k8s.io/v1"
    );
    let live = cluster.live().await;
    let terminal = std::sync::Arc::new(Collect::default());
    let recorder = EventRecorder::start(&live, "a-legacy-run", Scope::Rotation, terminal.clone());
    recorder.report(Event::Cordoned {
        node: "legacy-1".into(),
        excluded_from_load_balancers: true,
    });
    for left in (0..20).rev() {
        recorder.report(Event::EvictionBlocked {
            node: "legacy-1".into(),
            pod: "shop/web-1".into(),
            reason: "PodDisruptionBudget shop/web allows no disruption".into(),
            retry_seconds: 5,
            seconds_left: left * 5,
        });
    }
    recorder.finish(None).await;
    // Publishing raised no warning: every event reached the terminal as it was.
    assert_eq!(terminal.events().len(), 21, "{:?}", terminal.events());
    // The only namespace core v1 accepts for Events about a Node.
    let api: Api<CoreEvent> = Api::namespaced(client, "default");
    let listed = api
        .list(&ListParams::default().fields("involvedObject.name=legacy-1"))
        .await
        .unwrap()
        .items;
    let mut seen: Vec<(String, i32)> = listed
        .iter()
        .map(|e| (e.reason.clone().unwrap_or_default(), e.count.unwrap_or(0)))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("Cordoned".to_string(), 1),
            ("EvictionBlocked".to_string(), 20)
        ]
    );
    for event in &listed {
        assert_eq!(
            event.source.as_ref().and_then(|s| s.component.as_deref()),
            Some("rollout-ext")
        );
        assert!(
            event
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("(run a-legacy-run)")
        );
        assert_eq!(event.involved_object.kind.as_deref(), Some("Node"));
    }
}
