//! The offline plan's memory guard: what a generated 500-node snapshot adds to a plan's peak RSS
//! stays under half of what it adds to a bare `serde_json::Value` parse of the same file, both
//! measured here as child processes (`wait4`). Nothing is timed. Each peak is taken above its own
//! floor, the same command on an empty list: the plugin's own pages and its compiled hooks
//! (about 40 MiB in a debug build) say nothing about the snapshot. A plan that builds a value
//! tree of the whole file (as one did, for a warning about granted kinds) adds more than the
//! parse and fails.

use std::path::Path;
use std::process::Command;

use rollout_ext_e2e::child;
use rollout_ext_e2e::{demo_policy_in, helper_binary, plugin_binary};

/// Peak RSS of `cmd`, in KiB.
fn peak_rss(mut cmd: Command, work: &Path) -> u64 {
    child::run(&mut cmd, &work.join("stderr.txt"))
        .unwrap_or_else(|e| panic!("{e:#}"))
        .max_rss_kib
}

/// The demo policy with its three hooks, granting hooks the budgets (which the snapshot holds)
/// and the Deployments (which it does not), so that both the hooks and the grants' check run.
fn policy(work: &Path) -> std::path::PathBuf {
    let file = demo_policy_in(work);
    let demo = std::fs::read_to_string(&file).unwrap();
    let granted = demo.replace(
        "  hooks:\n",
        "  contextResources:\n    - {apiVersion: policy/v1, kind: PodDisruptionBudget}\n    - {apiVersion: apps/v1, kind: Deployment}\n  hooks:\n",
    );
    assert_ne!(granted, demo, "the demo policy has a hooks section");
    std::fs::write(&file, granted).unwrap();
    file
}

#[test]
fn an_offline_plan_needs_under_half_the_memory_of_parsing_its_snapshot() {
    let work = tempfile::tempdir().unwrap();
    let snapshot = work.path().join("cluster.json");
    let status = Command::new(helper_binary("gen-snapshot"))
        .args(["--nodes", "500", "--groups", "10", "--pods-per-node", "30"])
        .args(["--pdbs", "200", "--seed", "1"])
        .stdout(std::fs::File::create(&snapshot).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "gen-snapshot: {status}");

    let empty = work.path().join("empty.json");
    std::fs::write(
        &empty,
        r#"{"kind": "List", "apiVersion": "v1", "items": []}"#,
    )
    .unwrap();

    let parse = |file: &Path| {
        let mut cmd = Command::new(helper_binary("parse-json"));
        cmd.arg(file);
        peak_rss(cmd, work.path())
    };
    let policy = policy(work.path());
    let plan = |file: &Path| {
        let mut cmd = Command::new(plugin_binary());
        cmd.args(["nodes", "--from-snapshot"])
            .arg(file)
            .arg("--policy")
            .arg(&policy)
            .args(["--kubelet-version", "v1.20.2", "-o", "json"])
            .args(["--now", "2026-11-27T12:00:00Z"])
            .env("XDG_CACHE_HOME", work.path().join("cache"));
        peak_rss(cmd, work.path())
    };
    // The first plan compiles the hooks into the module cache, as an operator's first plan
    // does; the guard is about the snapshot, not the compiler.
    plan(&empty);

    let parsed = parse(&snapshot).saturating_sub(parse(&empty));
    let planned = plan(&snapshot).saturating_sub(plan(&empty));
    eprintln!("peak RSS above the floor: plan {planned} KiB, bare parse {parsed} KiB");
    assert!(parsed > 0, "a parse of the snapshot needs memory");
    assert!(
        planned * 2 < parsed,
        "a 500-node snapshot added {planned} KiB to an offline plan's peak RSS, not under half of the {parsed} KiB it adds to a bare parse: is the snapshot parsed into a value tree whole?"
    );
}
