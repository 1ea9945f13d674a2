//! Plans of drains that cannot finish, of nodes that ask not to be disrupted, and of the
//! after-batch gate.

use super::*;

/// Six nodes, four outdated; n2 runs a pod whose budget allows no disruption.
fn with_a_blocked_pod_on_n2() -> Snapshot {
    let mut snapshot = group_of_six(4);
    let extra = Snapshot::from_json(
        br#"{"kind": "List", "items": [
          {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "db-0", "namespace": "shop", "labels": {"app": "db"}, "ownerReferences": [{"kind": "StatefulSet", "name": "db", "controller": true}]}, "spec": {"nodeName": "n2"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
          {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "db", "namespace": "shop"}, "spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": 0}}
        ]}"#,
    )
    .unwrap();
    snapshot.pods = extra.pods;
    snapshot.pdbs = extra.pdbs;
    snapshot
}

fn quarantining(unavailable: u32, max: u32) -> PlanOptions {
    let mut opts = options(None, Some(unavailable));
    opts.drain.rules.undrainable = crate::policy::drain::Undrainable {
        action: crate::policy::drain::UndrainableAction::Quarantine,
        max_quarantined: max,
    };
    opts
}

#[test]
fn with_quarantine_a_node_whose_drain_the_forecast_sees_blocked_is_likely_set_aside() {
    let snapshot = with_a_blocked_pod_on_n2();
    let p = plan(&snapshot, &quarantining(2, 1));
    let g = &p.groups[0];
    // n2 takes a place of the budget once set aside: the batches after it go one at a time.
    assert_eq!(shape(g), ["n1 n2", "n3", "n4"]);
    assert_eq!(g.batches[0].likely_set_aside, ["n2"]);
    assert!(g.batches[1].likely_set_aside.is_empty());
    assert_eq!(p.stopped, None);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["undrainable"]["action"], "Quarantine");
    assert_eq!(json["undrainable"]["maxQuarantined"], 1);
    assert_eq!(json["groups"][0]["batches"][0]["likelySetAside"][0], "n2");

    // No more than maxQuarantined: beyond it the run stops, as the forecast's block says.
    let none = plan(&snapshot, &quarantining(2, 0));
    assert!(none.groups[0].batches[0].likely_set_aside.is_empty());
    assert_eq!(shape(&none.groups[0]), ["n1 n2", "n3 n4"]);

    // A node set aside that takes the whole budget stops the run before the next batch.
    let full = plan(&snapshot, &quarantining(1, 1));
    assert_eq!(shape(&full.groups[0]), ["n1", "n2"]);
    assert!(
        full.stopped
            .as_deref()
            .is_some_and(|s| s.contains("the node(s) likely set aside (n2) take the whole budget")),
        "{:?}",
        full.stopped
    );

    // The default stops at the block: no setting shown, nothing set aside.
    let stop = plan(&snapshot, &options(None, Some(2)));
    assert!(stop.undrainable.is_none());
    assert!(
        serde_json::to_value(&stop)
            .unwrap()
            .get("undrainable")
            .is_none()
    );
    assert!(
        stop.groups[0]
            .batches
            .iter()
            .all(|b| b.likely_set_aside.is_empty())
    );
}

#[test]
fn a_node_that_asks_not_to_be_disrupted_is_left_alone_unless_forced() {
    let mut snapshot = group_of_six(3);
    snapshot.nodes[1]
        .annotations
        .insert("karpenter.sh/do-not-disrupt".into(), "true".into());
    // Asking with another value does not count.
    snapshot.nodes[2]
        .annotations
        .insert("rollout-ext.io/do-not-disrupt".into(), "false".into());
    let p = plan(&snapshot, &options(None, Some(1)));
    let g = &p.groups[0];
    assert_eq!(shape(g), ["n1", "n3"]);
    assert_eq!(g.group.selected, 2);
    let n2 = g.instances.iter().find(|i| i.name == "n2").unwrap();
    assert!(!n2.update);
    assert_eq!(
        n2.reason,
        "out of date, but the node asks not to be disrupted (karpenter.sh/do-not-disrupt: \"true\"): left alone (--force replaces it)"
    );
    assert!(
        p.warnings.iter().any(|w| w.starts_with(
            "group nodes: node n2 is out of date, but the node asks not to be disrupted"
        )),
        "{:?}",
        p.warnings
    );
    // With --force it is replaced, with every other node.
    let forced = plan(
        &snapshot,
        &PlanOptions {
            force: true,
            ..options(None, Some(1))
        },
    );
    assert_eq!(forced.groups[0].group.selected, 6);
    assert!(
        forced
            .warnings
            .iter()
            .all(|w| !w.contains("n2 is out of date"))
    );
}

#[test]
fn the_plan_asks_the_after_batch_gate_and_its_abort_stops_the_plan_there() {
    let mut gate = FakeHook::new("slo", &[HookPoint::Gate]);
    let mut asked: std::collections::HashMap<u32, u32> = Default::default();
    gate.gate = Box::new(move |b| {
        // Before the group every instance is at hand; then each batch is asked before and after.
        if b.instances.len() == 6 {
            return Ok(GateAnswer::Proceed);
        }
        let n = asked.entry(b.index).or_default();
        *n += 1;
        Ok(match (b.index, *n) {
            (2, 2) => GateAnswer::Abort("error rate up after batch 3".into()),
            _ => GateAnswer::Proceed,
        })
    });
    let mut hooks = vec![gate.boxed()];
    let options = PlanOptions {
        ask_after_batch: true,
        ..PlanOptions::default()
    };
    let p = plan_nodes(&group_of_six(6), &Policy::default(), &options, &mut hooks).unwrap();
    let g = &p.groups[0];
    assert_eq!(shape(g), ["c:n1", "n2", "n3"]);
    let after: Vec<String> = (g.batches.iter())
        .map(|b| b.after_gate.as_ref().unwrap().verdict.to_string())
        .collect();
    assert_eq!(after, ["proceed", "proceed", "abort"]);
    let json = serde_json::to_value(&p).unwrap();
    for batch in json["groups"][0]["batches"].as_array().unwrap() {
        assert_eq!(batch["afterGate"]["phase"], "after-batch", "{batch}");
    }
    assert!(
        p.stopped
            .as_deref()
            .is_some_and(|s| s.contains("after batch 3") && s.contains("error rate up")),
        "{:?}",
        p.stopped
    );
}

#[test]
fn the_batch_that_drains_the_runners_node_says_it_moves_the_runner() {
    let mut snapshot = group_of_six(4);
    let extra = Snapshot::from_json(
        br#"{"kind": "List", "items": [
          {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "rollout-ext-run-1-x7", "namespace": "kube-system", "labels": {"rollout-ext.io/runner": "rollout-ext-run-1"}, "ownerReferences": [{"kind": "Job", "name": "rollout-ext-run-1", "controller": true}]}, "spec": {"nodeName": "n3"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        ]}"#,
    )
    .unwrap();
    snapshot.pods = extra.pods;
    let p = plan(&snapshot, &options(None, Some(1)));
    let g = &p.groups[0];
    let moving: Vec<(String, Vec<String>)> = (g.batches.iter())
        .map(|b| (b.instances.join(" "), b.moves_runner.clone()))
        .filter(|(_, m)| !m.is_empty())
        .collect();
    assert_eq!(
        moving,
        [(
            "n3".to_string(),
            vec!["kube-system/rollout-ext-run-1-x7 on n3".to_string()]
        )]
    );
    let json = serde_json::to_value(&p).unwrap();
    let third = &json["groups"][0]["batches"][2];
    assert_eq!(third["instances"][0], "n3");
    assert_eq!(
        third["movesRunner"][0],
        "kube-system/rollout-ext-run-1-x7 on n3"
    );
    assert!(json["groups"][0]["batches"][0].get("movesRunner").is_none());
}
