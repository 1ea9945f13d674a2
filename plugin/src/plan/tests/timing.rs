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
        // The run's setup (5 s by default) is left until its first batch is done.
        let setup = if i == 0 { 5 } else { 0 };
        let left = ctx.timing.remaining.as_ref().expect("what is left");
        assert_eq!(left.seconds, setup + 40 * (3 - i as u64), "batch {i}");
        // The plan's clock moved by the setup and each batch done, as a run's would.
        let now = if i == 0 {
            1_000_000
        } else {
            1_000_005 + 40 * i as i64
        };
        assert_eq!(ctx.now, now, "batch {i}");
    }
    let before = calls_at(&calls, "before-batch");
    assert_eq!(before.len(), 3);
    assert!(before.iter().all(|c| c.timing.batch.is_some()));
    // A selection and a gate before the group are about no batch; the whole run is left.
    for point in ["select", "before-group"] {
        let ctx = &calls_at(&calls, point)[0];
        assert_eq!(ctx.timing.batch, None, "{point}");
        assert_eq!(ctx.timing.remaining.as_ref().unwrap().seconds, 125);
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
    // The plan's own estimate is what the hooks were told at its start.
    let estimate = p.estimate.as_ref().unwrap();
    assert_eq!(estimate.seconds, 125);
    let told = calls_at(&calls, "select")[0]
        .timing
        .remaining
        .clone()
        .unwrap();
    assert_eq!(told.ends_at, estimate.ends_at);
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
        165
    );
    let sized = calls_at(&calls, "batch");
    assert_eq!(sized.len(), 1);
    assert_eq!(sized[0].timing.remaining.as_ref().unwrap().seconds, 5 + 40);
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
    assert_eq!(left, [165, 120, 80, 40]);
}

/// A hook that sizes batches below the budget is told of the run those batches make, the
/// figure the plan prints: at each batch, what is left ends when the plan's last batch does.
#[test]
fn hooks_are_told_what_is_left_at_the_size_they_choose_as_the_plan_prints_it() {
    let mut opts = options(None, Some(3));
    opts.now = 1_000_000;
    opts.durations.history = history_of("nodes", 10);
    let mut hook = FakeHook::new("h", &[HookPoint::Batch]);
    hook.batch = Box::new(|_| {
        Ok(crate::plan::hook::BatchAnswer::Size {
            count: 1,
            reason: "one at a time".into(),
        })
    });
    let calls = hook.calls.clone();
    let p = plan_nodes(
        &group_of_six(5),
        &Policy::default(),
        &opts,
        &mut [hook.boxed()],
    )
    .unwrap();
    let batches = &p.groups[0].batches;
    assert_eq!(batches.len(), 5, "{:?}", shape(&p.groups[0]));
    let sized = calls_at(&calls, "batch");
    assert_eq!(sized.len(), 5);
    let plan_ends = p.estimate.as_ref().unwrap().ends_at.clone();
    assert!(plan_ends.is_some());
    let told: Vec<u64> = (sized.iter())
        .map(|c| c.timing.remaining.as_ref().unwrap().seconds)
        .collect();
    // Before its first batch the budget (3 at a time) was all the run could foresee: a setup
    // and two batches. From then on, the batches of one the hook chose.
    assert_eq!(told, [5 + 80, 160, 120, 80, 40]);
    for (i, ctx) in sized.iter().enumerate().skip(1) {
        let left = ctx.timing.remaining.as_ref().unwrap();
        assert_eq!(left.ends_at, plan_ends, "batch {i}");
        let plan_left: u64 = batches[i..]
            .iter()
            .map(|b| b.estimate.as_ref().unwrap().seconds)
            .sum();
        assert_eq!(left.seconds, plan_left, "batch {i}");
    }
}
