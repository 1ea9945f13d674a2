//! One step machine drives the plan and the run, on the real test bed: hooks are asked once per
//! real decision (counted by a tracing hook inside the sandbox), the batches a run performs are
//! the ones its plan printed, and a gate that refuses a later batch lets the earlier ones run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::{events, run_plugin, wasm_module};
use serde_json::Value;

/// One rotation at a time in this cluster (the plugin's own lock would refuse the others).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies the named test and example modules into `dir` as `<crate_name>.wasm`.
fn modules(dir: &Path, names: &[&str]) {
    for name in names {
        let module = wasm_module(name);
        std::fs::copy(&module, dir.join(module.file_name().unwrap())).unwrap();
    }
}

/// The three demo hooks (the window always open, so that nothing pauses for days), and a
/// tracing hook that prints each call it gets at every point.
const DEMO_HOOKS_AND_TRACER: &str = "  hooks:
  - {name: zone-spread, module: zone_spread.wasm, points: [select, batch], config: {maxPerZone: 1}}
  - name: maintenance-window
    module: maintenance_window.wasm
    points: [batch]
    config: {windows: [{days: [mon, tue, wed, thu, fri, sat, sun], start: \"00:00\", end: \"00:00\"}], initialBatch: 1, maxBatch: 4}
  - {name: error-budget, module: error_budget.wasm, points: [gate], config: {maxPodsNotReady: 2, maxFailedChecks: 10, retrySeconds: 1}}
  - {name: tracer, module: hostile_hook.wasm, points: [select, batch, gate], config: {select: trace, batch: trace, gate: trace}}
";

/// What the tracing hook printed: one entry per call.
fn traced(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| {
            l.split_once("[hook tracer] trace ")
                .map(|(_, t)| t.to_string())
        })
        .collect()
}

#[tokio::test]
async fn a_live_rotation_asks_each_hook_once_per_decision() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("tally", 12).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    modules(
        dir.path(),
        &[
            "zone-spread",
            "maintenance-window",
            "error-budget",
            "hostile-hook",
        ],
    );
    let policy = cluster.exec_policy(dir.path(), DEMO_HOOKS_AND_TRACER);
    let mut args = cluster.rotate_args(&policy, "tally");
    // `-v` logs what hooks print (the tracer's lines).
    args.extend(["--max-unavailable", "1", "-v"].map(String::from));
    let out = run_plugin(args).await;
    succeeded(&out);
    let events = events(&out);
    let batches = events
        .iter()
        .filter(|e| e["event"] == "batch-started")
        .count();
    assert_eq!(batches, 12, "concurrency 1: one batch per instance");

    // Waits and pauses ask the same question again; nothing else does.
    let decided = |point: &str, prefix: &str| {
        events
            .iter()
            .filter(|e| e["event"] == "decided" && e["point"] == point)
            .filter(|e| e["decision"].as_str().unwrap().starts_with(prefix))
            .count()
    };
    let (waits, pauses) = (decided("gate", "wait"), decided("batch", "pause"));
    let calls = traced(&out);
    assert!(
        calls.iter().all(|c| c.ends_with("dry-run=false")),
        "a live run asks with dryRun = false: {calls:?}"
    );
    let count = |prefix: &str| calls.iter().filter(|c| c.starts_with(prefix)).count();
    assert_eq!(count("select"), 1, "{calls:?}");
    assert_eq!(count("batch"), 12 + pauses, "{calls:?}");
    assert_eq!(count("gate before-group"), 1, "{calls:?}");
    assert_eq!(
        count("gate before-batch") + count("gate after-batch"),
        2 * 12 + waits,
        "{calls:?}"
    );
    // Each batch is asked about once, in order, when it is due: never a batch ahead.
    let sized: Vec<String> = calls
        .iter()
        .filter(|c| c.starts_with("batch"))
        .map(|c| c.split(' ').nth(1).unwrap().to_string())
        .collect();
    let mut in_order = sized.clone();
    in_order.dedup();
    let expected: Vec<String> = (0..12).map(|i| i.to_string()).collect();
    assert_eq!(in_order, expected, "{sized:?}");
    // Each question is told the estimates (contract 0.3.5): a batch's own, and the run's work
    // left, from all twelve batches (concurrency 1) down to the last one alone.
    let told = |call: &str| -> (Option<u64>, Option<u64>) {
        let told = call
            .split(' ')
            .find_map(|w| w.strip_prefix("told="))
            .unwrap();
        let (batch, left) = told.split_once('/').unwrap();
        (batch.parse().ok(), left.parse().ok())
    };
    let sizes: Vec<(Option<u64>, Option<u64>)> = (calls.iter())
        .filter(|c| c.starts_with("batch"))
        .map(|c| told(c))
        .collect();
    let (Some(first), Some(all)) = sizes[0] else {
        panic!("the first batch is told its estimate and the run's: {calls:?}")
    };
    assert!(
        all.abs_diff(12 * first) <= 12,
        "{first} × 12 ≈ {all}: {calls:?}"
    );
    let (Some(last), Some(left)) = sizes[sizes.len() - 1] else {
        panic!("the last batch is told its estimate and the run's: {calls:?}")
    };
    assert_eq!(left, last, "the last batch is all that is left: {calls:?}");
    assert!(left < all, "what is left shrinks: {calls:?}");
    for call in calls.iter().filter(|c| c.starts_with("gate")) {
        let (batch, left) = told(call);
        assert!(left.is_some(), "{call}");
        let about_a_batch = call.starts_with("gate before-batch");
        assert_eq!(batch.is_some(), about_a_batch, "{call}");
    }
    let (batch, left) = told(calls.iter().find(|c| c.starts_with("select")).unwrap());
    assert_eq!((batch, left), (None, Some(all)), "{calls:?}");
    // The demo hooks' decisions are reported, one per question.
    assert_eq!(decided("select", ""), 1);
    assert_eq!(decided("batch", ""), 12 + pauses);
    assert_eq!(decided("gate", ""), 1 + 2 * 12 + waits);
}

/// The instances of each surge and batch: `+` marks a surge, `c` the canary.
fn steps_of_plan(plan: &Value) -> Vec<String> {
    plan["groups"][0]["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| step(b["surge"] == true, b["canary"] == true, &b["instances"]))
        .collect()
}

fn steps_of_run(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e["event"].as_str() {
            Some("surging") => Some(step(true, e["canary"] == true, &e["detached"])),
            Some("batch-started") => Some(step(false, e["canary"] == true, &e["nodes"])),
            _ => None,
        })
        .collect()
}

fn step(surge: bool, canary: bool, instances: &Value) -> String {
    let names: Vec<&str> = instances
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    format!(
        "{}{}{}",
        if surge { "+" } else { "" },
        if canary { "c:" } else { "" },
        names.join(" ")
    )
}

#[tokio::test]
async fn the_run_performs_the_plan_it_printed() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    cluster.outdated_group("mirror", 6).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    modules(dir.path(), &["zone-spread"]);
    let policy = cluster.exec_policy(
        dir.path(),
        "  hooks:\n  - {name: zone-spread, module: zone_spread.wasm, points: [select, batch], config: {maxPerZone: 1}}\n",
    );
    let mut args = cluster.rotate_args(&policy, "mirror");
    args.extend(["--max-surge", "1", "--max-unavailable", "2"].map(String::from));
    let plan_args = rollout_ext_e2e::plan_of(&args);

    let printed = run_plugin(plan_args).await;
    succeeded(&printed);
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let planned = steps_of_plan(&plan);
    assert!(
        planned.first().is_some_and(|s| s.starts_with("+c:")),
        "nothing is up to date: a canary surge first: {planned:?}"
    );

    let done = run_plugin(args).await;
    succeeded(&done);
    assert_eq!(steps_of_run(&events(&done)), planned);
    // Who sized each batch is the same too.
    let sized_by: Vec<&Value> = plan["groups"][0]["batches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["surge"] != true)
        .map(|b| &b["decidedBy"])
        .collect();
    let events = events(&done);
    let run_sized_by: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "batch-started")
        .map(|e| &e["decided_by"])
        .collect();
    assert_eq!(run_sized_by, sized_by);
}

#[tokio::test]
async fn a_gate_that_refuses_a_later_batch_lets_the_earlier_ones_run() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("later", 4).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    modules(dir.path(), &["hostile-hook"]);
    let policy = cluster.exec_policy(
        dir.path(),
        "  hooks:\n  - {name: third-no, module: hostile_hook.wasm, points: [gate], config: {gate: abort-batch-2}}\n",
    );
    let mut args = cluster.rotate_args(&policy, "later");
    args.extend(["--max-unavailable".to_string(), "1".into()]);
    let out = run_plugin(args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("before batch 3 of group later") && stderr.contains("batch 3 must not go"),
        "{stderr}"
    );
    let terminated = cluster.cloud.terminated("later");
    assert_eq!(
        terminated,
        originals[..2],
        "batches 1 and 2 ran, then it stopped"
    );
    let verdicts: BTreeMap<(String, u64), String> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "decided" && e["point"] == "gate")
        .map(|e| {
            (
                (
                    e["phase"].as_str().unwrap().to_string(),
                    e["batch"].as_u64().unwrap(),
                ),
                e["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        verdicts.get(&("before-batch".to_string(), 2)),
        Some(&"abort: batch 3 must not go".to_string())
    );
    assert_eq!(
        verdicts
            .keys()
            .filter(|(phase, _)| phase == "before-batch")
            .count(),
        3,
        "never asked about batch 4: {verdicts:?}"
    );
    assert_eq!(verdicts.len(), 1 + 3 + 2, "{verdicts:?}");
}

#[tokio::test]
async fn a_shadow_hook_is_reported_beside_each_decision_and_never_acted_on() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let originals = cluster.outdated_group("shadowed", 3).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    modules(dir.path(), &["hostile-hook"]);
    // The hook that would stop the run before batch 3, tried in shadow (its failurePolicy is
    // the one it will have once trusted; a shadow never stops a run).
    let policy = cluster.exec_policy(
        dir.path(),
        "  hooks:\n  - {name: next-gate, module: hostile_hook.wasm, points: [gate], mode: Shadow, failurePolicy: Fail, config: {gate: abort-batch-2}}\n",
    );
    let mut args = cluster.rotate_args(&policy, "shadowed");
    args.extend(["--max-unavailable".to_string(), "1".into()]);
    let plan_args = rollout_ext_e2e::plan_of(&args);

    let printed = run_plugin(plan_args).await;
    succeeded(&printed);
    let plan: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert!(plan.get("stopped").is_none(), "{plan}");
    let batches = plan["groups"][0]["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 3, "{plan}");
    let third = &batches[2]["shadow"][0];
    assert_eq!(third["hook"], "next-gate");
    assert_eq!(third["phase"], "before-batch");
    assert_eq!(third["decision"], "abort: batch 3 must not go");
    assert_eq!(third["agrees"], false);
    assert!(batches[2]["gate"].is_null(), "the built-in decided: {plan}");

    let out = run_plugin(args).await;
    succeeded(&out);
    let terminated = cluster.cloud.terminated("shadowed").len();
    assert_eq!(terminated, originals.len(), "every batch ran");
    let events = events(&out);
    let gates = |kind: &str| -> Vec<(String, u64)> {
        events
            .iter()
            .filter(|e| e["event"] == kind && e["point"] == "gate")
            .map(|e| {
                (
                    e["phase"].as_str().unwrap().to_string(),
                    e["batch"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        gates("shadow"),
        gates("decided"),
        "one shadow report beside each gate decision"
    );
    let differs: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "shadow" && e["agrees"] == false)
        .collect();
    assert_eq!(differs.len(), 1, "{differs:?}");
    assert_eq!(differs[0]["batch"], 2);
    assert_eq!(differs[0]["decision"], "abort: batch 3 must not go");
}

/// A hook asking `others-disrupting` (contract 0.3.7) is told the nodes of its group another tool
/// is taking out, by the plan and by the run, as they count them: here a node Karpenter drains
/// for the whole run, so every batch is told it.
#[tokio::test]
async fn hooks_are_told_what_others_disrupt_in_the_group() {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::shared();
    let group = "told-others";
    cluster.outdated_group(group, 2).await.unwrap();
    let other = format!("{group}-other");
    (cluster.nodes)
        .add(rollout_ext_e2e::cluster::NodeSpec::new(&other, group))
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(cluster.client().await);
    let taint = |on: bool| {
        let taints = match on {
            true => serde_json::json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]),
            false => serde_json::json!([]),
        };
        serde_json::json!({"spec": {"taints": taints}})
    };
    (nodes.patch(
        &other,
        &PatchParams::default(),
        &Patch::Strategic(taint(true)),
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    modules(dir.path(), &["hostile-hook"]);
    let hooks = "  hooks:\n  - {name: tracer, module: hostile_hook.wasm, points: [batch], config: {batch: others}}\n";
    let policy = cluster.exec_policy(dir.path(), hooks);
    let mut args = cluster.rotate_args(&policy, group);
    args.extend(["--max-unavailable", "2", "-v"].map(String::from));
    let told = |out: &Output| -> Vec<String> {
        (String::from_utf8_lossy(&out.stderr).lines())
            .filter_map(|l| {
                l.split_once("[hook tracer] others ")
                    .map(|(_, t)| t.to_string())
            })
            .collect()
    };
    let plan_args: Vec<String> = args.iter().filter(|a| *a != "--yes").cloned().collect();
    let plan = run_plugin(plan_args).await;
    let run = run_plugin(args).await;
    (nodes.patch(
        &other,
        &PatchParams::default(),
        &Patch::Strategic(taint(false)),
    ))
    .await
    .unwrap();
    succeeded(&plan);
    succeeded(&run);
    let said = format!("[{other}=karpenter]");
    for (out, dry_run) in [(&plan, true), (&run, false)] {
        let calls = told(out);
        assert_eq!(calls.len(), 2, "one batch of the two at a time: {calls:?}");
        for (i, call) in calls.iter().enumerate() {
            assert_eq!(
                *call,
                format!("batch {i} {said} dry-run={dry_run}"),
                "{calls:?}"
            );
        }
    }
}
