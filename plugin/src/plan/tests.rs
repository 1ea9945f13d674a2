//! Planner scenarios: given a cluster and a policy, the plan is.

use super::*;
use crate::keys;
use crate::labels::Labels;
use crate::plan::decide::tests::FakeHook;
use crate::plan::hook::{BatchAnswer, GateAnswer};
use crate::policy::Policy;
use crate::policy::{HookPoint, IntOrPercent};
use crate::snapshot::Node;
use crate::snapshot::Snapshot;

mod capi;
mod drains;
mod timing;

fn node(name: &str, group: &str, outdated: bool) -> Node {
    let mut labels = Labels::new();
    labels.insert("kops.k8s.io/instancegroup".into(), group.into());
    let mut annotations = Labels::new();
    if outdated {
        annotations.insert(keys::NEEDS_UPDATE.into(), String::new());
    }
    Node {
        labels,
        annotations,
        created: Some(0),
        kubelet_version: Some("v1.20.2".into()),
        ..Node::ready(name)
    }
}

fn cluster(nodes: Vec<Node>) -> Snapshot {
    Snapshot {
        nodes,
        ..Default::default()
    }
}

fn group_of_six(outdated: usize) -> Snapshot {
    cluster(
        (1..=6)
            .map(|i| node(&format!("n{i}"), "nodes", i <= outdated))
            .collect(),
    )
}

fn options(surge: Option<u32>, unavailable: Option<u32>) -> PlanOptions {
    PlanOptions {
        rolling_update: RollingUpdate {
            max_surge: surge.map(IntOrPercent::Int),
            max_unavailable: unavailable.map(IntOrPercent::Int),
        },
        ..Default::default()
    }
}

fn plan(snapshot: &Snapshot, opts: &PlanOptions) -> Plan {
    plan_nodes(snapshot, &Policy::default(), opts, &mut []).unwrap()
}

/// Batches as strings: `c` marks the canary, `+` a surge.
fn shape(g: &GroupPlan) -> Vec<String> {
    g.batches
        .iter()
        .map(|b| {
            let mark = match (b.surge, b.canary) {
                (true, true) => "+c:",
                (true, false) => "+:",
                (false, true) => "c:",
                (false, false) => "",
            };
            format!("{mark}{}", b.instances.join(" "))
        })
        .collect()
}

#[test]
fn no_instance_up_to_date_starts_with_a_single_canary() {
    let p = plan(&group_of_six(6), &options(None, Some(2)));
    assert_eq!(shape(&p.groups[0]), ["c:n1", "n2 n3", "n4 n5", "n6"]);
}

#[test]
fn with_an_up_to_date_instance_there_is_no_canary() {
    let p = plan(&group_of_six(4), &options(None, Some(2)));
    let g = &p.groups[0];
    assert_eq!(shape(g), ["n1 n2", "n3 n4"]);
    assert_eq!(
        (g.group.size, g.group.up_to_date, g.group.selected),
        (6, 2, 4)
    );
    // Every instance is listed, the updated ones first.
    let listed: Vec<(&str, bool)> = g
        .instances
        .iter()
        .map(|i| (i.name.as_str(), i.update))
        .collect();
    assert_eq!(listed[4], ("n5", false));
    assert_eq!(g.instances[5].reason, "up to date");
}

/// A node already being deleted (an earlier run's termination Karpenter still drains, or
/// another tool's) is neither replaced again nor counted in the group; the plan says so.
#[test]
fn a_node_being_deleted_is_left_out_and_said() {
    let mut snapshot = group_of_six(4);
    snapshot.nodes[0].deleting = true;
    let p = plan(&snapshot, &options(None, Some(2)));
    let g = &p.groups[0];
    assert_eq!(shape(g), ["n2 n3", "n4"]);
    assert_eq!((g.group.size, g.group.selected), (5, 3));
    assert!(g.instances.iter().all(|i| i.name != "n1"));
    assert!(
        p.warnings.iter().any(|w| w
            == "group nodes: node n1 is being deleted already (by an earlier run or another tool): left out"),
        "{:?}",
        p.warnings
    );
}

#[test]
fn surge_canary_is_one_new_instance_then_the_other_surges_then_waves() {
    let p = plan(&group_of_six(6), &options(Some(2), None));
    // maxSurge 2 → maxUnavailable defaults to 0; concurrency 2. Surges detach the last ones.
    assert_eq!(
        shape(&p.groups[0]),
        ["+c:n6", "+:n5", "n1 n2", "n3 n4", "n5 n6"]
    );
}

#[test]
fn force_rotates_up_to_date_instances_after_outdated_ones_without_canary() {
    let mut opts = options(None, Some(3));
    opts.force = true;
    let p = plan(&group_of_six(2), &opts);
    let g = &p.groups[0];
    assert_eq!(shape(g), ["n1 n2 n3", "n4 n5 n6"]);
    assert_eq!(g.instances[2].reason, "forced (--force)");
}

#[test]
fn instances_detached_by_an_earlier_run_go_last() {
    let mut s = group_of_six(6);
    s.nodes[0]
        .annotations
        .insert(keys::DETACHED.into(), String::new());
    let p = plan(&s, &options(Some(1), Some(1)));
    let order: Vec<&str> = p.groups[0]
        .instances
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert_eq!(order, ["n2", "n3", "n4", "n5", "n6", "n1"]);
    // The detached one already has its surge instance: no new surge is planned.
    assert!(p.groups[0].batches.iter().all(|b| !b.surge));
}

#[test]
fn groups_are_planned_bastion_control_plane_node() {
    let mut cp = node("cp1", "masters", true);
    cp.labels
        .insert(keys::ROLE_CONTROL_PLANE.into(), String::new());
    let s = cluster(vec![node("a1", "alpha", true), cp]);
    let p = plan(&s, &options(Some(3), None));
    let names: Vec<&str> = p.groups.iter().map(|g| g.group.name.as_str()).collect();
    assert_eq!(names, ["masters", "alpha"]);
    // The cluster-wide surge is ignored on the control plane.
    assert_eq!(
        (p.groups[0].group.max_surge, p.groups[0].concurrency),
        (0, 1)
    );
    assert!(p.groups[0].batches.iter().all(|b| !b.surge));
}

#[test]
fn a_group_surge_on_the_control_plane_names_the_policy_line() {
    let mut cp = node("cp1", "masters", true);
    cp.labels
        .insert(keys::ROLE_CONTROL_PLANE.into(), String::new());
    let policy = Policy::parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  groups:\n  - name: masters\n    rollingUpdate:\n      maxSurge: 1\n",
        "policy.yaml",
        std::path::Path::new("."),
    )
    .unwrap();
    let err = plan_nodes(
        &cluster(vec![cp]),
        &policy,
        &PlanOptions::default(),
        &mut [],
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("policy.yaml:7:"), "{text}");
    assert!(text.contains("cannot surge"), "{text}");
}

#[test]
fn both_budgets_zero_disables_the_group_without_error() {
    let p = plan(&group_of_six(6), &options(Some(0), Some(0)));
    let g = &p.groups[0];
    assert!(g.disabled);
    assert!(g.batches.is_empty());
    assert!(g.note.as_deref().unwrap().contains("disabled"));
    assert!(
        g.instances
            .iter()
            .all(|i| !i.update && i.reason.starts_with("group disabled"))
    );
}

#[test]
fn group_and_role_filters() {
    let mut cp = node("cp1", "masters", true);
    cp.labels
        .insert(keys::ROLE_CONTROL_PLANE.into(), String::new());
    let s = cluster(vec![
        cp,
        node("a1", "alpha", true),
        node("b1", "beta", true),
    ]);
    let mut opts = PlanOptions {
        instance_groups: vec!["beta".into()],
        ..Default::default()
    };
    assert_eq!(plan(&s, &opts).groups.len(), 1);
    opts.instance_groups.clear();
    opts.roles = vec![Role::ControlPlane];
    let p = plan(&s, &opts);
    assert_eq!(p.groups.len(), 1);
    assert_eq!(p.groups[0].group.name, "masters");

    opts.instance_groups = vec!["gamma".into()];
    let err = plan_nodes(&s, &Policy::default(), &opts, &mut []).unwrap_err();
    assert!(
        err.to_string()
            .contains("\"gamma\" not found; groups in the cluster: masters, alpha, beta"),
        "{err}"
    );
}

#[test]
fn interactive_goes_one_by_one() {
    let mut opts = options(None, Some(3));
    opts.interactive = true;
    let p = plan(&group_of_six(3), &opts);
    assert_eq!(shape(&p.groups[0]), ["n1", "n2", "n3"]);
}

#[test]
fn cloudonly_does_not_surge() {
    let mut opts = options(Some(2), Some(1));
    opts.cloud_only = true;
    let p = plan(&group_of_six(3), &opts);
    assert!(p.groups[0].batches.iter().all(|b| !b.surge));
}

#[test]
fn batching_hook_pauses_advance_the_simulated_clock() {
    let mut window = FakeHook::new("window", &[HookPoint::Batch]);
    let mut calls = 0;
    window.batch = Box::new(move |p| {
        calls += 1;
        Ok(if calls == 1 {
            BatchAnswer::Pause {
                seconds: 3600,
                reason: "closed".into(),
            }
        } else {
            crate::plan::decide::tests::sized(p.max_batch.min(2))
        })
    });
    let mut hooks = vec![window.boxed()];
    let p = plan_nodes(
        &group_of_six(5),
        &Policy::default(),
        &options(None, Some(3)),
        &mut hooks,
    )
    .unwrap();
    let g = &p.groups[0];
    let pause = g.batches[0].pause.as_ref().expect("the first batch waits");
    assert_eq!((pause.seconds, pause.reason.as_str()), (3600, "closed"));
    // One instance is up to date, so no canary.
    assert_eq!(shape(g), ["n1 n2", "n3 n4", "n5"]);
    assert_eq!(g.batches[1].decided_by, DecidedBy::Hook("window".into()));
}

#[test]
fn a_hook_that_never_stops_pausing_ends_the_simulation_with_a_warning() {
    let mut stuck = FakeHook::new("stuck", &[HookPoint::Batch]);
    stuck.batch = Box::new(|_| {
        Ok(BatchAnswer::Pause {
            seconds: 86_400,
            reason: "later".into(),
        })
    });
    let mut hooks = vec![stuck.boxed()];
    let p = plan_nodes(
        &group_of_six(2),
        &Policy::default(),
        &PlanOptions::default(),
        &mut hooks,
    )
    .unwrap();
    assert!(p.groups[0].batches.is_empty());
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("hook/stuck kept pausing")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_gate_wait_is_shown_on_its_batch() {
    let mut gate = FakeHook::new("careful", &[HookPoint::Gate]);
    gate.gate = Box::new(|b| {
        Ok(if b.instances.contains(&"n2".to_string()) {
            GateAnswer::Wait {
                seconds: 30,
                reason: "n2 is busy".into(),
            }
        } else {
            GateAnswer::Proceed
        })
    });
    let mut hooks = vec![gate.boxed()];
    let p = plan_nodes(
        &group_of_six(6),
        &Policy::default(),
        &PlanOptions::default(),
        &mut hooks,
    )
    .unwrap();
    let waits: Vec<String> = p.groups[0]
        .batches
        .iter()
        .filter_map(|b| b.gate.as_ref())
        .map(|g| g.verdict.to_string())
        .collect();
    assert_eq!(
        waits,
        [
            "proceed", "wait", "proceed", "proceed", "proceed", "proceed"
        ]
    );
}

#[test]
fn the_plan_json_has_the_documented_shape() {
    let p = plan(&group_of_six(2), &PlanOptions::default());
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["apiVersion"], "rollout-ext/v1alpha1");
    assert_eq!(v["kind"], "Plan");
    let g = &v["groups"][0];
    for field in [
        "name",
        "role",
        "size",
        "upToDate",
        "selected",
        "maxSurge",
        "maxUnavailable",
        "disabled",
        "instances",
        "batches",
    ] {
        assert!(!g[field].is_null(), "missing {field}");
    }
    assert_eq!(g["role"], "node");
    assert_eq!(g["instances"][0]["decidedBy"], "built-in");
    assert_eq!(g["instances"][0]["update"], true);
    assert_eq!(g["batches"][0]["instances"][0], "n1");
    assert!(
        g["batches"][0].get("canary").is_none(),
        "canary is omitted when false"
    );
    assert!(v["warnings"].is_array());
}

#[test]
fn policy_groups_that_match_nothing_are_warned_about() {
    let policy = Policy::parse(
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  groups:\n  - name: nodez\n",
        "policy.yaml",
        std::path::Path::new("."),
    )
    .unwrap();
    let p = plan_nodes(&group_of_six(1), &policy, &PlanOptions::default(), &mut []).unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("\"nodez\" match no instance group")),
        "{:?}",
        p.warnings
    );
}

/// Two outdated 2-CPU nodes and an up-to-date one, each running a pod of `cpu`; the first also
/// a pod only an SSD node may run.
fn crowded(cpu: &str) -> Snapshot {
    let node = |name: &str, outdated: bool| {
        let annotations = if outdated {
            r#"{"rollout-ext.io/needs-update": ""}"#
        } else {
            "{}"
        };
        format!(
            r#"{{"kind": "Node", "metadata": {{"name": "{name}", "labels": {{"kops.k8s.io/instancegroup": "nodes"}}, "annotations": {annotations}}},
                "status": {{"conditions": [{{"type": "Ready", "status": "True"}}], "allocatable": {{"cpu": "2", "memory": "4Gi"}}}}}}"#
        )
    };
    let pod = |name: &str, node: &str, cpu: &str, selector: &str| {
        format!(
            r#"{{"kind": "Pod", "metadata": {{"name": "{name}", "namespace": "shop", "ownerReferences": [{{"kind": "ReplicaSet", "name": "rs", "controller": true}}]}},
                "spec": {{"nodeName": "{node}", "nodeSelector": {selector}, "containers": [{{"resources": {{"requests": {{"cpu": "{cpu}", "memory": "1Gi"}}}}}}]}},
                "status": {{"phase": "Running", "conditions": [{{"type": "Ready", "status": "True"}}]}}}}"#
        )
    };
    let items = [
        node("n1", true),
        node("n2", true),
        node("n3", false),
        pod("web-1", "n1", cpu, "{}"),
        pod("web-2", "n2", cpu, "{}"),
        pod("web-3", "n3", cpu, "{}"),
        pod("db-0", "n1", "100m", r#"{"disk": "ssd"}"#),
    ];
    let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
    Snapshot::from_json(json.as_bytes()).unwrap()
}

#[test]
fn the_forecast_lists_pods_that_wait_for_a_replacement_and_warns_of_those_that_fit_nowhere() {
    let p = plan(&crowded("1500m"), &options(None, Some(1)));
    let g = &p.groups[0];
    assert_eq!(shape(g), ["n1", "n2"]);
    let first = g.batches[0].forecast.as_ref().unwrap();
    assert_eq!(forecast::Forecast::word(Some(first)), "pending");
    let pending: Vec<(&[String], &str)> = first
        .pending
        .iter()
        .map(|p| (p.pods.as_slice(), p.reason.as_str()))
        .collect();
    assert_eq!(
        pending,
        [
            (
                &["shop/web-1".to_string()][..],
                "fits on no schedulable node until the batch's replacements are Ready (needs cpu 1500m, memory 1Gi)"
            ),
            (
                &["shop/db-0".to_string()][..],
                "fits on no node of any group: no node matches its nodeSelector disk=ssd"
            ),
        ]
    );
    // n1's replacement took web-1; n2's takes web-2.
    let second = g.batches[1].forecast.as_ref().unwrap();
    assert_eq!(second.pending[0].pods, ["shop/web-2"]);
    assert_eq!(
        p.warnings,
        [
            "group nodes batch 1 evicts 1 pod(s) that fit on no node of any group (no node matches its nodeSelector disk=ssd), so they would stay Pending: shop/db-0"
        ]
    );
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(
        v["groups"][0]["batches"][1]["forecast"]["pending"][0]["pods"][0],
        "shop/web-2"
    );
}

#[test]
fn pods_with_room_elsewhere_or_no_drain_forecast_nothing() {
    let mut roomy = plan(&crowded("500m"), &options(None, Some(1)));
    let batches = &roomy.groups[0].batches;
    assert!(batches[1].forecast.is_none(), "{:?}", batches[1].forecast);
    // Only the SSD pod, which fits nowhere, is pending in the first batch.
    assert_eq!(batches[0].forecast.as_ref().unwrap().pending.len(), 1);
    roomy = plan(
        &crowded("1500m"),
        &PlanOptions {
            cloud_only: true,
            ..options(None, Some(1))
        },
    );
    assert!(roomy.groups[0].batches.iter().all(|b| b.forecast.is_none()));
    assert!(roomy.warnings.is_empty(), "{:?}", roomy.warnings);
}

#[test]
fn the_demo_snapshot_has_no_requests_and_forecasts_no_pending_pod() {
    let demo = include_str!("../../../examples-hooks/demo/snapshot.json");
    let snapshot = Snapshot::from_json(demo.as_bytes()).unwrap();
    for unavailable in [1, 3, 100] {
        let opts = PlanOptions {
            staleness: groups::Staleness {
                kubelet_version: Some("v1.20.2".into()),
                ..Default::default()
            },
            ..options(Some(0), Some(unavailable))
        };
        let p = plan(&snapshot, &opts);
        assert!(p.groups.iter().any(|g| g.batches.len() > 1), "{p:?}");
        let pending = p
            .groups
            .iter()
            .flat_map(|g| &g.batches)
            .filter_map(|b| b.forecast.as_ref())
            .any(|f| !f.pending.is_empty());
        assert!(!pending, "{p:?}");
        assert!(
            !p.warnings
                .iter()
                .any(|w| w.contains("no node of any group")),
            "{:?}",
            p.warnings
        );
    }
}
