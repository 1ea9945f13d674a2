use std::path::Path;
use std::sync::{Arc, Mutex};

use super::*;
use crate::plan::decide::tests::FakeHook;
use crate::plan::hook::GateAnswer;
use crate::policy::HookPoint;

/// dev (one cluster, soak 10m), then prod (three clusters, two at a time).
fn fleet() -> Fleet {
    let text = "\
apiVersion: rollout-ext/v1alpha1
kind: Fleet
metadata: {name: nov}
spec:
  stages:
  - name: dev
    soak: 10m
    clusters: [{context: dev}]
  - name: prod
    maxParallel: 2
    clusters: [{context: eu}, {context: us}, {context: ap}]
";
    Fleet::parse(text, "fleet.yaml", Path::new(".")).unwrap()
}

fn ended(how: EndedHow, at: i64) -> ClusterState {
    ClusterState::Ended(Ended { how, at })
}

fn with(states: &[(&str, ClusterState)]) -> FleetProgress {
    FleetProgress {
        clusters: (states.iter())
            .map(|(c, s)| (c.to_string(), s.clone()))
            .collect(),
        gates_passed: Default::default(),
    }
}

#[test]
fn the_first_stage_is_gated_with_no_stage_before_it() {
    let next = next(&fleet(), &FleetProgress::default(), 100);
    assert_eq!(
        next,
        Next::AskGate {
            stage: 0,
            previous: None
        }
    );
}

#[test]
fn a_stage_past_its_gate_starts_up_to_max_parallel_then_waits() {
    let fleet = fleet();
    let mut progress = with(&[("dev", ended(EndedHow::Succeeded, 0))]);
    progress.gates_passed.insert(1);
    let start = next(&fleet, &progress, 10_000);
    assert_eq!(
        start,
        Next::Start {
            stage: 1,
            clusters: vec!["eu".into(), "us".into()]
        }
    );
    progress.clusters.insert("eu".into(), ClusterState::Running);
    progress.clusters.insert("us".into(), ClusterState::Running);
    assert_eq!(next(&fleet, &progress, 10_000), Next::AwaitRunning);
    progress
        .clusters
        .insert("eu".into(), ended(EndedHow::Succeeded, 10_100));
    assert_eq!(
        next(&fleet, &progress, 10_100),
        Next::Start {
            stage: 1,
            clusters: vec!["ap".into()]
        },
        "a slot freed, the next cluster takes it"
    );
}

#[test]
fn the_next_stage_waits_for_the_soak_then_its_gate_hears_of_the_stage_before() {
    let fleet = fleet();
    let progress = with(&[("dev", ended(EndedHow::NodesSetAside, 1_000))]);
    assert_eq!(
        next(&fleet, &progress, 1_100),
        Next::Soak {
            stage: 0,
            until: 1_600
        }
    );
    let Next::AskGate { stage, previous } = next(&fleet, &progress, 1_600) else {
        panic!("the gate of prod is asked once the soak is over");
    };
    assert_eq!(stage, 1);
    let previous = previous.unwrap();
    assert_eq!(previous.name, "dev");
    assert_eq!(previous.soaked_seconds, 600);
    assert_eq!(previous.clusters[0].outcome, ClusterOutcome::NodesSetAside);
    assert_eq!(previous.clusters[0].finished, 1_000);
}

#[test]
fn a_cluster_that_failed_stops_the_fleet_once_its_stage_stops_running() {
    let fleet = fleet();
    let mut progress = with(&[
        ("dev", ended(EndedHow::Succeeded, 0)),
        (
            "eu",
            ended(
                EndedHow::Failed {
                    code: 1,
                    message: "exit 1".into(),
                },
                5_000,
            ),
        ),
        ("us", ClusterState::Running),
    ]);
    assert_eq!(
        next(&fleet, &progress, 5_000),
        Next::AwaitRunning,
        "nothing new starts, the running one ends first"
    );
    progress
        .clusters
        .insert("us".into(), ended(EndedHow::Succeeded, 5_100));
    assert_eq!(
        next(&fleet, &progress, 5_100),
        Next::Stop {
            stage: 1,
            cluster: "eu".into(),
            how: EndedHow::Failed {
                code: 1,
                message: "exit 1".into()
            }
        }
    );
}

#[test]
fn a_stage_an_earlier_run_started_is_not_gated_again() {
    let fleet = fleet();
    // An earlier run started eu (then was killed): it is pending again, past its gate.
    let mut progress = with(&[("dev", ended(EndedHow::Succeeded, 0))]);
    progress.gates_passed.insert(1);
    let Next::Start { clusters, .. } = next(&fleet, &progress, 0) else {
        panic!("no gate asked again");
    };
    assert_eq!(clusters, ["eu", "us"]);
    let all_done = with(&[
        ("dev", ended(EndedHow::Succeeded, 0)),
        ("eu", ended(EndedHow::Succeeded, 1)),
        ("us", ended(EndedHow::Succeeded, 2)),
        ("ap", ended(EndedHow::Succeeded, 3)),
    ]);
    assert_eq!(
        next(&fleet, &all_done, 3),
        Next::Done,
        "no soak after the last stage"
    );
}

fn cluster_plan(seconds: u64) -> ClusterPlan {
    ClusterPlan {
        seconds: Some(seconds),
        stopped: None,
        plan: serde_json::json!({}),
    }
}

#[test]
fn the_plan_moves_its_clock_by_each_cluster_wave_and_soak() {
    let fleet = fleet();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let mut gate = FakeHook::new("g", &[HookPoint::Gate]);
    gate.stage_gate = Box::new(move |stage, previous| {
        seen.lock().unwrap().push((
            stage.name.clone(),
            previous.map(|p| (p.name.clone(), p.soaked_seconds)),
        ));
        Ok(GateAnswer::Proceed)
    });
    let mut hooks = vec![gate.boxed()];
    let mut started = Vec::new();
    let plan = plan(&fleet, FleetProgress::default(), &mut hooks, 0, |c, at| {
        started.push((c.to_string(), at));
        cluster_plan(match c {
            "dev" => 300,
            "eu" => 1_000,
            _ => 500,
        })
    })
    .unwrap();
    // dev 0..300, soak to 900, eu and us from 900, us ends 1400 and ap starts, eu ends 1900,
    // ap ends 1900.
    assert_eq!(
        started,
        [
            ("dev".to_string(), 0),
            ("eu".to_string(), 900),
            ("us".to_string(), 900),
            ("ap".to_string(), 1_400)
        ]
    );
    assert_eq!(plan.seconds, Some(1_900));
    assert_eq!(plan.stopped, None);
    assert_eq!(
        *asked.lock().unwrap(),
        [
            ("dev".to_string(), None),
            ("prod".to_string(), Some(("dev".to_string(), 600)))
        ]
    );
}

#[test]
fn a_gate_that_waits_then_aborts_stops_the_plan_before_the_stage() {
    let fleet = fleet();
    let mut gate = FakeHook::new("freeze", &[HookPoint::Gate]);
    gate.stage_gate = Box::new(|stage, _| {
        Ok(match (stage.name.as_str(), stage.attempt) {
            ("dev", _) => GateAnswer::Defer,
            ("prod", 0) => GateAnswer::Wait {
                seconds: 60,
                reason: "not yet".into(),
            },
            _ => GateAnswer::Abort("prod is frozen".into()),
        })
    });
    let mut hooks = vec![gate.boxed()];
    let mut planned = Vec::new();
    let plan = plan(&fleet, FleetProgress::default(), &mut hooks, 0, |c, _| {
        planned.push(c.to_string());
        cluster_plan(100)
    })
    .unwrap();
    assert_eq!(planned, ["dev"], "no cluster of prod is planned");
    let stopped = plan.stopped.unwrap();
    assert!(stopped.contains("before stage \"prod\""), "{stopped}");
    assert!(stopped.contains("hook/freeze"), "{stopped}");
    assert!(stopped.contains("prod is frozen"), "{stopped}");
    assert_eq!(plan.seconds, None, "a stopped fleet has no estimate");
    let gates: Vec<(String, i64)> = (plan.steps.iter())
        .filter_map(|s| match s {
            FleetStep::Gate { verdict, at, .. } => Some((verdict.clone(), *at)),
            _ => None,
        })
        .collect();
    assert_eq!(
        gates,
        [
            ("proceed".to_string(), 0),
            ("wait 60s: not yet".to_string(), 700),
            ("abort: prod is frozen".to_string(), 760)
        ]
    );
}

#[test]
fn what_earlier_runs_recorded_resumes_the_fleet_past_their_work() {
    let fleet = fleet();
    let progress = FleetProgress::recorded(
        &fleet,
        [
            (
                "dev".to_string(),
                Recorded::Finished(Ended {
                    how: EndedHow::Succeeded,
                    at: 50,
                }),
            ),
            ("us".to_string(), Recorded::Started),
        ],
    );
    assert_eq!(progress.finished(&fleet).collect::<Vec<_>>(), ["dev"]);
    assert_eq!(
        next(&fleet, &progress, 10_000),
        Next::Start {
            stage: 1,
            clusters: vec!["eu".into(), "us".into()]
        },
        "prod was started: not gated again, its clusters (us again) started"
    );
}

#[test]
fn a_stage_gate_that_fails_stops_the_plan_under_fail_and_is_said_under_ignore() {
    let fleet = fleet();
    let failing = |policy| {
        let mut gate = FakeHook::new("broken", &[HookPoint::Gate]);
        gate.policy = policy;
        gate.stage_gate =
            Box::new(|_, _| Err(crate::plan::hook::HookFault::Trap("unreachable".into())));
        vec![gate.boxed()]
    };
    let mut hooks = failing(crate::policy::FailurePolicy::Fail);
    let stopped = plan(&fleet, FleetProgress::default(), &mut hooks, 0, |_, _| {
        cluster_plan(1)
    });
    let error = stopped.unwrap_err().to_string();
    assert!(
        error.contains("hook broken failed at the gate point"),
        "{error}"
    );

    let mut hooks = failing(crate::policy::FailurePolicy::Ignore);
    let planned = plan(&fleet, FleetProgress::default(), &mut hooks, 0, |_, _| {
        cluster_plan(1)
    })
    .unwrap();
    assert_eq!(planned.stopped, None, "the built-in verdict: proceed");
    assert_eq!(
        planned.warnings.len(),
        1,
        "the same failure at each stage, said once: {:?}",
        planned.warnings
    );
    assert!(planned.warnings[0].contains("hook broken failed at the gate point"));
}
