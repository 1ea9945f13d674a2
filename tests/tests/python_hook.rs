//! A hook in a second language: the Python example (built with componentize-py against the same
//! WIT by the test command) decides the update order of a plan, credited to it.

use std::process::Command;

use rollout_ext_e2e::{plugin_binary, wasm_module};
use serde_json::{Value, json};

fn node(name: &str, created: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": created,
                     "labels": {"kops.k8s.io/instancegroup": "nodes"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "nodeInfo": {"kubeletVersion": "v1.19.7"}}
    })
}

fn order(plan: &Value) -> Vec<(String, String)> {
    plan["groups"][0]["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["instances"][0].as_str().unwrap().to_string(),
                b["decidedBy"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn the_python_hook_orders_the_plan_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snapshot.json");
    std::fs::write(
        &snapshot,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            node("node-a", "2026-05-01T00:00:00Z"),
            node("node-b", "2026-03-01T00:00:00Z"),
            node("node-c", "2026-04-01T00:00:00Z"),
            node("node-d", "2026-01-01T00:00:00Z"),
        ]})
        .to_string(),
    )
    .unwrap();
    std::fs::copy(
        wasm_module("oldest-first-py"),
        dir.path().join("oldest-first.wasm"),
    )
    .unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: oldest-first, module: oldest-first.wasm, points: [select]}\n",
    )
    .unwrap();
    // A cache of its own: the first plan compiles the component, the second reuses it.
    let cache = dir.path().join("cache");
    let plan = |with_policy: bool| {
        let mut cmd = Command::new(plugin_binary());
        cmd.args(["nodes", "--from-snapshot"])
            .arg(&snapshot)
            .args([
                "--kubelet-version",
                "v1.20.2",
                "--max-unavailable",
                "1",
                "-o",
                "json",
            ])
            .env("XDG_CACHE_HOME", &cache);
        if with_policy {
            cmd.arg("--policy").arg(&policy);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };

    let built_in: Vec<String> = order(&plan(false)).into_iter().map(|(n, _)| n).collect();
    assert_eq!(built_in, ["node-a", "node-b", "node-c", "node-d"]);

    let with_hook = plan(true);
    let names: Vec<String> = order(&with_hook).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["node-d", "node-b", "node-c", "node-a"],
        "oldest first"
    );
    let instances = with_hook["groups"][0]["instances"].as_array().unwrap();
    assert!(
        instances
            .iter()
            .all(|i| i["decidedBy"] == "hook/oldest-first"
                && i["reason"].as_str().unwrap().contains("oldest first")),
        "{instances:?}"
    );
    // Planned again from the compile cache: the same answer.
    assert_eq!(order(&plan(true)), order(&with_hook));
}

/// The SDK's Python helpers (hooks-sdk/python/rollout_ext_hooks.py) pass their own tests, run by
/// unittest with stand-in bindings.
#[test]
fn the_python_helpers_pass_their_tests() {
    let root = rollout_ext_e2e::workspace_root();
    let out = Command::new("python3")
        .args(["hooks-sdk/python/test/test_helpers.py", "-v"])
        .current_dir(&root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("\nOK") && !report.contains("Ran 0 tests"),
        "{report}"
    );
}

/// A Python hook that leaves out a point's class (here `Gates`) does not build, and the build
/// says which class and what to write, not componentize-py's traceback and backtrace.
#[test]
fn a_python_hook_without_a_points_class_is_told_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    let out = rollout_ext_e2e::build_site_policy(dir.path(), "py", |app| {
        let gates = app
            .find("class Gates(DeferGates):")
            .expect("the example has Gates");
        app[..gates].to_string()
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "build.sh: app.py defines no class Gates: every hook exports Metadata, Selection, Batching and Gates; for a point it does not serve, take the SDK's deferring one: class Gates(DeferGates): pass (from rollout_ext_hooks import DeferGates)"
    );
    assert!(!dir.path().join("app.wasm").exists());
}
