//! The real binary on the demo snapshot: what a newcomer sees. (What bad input gets is in
//! bad_input.rs.)

use std::process::{Command, Output};

use rollout_ext_e2e::{demo_file, demo_policy_in, plugin_binary, wasm_module};
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(plugin_binary())
        .args(args)
        .output()
        .expect("the plugin runs")
}

fn plan_json(extra: &[&str]) -> Value {
    plan_json_at("2026-11-27T12:00:00Z", extra)
}

/// The demo snapshot's plan at `now`, as JSON.
fn plan_json_at(now: &str, extra: &[&str]) -> Value {
    let snapshot = demo_file("snapshot.json");
    let mut args = vec![
        "nodes",
        "--from-snapshot",
        snapshot.to_str().unwrap(),
        "--kubelet-version",
        "v1.20.2",
        "--now",
        now,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("-o json prints JSON")
}

fn group<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap()
}

fn batches(g: &Value) -> Vec<Vec<String>> {
    g["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            b["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_demo_plan_is_decided_by_the_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let policy = demo_policy_in(dir.path());
    let with_hooks = plan_json(&["--policy", policy.to_str().unwrap()]);
    let built_in = plan_json(&["--max-unavailable", "50%"]);

    let hooked = group(&with_hooks, "nodes");
    let plain = group(&built_in, "nodes");
    assert_ne!(
        batches(hooked),
        batches(plain),
        "the hooks change the batches"
    );
    // Built-in: canary, then waves of the concurrency (50% of 9 = 4).
    assert_eq!(
        batches(plain).iter().map(Vec::len).collect::<Vec<_>>(),
        [1, 4, 4]
    );
    // zone-spread orders the nodes; every updated instance says so.
    let instances = hooked["instances"].as_array().unwrap();
    assert!(
        instances
            .iter()
            .filter(|i| i["update"] == true)
            .all(|i| i["decidedBy"] == "hook/zone-spread")
    );
    // No batch holds two nodes of one zone (maxPerZone 1).
    let zone_of =
        |name: &str| instances.iter().find(|i| i["name"] == name).unwrap()["zone"].clone();
    for batch in batches(hooked) {
        let mut zones: Vec<Value> = batch.iter().map(|n| zone_of(n)).collect();
        zones.sort_by_key(|z| z.to_string());
        zones.dedup();
        assert_eq!(zones.len(), batch.len(), "one node per zone in {batch:?}");
    }
    // The maintenance window pauses the first batch (a Friday noon) and slow-starts: 1 then 2.
    let first_group = &with_hooks["groups"][0];
    assert_eq!(
        first_group["batches"][0]["pause"]["decidedBy"],
        "hook/maintenance-window"
    );
    assert_eq!(hooked["batches"][1]["decidedBy"], "hook/maintenance-window");
    assert_eq!(
        hooked["batches"][1]["instances"].as_array().unwrap().len(),
        2
    );
    // The error budget holds batches that touch the db pods (PDB with 0 disruptions allowed).
    let gated: Vec<&Value> = hooked["batches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["gate"]["verdict"] == "wait")
        .collect();
    assert!(!gated.is_empty());
    assert!(
        gated
            .iter()
            .all(|b| b["gate"]["decidedBy"] == "hook/error-budget")
    );
    // The disabled spot group is reported, not an error.
    assert_eq!(group(&with_hooks, "spot")["disabled"], true);
    let warnings = with_hooks["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("PodDisruptionBudget shop/db"))
    );
}

/// Every batch's pause reason, in plan order (none for a batch that does not pause).
fn pauses(plan: &Value) -> Vec<Option<String>> {
    (plan["groups"].as_array().unwrap().iter())
        .flat_map(|g| g["batches"].as_array().unwrap())
        .map(|b| b["pause"]["reason"].as_str().map(String::from))
        .collect()
}

#[test]
fn the_maintenance_window_holds_back_a_batch_that_would_outlast_it() {
    let dir = tempfile::tempdir().unwrap();
    let policy = demo_policy_in(dir.path());
    // Sunday 05:55 UTC: Saturday night's window closes at 06:00, and a batch takes about 7
    // minutes by the defaults (the hook asks the plugin, contract 0.3.5).
    let plan = plan_json_at(
        "2026-11-29T05:55:00Z",
        &["--policy", policy.to_str().unwrap()],
    );
    let first = &plan["groups"][0]["batches"][0]["pause"];
    assert_eq!(
        first["reason"],
        "a batch likely takes until Sun 06:01 UTC, after the window closes at Sun 06:00 UTC; the next opens Sun 22:00 UTC",
        "{plan}"
    );
    assert_eq!(first["seconds"], 16 * 3600 + 5 * 60);
    assert_eq!(first["decidedBy"], "hook/maintenance-window");

    // Batches of two minutes fit: the first two go, and the plan's clock, moving by each
    // batch's estimate, reaches the window's end at the third.
    let text = std::fs::read_to_string(&policy).unwrap().replace(
        "spec:\n",
        "spec:\n  estimates: {drain: 30s, replacement: 1m, validation: 10s}\n",
    );
    std::fs::write(&policy, text).unwrap();
    let plan = plan_json_at(
        "2026-11-29T05:55:00Z",
        &["--policy", policy.to_str().unwrap()],
    );
    let reasons = pauses(&plan);
    assert_eq!(reasons[..2], [None, None], "{reasons:?}");
    assert!(
        reasons[2]
            .as_deref()
            .is_some_and(|r| r.contains("after the window closes at Sun 06:00 UTC")),
        "{reasons:?}"
    );
    assert!(
        plan["estimate"]["basis"]
            .as_str()
            .unwrap()
            .contains("policy")
    );
}

#[test]
fn the_table_and_yaml_outputs_render_the_same_plan() {
    let dir = tempfile::tempdir().unwrap();
    let policy = demo_policy_in(dir.path());
    let snapshot = demo_file("snapshot.json");
    let base = [
        "nodes",
        "--from-snapshot",
        snapshot.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--kubelet-version",
        "v1.20.2",
        "--now",
        "2026-11-27T12:00:00Z",
    ];
    let wide = run(&[&base[..], &["-o", "wide"]].concat());
    let text = String::from_utf8(wide.stdout).unwrap();
    assert!(text.starts_with("GROUP "), "{text}");
    assert!(text.contains("hook/zone-spread"));
    assert!(text.contains("DECIDED-BY"));
    // The run's estimate, its basis said: a snapshot carries no history.
    let estimate = (text.lines())
        .find(|l| l.starts_with("Estimate: about "))
        .unwrap_or_else(|| panic!("an estimate line: {text}"));
    assert!(estimate.ends_with("[defaults: no history]"), "{estimate}");
    assert!(
        estimate.contains("waiting the plan foresees"),
        "the window's pause: {estimate}"
    );
    let yaml = run(&[&base[..], &["-o", "yaml"]].concat());
    let yaml = String::from_utf8(yaml.stdout).unwrap();
    assert!(yaml.contains("kind: Plan"), "{yaml}");
    assert!(yaml.contains("p90Seconds:"), "{yaml}");
}

/// What `hooks inspect -o json` says of `module`.
fn inspect(module: &std::path::Path) -> Value {
    let out = run(&["hooks", "inspect", module.to_str().unwrap(), "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn hooks_inspect_describes_a_module_of_another_contract_version() {
    let module = wasm_module("wrong-version-hook");
    let info = inspect(&module);
    assert_eq!(info["name"], "from-the-past");
    assert_eq!(info["witVersion"], "0.1.0");
    assert_eq!(info["points"], serde_json::json!(["gate"]));
    assert_eq!(info["callable"], false);
    assert!(
        info["note"]
            .as_str()
            .unwrap()
            .contains("rebuild it with a matching rollout-ext-hooks SDK"),
        "{info}"
    );
    // Planning with it is still refused.
    let out = run(&[
        "hooks",
        "test",
        module.to_str().unwrap(),
        "--snapshot",
        demo_file("snapshot.json").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was built against rollout-ext:policy@0.1.0")
    );
}

#[test]
fn hooks_inspect_and_test_describe_a_module() {
    let module = wasm_module("zone-spread");
    let info = inspect(&module);
    assert_eq!(info["name"], "zone-spread");
    assert_eq!(info["witVersion"], rollout_ext::hooks::WIT_VERSION);
    assert_eq!(info["points"], serde_json::json!(["select", "batch"]));
    assert_eq!(info["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(info["callable"], true);

    let snapshot = demo_file("snapshot.json");
    let out = run(&[
        "hooks",
        "test",
        module.to_str().unwrap(),
        "--snapshot",
        snapshot.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Only the spot nodes carry needs-update annotations; the hook ordered them.
    let spot = group(&plan, "spot");
    assert_eq!(spot["instances"][0]["decidedBy"], "hook/zone-spread");
}

#[test]
fn the_plan_forecasts_drains_that_budgets_slow_or_block() {
    let snapshot = demo_file("snapshot.json");
    let base = [
        "nodes",
        "--from-snapshot",
        snapshot.to_str().unwrap(),
        "--kubelet-version",
        "v1.20.2",
        "--max-unavailable",
        "3",
        "--instance-group",
        "nodes",
    ];
    let out = run(&[&base[..], &["-o", "json"]].concat());
    assert!(out.status.success(), "a forecast alone fails nothing");
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let forecasts: Vec<&Value> = group(&plan, "nodes")["batches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b.get("forecast"))
        .collect();
    // shop/db allows no disruption: every batch with one of its pods is blocked; shop/web allows
    // one at a time: a batch with two of its pods waits.
    let pdbs = |kind: &str| -> Vec<String> {
        forecasts
            .iter()
            .flat_map(|f| f[kind].as_array().into_iter().flatten())
            .map(|s| s["pdb"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        pdbs("blocks").iter().all(|p| p == "shop/db"),
        "{forecasts:?}"
    );
    assert!(!pdbs("blocks").is_empty(), "{forecasts:?}");
    assert!(
        pdbs("waits").contains(&"shop/web".to_string()),
        "{forecasts:?}"
    );

    let gated = run(&[&base[..], &["--fail-on-forecast"]].concat());
    assert_eq!(gated.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&gated.stdout).contains("drain: blocks"));
    assert!(String::from_utf8_lossy(&gated.stderr).contains("shop/db"));

    // Deleting pods instead of evicting them meets no budget.
    let deleting = run(&[&base[..], &["--disable-eviction", "--fail-on-forecast"]].concat());
    assert!(deleting.status.success());
    assert!(!String::from_utf8_lossy(&deleting.stdout).contains("drain: blocks"));
}

#[test]
fn the_plan_forecasts_pods_that_wait_for_a_replacement() {
    // Two full 2-CPU nodes: each batch's pod fits only on its replacement.
    let node = |name: &str| {
        serde_json::json!({
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "labels": {"kops.k8s.io/instancegroup": "nodes"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.19.7"},
                       "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
        })
    };
    let pod = |name: &str, node: &str| {
        serde_json::json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "shop",
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "web-6b9c", "controller": true}]},
            "spec": {"nodeName": node, "containers": [
                {"name": "web", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        })
    };
    let list = serde_json::json!({"kind": "List", "apiVersion": "v1", "items": [
        node("n1"), node("n2"), pod("web-1", "n1"), pod("web-2", "n2"),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snapshot.json");
    std::fs::write(&snapshot, list.to_string()).unwrap();
    let base = [
        "nodes",
        "--from-snapshot",
        snapshot.to_str().unwrap(),
        "--kubelet-version",
        "v1.20.2",
        "--fail-on-forecast",
    ];

    let out = run(&[&base[..], &["-o", "json"]].concat());
    assert!(
        out.status.success(),
        "pending pods fail nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pending: Vec<&Value> = group(&plan, "nodes")["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["forecast"]["pending"][0])
        .collect();
    assert_eq!(pending.len(), 2, "{plan}");
    assert_eq!(pending[0]["pods"], serde_json::json!(["shop/web-1"]));
    assert_eq!(pending[1]["pods"], serde_json::json!(["shop/web-2"]));
    assert!(
        pending[0]["reason"]
            .as_str()
            .unwrap()
            .contains("until the batch's replacements are Ready (needs cpu 1500m, memory 1Gi)"),
        "{plan}"
    );
    assert_eq!(plan["warnings"], serde_json::json!([]));

    let out = run(&[&base[..], &["-o", "wide"]].concat());
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("drain: pending"), "{table}");
    assert!(
        table.contains("pending shop/web-1: fits on no schedulable node until"),
        "{table}"
    );
}

/// The demo plan as a page and as a picture: the page opened in a real browser shows every
/// batch of the JSON plan where its estimate puts it, with its forecast, and loads nothing from
/// anywhere; the SVG is well-formed with one bar per batch. Run as `make demo` runs it, from the
/// checkout with its paths, which the page shows (its screenshot is the README's).
#[test]
fn the_demo_plan_draws_as_a_page_and_a_picture() {
    use rollout_ext_e2e::browser;

    let dir = tempfile::tempdir().unwrap();
    let demo = |format: &str, file: Option<&std::path::Path>| {
        let mut cmd = Command::new(plugin_binary());
        cmd.current_dir(rollout_ext_e2e::workspace_root()).args([
            "nodes",
            "--from-snapshot",
            "examples-hooks/demo/snapshot.json",
            "--policy",
            "examples-hooks/demo/policy.yaml",
            "--kubelet-version",
            "v1.20.2",
            "--now",
            "2026-11-27T12:00:00Z",
            "-o",
            format,
        ]);
        if let Some(file) = file {
            cmd.arg("--output-file").arg(file);
        }
        let out = cmd.output().expect("the plugin runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let plan: Value = serde_json::from_slice(&demo("json", None)).expect("a JSON plan");
    let drawn = |format: &str| {
        let file = dir.path().join(format!("plan.{format}"));
        let printed = demo(format, Some(&file));
        assert!(printed.is_empty(), "the picture goes to the file alone");
        std::fs::read_to_string(file).unwrap()
    };

    let page = drawn("html");
    assert!(page.contains("<dd>snapshot examples-hooks/demo/snapshot.json</dd>"));
    let opened = browser::open(&page, None);
    browser::assert_only_the_page(&opened);
    browser::assert_page_shows_plan(&opened.dom, &plan);
    assert!(
        opened.dom.contains("hook/maintenance-window"),
        "who paused is said"
    );
    let shot = dir.path().join("plan.png");
    let opened = browser::open(&page, Some((&shot, 1280, 1000)));
    browser::assert_only_the_page(&opened);
    browser::assert_screenshot_shows_something(&shot, 1280, 1000);
    browser::keep_for_docs(&shot, "demo-plan.png");

    let bars = browser::svg_bars(&drawn("svg")).len();
    let batches: usize = (plan["groups"].as_array().unwrap().iter())
        .map(|g| g["batches"].as_array().unwrap().len())
        .sum();
    assert_eq!(bars, batches, "one bar per batch");
    assert!(batches > 3);
}

/// A picture is of a plan: asked of a run, or a file asked without one, is refused before
/// anything is read or changed.
#[test]
fn a_picture_is_asked_of_a_plan_only() {
    let snapshot = demo_file("snapshot.json");
    let out = run(&[
        "nodes",
        "--from-snapshot",
        snapshot.to_str().unwrap(),
        "-o",
        "json",
        "--output-file",
        "plan.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--output-file writes a picture of the plan: add -o html or -o svg"),
        "{stderr}"
    );
    for flags in [&["--yes"][..], &["--dry-run=server"]] {
        let mut args = vec!["nodes", "--kubeconfig", "/nonexistent", "-o", "html"];
        args.extend_from_slice(flags);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("-o html and -o svg draw a plan: they cannot be used with --"),
            "{stderr}"
        );
    }
}
