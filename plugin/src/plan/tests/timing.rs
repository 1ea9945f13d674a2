//! What hooks are told of how long things take, and the plan's clock that moves with it.

use super::*;
use crate::plan::estimate::{Durations, GroupHistory, History, Stage};
use crate::plan::hook::CallContext;

/// The calls of `hook` at `point`, in order.
fn calls_at(calls: &crate::plan::decide::tests::Calls, point: &str) -> Vec<CallContext> {
    let calls = calls.lock().unwrap();
    (calls.iter())
        .filter(|(p, _)| *p == point)
        .map(|(_, ctx)| ctx.clone())
        .collect()
}

/// A group whose history has every stage at `seconds`.
fn history_of(group: &str, seconds: u64) -> History {
    let mut history = GroupHistory::default();
    for stage in [
        Stage::Drain,
        Stage::Replacement,
        Stage::Validation,
        Stage::Other,
    ] {
        history.record("run-1", stage, seconds * 1000);
    }
    History {
        groups: [(group.to_string(), history)].into(),
    }
}

#[test]
fn hooks_are_told_the_batch_at_hand_and_what_is_left_as_the_plan_clock_moves() {
    let mut opts = options(None, Some(2));
    opts.now = 1_000_000;
    opts.ask_after_batch = true;
    opts.durations = Durations {
        history: history_of("nodes", 10),
        ..Default::default()
    };
    let hook = FakeHook::new("h", &[HookPoint::Select, HookPoint::Batch, HookPoint::Gate]);
    let calls = hook.calls.clone();
    // Five of six outdated: no canary.
    let p = plan_nodes(
        &group_of_six(5),
        &Policy::default(),
        &opts,
        &mut [hook.boxed()],
    )
    .unwrap();
    assert_eq!(shape(&p.groups[0]), ["n1 n2", "n3 n4", "n5"]);

    // A batch: other, drain, replacement and validation at 10 s each.
    let sized = calls_at(&calls, "batch");
    assert_eq!(sized.len(), 3);
    for (i, ctx) in sized.iter().enumerate() {
        let batch = ctx.timing.batch.as_ref().expect("a batch's estimate");
        assert_eq!(batch.seconds, 40, "batch {i}");
        assert_eq!(batch.basis, "history of 1 run");
        let left = ctx.timing.remaining.as_ref().expect("what is left");
        assert_eq!(left.seconds, 40 * (3 - i as u64), "batch {i}");
        // The plan's clock moved by each batch done, as a run's would.
        assert_eq!(ctx.now, 1_000_000 + 40 * i as i64, "batch {i}");
    }
    let before = calls_at(&calls, "before-batch");
    assert_eq!(before.len(), 3);
    assert!(before.iter().all(|c| c.timing.batch.is_some()));
    // A selection and a gate before the group are about no batch; the whole run is left.
    for point in ["select", "before-group"] {
        let ctx = &calls_at(&calls, point)[0];
        assert_eq!(ctx.timing.batch, None, "{point}");
        assert_eq!(ctx.timing.remaining.as_ref().unwrap().seconds, 120);
    }
    // After the last batch nothing is left.
    let after = calls_at(&calls, "after-batch");
    assert_eq!(
        after
            .last()
            .unwrap()
            .timing
            .remaining
            .as_ref()
            .unwrap()
            .seconds,
        0
    );
    // The plan's own estimate agrees with what the hooks were told, with the run's setup.
    assert_eq!(p.estimate.as_ref().unwrap().seconds, 120 + 5);
}

#[test]
fn a_selection_that_leaves_instances_out_shortens_what_hooks_are_told_is_left() {
    let mut opts = options(None, Some(1));
    opts.durations.history = history_of("nodes", 10);
    let mut hook = FakeHook::new("h", &[HookPoint::Select, HookPoint::Batch]);
    hook.select = Box::new(|c| {
        let first = crate::plan::hook::Choice {
            name: c[0].name.clone(),
            reason: "only the first".into(),
            force: false,
        };
        Ok(crate::plan::hook::SelectAnswer::Choose(vec![first]))
    });
    let calls = hook.calls.clone();
    plan_nodes(
        &group_of_six(4),
        &Policy::default(),
        &opts,
        &mut [hook.boxed()],
    )
    .unwrap();
    assert_eq!(
        calls_at(&calls, "select")[0]
            .timing
            .remaining
            .as_ref()
            .unwrap()
            .seconds,
        160
    );
    let sized = calls_at(&calls, "batch");
    assert_eq!(sized.len(), 1);
    assert_eq!(sized[0].timing.remaining.as_ref().unwrap().seconds, 40);
}

#[test]
fn without_history_hooks_are_told_the_defaults_and_say_so() {
    let hook = FakeHook::new("h", &[HookPoint::Batch]);
    let calls = hook.calls.clone();
    plan_nodes(
        &group_of_six(1),
        &Policy::default(),
        &options(None, Some(1)),
        &mut [hook.boxed()],
    )
    .unwrap();
    let ctx = &calls_at(&calls, "batch")[0];
    let batch = ctx.timing.batch.as_ref().unwrap();
    // Batch overhead 5 s, drain 60 s, replacement 300 s, validation 30 s.
    assert_eq!(batch.seconds, 395);
    assert_eq!(batch.basis, "defaults: no history");
}

#[test]
fn a_canary_counts_as_a_batch_of_what_is_left() {
    let mut opts = options(None, Some(2));
    opts.durations.history = history_of("nodes", 10);
    let hook = FakeHook::new("h", &[HookPoint::Batch]);
    let calls = hook.calls.clone();
    let p = plan_nodes(
        &group_of_six(6),
        &Policy::default(),
        &opts,
        &mut [hook.boxed()],
    )
    .unwrap();
    assert_eq!(shape(&p.groups[0]), ["c:n1", "n2 n3", "n4 n5", "n6"]);
    let left: Vec<u64> = (calls_at(&calls, "batch").iter())
        .map(|c| c.timing.remaining.as_ref().unwrap().seconds)
        .collect();
    assert_eq!(left, [160, 120, 80, 40]);
}
