//! Fixtures as a policy repository keeps them: a directory of files checked in one go, several
//! cases per file with their cluster declared inline, and what stages take stated. Real binary,
//! real modules in the three languages.

use std::path::PathBuf;

use rollout_ext_e2e::{aborting_gate_policy, demo_file, hooks_test, workspace_root};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn site_fixtures() -> PathBuf {
    workspace_root().join("examples-hooks/site-policy/fixtures")
}

/// `--expect DIR` checks every fixture of the directory (its policy file left aside), and a file
/// of several documents is several cases, each with its cluster declared inline; the same
/// cases hold for the site policy in each of its three languages.
#[test]
fn a_directory_and_a_file_of_cases_are_checked_in_one_go() {
    let dir = site_fixtures();
    let policy = dir.join("policy.yaml");
    let policy = policy.to_str().unwrap();
    let out = hooks_test(
        "site-policy",
        &["--policy", policy, "--expect", dir.to_str().unwrap()],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("fixtures: all 5 fixtures met"), "{stdout}");
    assert!(
        stdout.contains(
            "cases.yaml#2 (two nodes of one rack never go together): every expectation met"
        ),
        "{stdout}"
    );
    let cases = dir.join("cases.yaml");
    for module in ["site-policy-py", "site-policy-js"] {
        let args = [
            "--policy",
            policy,
            "--hook",
            "site",
            "--expect",
            cases.to_str().unwrap(),
        ];
        let out = hooks_test(module, &args);
        assert!(out.status.success(), "{module}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("cases.yaml: all 3 fixtures met"),
            "{module}"
        );
    }
}

/// One case changed: the others are still checked, the changed one is named with what it
/// expected and got, and the run exits 1 saying how many were not met.
#[test]
fn a_case_not_met_is_named_and_the_others_still_run() {
    let original = std::fs::read_to_string(site_fixtures().join("cases.yaml")).unwrap();
    let expected = "batches: [[a], [b]]";
    assert!(original.contains(expected));
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.yaml");
    std::fs::write(&cases, original.replace(expected, "batches: [[a, b]]")).unwrap();
    let policy = site_fixtures().join("policy.yaml");
    let args = [
        "--policy",
        policy.to_str().unwrap(),
        "--expect",
        cases.to_str().unwrap(),
    ];
    let out = hooks_test("site-policy", &args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stdout.contains("cases.yaml#1 (a pinned node is never chosen"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cases.yaml#3 (a payments pod not Ready"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            r#"cases.yaml#2 (two nodes of one rack never go together): 1 expectation(s) not met:"#
        ) && stderr.contains(r#"group nodes: batches: expected [["a","b"]], got [["a"],["b"]]"#)
            && stderr.contains("error: 1 of 3 fixtures not met"),
        "{stderr}"
    );

    // A case that expects nothing would pass whatever the hook does: refused, naming it.
    for (groups, says) in [
        ("{}", "cases.yaml: its groups expect nothing"),
        (
            "{nodes: {}}",
            "cases.yaml: group nodes expects nothing: give it order, reasons, batches",
        ),
    ] {
        let fixture = format!("cluster: {{nodes: [{{name: a}}]}}\ngroups: {groups}\n");
        std::fs::write(&cases, fixture).unwrap();
        let out = hooks_test("site-policy", &args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }

    // A case naming a snapshot and declaring its cluster; a node field misspelt.
    let both =
        "snapshot: snapshot.json\ncluster: {nodes: [{name: a}]}\ngroups: {nodes: {order: [a]}}\n";
    std::fs::write(&cases, both).unwrap();
    let out = hooks_test("site-policy", &args);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("a fixture names a snapshot or declares its cluster, not both")
    );
    std::fs::write(
        &cases,
        "cluster:\n  nodes:\n    - {nam: a}\ngroups: {nodes: {order: [a]}}\n",
    )
    .unwrap();
    let out = hooks_test("site-policy", &args);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cases.yaml: line 3 column 8: unknown field `nam`"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("unknown field `nam`"),
        "{}",
        text(&out.stderr)
    );
}

/// A fixture states what stages take (`estimates`, as a policy's) and the group it tests: the
/// maintenance window's batches wait on the estimate they are told, so without the stated 2h
/// drain they do not; a stated duration out of range is named at its line.
#[test]
fn a_fixtures_estimates_are_what_its_hook_is_told() {
    let policy = demo_file("policy.yaml");
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(demo_file("fixtures/maintenance-window.yaml")).unwrap();
    let snapshot = demo_file("snapshot.json");
    let with = |estimates: &str| {
        let stated = "estimates: {drain: 2h}";
        assert!(original.contains(stated), "the fixture states a drain");
        let changed = (original.replace(stated, estimates))
            .replace("../snapshot.json", snapshot.to_str().unwrap());
        let fixture = dir.path().join("changed.yaml");
        std::fs::write(&fixture, changed).unwrap();
        let args = ["--policy", policy.to_str().unwrap(), "--expect"];
        hooks_test(
            "maintenance-window",
            &[&args[..], &[fixture.to_str().unwrap()]].concat(),
        )
    };
    let out = with("");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            r#"group nodes: pauses: expected ["17h","-","5d17h"], got ["-","-","-","-"]"#
        ),
        "{stderr}"
    );
    let out = with("estimates: {drain: 200h}");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            r#"changed.yaml:10: estimates.drain "200h": expected more than 0 and at most 7d"#
        ),
        "{}",
        text(&out.stderr)
    );
}

/// The gate's verdict before the group and the reasons a selection gives are expectations too:
/// a gate that aborts before the group passes when the fixture expects it (and fails naming the
/// field when it expects otherwise), and a reason that differs is named with the one given.
#[test]
fn the_gate_before_the_group_and_the_reasons_of_a_selection_are_expected() {
    let dir = tempfile::tempdir().unwrap();
    let policy = aborting_gate_policy(dir.path());
    let cases = dir.path().join("cases.yaml");
    let case = |expected: &str| {
        let cluster = "cluster: {nodes: [{name: a, kubeletVersion: v1.20.1}]}";
        let fixture = format!("kubeletVersion: v1.20.2\n{cluster}\ngroups:\n  nodes: {expected}\n");
        std::fs::write(&cases, fixture).unwrap();
        let args = [
            "--policy",
            policy.to_str().unwrap(),
            "--hook",
            "stopper",
            "--expect",
            cases.to_str().unwrap(),
        ];
        hooks_test("hostile-hook", &args)
    };
    let out = case("{groupGate: abort, batches: []}");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("every expectation met"));
    let out = case("{groupGate: proceed}");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(r#"group nodes: groupGate: expected "proceed", got "abort""#),
        "{stderr}"
    );

    let site = site_fixtures();
    let fixture = "kubeletVersion: v1.20.2\ncluster:\n  nodes:\n    - {name: a, kubeletVersion: v1.20.1}\n    - {name: b, kubeletVersion: v1.20.2}\ngroups:\n  nodes:\n    reasons: {a: 3 pods to move, b: not chosen}\n";
    std::fs::write(&cases, fixture).unwrap();
    let policy = site.join("policy.yaml");
    let args = [
        "--policy",
        policy.to_str().unwrap(),
        "--expect",
        cases.to_str().unwrap(),
    ];
    let out = hooks_test("site-policy", &args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(r#"group nodes: reasons: expected {"a":"3 pods to move","b":"not chosen"}, got {"a":"0 pods to move","b":"not chosen"}"#),
        "{stderr}"
    );
}

/// `--show-plans` prints each case's plan before what it met: what a fixture may expect (a
/// selection's reasons, its batches' sizes) is there to read.
#[test]
fn each_case_s_plan_is_shown_when_asked() {
    let dir = site_fixtures();
    let policy = dir.join("policy.yaml");
    let cases = dir.join("cases.yaml");
    let args = [
        "--policy",
        policy.to_str().unwrap(),
        "--expect",
        cases.to_str().unwrap(),
        "--show-plans",
    ];
    let out = hooks_test("site-policy", &args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = stdout.find("--- ").expect("a case's heading");
    let plan = &stdout[first..];
    assert!(
        plan.starts_with("--- ") && plan.contains("cases.yaml#1 (a pinned node"),
        "{stdout}"
    );
    for said in [
        "1 pods to move",
        "2 pods to move",
        "at most 2, one per rack",
    ] {
        assert!(plan.contains(said), "{said}: {stdout}");
    }
    assert_eq!(
        stdout.matches("--- ").count(),
        3,
        "a plan per case: {stdout}"
    );
}
