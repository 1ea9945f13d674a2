use super::*;
use crate::plan::forecast::{Forecast, Stall};
use crate::plan::hook::{DecidedBy, GroupInfo};
use crate::plan::{PLAN_API_VERSION, PauseStep};

fn batch(waves: u32, pause_seconds: Option<u64>) -> BatchPlan {
    BatchPlan {
        instances: vec!["n1".into()],
        canary: false,
        surge: false,
        decided_by: DecidedBy::BuiltIn,
        size_reason: String::new(),
        pause: pause_seconds.map(|seconds| PauseStep {
            seconds,
            reason: "window".into(),
            decided_by: DecidedBy::BuiltIn,
        }),
        gate: None,
        soak_seconds: None,
        forecast: (waves > 1).then(|| Forecast {
            waits: vec![Stall {
                pdb: "shop/web".into(),
                pods: vec![],
                reason: String::new(),
                waves,
            }],
            ..Default::default()
        }),
        after_gate: None,
        shadow: Vec::new(),
        likely_set_aside: Vec::new(),
        moves_runner: Vec::new(),
        estimate: None,
    }
}

fn plan(batches: Vec<BatchPlan>) -> Plan {
    Plan {
        api_version: PLAN_API_VERSION,
        kind: "Plan",
        groups: vec![GroupPlan {
            group: GroupInfo {
                name: "nodes".into(),
                role: Role::Node,
                size: 3,
                up_to_date: 0,
                selected: 3,
                max_surge: 0,
                max_unavailable: 1,
            },
            concurrency: 1,
            disabled: false,
            note: None,
            gate: None,
            others_disrupting: Vec::new(),
            shadow: Vec::new(),
            instances: Vec::new(),
            batches,
            aborted: None,
            estimate: None,
        }],
        warnings: Vec::new(),
        stopped: None,
        undrainable: None,
        modules: Vec::new(),
        estimate: None,
    }
}

fn history(samples: &[(Stage, &[u64])], runs: &[&str]) -> History {
    let mut group = GroupHistory::default();
    for (stage, values) in samples {
        group
            .samples
            .insert(*stage, values.iter().map(|s| s * 1000).collect());
    }
    group.runs = runs.iter().map(|r| r.to_string()).collect();
    History {
        groups: [("nodes".to_string(), group)].into(),
    }
}

fn annotated(history: &History, stated: &StatedDurations, batches: Vec<BatchPlan>) -> Plan {
    let mut plan = plan(batches);
    let estimator = Estimator {
        history,
        stated,
        fixed: FixedWaits::default(),
    };
    estimator.annotate(&mut plan, 1_795_780_800);
    plan
}

const EVERY_STAGE: [(Stage, &[u64]); 5] = [
    (Stage::Drain, &[10]),
    (Stage::Replacement, &[100]),
    (Stage::Validation, &[20]),
    (Stage::Other, &[2]),
    (Stage::Setup, &[3]),
];

#[test]
fn with_no_history_the_defaults_are_used_and_said() {
    let plan = annotated(
        &History::default(),
        &StatedDurations::default(),
        vec![batch(1, None)],
    );
    let run = plan.estimate.unwrap();
    // setup 5 + other 5 + drain 60 + replacement 300 + validation 30.
    assert_eq!(run.seconds, 400);
    assert_eq!(run.basis, "defaults: no history");
    assert_eq!(run.ends_at.as_deref(), Some("2026-11-27T12:06:40Z"));
    let stated = StatedDurations {
        replacement: Some(Duration::from_secs(120)),
        ..Default::default()
    };
    let plan = annotated(&History::default(), &stated, vec![batch(1, None)]);
    assert_eq!(plan.estimate.as_ref().unwrap().seconds, 220);
    assert_eq!(
        plan.estimate.unwrap().basis,
        "policy (spec.estimates) for replacement joining; defaults for drain, validation, batch overhead, run setup: no history"
    );
}

#[test]
fn budget_waves_multiply_the_drain_and_a_window_adds_its_pause() {
    let history = history(&EVERY_STAGE, &["run-1", "run-2"]);
    let plan = annotated(
        &history,
        &StatedDurations::default(),
        vec![batch(1, None), batch(3, None), batch(1, Some(3600))],
    );
    let batches = &plan.groups[0].batches;
    let one = batches[0].estimate.as_ref().unwrap();
    assert_eq!(one.seconds, 2 + 10 + 100 + 20);
    assert_eq!(one.basis, "history of 2 runs");
    let three_waves = batches[1].estimate.as_ref().unwrap();
    assert_eq!(three_waves.seconds, 2 + 3 * 10 + 100 + 20);
    let paused = batches[2].estimate.as_ref().unwrap();
    assert_eq!(paused.seconds, 3600 + 132);
    assert_eq!(paused.foreseen_wait_seconds, 3600);
    let run = plan.estimate.as_ref().unwrap();
    assert_eq!(run.seconds, 3 + 132 + 152 + 3732);
    assert_eq!(run.foreseen_wait_seconds, 3600);
    assert_eq!(
        plan.groups[0].estimate.as_ref().unwrap().seconds,
        132 + 152 + 3732
    );
}

#[test]
fn a_varying_history_gives_a_range() {
    let mut stages = EVERY_STAGE.to_vec();
    let replacements: &[u64] = &[60, 70, 80, 90, 100, 110, 120, 130, 140, 400];
    stages[1] = (Stage::Replacement, replacements);
    let history = history(&stages, &["r"]);
    let plan = annotated(&history, &StatedDurations::default(), vec![batch(1, None)]);
    let e = plan.groups[0].batches[0].estimate.clone().unwrap();
    assert_eq!(e.seconds, 2 + 10 + 100 + 20, "the median replacement");
    assert_eq!(e.p90_seconds, 2 + 10 + 140 + 20, "the 90th percentile");
    assert_eq!(percentile(&[5], 90), Some(5));
    assert_eq!(percentile(&[], 50), None);
}

#[test]
fn another_groups_history_stands_in_and_is_said() {
    let mut history = history(&EVERY_STAGE, &["r"]);
    let other = history.groups.remove("nodes").unwrap();
    history.groups.insert("workers".into(), other);
    let plan = annotated(&history, &StatedDurations::default(), vec![batch(1, None)]);
    let e = plan.estimate.unwrap();
    assert_eq!(e.seconds, 3 + 132);
    assert!(
        e.basis.contains("other groups' history for drain"),
        "{}",
        e.basis
    );
}

#[test]
fn the_history_is_bounded() {
    let mut group = GroupHistory::default();
    for i in 0..(KEPT_SAMPLES as u64 + 5) {
        group.record(&format!("run-{i}"), Stage::Drain, i);
    }
    let drains = &group.samples[&Stage::Drain];
    assert_eq!(drains.len(), KEPT_SAMPLES);
    assert_eq!(drains[0], 5, "the oldest are forgotten");
    assert_eq!(group.runs.len(), KEPT_RUNS);
    assert_eq!(group.runs.last().map(String::as_str), Some("run-24"));
    group.record("run-24", Stage::Validation, 1);
    assert_eq!(group.runs.len(), KEPT_RUNS, "a run is counted once");
}
