//! `hooks test` as a policy author runs it in the policy's own CI: with the policy's entry, a
//! budget, repeated gate checks and fixtures of expected decisions. Real binary, real modules.

use std::process::Output;

use rollout_ext_e2e::{demo_file, hooks_test};
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_demo_fixtures_hold_and_a_changed_decision_fails_with_the_difference() {
    let policy = demo_file("policy.yaml");
    let policy = policy.to_str().unwrap();
    for (module, fixture) in [
        ("zone-spread", "zone-spread.yaml"),
        ("error-budget", "error-budget.yaml"),
        ("error-budget", "error-budget-gives-up.yaml"),
        ("maintenance-window", "maintenance-window.yaml"),
    ] {
        let fixture = demo_file("fixtures").join(fixture);
        let out = hooks_test(
            module,
            &["--policy", policy, "--expect", fixture.to_str().unwrap()],
        );
        assert!(
            out.status.success(),
            "{module} {}: {}",
            fixture.display(),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("every expectation met"),
            "{}",
            text(&out.stdout)
        );
    }

    // One expected verdict changed: exit 1, and the difference is shown.
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(demo_file("fixtures/error-budget.yaml")).unwrap();
    let changed = original
        .replace(
            "../snapshot.json",
            demo_file("snapshot.json").to_str().unwrap(),
        )
        .replace(
            "gates: [proceed, wait, wait, wait, proceed]",
            "gates: [proceed, proceed, wait, wait, proceed]",
        );
    assert_ne!(changed, original);
    let fixture = dir.path().join("changed.yaml");
    std::fs::write(&fixture, changed).unwrap();
    let out = hooks_test(
        "error-budget",
        &["--policy", policy, "--expect", fixture.to_str().unwrap()],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            r#"group nodes: gates: expected ["proceed","proceed","wait","wait","proceed"], got ["proceed","wait","wait","wait","proceed"]"#
        ),
        "{stderr}"
    );
}

fn site_fixtures() -> std::path::PathBuf {
    rollout_ext_e2e::workspace_root().join("examples-hooks/site-policy/fixtures")
}

/// The site policy's three builds, Rust and its Python and JavaScript twins on the SDKs'
/// helpers: the module and the directory of its own policy (the fixtures are the same rules).
const SITE_POLICIES: [(&str, &str); 3] = [
    ("site-policy", "examples-hooks/site-policy/fixtures"),
    ("site-policy-py", "examples-hooks/site-policy-py/fixtures"),
    ("site-policy-js", "examples-hooks/site-policy-js/fixtures"),
];

/// `hooks test` of one build of the site policy against the fixture `expect`.
fn site_policy_test_of((module, dir): (&str, &str), expect: &std::path::Path) -> Output {
    let policy = rollout_ext_e2e::workspace_root()
        .join(dir)
        .join("policy.yaml");
    hooks_test(
        module,
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--expect",
            expect.to_str().unwrap(),
        ],
    )
}

#[test]
fn the_site_policy_example_and_its_python_and_javascript_twins_meet_their_fixtures() {
    for site in SITE_POLICIES {
        let fixtures = rollout_ext_e2e::workspace_root().join(site.1);
        for fixture in ["rotation.yaml", "after-batch.yaml"] {
            let out = site_policy_test_of(site, &fixtures.join(fixture));
            assert!(
                out.status.success(),
                "{site:?} {fixture}: {}",
                text(&out.stderr)
            );
            assert!(text(&out.stdout).contains("every expectation met"));
        }
    }
}

#[test]
fn the_after_batch_gate_is_asked_with_phase_and_holds_then_aborts() {
    // The snapshot with one payments pod not Ready: the cluster as a batch would leave it.
    let dir = tempfile::tempdir().unwrap();
    let mut snapshot: Value =
        serde_json::from_slice(&std::fs::read(site_fixtures().join("snapshot.json")).unwrap())
            .unwrap();
    let pod = snapshot["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|i| i["metadata"]["name"] == "api-node-2-0")
        .unwrap();
    pod["status"]["conditions"][0]["status"] = "False".into();
    std::fs::write(dir.path().join("snapshot.json"), snapshot.to_string()).unwrap();
    for site in SITE_POLICIES {
        holds_then_aborts(site, dir.path());
    }
}

/// The site policy's after-batch gate (one build of it) on the snapshot in `dir`, which has a
/// payments pod not Ready: it waits at each batch, and its third check aborts.
fn holds_then_aborts(site: (&str, &str), dir: &std::path::Path) {
    let fixture = |attempt: u32, expected: &str| {
        let file = dir.join(format!("attempt-{attempt}.yaml"));
        std::fs::write(
            &file,
            format!(
                "snapshot: snapshot.json\nnow: \"2026-11-27T12:00:00Z\"\nphases: [after-batch]\nattempt: {attempt}\ngroups:\n  nodes:\n{expected}"
            ),
        )
        .unwrap();
        site_policy_test_of(site, &file)
    };

    // First check: wait after every batch (a plan assumes the wait clears).
    let out = fixture(
        0,
        "    batches: [[node-3], [node-2, node-5], [node-1]]\n    afterGates: [wait, wait, wait]\n    gates: [\"-\", \"-\", \"-\"]\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The third check gives up: the plan stops after the first batch.
    let out = fixture(2, "    batches: [[node-3]]\n    afterGates: [abort]\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Expecting it to go on fails, naming the field.
    let out = fixture(2, "    afterGates: [proceed, proceed, proceed]\n");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            r#"group nodes: afterGates: expected ["proceed","proceed","proceed"], got ["abort"]"#
        ),
        "{stderr}"
    );
}

#[test]
fn repeated_gate_checks_are_simulated_with_attempt_and_an_abort_fails_unless_allowed() {
    let policy = demo_file("policy.yaml");
    let snapshot = demo_file("snapshot.json");
    let test = |attempt: &str, more: &[&str]| {
        let mut args = vec![
            "--policy",
            policy.to_str().unwrap(),
            "--snapshot",
            snapshot.to_str().unwrap(),
            "--kubelet-version",
            "v1.20.2",
            "--max-batch",
            "2",
            "--attempt",
            attempt,
            "-o",
            "json",
        ];
        args.extend_from_slice(more);
        let out = hooks_test("error-budget", &args);
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out, plan)
    };
    // maxFailedChecks is 10 in the demo policy: a wait at first, an abort once spent.
    let (out, plan) = test("0", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(plan["stopped"].is_null());

    // Spent, the gate aborts: the plan is printed, and the test fails saying so.
    let (out, spent) = test("12", &[]);
    let stopped = spent["stopped"].as_str().unwrap_or_default();
    assert!(
        stopped.contains("hook/error-budget aborted before batch 2"),
        "{spent}"
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the run would stop at group ")
            && stderr.contains("hook/error-budget aborted before batch 2")
            && stderr.contains("--allow-abort"),
        "{stderr}"
    );

    // Asked for, the same abort passes.
    let (out, allowed) = test("12", &["--allow-abort"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(allowed["stopped"], spent["stopped"]);
}

#[test]
fn a_config_typo_in_the_policy_is_named_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n    - name: spread\n      module: zone_spread.wasm\n      config: {maxPerZne: 1}\n",
    )
    .unwrap();
    let snapshot = demo_file("snapshot.json");
    let out = hooks_test(
        "zone-spread",
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--snapshot",
            snapshot.to_str().unwrap(),
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("policy.yaml:7:16: hook spread:") && stderr.contains("maxPerZne"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_failing_point_does_not_hide_the_decisions_of_the_others() {
    let snapshot = demo_file("snapshot.json");
    let out = hooks_test(
        "hostile-hook",
        &[
            "--snapshot",
            snapshot.to_str().unwrap(),
            "--point",
            "select,batch",
            "--config",
            r#"{"select": "force", "batch": "zero"}"#,
            "-o",
            "json",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("decision(s) of hook hostile failed") && stderr.contains("batch size 0"),
        "the module's own name and the fault: {stderr}"
    );
    // The selection it made is still shown.
    let plan: Value = serde_json::from_slice(&out.stdout).expect("the plan is printed");
    let decided: Vec<&Value> = plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["instances"].as_array().unwrap())
        .filter(|i| i["decidedBy"] == "hook/hostile")
        .collect();
    assert!(!decided.is_empty(), "{plan}");
}

#[test]
fn a_drain_order_hook_is_asked_about_every_node_the_plan_replaces() {
    let module = "drain-tiers";
    let snapshot = demo_file("snapshot.json");
    let config = r#"{"label": "app", "tiers": ["db", "web"]}"#;
    let args = [
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--config",
        config,
        "--kubelet-version",
        "v1.20.2",
        "--now",
        "2026-11-27T12:00:00Z",
    ];
    let out = hooks_test(module, &[&args[..], &["-o", "json"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tested: Value = serde_json::from_slice(&out.stdout).unwrap();
    let orders = tested["drainOrders"].as_array().expect("drain orders");

    // The same turns, from the snapshot: per node, its db pods, then its web pods.
    let items: Value = serde_json::from_slice(&std::fs::read(&snapshot).unwrap()).unwrap();
    let turn = |node: &str, app: &str| -> Vec<String> {
        items["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "Pod" && i["spec"]["nodeName"] == node)
            .filter(|i| i["metadata"]["labels"]["app"] == app)
            .map(|i| {
                format!(
                    "{}/{}",
                    i["metadata"]["namespace"].as_str().unwrap(),
                    i["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    let replaced: Vec<&str> = tested["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["disabled"] == false)
        .flat_map(|g| g["batches"].as_array().unwrap())
        .flat_map(|b| b["instances"].as_array().unwrap())
        .map(|n| n.as_str().unwrap())
        .collect();
    let asked: Vec<&str> = orders.iter().map(|o| o["node"].as_str().unwrap()).collect();
    assert_eq!(asked, replaced, "one answer per replaced node, in order");
    let mut ordered = 0;
    for order in orders {
        let node = order["node"].as_str().unwrap();
        let turns: Vec<String> = [turn(node, "db"), turn(node, "web")]
            .into_iter()
            .filter(|t| !t.is_empty())
            .map(|t| t.join(", "))
            .collect();
        let want = match turns.is_empty() {
            true => "no turns (policy order)".to_string(),
            false => format!("turns {}", turns.join(" | ")),
        };
        assert_eq!(order["decision"], want, "{order}");
        ordered += usize::from(!turns.is_empty());
    }
    assert!(ordered > 0, "some node runs web or db pods: {orders:?}");

    // A fixture checks them like every other decision.
    let first = orders
        .iter()
        .find(|o| o["decision"].as_str().unwrap().starts_with("turns "))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fixture = |decision: &str| {
        let file = dir.path().join("expect.yaml");
        std::fs::write(
            &file,
            format!(
                "snapshot: {}\nnow: \"2026-11-27T12:00:00Z\"\nkubeletVersion: v1.20.2\ngroups:\n  {}:\n    drainOrder:\n      {}: \"{decision}\"\n",
                snapshot.display(),
                first["group"].as_str().unwrap(),
                first["node"].as_str().unwrap()
            ),
        )
        .unwrap();
        file
    };
    let met = hooks_test(
        module,
        &[
            "--config",
            config,
            "--expect",
            fixture(first["decision"].as_str().unwrap())
                .to_str()
                .unwrap(),
        ],
    );
    assert!(met.status.success(), "{}", text(&met.stderr));
    let missed = hooks_test(
        module,
        &[
            "--config",
            config,
            "--expect",
            fixture("policy order").to_str().unwrap(),
        ],
    );
    assert_eq!(missed.status.code(), Some(1));
    assert!(
        text(&missed.stderr).contains("drainOrder: expected"),
        "{}",
        text(&missed.stderr)
    );
}

fn slo_gate_file(name: &str) -> std::path::PathBuf {
    rollout_ext_e2e::workspace_root()
        .join("examples-hooks/slo-gate")
        .join(name)
}

#[test]
fn the_slo_gate_is_tested_on_recorded_metrics_without_a_prometheus() {
    let policy = slo_gate_file("policy.yaml");
    for fixture in ["healthy.yaml", "burning.yaml"] {
        let fixture = slo_gate_file("fixtures").join(fixture);
        let out = hooks_test(
            "slo-gate",
            &[
                "--policy",
                policy.to_str().unwrap(),
                "--expect",
                fixture.to_str().unwrap(),
            ],
        );
        assert!(
            out.status.success(),
            "{}: {}",
            fixture.display(),
            text(&out.stderr)
        );
    }

    // A source that cannot be reached is named in the hook's failure.
    let down = slo_gate_file("fixtures/prometheus-down.yaml");
    let out = hooks_test(
        "slo-gate",
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--expect",
            down.to_str().unwrap(),
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("hook slo failed at the gate point: returned an error: metrics source prom (recorded): connection refused"),
        "{stderr}"
    );
    assert!(!stderr.contains("expectation(s) not met"), "{stderr}");

    // Without a policy the hook is granted the sources the fixture records; a query the fixture
    // does not record fails, named.
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(slo_gate_file("fixtures/healthy.yaml")).unwrap();
    let fixture = dir.path().join("other-query.yaml");
    std::fs::write(
        &fixture,
        original
            .replace(
                "../../demo/snapshot.json",
                demo_file("snapshot.json").to_str().unwrap(),
            )
            .replace(
                "gates: [proceed, proceed, proceed, proceed, proceed]",
                r#"gates: ["-", "-", "-", "-", "-"]"#,
            ),
    )
    .unwrap();
    let config = r#"{"source": "prom", "query": "up", "threshold": 0.5}"#;
    let out = hooks_test(
        "slo-gate",
        &["--config", config, "--expect", fixture.to_str().unwrap()],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(r#"metrics source prom (recorded): the fixture records no answer to "up""#),
        "{stderr}"
    );
}

#[test]
fn a_fixture_that_is_not_one_is_named_with_its_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = dir.path().join("fixture.yaml");
    std::fs::write(&fixture, "snapshot: s.json\npoint: select\n").unwrap();
    let out = hooks_test("zone-spread", &["--expect", fixture.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: {}: line 2 column 1: unknown field `point`",
            fixture.display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
}

/// `hooks test` is as strict as a plan: the policy entry's pin holds, a module no entry names
/// is refused, and `--group` narrows the plan (a group it leaves out says why in a fixture).
#[test]
fn hooks_test_checks_the_pin_refuses_a_module_no_entry_names_and_takes_a_group() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = demo_file("snapshot.json");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let zero = "0".repeat(64);
    let pinned = write(
        "pinned.yaml",
        &format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n    - name: spread\n      module: zone_spread.wasm\n      sha256: \"{zero}\"\n"
        ),
    );
    let out = hooks_test(
        "zone-spread",
        &[
            "--policy",
            &pinned,
            "--snapshot",
            snapshot.to_str().unwrap(),
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("sha256"), "{stderr}");

    let other = write(
        "other.yaml",
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n    - name: budget\n      module: error_budget.wasm\n",
    );
    let out = hooks_test(
        "zone-spread",
        &["--policy", &other, "--snapshot", snapshot.to_str().unwrap()],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no hook entry for") && stderr.contains("--hook (hooks: budget)"),
        "{stderr}"
    );

    // --group: only that group is planned.
    let out = hooks_test(
        "zone-spread",
        &[
            "--snapshot",
            snapshot.to_str().unwrap(),
            "--kubelet-version",
            "v1.20.2",
            "--group",
            "spot",
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups: Vec<&str> = (plan["groups"].as_array().unwrap().iter())
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["spot"], "{plan}");
}
