use super::*;
use crate::plan::decide::tests::{FakeHook, cands, choose, ctx, group, progress_of, sized};
use crate::plan::hook::{DecidedBy, GateAnswer};

fn shadow(mut hook: FakeHook) -> Box<dyn Hook> {
    hook.mode = HookMode::Shadow;
    hook.boxed()
}

fn batch() -> BatchInfo {
    BatchInfo {
        index: 0,
        instances: vec!["a".into()],
        canary: false,
        attempt: 0,
    }
}

#[test]
fn a_shadow_selection_is_reported_and_never_decides() {
    let c = cands();
    let mut reorder = FakeHook::new("new", &[HookPoint::Select]);
    reorder.select = Box::new(|view: &[Candidate]| {
        // It sees the built-in choice, not what a deciding hook made of it.
        assert_eq!(view[0].reason.as_deref(), Some("old"));
        Ok(choose(&["b", "a"]))
    });
    let mut enforce = FakeHook::new("current", &[HookPoint::Select]);
    enforce.select = Box::new(|_| Ok(choose(&["a"])));
    let mut hooks = vec![enforce.boxed(), shadow(reorder)];

    let decided = decide::select(&mut hooks, &ctx(), &group(), &c, &mut vec![]).unwrap();
    assert_eq!(decided.by, DecidedBy::Hook("current".into()));
    assert_eq!(decided.chosen.len(), 1, "the shadow's order is not taken");

    let seen = select(&mut hooks, &ctx(), &group(), &c, &decided);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].hook, "new");
    assert_eq!(seen[0].decision, "order b, a");
    assert!(!seen[0].agrees);
    assert_eq!(
        seen[0].describe(),
        "hook/new (shadow) would order b, a; differs from the decision taken"
    );
}

#[test]
fn a_deferring_shadow_agrees_with_the_built_in_decision() {
    let c = cands();
    let mut hooks = vec![shadow(FakeHook::new("quiet", &[HookPoint::Select]))];
    let decided = decide::select(&mut hooks, &ctx(), &group(), &c, &mut vec![]).unwrap();
    assert_eq!(decided.by, DecidedBy::BuiltIn);
    let seen = select(&mut hooks, &ctx(), &group(), &c, &decided);
    assert_eq!((seen[0].decision.as_str(), seen[0].agrees), ("defer", true));
}

#[test]
fn shadow_batch_sizes_are_compared_with_the_size_taken() {
    let g = group();
    let c = cands();
    let p = progress_of(&g, &c, 2);
    let mut one = FakeHook::new("one", &[HookPoint::Batch]);
    one.batch = Box::new(|_| Ok(sized(1)));
    let mut two = FakeHook::new("two", &[HookPoint::Batch]);
    two.batch = Box::new(|_| Ok(sized(2)));
    let mut hooks = vec![shadow(one), shadow(two)];

    let decided = decide::batch_size(&mut hooks, &ctx(), &p, &mut vec![]).unwrap();
    assert_eq!(decided.to_string(), "size 2: the budget");
    let seen = batch_size(&mut hooks, &ctx(), &p, &decided);
    let words: Vec<(&str, bool)> = seen
        .iter()
        .map(|s| (s.decision.as_str(), s.agrees))
        .collect();
    assert_eq!(
        words,
        [
            ("size 1: hook says 1", false),
            ("size 2: hook says 2", true)
        ]
    );
}

#[test]
fn a_failing_shadow_is_reported_even_under_fail() {
    let g = group();
    let c = cands();
    let p = progress_of(&g, &c, 2);
    let mut broken = FakeHook::new("broken", &[HookPoint::Batch]);
    broken.policy = crate::policy::FailurePolicy::Fail;
    broken.batch = Box::new(|_| Ok(sized(5)));
    let mut hooks = vec![shadow(broken)];

    let mut warnings = vec![];
    let decided = decide::batch_size(&mut hooks, &ctx(), &p, &mut warnings).unwrap();
    assert!(warnings.is_empty());
    let seen = batch_size(&mut hooks, &ctx(), &p, &decided);
    assert!(!seen[0].agrees);
    let error = seen[0].error.as_deref().unwrap();
    assert!(error.contains("exceeds the budget of 2"), "{error}");
    assert!(seen[0].describe().contains("shadow hooks never decide"));
}

#[test]
fn a_shadow_gate_that_would_abort_differs_from_going_on() {
    let mut stop = FakeHook::new("stop", &[HookPoint::Gate]);
    stop.gate = Box::new(|_| Ok(GateAnswer::Abort("payments not ready".into())));
    let mut hooks = vec![shadow(stop)];
    let summary = HealthSummary::default();
    let decided = decide::gate(
        &mut hooks,
        &ctx(),
        Phase::AfterBatch,
        &batch(),
        &summary,
        &mut vec![],
    )
    .unwrap();
    assert_eq!(decided.verdict, Verdict::Proceed);
    assert_eq!(decided.by, DecidedBy::BuiltIn);
    let seen = gate(
        &mut hooks,
        &ctx(),
        Phase::AfterBatch,
        &batch(),
        &summary,
        &decided,
    );
    assert_eq!(seen[0].phase, Some(Phase::AfterBatch));
    assert_eq!(seen[0].decision, "abort: payments not ready");
    assert!(!seen[0].agrees);
    assert!(in_shadow(hooks[0].as_ref(), HookPoint::Gate));
    assert!(!in_shadow(hooks[0].as_ref(), HookPoint::Select));
    assert!(decide::serves_any(&hooks, HookPoint::Gate));
}

#[test]
fn a_shadow_drain_order_is_reported_beside_the_order_taken() {
    use crate::plan::hook::DrainOrderAnswer;
    let json = r#"{"kind": "List", "items": [
        {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}},
        {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "b", "namespace": "ns"}, "spec": {"nodeName": "n1"}}]}"#;
    let pods: Vec<_> = crate::snapshot::Snapshot::from_json(json.as_bytes())
        .unwrap()
        .pods
        .into_iter()
        .map(std::sync::Arc::unwrap_or_clone)
        .collect();
    let mut tried = FakeHook::new("tried", &[HookPoint::DrainOrder]);
    tried.drain_order = Some(DrainOrderAnswer::Turns(vec![
        vec!["ns/b".into()],
        vec!["ns/a".into()],
    ]));
    let mut wrong = FakeHook::new("wrong", &[HookPoint::DrainOrder]);
    wrong.drain_order = Some(DrainOrderAnswer::Turns(vec![vec!["ns/zz".into()]]));
    let mut hooks = vec![shadow(tried), shadow(wrong)];
    let mut warnings = Vec::new();
    let decided = decide::drain_order(&mut hooks, &ctx(), "n1", &pods, &mut warnings).unwrap();
    assert_eq!(decided.turns, None, "a shadow hook never decides");
    let said = drain_order(&mut hooks, &ctx(), "n1", &pods, &decided);
    assert_eq!(said.len(), 2);
    assert_eq!(said[0].decision, "turns ns/b | ns/a");
    assert!(!said[0].agrees);
    assert!(
        said[1]
            .error
            .as_deref()
            .unwrap()
            .contains("not one of the pods"),
        "{said:?}"
    );
}
