//! Validation on the real test bed, read from a live view: consecutive successes, failures
//! named, cordons of the run excused, and a failed validation woken up by the change that fixes
//! it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rollout_ext::cluster::validate::{ValidationError, ValidationSettings};
use rollout_ext::cluster::view::{Deadline, LiveView};
use rollout_ext::progress::{Collect, Event, Reporter};
use rollout_ext_e2e::cluster::{NodeSpec, TestCluster};

fn settings(timeout: Duration) -> ValidationSettings {
    ValidationSettings {
        count: 2,
        success_interval: Duration::from_millis(100),
        timeout,
    }
}

#[derive(Default)]
struct FirstFailure {
    events: Collect,
    failed: tokio::sync::Notify,
}

impl Reporter for FirstFailure {
    fn report(&self, event: Event) {
        if matches!(event, Event::ValidationFailed { .. }) {
            self.failed.notify_one();
        }
        self.events.report(event);
    }
}

#[tokio::test]
async fn validation_counts_successes_names_failures_and_wakes_on_change() {
    let cluster = TestCluster::shared();
    for name in ["v-1", "v-2"] {
        cluster.nodes.add(NodeSpec::new(name, "v")).await.unwrap();
    }
    let live = Arc::new(LiveView::start(&cluster.live().await).await.unwrap());
    let none = HashSet::new();

    let reporter = Collect::default();
    live.validate(&settings(Duration::from_secs(30)), &none, &reporter)
        .await
        .unwrap();
    assert_eq!(
        reporter.events(),
        [
            Event::Validated {
                passed: 1,
                needed: 2
            },
            Event::Validated {
                passed: 2,
                needed: 2
            }
        ]
    );

    // A NotReady node fails validation, by name, at the timeout.
    cluster.nodes.set_ready("v-2", false).await.unwrap();
    match live
        .validate(&settings(Duration::from_secs(2)), &none, &reporter)
        .await
    {
        Err(ValidationError::Timeout { failures, .. }) => {
            assert_eq!(failures, ["node v-2 is not Ready"]);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }

    // A failed validation waits for the change that fixes it.
    let watcher = Arc::new(FirstFailure::default());
    let validation = {
        let (live, watcher) = (live.clone(), watcher.clone());
        tokio::spawn(async move {
            live.validate(
                &settings(Duration::from_secs(60)),
                &HashSet::new(),
                watcher.as_ref(),
            )
            .await
        })
    };
    tokio::time::timeout(Duration::from_secs(30), watcher.failed.notified())
        .await
        .unwrap();
    cluster.nodes.set_ready("v-2", true).await.unwrap();
    validation
        .await
        .unwrap()
        .expect("validates once the node is Ready again");

    // A node cordoned by someone else fails validation; one cordoned by the run does not.
    let nodes: Api<Node> = Api::all(cluster.client().await);
    nodes
        .patch(
            "v-1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    let cordoned =
        |s: &rollout_ext::snapshot::Snapshot| match s.nodes.iter().find(|n| n.name == "v-1") {
            Some(n) if n.unschedulable => Ok(()),
            _ => Err(()),
        };
    live.wait_until(Deadline::Within(Duration::from_secs(30)), cordoned)
        .await
        .expect("the view shows the cordon");
    let summary = live.health(&none).unwrap();
    assert_eq!(summary.failures, ["node v-1 is unschedulable"]);
    let ours: HashSet<&str> = ["v-1"].into();
    live.validate(
        &settings(Duration::from_secs(30)),
        &ours,
        &Collect::default(),
    )
    .await
    .unwrap();
}
