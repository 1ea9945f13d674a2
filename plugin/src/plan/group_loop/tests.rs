//! The group loop, step by step: given a group and the answers, the steps are.

use super::*;
use crate::plan::Role;
use crate::plan::decide::{Chosen, built_in_choice, tests::candidate};
use crate::policy::{IntOrPercent, RollingUpdate};

fn start(
    role: Role,
    outdated: usize,
    up_to_date: usize,
    surge: u32,
    unavailable: u32,
) -> GroupStart {
    let candidates: Vec<Candidate> = (1..=outdated + up_to_date)
        .map(|i| candidate(&format!("n{i}"), (i <= outdated).then_some("old")))
        .collect();
    let size = candidates.len() as u32;
    GroupStart {
        info: GroupInfo {
            name: "g".into(),
            role,
            size,
            up_to_date: up_to_date as u32,
            selected: outdated as u32,
            max_surge: surge,
            max_unavailable: unavailable,
        },
        candidates,
        budget: BudgetRule {
            role,
            cluster: RollingUpdate {
                max_surge: Some(IntOrPercent::Int(surge)),
                max_unavailable: Some(IntOrPercent::Int(unavailable)),
            },
            group: RollingUpdate::default(),
            size,
            interactive: false,
        },
        cloud_only: false,
        soak_seconds: 0,
    }
}

fn proceed() -> GateDecision {
    GateDecision {
        verdict: Verdict::Proceed,
        by: DecidedBy::BuiltIn,
    }
}

/// Answers the loop's questions: the built-in selection and sizes unless `size` says otherwise,
/// gates through `gate`. Returns every step as a short line, and the outcome.
fn drive(
    start: GroupStart,
    mut size: impl FnMut(&Sizing) -> BatchDecision,
    mut gate: impl FnMut(Phase, &BatchInfo) -> GateDecision,
) -> (Vec<String>, Outcome) {
    let mut group = GroupLoop::new(start);
    let mut trace = Vec::new();
    let mut input = Input::Start;
    loop {
        input = match group.step(input) {
            Step::Ask(Question::Select) => {
                trace.push("select".to_string());
                Input::Selected(Selected {
                    chosen: built_in_choice(group.candidates()),
                    by: DecidedBy::BuiltIn,
                })
            }
            Step::Ask(Question::BatchSize(sizing)) => {
                trace.push(format!("size<={}#{}", sizing.max_batch, sizing.attempt));
                Input::Sized(size(&sizing))
            }
            Step::Ask(Question::Gate { phase, batch }) => {
                trace.push(format!("{}#{}", phase.as_str(), batch.attempt));
                Input::Judged(gate(phase, &batch))
            }
            Step::Do(action) => {
                trace.push(match action {
                    Action::Validate => "validate".into(),
                    Action::Begin { instances } => format!("begin {}", instances.join(" ")),
                    Action::Surge { instances, canary } => {
                        format!(
                            "surge{} {}",
                            if canary { "(c)" } else { "" },
                            instances.join(" ")
                        )
                    }
                    Action::Replace(b) => format!(
                        "replace{} {}",
                        if b.canary { "(c)" } else { "" },
                        b.instances.join(" ")
                    ),
                    Action::Wait(w) => format!("wait {}s", w.seconds),
                    Action::Soak { batch, seconds } => format!("soak {seconds}s after {batch}"),
                });
                Input::Done
            }
            Step::Done(outcome) => return (trace, outcome),
        };
    }
}

fn built_in(s: &Sizing) -> BatchDecision {
    BatchDecision::Size {
        size: s.max_batch,
        reason: s.max_batch_reason.clone(),
        by: DecidedBy::BuiltIn,
    }
}

#[test]
fn a_group_with_nothing_up_to_date_starts_with_a_canary_wave_and_asks_each_gate_once() {
    let (trace, outcome) = drive(start(Role::Node, 3, 0, 0, 2), built_in, |_, _| proceed());
    assert_eq!(
        trace,
        [
            "select",
            "validate",
            "before-group#0",
            "size<=1#0",
            "begin n1 n2 n3",
            "before-batch#0",
            "replace(c) n1",
            "after-batch#0",
            "size<=2#0",
            "before-batch#0",
            "replace n2 n3",
            "after-batch#0",
        ]
    );
    assert_eq!(outcome, Outcome::Finished);
}

#[test]
fn a_soak_holds_after_every_batch_but_the_last_then_validates_before_the_gate() {
    let mut group = start(Role::Node, 3, 0, 0, 2);
    group.soak_seconds = 600;
    let (trace, outcome) = drive(group, built_in, |_, _| proceed());
    assert_eq!(
        trace,
        [
            "select",
            "validate",
            "before-group#0",
            "size<=1#0",
            "begin n1 n2 n3",
            "before-batch#0",
            "replace(c) n1",
            "soak 600s after 0",
            "validate",
            "after-batch#0",
            "size<=2#0",
            "before-batch#0",
            "replace n2 n3",
            "after-batch#0",
        ]
    );
    assert_eq!(outcome, Outcome::Finished);
}

#[test]
fn surges_come_before_the_waves_the_canary_surge_alone() {
    let (trace, _) = drive(start(Role::Node, 4, 0, 2, 0), built_in, |_, _| proceed());
    let actions: Vec<&str> = trace
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("surge") || t.starts_with("replace"))
        .collect();
    assert_eq!(
        actions,
        ["surge(c) n4", "surge n3", "replace n1 n2", "replace n3 n4"]
    );
}

#[test]
fn a_bastion_is_not_validated_and_nothing_selected_ends_at_once() {
    let (trace, _) = drive(start(Role::Bastion, 1, 1, 0, 1), built_in, |_, _| proceed());
    assert_eq!(
        &trace[..4],
        ["select", "before-group#0", "size<=1#0", "begin n1"]
    );
    let (trace, outcome) = drive(start(Role::Node, 0, 2, 0, 1), built_in, |_, _| proceed());
    assert_eq!(
        (trace, outcome),
        (vec!["select".to_string()], Outcome::Finished)
    );
}

#[test]
fn a_gate_that_aborts_a_later_batch_lets_the_earlier_ones_run() {
    let (trace, outcome) = drive(start(Role::Node, 4, 1, 0, 1), built_in, |phase, b| {
        if phase == Phase::BeforeBatch && b.index == 2 {
            GateDecision {
                verdict: Verdict::Abort("n3 is special".into()),
                by: DecidedBy::Hook("careful".into()),
            }
        } else {
            proceed()
        }
    });
    let replaced: Vec<&str> = trace
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("replace"))
        .collect();
    assert_eq!(replaced, ["replace n1", "replace n2"]);
    assert_eq!(trace.last().unwrap(), "before-batch#0");
    assert_eq!(
        outcome,
        Outcome::Aborted {
            phase: Phase::BeforeBatch,
            batch: 2,
            decided_by: DecidedBy::Hook("careful".into()),
            reason: "n3 is special".into(),
        }
    );
}

#[test]
fn a_wait_asks_the_same_question_again_with_the_attempt_counted() {
    let mut waits = 2;
    let (trace, _) = drive(start(Role::Node, 1, 1, 0, 1), built_in, |phase, _| {
        if phase == Phase::AfterBatch && waits > 0 {
            waits -= 1;
            GateDecision {
                verdict: Verdict::Wait {
                    seconds: 30,
                    reason: "settling".into(),
                },
                by: DecidedBy::Hook("h".into()),
            }
        } else {
            proceed()
        }
    });
    assert_eq!(
        &trace[6..],
        [
            "replace n1",
            "after-batch#0",
            "wait 30s",
            "after-batch#1",
            "wait 30s",
            "after-batch#2",
        ]
    );
}

#[test]
fn a_pause_asks_the_size_again_and_not_the_gates() {
    let mut paused = false;
    let (trace, _) = drive(
        start(Role::Node, 2, 1, 0, 2),
        |s| {
            if paused {
                built_in(s)
            } else {
                paused = true;
                BatchDecision::Pause {
                    seconds: 60,
                    reason: "window closed".into(),
                    by: DecidedBy::Hook("window".into()),
                }
            }
        },
        |_, _| proceed(),
    );
    assert_eq!(
        &trace[3..],
        [
            "size<=2#0",
            "wait 60s",
            "size<=2#1",
            "begin n1 n2",
            "before-batch#0",
            "replace n1 n2",
            "after-batch#0",
        ]
    );
}

#[test]
fn questions_grow_linearly_with_the_group() {
    // Concurrency 1, twelve instances: one selection, twelve sizes, and one gate before the
    // group plus two per batch — not a re-plan of every remaining batch at every step.
    let (trace, _) = drive(start(Role::Node, 12, 1, 0, 1), built_in, |_, _| proceed());
    let count = |prefix: &str| trace.iter().filter(|t| t.starts_with(prefix)).count();
    assert_eq!(count("select"), 1);
    assert_eq!(count("size"), 12);
    assert_eq!(
        count("before-group") + count("before-batch") + count("after-batch"),
        25
    );
    assert_eq!(count("replace"), 12);
}

#[test]
fn a_hook_that_trims_the_selection_shrinks_the_update() {
    let mut group = GroupLoop::new(start(Role::Node, 3, 0, 0, 1));
    assert_eq!(group.step(Input::Start), Step::Ask(Question::Select));
    let step = group.step(Input::Selected(Selected {
        chosen: vec![Chosen {
            index: 2,
            reason: "picked".into(),
            by: DecidedBy::Hook("h".into()),
        }],
        by: DecidedBy::Hook("h".into()),
    }));
    assert_eq!(step, Step::Do(Action::Validate));
    assert_eq!(group.group().selected, 1);
    group.step(Input::Done);
    let step = group.step(Input::Judged(proceed()));
    assert!(
        matches!(step, Step::Ask(Question::BatchSize(_))),
        "{step:?}"
    );
    let step = group.step(Input::Sized(BatchDecision::Size {
        size: 1,
        reason: "built-in".into(),
        by: DecidedBy::BuiltIn,
    }));
    assert_eq!(
        step,
        Step::Do(Action::Begin {
            instances: vec!["n3".into()]
        })
    );
}

#[test]
#[should_panic(expected = "cannot take")]
fn an_answer_to_a_question_not_asked_is_a_driver_bug() {
    let mut group = GroupLoop::new(start(Role::Node, 1, 0, 0, 1));
    group.step(Input::Done);
}

/// Drives a group whose replacements set aside the nodes `undrainable` names; returns the
/// trace (sizes with their reasons) and the outcome.
fn drive_setting_aside(start: GroupStart, undrainable: &[&str]) -> (Vec<String>, Outcome) {
    let mut group = GroupLoop::new(start);
    let mut trace = Vec::new();
    let mut input = Input::Start;
    loop {
        input = match group.step(input) {
            Step::Ask(Question::Select) => Input::Selected(Selected {
                chosen: built_in_choice(group.candidates()),
                by: DecidedBy::BuiltIn,
            }),
            Step::Ask(Question::BatchSize(sizing)) => {
                trace.push(format!(
                    "size<={} ({})",
                    sizing.max_batch, sizing.max_batch_reason
                ));
                Input::Sized(built_in(&sizing))
            }
            Step::Ask(Question::Gate { .. }) => Input::Judged(proceed()),
            Step::Do(Action::Replace(b)) => {
                trace.push(format!("replace {}", b.instances.join(" ")));
                Input::Replaced {
                    set_aside: (b.instances.iter())
                        .filter(|n| undrainable.contains(&n.as_str()))
                        .cloned()
                        .collect(),
                }
            }
            Step::Do(_) => Input::Done,
            Step::Done(outcome) => return (trace, outcome),
        };
    }
}

#[test]
fn a_node_set_aside_takes_a_place_of_the_budget_for_the_batches_after_it() {
    // Two at a time, five to replace, one up to date (no canary): n2 is set aside in the first
    // batch, so the others go one at a time.
    let (trace, outcome) = drive_setting_aside(start(Role::Node, 5, 1, 0, 2), &["n2"]);
    assert_eq!(
        trace,
        [
            "size<=2 (the budget allows 2 at once (maxSurge 0, maxUnavailable 2))",
            "replace n1 n2",
            "size<=1 (the budget allows 2 at once (maxSurge 0, maxUnavailable 2), less 1 node(s) set aside)",
            "replace n3",
            "size<=1 (the budget allows 2 at once (maxSurge 0, maxUnavailable 2), less 1 node(s) set aside)",
            "replace n4",
            "size<=1 (the budget allows 2 at once (maxSurge 0, maxUnavailable 2), less 1 node(s) set aside)",
            "replace n5",
        ]
    );
    assert_eq!(outcome, Outcome::Finished);

    // A second node set aside fills the budget: no batch fits, and nothing after is touched.
    let (trace, outcome) = drive_setting_aside(start(Role::Node, 5, 1, 0, 2), &["n2", "n3"]);
    assert_eq!(trace.last().unwrap(), "replace n3");
    assert_eq!(
        outcome,
        Outcome::NoRoomLeft {
            set_aside: vec!["n2".into(), "n3".into()],
            concurrency: 2,
        }
    );
    // The last node set aside ends the group as any last batch does.
    let (_, outcome) = drive_setting_aside(start(Role::Node, 2, 1, 0, 1), &["n2"]);
    assert_eq!(outcome, Outcome::Finished);
}

#[test]
fn nodes_an_earlier_run_set_aside_are_tried_again_first_and_detached_ones_last() {
    let mut s = start(Role::Node, 4, 0, 0, 1);
    s.candidates[0]
        .annotations
        .insert(keys::DETACHED.into(), "true".into());
    s.candidates[2]
        .annotations
        .insert(keys::QUARANTINED.into(), "{}".into());
    let mut group = GroupLoop::new(s);
    group.step(Input::Start);
    let chosen = built_in_choice(group.candidates());
    group.step(Input::Selected(Selected {
        chosen,
        by: DecidedBy::BuiltIn,
    }));
    let order: Vec<&str> = (group.selected().unwrap().chosen.iter())
        .map(|c| group.candidates()[c.index].name.as_str())
        .collect();
    assert_eq!(order, ["n3", "n2", "n4", "n1"]);
}
