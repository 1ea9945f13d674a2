use super::*;

#[test]
fn rolling_update_events_read_as_legacy_kubectl_printed_them() {
    let cases = [
        (
            Event::UpdateStarted {
                old: "foo".into(),
                old_replicas: 3,
                next: "foo-2".into(),
                next_replicas: 0,
                desired: 3,
                min_available: 3,
                max_total: 4,
            },
            "Scaling up foo-2 from 0 to 3, scaling down foo from 3 to 0 (keep 3 pods available, don't exceed 4 pods)",
        ),
        (
            Event::ControllerCreated {
                controller: "foo-2".into(),
            },
            "Created foo-2",
        ),
        (
            Event::UpdateContinued {
                controller: "foo-2".into(),
            },
            "Continuing update with existing controller foo-2.",
        ),
        (
            Event::RollbackStarted {
                controller: "foo".into(),
                replicas: 3,
            },
            "Setting \"foo\" replicas to 3",
        ),
        (
            Event::StepStarted {
                step: 0,
                controller: "foo-2".into(),
                from: 0,
                to: 1,
                decided_by: "hook/window".into(),
            },
            "Scaling foo-2 up to 1 [step 1, size: hook/window]",
        ),
        (
            Event::StepStarted {
                step: 1,
                controller: "foo".into(),
                from: 3,
                to: 2,
                decided_by: "built-in".into(),
            },
            "Scaling foo down to 2 [step 2, size: built-in]",
        ),
        (
            Event::Scaled {
                controller: "foo".into(),
                from: 3,
                to: 2,
            },
            "scaled foo from 3 to 2 replicas",
        ),
        (
            Event::StepDone {
                step: 1,
                old: "foo".into(),
                old_replicas: 2,
                next: "foo-2".into(),
                next_replicas: 1,
                desired: 3,
            },
            "step 2 done: foo has 2, foo-2 1 of 3 replicas",
        ),
        (
            Event::Deleting {
                controller: "foo".into(),
            },
            "Update succeeded. Deleting foo",
        ),
        (
            Event::Renaming {
                from: "foo-2".into(),
                to: "foo".into(),
            },
            "Renaming foo-2 to foo",
        ),
        (
            Event::RenameResumed {
                controller: "rc/foo".into(),
                pod: "foo-2-abcde".into(),
            },
            "Finishing an interrupted rename to rc/foo (recorded on pod foo-2-abcde)",
        ),
        (
            Event::OldGone {
                old: "rc/foo".into(),
                next: "foo-2".into(),
            },
            "rc/foo is gone; continuing with foo-2",
        ),
        (
            Event::RollingBackOnAbort {
                reason: "hook/stop aborted".into(),
            },
            "hook/stop aborted; rolling back (--on-abort=rollback)",
        ),
        (
            Event::UpdateDone {
                controller: "rc/foo".into(),
                next: Some("foo-2".into()),
            },
            "rc/foo rolling updated to \"foo-2\"",
        ),
        (
            Event::UpdateDone {
                controller: "rc/foo".into(),
                next: None,
            },
            "rc/foo rolling updated",
        ),
        (
            Event::RolledBack {
                controller: "rc/foo".into(),
            },
            "rc/foo rolled back",
        ),
    ];
    for (event, line) in cases {
        assert_eq!(event.describe(), line, "{event:?}");
    }
}

#[test]
fn a_shadow_event_carries_the_hook_its_words_and_whether_it_agrees() {
    let event = Event::Shadow {
        batch: 1,
        attempt: 0,
        said: ShadowDecision {
            hook: "next-policy".into(),
            point: HookPoint::Gate,
            phase: Some(Phase::AfterBatch),
            decision: "abort: payments not ready".into(),
            agrees: false,
            error: None,
        },
    };
    assert_eq!(
        event.describe(),
        "gate after-batch for batch 2: hook/next-policy (shadow) would abort: payments not ready; differs from the decision taken"
    );
    assert_eq!(
        serde_json::to_value(event).unwrap(),
        serde_json::json!({"event": "shadow", "batch": 1, "attempt": 0, "hook": "next-policy",
                           "point": "gate", "phase": "after-batch",
                           "decision": "abort: payments not ready", "agrees": false})
    );
}

#[test]
fn rolling_update_events_serialize_with_their_kind() {
    let step = Event::StepStarted {
        step: 0,
        controller: "foo-2".into(),
        from: 0,
        to: 1,
        decided_by: "built-in".into(),
    };
    assert_eq!(
        serde_json::to_value(step).unwrap(),
        serde_json::json!({"event": "step-started", "step": 0, "controller": "foo-2",
                           "from": 0, "to": 1, "decided_by": "built-in"})
    );
    let done = Event::UpdateDone {
        controller: "rc/foo".into(),
        next: None,
    };
    assert_eq!(
        serde_json::to_value(done).unwrap(),
        serde_json::json!({"event": "update-done", "controller": "rc/foo"})
    );
}
