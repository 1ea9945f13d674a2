//! Bad input to the real binary: each case gets a message naming what is wrong and where (the
//! file and line for a policy, the flag for a flag), the usage exit code 2 (1 only where the
//! input may be right and the server is not there), nothing on stdout, and, for the runs that
//! reach the test cluster, no change to it. Budgets that are both zero are not an error: the
//! group is reported as disabled.

use std::path::PathBuf;

use rollout_ext_e2e::cluster::{GroupSpec, NodeSpec, TestCluster};
use rollout_ext_e2e::fingerprint::{Fingerprint, wait_settled};
use rollout_ext_e2e::{FAST_ROTATION, demo_file, run_plugin as run};
use serde_json::Value;

const HEAD: &str = "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n";

/// Input files, written into a temporary directory.
struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Files {
        Files(tempfile::tempdir().unwrap())
    }

    /// Writes `text` to `name` and returns its path as an argument.
    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }

    /// A policy: `body` under `spec:`.
    fn policy(&self, name: &str, body: &str) -> String {
        self.write(name, &format!("{HEAD}{body}"))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// One bad input: the arguments, the exit code, and what stderr must say (every fragment).
struct Case {
    args: Vec<String>,
    code: i32,
    says: Vec<String>,
}

fn case(args: &[&str], code: i32, says: &[&str]) -> Case {
    with(args.iter().map(|a| a.to_string()).collect(), code, says)
}

fn with(args: Vec<String>, code: i32, says: &[&str]) -> Case {
    Case {
        args,
        code,
        says: says.iter().map(|s| s.to_string()).collect(),
    }
}

async fn check(case: &Case) {
    let out = run(case.args.clone()).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let args = &case.args;
    assert_eq!(out.status.code(), Some(case.code), "{args:?}: {stderr}");
    for fragment in &case.says {
        assert!(stderr.contains(fragment.as_str()), "{args:?}: {stderr}");
    }
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: errors go to stderr only");
}

/// Policies and snapshots that are wrong, shared by the offline and the live cases.
fn bad_policies(files: &Files) -> Vec<(String, Vec<&'static str>)> {
    vec![
        // Malformed YAML: a key indented out of its mapping.
        (
            files.policy(
                "indent.yaml",
                "  rollingUpdate:\n    maxSurge: 1\n   maxUnavailable: 2\n",
            ),
            vec!["indent.yaml:6:", "did not find expected key"],
        ),
        // Malformed JSON: a missing colon.
        (
            files.write(
                "colon.json",
                "{\"apiVersion\": \"rollout-ext/v1alpha1\", \"kind\": \"RolloutPolicy\",\n \"spec\": {\"rollingUpdate\": {\"maxSurge\" 1}}}\n",
            ),
            vec!["colon.json:2:"],
        ),
        // An unknown field, in JSON.
        (
            files.write(
                "unknown.json",
                "{\"apiVersion\": \"rollout-ext/v1alpha1\", \"kind\": \"RolloutPolicy\",\n \"spec\": {\"maxSurge\": 1}}\n",
            ),
            vec!["unknown.json:2:", "unknown field `maxSurge`", "rollingUpdate"],
        ),
        // An unknown field, in YAML, nested.
        (
            files.policy("typo.yaml", "  rollingUpdate: {maxSurge: 1, surge: 2}\n"),
            vec!["typo.yaml:4:", "unknown field `surge`"],
        ),
        (
            files.write("version.yaml", "apiVersion: rollout-ext/v2\nkind: RolloutPolicy\n"),
            vec!["version.yaml:1:", "\"rollout-ext/v2\" is not supported"],
        ),
        (
            files.policy("percent.yaml", "  rollingUpdate:\n    maxSurge: 150%\n"),
            vec!["percent.yaml:5:", "\"150%\"", "from 0% to 100%"],
        ),
        (
            files.policy("negative.yaml", "  rollingUpdate: {maxUnavailable: -1}\n"),
            vec!["negative.yaml:4:", "-1", "must not be negative"],
        ),
        (
            files.policy("fraction.yaml", "  rollingUpdate: {maxUnavailable: 1.5}\n"),
            vec!["fraction.yaml:4:", "1.5", "whole number"],
        ),
        (
            files.policy(
                "point.yaml",
                "  hooks:\n  - {name: a, module: a.wasm, points: [pick]}\n",
            ),
            vec!["point.yaml:5:", "pick", "select"],
        ),
        (
            files.policy(
                "missing-module.yaml",
                "  hooks:\n  - {name: gone, module: gone.wasm, points: [gate]}\n",
            ),
            vec!["missing-module.yaml:5: hook gone: cannot read module", "gone.wasm"],
        ),
        (
            files.policy(
                "no-timeout.yaml",
                "  hooks:\n  - {name: a, module: a.wasm, points: [gate], timeout: 0s}\n",
            ),
            vec!["no-timeout.yaml:5:", "timeout \"0s\""],
        ),
        (
            files.path("no-such-policy.yaml").to_str().unwrap().to_string(),
            vec!["no-such-policy.yaml", "cannot read the policy file"],
        ),
    ]
}

#[tokio::test]
async fn offline_bad_input_is_named_with_a_usage_exit_code() {
    let files = Files::new();
    let snapshot = demo_file("snapshot.json");
    let snap = snapshot.to_str().unwrap();
    let mut cases: Vec<Case> = bad_policies(&files)
        .into_iter()
        .map(|(policy, says)| {
            case(
                &["nodes", "--from-snapshot", snap, "--policy", &policy],
                2,
                &says,
            )
        })
        .collect();
    let control_plane = files.policy(
        "control-plane.yaml",
        "  groups:\n  - name: control-plane-us-east-1a\n    rollingUpdate:\n      maxSurge: 1\n",
    );
    let not_a_list = files.write("pod.json", r#"{"kind": "Pod", "apiVersion": "v1"}"#);
    let cut = files.write(
        "cut.json",
        "{\"kind\": \"List\", \"apiVersion\": \"v1\",\n \"items\": [\n",
    );
    let kubeconfig = files.path("no-such-kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let next = files.write("next.yaml", "kind: ReplicationController\n");
    cases.extend([
        // A live view is not a format of one reading, and follows nothing but status.
        case(
            &["status", "--watch", "-o", "json"],
            2,
            &["status --watch shows a live view", "-o is for one reading"],
        ),
        case(
            &["fleet", "run", "-f", "fleet.yaml", "--watch"],
            2,
            &["--watch follows a fleet's rotations: it is for fleet status, not fleet run"],
        ),
        case(
            &[
                "nodes",
                "--from-snapshot",
                snap,
                "--policy",
                &control_plane,
                "--force",
            ],
            2,
            &[
                "control-plane.yaml:7:",
                "control-plane-us-east-1a",
                "cannot surge",
            ],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "--max-surge", "150%"],
            2,
            &["'--max-surge", "\"150%\""],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "--max-unavailable", "-1"],
            2,
            &["'--max-unavailable", "\"-1\""],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "--max-surge", "1.5"],
            2,
            &["'--max-surge", "\"1.5\""],
        ),
        case(
            &["nodes", "--from-snapshot", &not_a_list],
            2,
            &["pod.json", "not a v1 List"],
        ),
        case(
            &["nodes", "--from-snapshot", &cut],
            2,
            &["cut.json", "not valid JSON", "line 3"],
        ),
        case(
            &["nodes", "--from-snapshot", "no-such-snapshot.json"],
            2,
            &["cannot read snapshot no-such-snapshot.json"],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "-o", "xml"],
            2,
            &["'xml' for '--output", "table, wide, json, yaml"],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "--yes"],
            2,
            &["--yes is not implemented with --from-snapshot"],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "--instance-group", "nope"],
            2,
            &["\"nope\" not found"],
        ),
        case(
            &[
                "nodes",
                "--from-snapshot",
                snap,
                "--instance-group-roles",
                "worker",
            ],
            2,
            &["unknown instance group role", "worker"],
        ),
        case(
            &["nodes", "--from-snapshot", snap, "--drain-timeout", "5x"],
            2,
            &["'--drain-timeout", "invalid duration \"5x\""],
        ),
        case(
            &[
                "nodes",
                "--from-snapshot",
                snap,
                "--expect-label",
                "no-equals",
            ],
            2,
            &["'--expect-label", "no-equals"],
        ),
        case(&["nodes", "--no-such-flag"], 2, &["'--no-such-flag'"]),
        case(
            &["rolling-update", "foo", "--replicas", "3"],
            2,
            &["'--replicas'"],
        ),
        case(
            &["rolling-update", "foo", "--image", "app:2", "-f", &next],
            2,
            &["'--image <IMAGE>' cannot be used with '--filename <FILE>'"],
        ),
        case(
            &["rolling-update", "foo", "--rollback", "--image", "app:2"],
            2,
            &["'--rollback' cannot be used with"],
        ),
        case(
            &["rolling-update", "foo", "foo", "--image", "app:2"],
            2,
            &["the next controller cannot have the same name as the old one (foo)"],
        ),
        case(
            &["rolling-update", "rs/foo", "rs/foo", "--image", "app:2"],
            2,
            &["the next controller cannot have the same name as the old one (foo)"],
        ),
        case(
            &["rolling-update", "rs/foo", "rc/bar", "--image", "app:2"],
            2,
            &["NEXT rc/bar names a ReplicationController, but NAME rs/foo names a ReplicaSet"],
        ),
        case(
            &[
                "rolling-update",
                "foo",
                "--max-unavailable",
                "-1",
                "--image",
                "app:2",
            ],
            2,
            &["'--max-unavailable", "\"-1\""],
        ),
        case(
            &["nodes", "--kubeconfig", kubeconfig],
            2,
            &["kubeconfig: ", "no-such-kubeconfig", "No such file"],
        ),
    ]);
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for c in &cases {
        check(c).await;
    }
}

#[tokio::test]
async fn budgets_both_zero_disable_a_group_without_an_error() {
    let files = Files::new();
    let policy = files.policy(
        "zero.yaml",
        "  rollingUpdate: {maxSurge: 0, maxUnavailable: 0}\n",
    );
    let snapshot = demo_file("snapshot.json");
    let out = run(["nodes", "--from-snapshot", snapshot.to_str().unwrap()]
        .into_iter()
        .chain(["--policy", &policy, "-o", "json"])
        .map(String::from)
        .collect())
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let spot = plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "spot")
        .expect("the spot group is planned");
    assert_eq!(spot["disabled"], true, "{spot}");
    assert_eq!(
        spot["note"],
        "rolling update disabled: maxSurge and maxUnavailable are both 0"
    );
    assert!(spot["batches"].as_array().unwrap().is_empty(), "{spot}");
}

/// A kubeconfig whose server listens nowhere: a port that was free a moment ago.
fn unreachable_kubeconfig(files: &Files) -> (String, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster: {{server: \"https://127.0.0.1:{port}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: gone\n  context: {{cluster: gone, user: u}}\ncurrent-context: gone\n"
    );
    (files.write("unreachable.kubeconfig", &text), port)
}

/// The same bad input against the real test cluster, with `--yes` where it applies: every case
/// is refused before anything changes.
#[tokio::test]
async fn bad_input_against_a_cluster_changes_nothing() {
    let cluster = TestCluster::shared();
    for (name, group, control_plane) in [("bad-1", "bad", false), ("bad-cp-1", "bad-cp", true)] {
        cluster.cloud.set_group_spec(
            group,
            GroupSpec {
                kubelet_version: Some("v1.20.2".into()),
                ..Default::default()
            },
        );
        let mut node = NodeSpec::new(name, group).kubelet("v1.19.7");
        if control_plane {
            node = node.control_plane();
        }
        cluster.nodes.add(node).await.unwrap();
    }
    let files = Files::new();
    let kubeconfig = cluster.kubeconfig.to_str().unwrap().to_string();
    let exec_policy = |name: &str, body: &str| -> String {
        let dir = files.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let path = cluster.exec_policy(&dir, body);
        path.to_str().unwrap().to_string()
    };
    let live = |group: &str, extra: &[&str]| -> Vec<String> {
        [
            "nodes",
            "--yes",
            "--kubeconfig",
            &kubeconfig,
            "--instance-group",
            group,
        ]
        .iter()
        .chain(["--kubelet-version", "v1.20.2", "--provider", "delete-node"].iter())
        .chain(FAST_ROTATION)
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    };
    let mut cases: Vec<Case> = bad_policies(&files)
        .into_iter()
        .map(|(policy, says)| with(live("bad", &["--policy", &policy]), 2, &says))
        .collect();
    let surging_control_plane = exec_policy(
        "control-plane",
        "  groups:\n  - name: bad-cp\n    rollingUpdate:\n      maxSurge: 1\n",
    );
    let plain = exec_policy("plain", "");
    let (unreachable, port) = unreachable_kubeconfig(&files);
    let unreachable_server = format!("cannot reach the API server at https://127.0.0.1:{port}");
    let next = files.write("next.yaml", "kind: ReplicationController\n");
    cases.extend([
        with(
            live("bad-cp", &["--policy", &surging_control_plane]),
            2,
            &["control-plane", "policy.yaml:11:", "bad-cp", "cannot surge"],
        ),
        // A provider that cannot surge, for a group that would: refused before the lock.
        with(
            live("bad", &["--policy", &plain, "--max-surge", "1"]),
            2,
            &["group bad has maxSurge > 0, but the deleteNode provider cannot surge"],
        ),
        with(
            live("bad", &["--policy", &plain, "--max-unavailable", "-1"]),
            2,
            &["'--max-unavailable", "\"-1\""],
        ),
        with(
            live("bad", &["--policy", &plain, "--max-surge", "150%"]),
            2,
            &["'--max-surge", "\"150%\""],
        ),
        with(
            live("no-such-group", &["--policy", &plain]),
            2,
            &["\"no-such-group\" not found"],
        ),
        with(
            live("bad", &["--policy", &plain, "-o", "xml"]),
            2,
            &["'xml' for '--output"],
        ),
        with(
            live("bad", &["--policy", &plain, "--context", "nope"]),
            2,
            &["context \"nope\" does not exist; contexts: test"],
        ),
        with(
            live("bad", &["--policy", &plain, "--no-such-flag"]),
            2,
            &["'--no-such-flag'"],
        ),
        // The input may be right and the server down: a failure (1), not a usage error, naming
        // the server. (Without retrying: by default a refused connection is retried for 2m.)
        with(
            [
                "nodes",
                "--yes",
                "--kubeconfig",
                &unreachable,
                "--retry-timeout=0",
                "--policy",
                &plain,
            ]
            .map(String::from)
            .to_vec(),
            1,
            &[&unreachable_server, "check --kubeconfig/--context"],
        ),
        with(
            [
                "rolling-update",
                "web",
                "--image=app:2",
                "-f",
                &next,
                "--kubeconfig",
                &kubeconfig,
            ]
            .map(String::from)
            .to_vec(),
            2,
            &["'--image <IMAGE>' cannot be used with '--filename <FILE>'"],
        ),
        with(
            [
                "rolling-update",
                "web",
                "web",
                "--image=app:2",
                "--kubeconfig",
                &kubeconfig,
            ]
            .map(String::from)
            .to_vec(),
            2,
            &["the next controller cannot have the same name as the old one (web)"],
        ),
        with(
            [
                "rolling-update",
                "missing",
                "--image=app:2",
                "--kubeconfig",
                &kubeconfig,
            ]
            .map(String::from)
            .to_vec(),
            2,
            &["missing", "not found"],
        ),
        with(
            [
                "rolling-update",
                "web",
                "--image=app:2",
                "--context",
                "nope",
                "--kubeconfig",
                &kubeconfig,
            ]
            .map(String::from)
            .to_vec(),
            2,
            &["context \"nope\" does not exist"],
        ),
    ]);
    wait_settled(cluster, &["bad-1", "bad-cp-1"]).await;
    let before = Fingerprint::take(cluster).await;
    for c in &cases {
        check(c).await;
        before
            .assert_unchanged(cluster, &format!("{:?}", c.args))
            .await;
    }

    // Both budgets zero: the group is disabled, the run succeeds and touches nothing.
    let zero = exec_policy(
        "zero",
        "  rollingUpdate: {maxSurge: 0, maxUnavailable: 0}\n",
    );
    let out = run(live("bad", &["--policy", &zero])).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("rolling update disabled: maxSurge and maxUnavailable are both 0"),
        "{stderr}"
    );
    before.assert_unchanged(cluster, "budgets both zero").await;
}
