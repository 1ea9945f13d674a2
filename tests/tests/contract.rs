//! The hook contract's load-time checks and answers, with the real binary and real components:
//! points declared by the module, configs checked at load against the policy's lines, reasons
//! and phases in the plan, and selections that may not replace up-to-date nodes by accident.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rollout_ext_e2e::{demo_file, plugin_binary, wasm_module};
use serde_json::Value;

/// Copies the modules beside a policy of `hooks` (the lines under `spec.hooks:`) and returns
/// its path. The hooks' entries start at line 5.
fn policy(dir: &Path, modules: &[&str], hooks: &str) -> PathBuf {
    for name in modules {
        let module = wasm_module(name);
        std::fs::copy(&module, dir.join(module.file_name().unwrap())).unwrap();
    }
    let file = dir.join("policy.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n{hooks}"),
    )
    .unwrap();
    file
}

/// Plans the demo snapshot. With `extra` empty only the spot nodes are outdated; the tests
/// that need every node outdated pass `OUTDATED`.
fn plan(policy: &Path, extra: &[&str]) -> Output {
    let snapshot = demo_file("snapshot.json");
    Command::new(plugin_binary())
        .args([
            "nodes",
            "--from-snapshot",
            snapshot.to_str().unwrap(),
            "--now",
            "2026-11-27T12:00:00Z",
            "--policy",
            policy.to_str().unwrap(),
            "-o",
            "json",
        ])
        .args(extra)
        .output()
        .expect("the plugin runs")
}

/// Every node of the demo snapshot runs kubelet v1.19.7.
const OUTDATED: &[&str] = &["--kubelet-version", "v1.20.2"];

fn plan_json(policy: &Path, extra: &[&str]) -> Value {
    let out = plan(policy, extra);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("-o json prints JSON")
}

fn nodes_group(plan: &Value) -> &Value {
    plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "nodes")
        .expect("the demo snapshot has a nodes group")
}

fn warnings(plan: &Value) -> Vec<String> {
    plan["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_policy_without_points_enables_what_the_module_implements() {
    let dir = tempfile::tempdir().unwrap();
    let all = policy(
        dir.path(),
        &["zone-spread"],
        "    - name: zone-spread\n      module: zone_spread.wasm\n      config: {maxPerZone: 1}\n",
    );
    let plan = plan_json(&all, OUTDATED);
    let nodes = nodes_group(&plan);
    // zone-spread implements select and batch: both are asked.
    assert!(
        nodes["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["update"] == true)
            .all(|i| i["decidedBy"] == "hook/zone-spread"),
        "{nodes}"
    );
    assert!(
        nodes["batches"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["decidedBy"] == "hook/zone-spread"),
        "{nodes}"
    );
    assert!(
        !warnings(&plan).iter().any(|w| w.contains("implements")),
        "{plan}"
    );
}

#[test]
fn a_point_the_policy_leaves_out_is_a_warning_in_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let subset = policy(
        dir.path(),
        &["zone-spread"],
        "    - name: zone-spread\n      module: zone_spread.wasm\n      points: [select]\n      config: {maxPerZone: 1}\n",
    );
    let plan = plan_json(&subset, OUTDATED);
    let warning = warnings(&plan)
        .into_iter()
        .find(|w| w.starts_with("hook zone-spread:"))
        .unwrap_or_else(|| panic!("a warning names the hook: {plan}"));
    assert!(
        warning.contains("implements batch but the policy enables only select"),
        "{warning}"
    );
    // And it is really not asked: no batch is sized by it.
    assert!(
        nodes_group(&plan)["batches"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["decidedBy"] != "hook/zone-spread"),
        "{plan}"
    );
}

#[test]
fn a_config_typo_stops_at_the_policy_line_whatever_the_failure_policy() {
    for failure_policy in ["Fail", "Ignore"] {
        let dir = tempfile::tempdir().unwrap();
        let typo = policy(
            dir.path(),
            &["zone-spread"],
            &format!(
                "    - name: zone-spread\n      module: zone_spread.wasm\n      failurePolicy: {failure_policy}\n      config:\n        maxPerZon: 1\n"
            ),
        );
        let out = plan(&typo, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{failure_policy}: {stderr}");
        assert!(out.stdout.is_empty(), "nothing planned: {stderr}");
        // The module's own words name the field, and the error points at it: line 9, column 9.
        assert!(
            stderr.contains("policy.yaml:9:9: hook zone-spread:")
                && stderr.contains("rejects its config"),
            "{failure_policy}: {stderr}"
        );
        assert!(stderr.contains("maxPerZon"), "{stderr}");
    }
}

#[test]
fn a_config_the_module_rejects_is_reported_in_its_own_words() {
    let dir = tempfile::tempdir().unwrap();
    let rejected = policy(
        dir.path(),
        &["hostile-hook"],
        "    - name: picky\n      module: hostile_hook.wasm\n      config: {rejectConfig: \"windows must not overlap\"}\n",
    );
    let out = plan(&rejected, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("policy.yaml:7:")
            && stderr.contains("hook picky")
            && stderr.contains("windows must not overlap"),
        "{stderr}"
    );
}

#[test]
fn batches_say_why_they_have_their_size_and_gates_when_they_judged() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("hooks");
    std::fs::create_dir_all(&demo).unwrap();
    for name in ["zone-spread", "maintenance-window", "error-budget"] {
        let module = wasm_module(name);
        std::fs::copy(&module, demo.join(module.file_name().unwrap())).unwrap();
    }
    let file = dir.path().join("policy.yaml");
    std::fs::copy(demo_file("policy.yaml"), &file).unwrap();
    let plan = plan_json(&file, OUTDATED);
    let batches = nodes_group(&plan)["batches"].as_array().unwrap().clone();
    assert!(!batches.is_empty());
    for b in &batches {
        let reason = b["sizeReason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "every batch says why: {b}");
    }
    // A hook's size comes with the hook's reason, not the budget's.
    let hooked: Vec<&Value> = batches
        .iter()
        .filter(|b| b["decidedBy"] != "built-in")
        .collect();
    assert!(!hooked.is_empty(), "{plan}");
    for b in &hooked {
        assert!(
            !b["sizeReason"].as_str().unwrap().starts_with("the budget"),
            "{b}"
        );
    }
    // The error budget's verdicts are before-batch verdicts (a plan does not ask after-batch).
    let gates: Vec<&Value> = batches.iter().filter(|b| b["gate"].is_object()).collect();
    assert!(!gates.is_empty(), "{plan}");
    assert!(gates.iter().all(|b| b["gate"]["phase"] == "before-batch"));

    // The table shows both.
    let snapshot = demo_file("snapshot.json");
    let out = Command::new(plugin_binary())
        .args(["nodes", "--from-snapshot", snapshot.to_str().unwrap()])
        .args([
            "--kubelet-version",
            "v1.20.2",
            "--now",
            "2026-11-27T12:00:00Z",
        ])
        .args(["--policy", file.to_str().unwrap()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("gate before-batch: wait"), "{table}");
    let hook_reason = hooked[0]["sizeReason"].as_str().unwrap();
    assert!(table.contains(hook_reason), "{table}");
}

#[test]
fn a_selection_may_replace_up_to_date_nodes_only_when_it_says_force() {
    let dir = tempfile::tempdir().unwrap();
    let careless = policy(
        dir.path(),
        &["hostile-hook"],
        "    - name: everything\n      module: hostile_hook.wasm\n      points: [select]\n      config: {select: up-to-date}\n",
    );
    // Without a kubelet version to reach, the nodes group is up to date.
    let out = plan(&careless, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("which is up to date, without force"),
        "{stderr}"
    );

    let forced = policy(
        dir.path(),
        &["hostile-hook"],
        "    - name: everything\n      module: hostile_hook.wasm\n      points: [select]\n      config: {select: force}\n",
    );
    let plan = plan_json(&forced, &[]);
    let nodes = nodes_group(&plan);
    let instances = nodes["instances"].as_array().unwrap();
    assert!(
        !instances.is_empty() && instances.iter().all(|i| i["update"] == true),
        "every node, though up to date: {nodes}"
    );
}

#[test]
fn a_module_of_contract_0_3_0_still_decides_under_a_later_0_3_host() {
    let fixture =
        rollout_ext_e2e::workspace_root().join("tests/hooks/fixtures/zone_spread_0.3.0.wasm");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&fixture, dir.path().join("zone_spread.wasm")).unwrap();
    let inspected = Command::new(plugin_binary())
        .args(["hooks", "inspect", "-o", "json"])
        .arg(dir.path().join("zone_spread.wasm"))
        .output()
        .unwrap();
    assert!(inspected.status.success(), "{inspected:?}");
    let info: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(info["witVersion"], "0.3.0", "{info}");
    assert_eq!(info["callable"], true, "{info}");
    assert_eq!(
        info["points"],
        serde_json::json!(["select", "batch"]),
        "{info}"
    );

    let file = policy(
        dir.path(),
        &[],
        "    - name: zones\n      module: zone_spread.wasm\n      config: {maxPerZone: 1}\n",
    );
    let plan = plan_json(&file, OUTDATED);
    let batches = nodes_group(&plan)["batches"].as_array().unwrap().clone();
    assert!(
        batches.iter().all(|b| b["decidedBy"] == "hook/zones"),
        "{batches:?}"
    );
}
