use super::*;
use crate::plan::decide::tests::FakeHook;
use crate::plan::hook::GateAnswer;
use crate::policy::{HookPoint, IntOrPercent};
use serde_json::json;

fn old(replicas: i32) -> Controller {
    Controller::from_value(json!({
        "kind": "ReplicationController",
        "metadata": {"name": "foo", "uid": "u1"},
        "spec": {"replicas": replicas, "selector": {"app": "foo"}}
    }))
    .unwrap()
}

fn input(old: &Controller, surge: IntOrPercent, unavailable: IntOrPercent) -> PlanInput<'_> {
    let desired = old.replicas();
    PlanInput {
        old,
        old_pods: &[],
        next_name: "foo-next".into(),
        next_replicas: 0,
        next_exists: false,
        desired,
        budgets: crate::plan::rolling_update::steps::budgets(
            surge,
            unavailable,
            desired,
            old.replicas(),
        ),
        cleanup: Cleanup::Rename,
        ctx: CallContext {
            now: 0,
            run_id: "plan".into(),
            dry_run: true,
            timing: Default::default(),
            others: Vec::new(),
        },
        estimates: Default::default(),
    }
}

fn summary(plan: &RollingUpdatePlan) -> Vec<(Side, i32)> {
    plan.steps
        .iter()
        .map(|s| (s.controller, s.replicas))
        .collect()
}

#[test]
fn the_documented_example_and_json_shape() {
    let old = old(10);
    let plan = plan(
        &input(&old, IntOrPercent::Int(0), IntOrPercent::Percent(30)),
        &mut [],
    )
    .unwrap();
    use Side::{Next, Old};
    assert_eq!(
        summary(&plan),
        vec![
            (Old, 7),
            (Next, 3),
            (Old, 4),
            (Next, 6),
            (Old, 1),
            (Next, 9),
            (Old, 0),
            (Next, 10)
        ]
    );
    let value = serde_json::to_value(&plan).unwrap();
    assert_eq!(
        value,
        json!({"apiVersion": "rollout-ext/v1alpha1", "kind": "RollingUpdatePlan",
               "old": {"kind": "ReplicationController", "name": "foo", "replicas": 10},
               "next": {"name": "foo-next", "replicas": 0, "desired": 10, "exists": false},
               "maxSurge": 0, "maxUnavailable": 3,
               "steps": [{"controller": "old", "replicas": 7, "decidedBy": "built-in"}, {"controller": "next", "replicas": 3, "decidedBy": "built-in"},
                         {"controller": "old", "replicas": 4, "decidedBy": "built-in"}, {"controller": "next", "replicas": 6, "decidedBy": "built-in"},
                         {"controller": "old", "replicas": 1, "decidedBy": "built-in"}, {"controller": "next", "replicas": 9, "decidedBy": "built-in"},
                         {"controller": "old", "replicas": 0, "decidedBy": "built-in"}, {"controller": "next", "replicas": 10, "decidedBy": "built-in"}],
               "cleanup": "rename"})
    );
}

#[test]
fn a_batching_hook_shrinks_steps_and_is_credited() {
    let old = old(4);
    let mut hook = FakeHook::new("one", &[HookPoint::Batch]);
    hook.batch = Box::new(|_| Ok(crate::plan::decide::tests::sized(1)));
    let hook = hook.boxed();
    let plan = plan(
        &input(&old, IntOrPercent::Int(0), IntOrPercent::Int(2)),
        &mut [hook],
    )
    .unwrap();
    assert!(
        plan.steps
            .iter()
            .all(|s| s.decisions.decided_by.to_string() == "hook/one")
    );
    // One at a time: 4 removals and 4 additions.
    assert_eq!(plan.steps.len(), 8);
}

#[test]
fn a_gate_abort_stops_the_plan() {
    let old = old(4);
    let mut hook = FakeHook::new("stop", &[HookPoint::Gate]);
    hook.gate = Box::new(|batch| {
        Ok(if batch.index >= 1 {
            GateAnswer::Abort("error budget spent".into())
        } else {
            GateAnswer::Proceed
        })
    });
    let hook = hook.boxed();
    let plan = plan(
        &input(&old, IntOrPercent::Int(1), IntOrPercent::Int(0)),
        &mut [hook],
    )
    .unwrap();
    assert_eq!(plan.steps.len(), 2);
    assert!(plan.stopped.unwrap().contains("error budget spent"));
}

#[test]
fn a_shadow_gate_that_would_abort_is_shown_and_the_plan_goes_on() {
    let old = old(4);
    let mut hook = FakeHook::new("next", &[HookPoint::Gate]);
    hook.mode = crate::policy::HookMode::Shadow;
    hook.gate = Box::new(|batch| {
        Ok(if batch.index >= 1 {
            GateAnswer::Abort("error budget spent".into())
        } else {
            GateAnswer::Proceed
        })
    });
    let baseline = plan(
        &input(&old, IntOrPercent::Int(1), IntOrPercent::Int(0)),
        &mut [],
    )
    .unwrap();
    let plan = plan(
        &input(&old, IntOrPercent::Int(1), IntOrPercent::Int(0)),
        &mut [hook.boxed()],
    )
    .unwrap();
    assert_eq!(summary(&plan), summary(&baseline));
    assert!(plan.stopped.is_none());
    assert!(plan.steps.iter().all(|s| s.decisions.gate.is_none()));
    let said: Vec<(&str, bool)> = plan
        .steps
        .iter()
        .map(|s| {
            (
                s.decisions.shadow[0].decision.as_str(),
                s.decisions.shadow[0].agrees,
            )
        })
        .collect();
    assert_eq!(said[0], ("proceed", true));
    assert!(
        said[1..]
            .iter()
            .all(|s| *s == ("abort: error budget spent", false)),
        "{said:?}"
    );
}

#[test]
fn a_selection_hook_orders_the_old_pods() {
    let old = old(2);
    let pods: Vec<PodInfo> = ["foo-a", "foo-b"]
        .iter()
        .map(|name| {
            PodInfo::from_value(&json!({
                "metadata": {"name": name, "ownerReferences": [{"uid": "u1", "controller": true}]}
            }))
        })
        .collect();
    let mut hook = FakeHook::new("order", &[HookPoint::Select]);
    hook.select = Box::new(|candidates| {
        assert!(
            candidates
                .iter()
                .all(|c| c.kind == crate::plan::hook::InstanceKind::Pod)
        );
        Ok(crate::plan::hook::SelectAnswer::Choose(
            candidates
                .iter()
                .rev()
                .map(|c| crate::plan::hook::Choice {
                    name: c.name.clone(),
                    reason: "newest first".into(),
                    force: false,
                })
                .collect(),
        ))
    });
    let mut input = input(&old, IntOrPercent::Int(1), IntOrPercent::Int(0));
    input.old_pods = &pods;
    let plan = plan(&input, &mut [hook.boxed()]).unwrap();
    let order = plan.deletion_order.unwrap();
    assert_eq!(order.pods, vec!["foo-b", "foo-a"]);
    assert_eq!(order.decided_by.to_string(), "hook/order");
}
