//! `hooks run MODULE POINT --input FILE`: one point of a real module asked once with a JSON
//! input, its answer printed as a plan reads it (checked the same way). Real binary, real
//! modules in the three languages.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use rollout_ext_e2e::{plugin_binary, wasm_module, workspace_root};
use serde_json::{Value, json};

/// `hooks run` of `module`'s `point` with `input` on standard input, and `args` after.
fn hooks_run(module: &str, point: &str, input: &Value, args: &[&str]) -> Output {
    let mut child = Command::new(plugin_binary())
        .args(["hooks", "run"])
        .arg(wasm_module(module))
        .args([point, "--input", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the plugin runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// The answer printed, for a run that succeeded.
fn answer(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

fn error(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

fn racks() -> Value {
    json!({
        "context": {"now": "2026-11-27T12:00:00Z"},
        "group": {"name": "nodes", "maxUnavailable": 2},
        "candidates": [
            {"name": "n1", "pods": 5, "reason": "outdated"},
            {"name": "n2", "pods": 1, "reason": "outdated", "labels": {"example.com/pinned": "true"}},
            {"name": "n3", "pods": 2, "reason": "outdated"},
            {"name": "n4", "upToDate": true}
        ],
        "pending": [
            {"name": "n3", "labels": {"example.com/rack": "r1"}},
            {"name": "n1", "labels": {"example.com/rack": "r2"}}
        ]
    })
}

/// The site policy, in each of its three languages, answers select and batch alike from the
/// same input: fewest pods first without the pinned node, two of different racks.
#[test]
fn each_point_answers_from_a_json_input_in_every_language() {
    for module in ["site-policy", "site-policy-py", "site-policy-js"] {
        let chosen = answer(&hooks_run(module, "select", &racks(), &[]));
        assert_eq!(
            chosen,
            json!({"answer": "choose", "order": [
                {"name": "n3", "reason": "2 pods to move"},
                {"name": "n1", "reason": "5 pods to move"}
            ]}),
            "{module}"
        );
        let sized = answer(&hooks_run(module, "batch", &racks(), &[]));
        assert_eq!(
            sized,
            json!({"answer": "size", "count": 2, "reason": "at most 2, one per rack"}),
            "{module}"
        );
    }
}

/// A gate reads the cluster from `--snapshot` within what `--policy` grants; without the
/// grant its read fails the call, named.
#[test]
fn a_gate_reads_the_snapshot_the_policy_grants() {
    let fixtures = workspace_root().join("examples-hooks/site-policy/fixtures");
    let policy = fixtures.join("policy.yaml");
    let snapshot = fixtures.join("snapshot.json");
    let input = json!({"phase": "after-batch", "batch": {"instances": ["nodes-01"], "attempt": 2}});
    let args = [
        "--policy",
        policy.to_str().unwrap(),
        "--snapshot",
        snapshot.to_str().unwrap(),
    ];
    // The fixture's payments pods are Ready.
    assert_eq!(
        answer(&hooks_run("site-policy", "gate", &input, &args)),
        json!({"answer": "proceed"})
    );
    // One that is not: the third check aborts.
    let dir = tempfile::tempdir().unwrap();
    let not_ready = dir.path().join("snapshot.json");
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "payments", "name": "api-0"},
        "spec": {"nodeName": "nodes-02"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [pod]});
    std::fs::write(&not_ready, list.to_string()).unwrap();
    let args = [&args[..2], &["--snapshot", not_ready.to_str().unwrap()]].concat();
    assert_eq!(
        answer(&hooks_run("site-policy", "gate", &input, &args)),
        json!({"answer": "abort", "reason": "1 payments pod(s) not Ready after 3 checks"})
    );
    let out = hooks_run("site-policy", "gate", &input, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", error(&out));
    assert_eq!(
        error(&out),
        "error: hook site-policy failed at gate: read v1 Pod in namespace payments, which the policy's contextResources does not grant (add {apiVersion: v1, kind: Pod, namespace: payments} there)"
    );
}

/// The points only some runs ask: a fleet's stage gate and a node's drain order.
#[test]
fn before_stage_and_drain_order_answer_too() {
    let config = r#"{"minSoakSeconds": 600, "abortStages": [], "waitOnceStages": [], "stopOnSetAside": true}"#;
    let stage = json!({
        "context": {"now": "2026-11-27T12:00:00Z"},
        "stage": {"fleet": "prod", "index": 1, "name": "canary-regions"},
        "previous": {"name": "staging", "soakedSeconds": 60, "clusters": [
            {"cluster": "stg-1", "finished": "2026-11-27T11:59:00Z"}
        ]}
    });
    let waited = answer(&hooks_run(
        "stage-gate",
        "before-stage",
        &stage,
        &["--config", config],
    ));
    assert_eq!(waited["answer"], "wait", "{waited}");
    assert_eq!(waited["seconds"], 540, "{waited}");

    let pod = |name: &str, tier: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": "shop", "name": name, "labels": {"tier": tier}},
               "spec": {"nodeName": "n1"}})
    };
    let drain = json!({"node": "n1", "pods": [pod("db-0", "backend"), pod("web-0", "frontend")]});
    let config = r#"{"tiers": ["frontend", "backend"]}"#;
    let turns = answer(&hooks_run(
        "drain-tiers",
        "drain-order",
        &drain,
        &["--config", config],
    ));
    assert_eq!(
        turns,
        json!({"answer": "turns", "turns": [["shop/web-0"], ["shop/db-0"]]})
    );
}

/// An input field misspelt, a gate without its phase, a point the module does not serve, and
/// an answer the plan would refuse (a batch larger than the budget): each said, exit non-zero.
#[test]
fn bad_input_and_answers_a_plan_would_refuse_are_said() {
    let out = hooks_run(
        "site-policy",
        "gate",
        &json!({"phasee": "after-batch"}),
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        error(&out).starts_with("error: -: unknown field `phasee`"),
        "{}",
        error(&out)
    );

    let out = hooks_run("site-policy", "gate", &json!({}), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        error(&out).contains("a gate is asked at a phase"),
        "{}",
        error(&out)
    );

    let out = hooks_run(
        "zone-spread",
        "gate",
        &json!({"phase": "before-batch"}),
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        error(&out),
        "error: module zone-spread does not serve gate: it declares select, batch"
    );

    // Two pending of different racks, but a budget of one: the hook is offered the first only,
    // as a plan offers it, and sizes one.
    let mut one_at_a_time = racks();
    one_at_a_time["group"]["maxUnavailable"] = json!(1);
    let sized = answer(&hooks_run("site-policy", "batch", &one_at_a_time, &[]));
    assert_eq!(sized["count"], 1, "{sized}");

    // A size over the budget is refused as a plan refuses it.
    let over = ["--config", r#"{"batch": "over-budget"}"#];
    let out = hooks_run("hostile-hook", "batch", &one_at_a_time, &over);
    assert_eq!(out.status.code(), Some(1), "{}", error(&out));
    assert!(
        error(&out).starts_with("error: hook hostile failed at batch: "),
        "{}",
        error(&out)
    );
}
