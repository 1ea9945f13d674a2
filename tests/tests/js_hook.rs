//! A hook in a third language: the JavaScript example (built with componentize-js against the
//! same WIT by the test command) decides the update order of a plan, credited to it, and refuses
//! a config in its own words.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rollout_ext_e2e::{plugin_binary, wasm_module};
use serde_json::{Value, json};

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"kops.k8s.io/instancegroup": "nodes"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "nodeInfo": {"kubeletVersion": "v1.19.7"}}
    })
}

/// A Ready pod bound to `node`, owned by `owner` (a drain moves a ReplicaSet's pods and leaves a
/// DaemonSet's).
fn pod(name: &str, node: &str, owner: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "web",
                                          "uid": "u", "controller": true}]},
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Four outdated nodes whose name order is not their pod order: node-a 3 pods, node-b 1,
/// node-c none (its DaemonSet pod stays put), node-d 1.
fn setup(dir: &Path, config: &str) -> (PathBuf, PathBuf) {
    let snapshot = dir.join("snapshot.json");
    std::fs::write(
        &snapshot,
        json!({"apiVersion": "v1", "kind": "List", "items": [
            node("node-a"), node("node-b"), node("node-c"), node("node-d"),
            pod("web-1", "node-a", "ReplicaSet"),
            pod("web-2", "node-a", "ReplicaSet"),
            pod("web-3", "node-a", "ReplicaSet"),
            pod("web-4", "node-b", "ReplicaSet"),
            pod("agent-c", "node-c", "DaemonSet"),
            pod("web-5", "node-d", "ReplicaSet"),
        ]})
        .to_string(),
    )
    .unwrap();
    std::fs::copy(wasm_module("fewest-pods-js"), dir.join("fewest-pods.wasm")).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - name: fewest-pods\n    module: fewest-pods.wasm\n    points: [select]\n{config}"
        ),
    )
    .unwrap();
    (snapshot, policy)
}

/// A dry-run plan of `snapshot`, with `policy` when given; the compile cache is `dir`'s own.
fn plan(dir: &Path, snapshot: &Path, policy: Option<&Path>) -> Output {
    let mut cmd = Command::new(plugin_binary());
    cmd.args(["nodes", "--from-snapshot"])
        .arg(snapshot)
        .args([
            "--kubelet-version",
            "v1.20.2",
            "--max-unavailable",
            "1",
            "-o",
            "json",
        ])
        .env("XDG_CACHE_HOME", dir.join("cache"));
    if let Some(policy) = policy {
        cmd.arg("--policy").arg(policy);
    }
    cmd.output().unwrap()
}

fn plan_json(dir: &Path, snapshot: &Path, policy: Option<&Path>) -> Value {
    let out = plan(dir, snapshot, policy);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn order(plan: &Value) -> Vec<String> {
    plan["groups"][0]["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["instances"][0].as_str().unwrap().to_string())
        .collect()
}

/// Each instance's (decidedBy, reason), by name.
fn reasons(plan: &Value) -> Vec<(String, String, String)> {
    let mut all: Vec<_> = plan["groups"][0]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_string(),
                i["decidedBy"].as_str().unwrap_or("").to_string(),
                i["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    all.sort();
    all
}

#[test]
fn the_javascript_hook_orders_the_plan_fewest_pods_first() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, policy) = setup(dir.path(), "");

    let built_in = plan_json(dir.path(), &snapshot, None);
    assert_eq!(order(&built_in), ["node-a", "node-b", "node-c", "node-d"]);

    // The first plan with the hook compiles the component into the cache.
    let with_hook = plan_json(dir.path(), &snapshot, Some(&policy));
    assert_eq!(
        order(&with_hook),
        ["node-c", "node-b", "node-d", "node-a"],
        "fewest pods first, then by name"
    );
    let pods = [("node-a", 3), ("node-b", 1), ("node-c", 0), ("node-d", 1)];
    let before = reasons(&built_in);
    let after = reasons(&with_hook);
    for (((name, count), (_, _, built_in_reason)), (hooked, decided_by, reason)) in
        pods.iter().zip(&before).zip(&after)
    {
        assert_eq!(hooked, name);
        assert_eq!(decided_by, "hook/fewest-pods", "{after:?}");
        assert!(!built_in_reason.is_empty(), "{before:?}");
        assert_eq!(
            reason,
            &format!("{built_in_reason}; fewest pods first ({count} pods)")
        );
    }

    // Planned again from the compile cache: the same answer.
    let again = plan_json(dir.path(), &snapshot, Some(&policy));
    assert_eq!(order(&again), order(&with_hook));
    assert_eq!(reasons(&again), after);
}

#[test]
fn a_config_that_is_not_an_object_is_refused_in_the_modules_words() {
    let dir = tempfile::tempdir().unwrap();
    let (snapshot, policy) = setup(dir.path(), "    config: [1]\n");
    let out = plan(dir.path(), &snapshot, Some(&policy));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    // The config's value is on line 8; the words are the module's.
    assert!(
        stderr.contains("policy.yaml:8:")
            && stderr.contains("hook fewest-pods")
            && stderr.contains("config must be a JSON object, not an array"),
        "{stderr}"
    );
}

/// The SDK's JavaScript helpers (hooks-sdk/js/rollout_ext_hooks.js) and the site-policy
/// example pass their own tests, run by Node's test runner on the SDK's stand-in host
/// (rollout_ext_testing.js), as a hook's author runs them.
#[test]
fn the_javascript_helpers_and_the_example_pass_their_tests_in_javascript() {
    let root = rollout_ext_e2e::workspace_root();
    let out = Command::new("node")
        .args([
            "--test",
            "hooks-sdk/js/test/",
            "examples-hooks/site-policy-js/",
        ])
        .current_dir(&root)
        .output()
        .expect("node runs (the README's test command needs Node.js 20)");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains("# fail 0") && report.contains("fewest pods first and never a pinned node"),
        "{report}"
    );
}

/// A JavaScript hook whose `describe` throws (a point name mistyped, `gates`) is refused at load
/// with the error it threw, not the engine's abort notice that follows it on stderr.
#[test]
fn a_javascript_error_at_load_is_said_in_its_own_words() {
    let dir = tempfile::tempdir().unwrap();
    let built = rollout_ext_e2e::build_site_policy(dir.path(), "js", |app| {
        declared(app, "['select', 'batch', 'gates']")
    });
    assert!(built.status.success(), "{built:?}");
    std::fs::rename(dir.path().join("app.wasm"), dir.path().join("typo.wasm")).unwrap();
    let (snapshot, _) = setup(dir.path(), "");
    let policy = dir.path().join("typo.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: typo, module: typo.wasm, points: [select]}\n",
    )
    .unwrap();
    let out = plan(dir.path(), &snapshot, Some(&policy));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let error = (stderr.lines())
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        error.contains("hook typo: cannot instantiate ")
            && error.contains(
                r#"(guest said: describe: unknown point "gates" (one of select, batch, gate))"#
            ),
        "{error}"
    );
    assert!(!error.contains("mozalloc_abort"), "{error}");
}

/// The site-policy example with its `name` replaced by a metadata export declaring `points`.
fn declared(app: &str, points: &str) -> String {
    let named = "export const name = 'site-policy-js';\n";
    assert!(
        app.contains(named),
        "the example is named by its name export"
    );
    let metadata = format!(
        "import {{ anyConfig }} from './rollout_ext_hooks.js';\nexport const metadata = anyConfig('site-policy-js', {points});\n"
    );
    app.replace(named, &metadata)
}

/// A JavaScript hook exports only the points it serves: one that leaves out its gate builds,
/// and describes itself as serving select and batch; one that serves a point its metadata does
/// not declare is refused at load, naming the function and the point; one that cannot be
/// called as written does not build, and the build says why.
#[test]
fn a_javascript_hook_exports_only_the_points_it_serves_and_declares_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = rollout_ext_e2e::build_site_policy(dir.path(), "js", |app| {
        let gate = (app.find("export function afterBatch")).expect("the example has a gate");
        app[..gate].to_string()
    });
    assert!(out.status.success(), "{out:?}");
    let (code, stdout, stderr) = rollout_ext_e2e::inspect_module(&dir.path().join("app.wasm"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("POINTS    select, batch\n"), "{stdout}");

    let out = rollout_ext_e2e::build_site_policy(dir.path(), "js", |app| {
        declared(app, "['select', 'batch']")
    });
    assert!(out.status.success(), "{out:?}");
    let (code, _, stderr) = rollout_ext_e2e::inspect_module(&dir.path().join("app.wasm"));
    assert_eq!(code, Some(2), "{stderr}");
    let error = (stderr.lines())
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        error.contains(r#"(guest said: describe: app.js's afterBatch serves point "gate", which describe leaves out of its points"#),
        "{error}"
    );

    for (edit, said) in [
        (
            ("export const name = 'site-policy-js';\n", ""),
            "build.sh: app.js exports no name and no metadata: every hook has one (export const name = 'my-policy')",
        ),
        (
            (
                "export function afterBatch({ batch })",
                "export function afterBatch(batch)",
            ),
            "build.sh: app.js's afterBatch takes batch: take those it reads from its one argument, afterBatch({ ctx, config, now, batch, summary }), any of them in any order",
        ),
    ] {
        let out = rollout_ext_e2e::build_site_policy(dir.path(), "js", |app| {
            assert!(app.contains(edit.0), "{app}");
            app.replace(edit.0, edit.1)
        });
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.trim(), said);
    }
}
