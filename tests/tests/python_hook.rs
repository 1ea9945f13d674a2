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

/// The SDK's Python helpers (hooks-sdk/python/rollout_ext_hooks.py) and the site-policy
/// example pass their own tests, run by unittest on the SDK's stand-in host
/// (rollout_ext_testing.py), as a hook's author runs them.
#[test]
fn the_python_helpers_and_the_example_pass_their_tests_in_python() {
    let root = rollout_ext_e2e::workspace_root();
    for (dir, args) in [
        ("hooks-sdk/python", &["test/test_helpers.py", "-v"][..]),
        (
            "examples-hooks/site-policy-py",
            &["-m", "unittest", "-v"][..],
        ),
    ] {
        let out = Command::new("python3")
            .args(args)
            .current_dir(root.join(dir))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .expect("python3 runs");
        let report = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{dir}: {report}");
        assert!(
            report.contains("\nOK") && !report.contains("Ran 0 tests"),
            "{dir}: {report}"
        );
    }
}

/// A Python hook writes functions only for the points it serves: one that leaves out its gate
/// builds, and describes itself as serving select and batch (the build's entry puts in the
/// SDK's deferring class and declares the points served).
#[test]
fn a_python_hook_writes_only_the_points_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let out = rollout_ext_e2e::build_site_policy(dir.path(), "py", |app| {
        let gate = app
            .find("def after_batch(")
            .expect("the example has a gate");
        app[..gate].to_string()
    });
    assert!(out.status.success(), "{out:?}");
    let (code, stdout, stderr) = rollout_ext_e2e::inspect_module(&dir.path().join("app.wasm"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("POINTS    select, batch\n"), "{stdout}");
}

/// A Python hook whose function serves a point its `describe` leaves out (here `gate`, which
/// would never be asked) is refused at load, naming the function and the point in its own words.
#[test]
fn a_python_hook_serving_a_point_it_does_not_declare_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = rollout_ext_e2e::build_site_policy(dir.path(), "py", |app| {
        let named = "NAME = \"site-policy-py\"\n";
        assert!(app.contains(named), "the example is named by NAME");
        let declared = "class Metadata(AnyConfig):\n    def describe(self):\n        return describe(\"site\", [\"select\", \"batch\"])\n";
        let app = app.replace(named, declared);
        format!("from rollout_ext_hooks import AnyConfig, describe\n{app}")
    });
    assert!(out.status.success(), "{out:?}");
    let (code, _, stderr) = rollout_ext_e2e::inspect_module(&dir.path().join("app.wasm"));
    assert_eq!(code, Some(2), "{stderr}");
    let error = (stderr.lines())
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        error.contains("(guest said: ValueError: describe: app.py's after_batch serves point 'gate', which describe leaves out of its points"),
        "{error}"
    );
}

/// A Python hook that cannot be called as written does not build, and the build says what to
/// write, not componentize-py's traceback and backtrace: one without a NAME, and one whose
/// point function takes an argument that no call offers.
#[test]
fn a_python_hook_that_cannot_be_called_is_told_what_to_write() {
    for (edit, said) in [
        (
            ("NAME = \"site-policy-py\"\n", ""),
            "build.sh: app.py sets no NAME and defines no class Metadata: every hook has one (NAME = \"my-policy\")",
        ),
        (
            ("def after_batch(batch):", "def after_batch(b):"),
            "build.sh: app.py's after_batch takes 'b', which is none of its arguments (ctx, config, now, batch, summary): name those it reads, in any order",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = rollout_ext_e2e::build_site_policy(dir.path(), "py", |app| {
            assert!(app.contains(edit.0), "{app}");
            app.replace(edit.0, edit.1)
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim(), said);
        assert!(!dir.path().join("app.wasm").exists());
    }
}
