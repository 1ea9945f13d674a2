//! kubectl's habits: KUBECONFIG with several files merged, the namespace from the context,
//! impersonation, output formats, completion scripts and the version line; and the hook contract
//! version, written once.

use std::process::{Command, Output};

use k8s_openapi::api::core::v1::ReplicationController;
use kube::api::{Api, PostParams};
use rollout_ext_e2e::cluster::{OPERATOR_USER, TestCluster};
use rollout_ext_e2e::workloads::create_namespace;
use rollout_ext_e2e::{plugin_binary, workspace_root};
use serde_json::{Value, json};

fn plugin(args: &[&str], kubeconfig_env: Option<&str>) -> Output {
    let mut cmd = Command::new(plugin_binary());
    cmd.args(args).env_remove("KUBECONFIG");
    if let Some(k) = kubeconfig_env {
        cmd.env("KUBECONFIG", k);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn kubeconfig_files_merge_and_the_context_names_the_namespace() {
    let cluster = TestCluster::shared();
    let client = cluster.client().await;
    create_namespace(&client, "from-context").await;
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "from-context");
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "ctx"},
        "spec": {"replicas": 2, "selector": {"app": "ctx"},
                 "template": {"metadata": {"labels": {"app": "ctx"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.invalid/ctx:1"}]}}}
    }))
    .unwrap();
    rcs.create(&PostParams::default(), &rc).await.unwrap();

    // The test kubeconfig split in two: clusters and users in one file, the context (with its
    // namespace) in the other.
    let full: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&cluster.kubeconfig).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("creds.yaml");
    let context = dir.path().join("context.yaml");
    std::fs::write(
        &creds,
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "Config",
            "clusters": full["clusters"], "users": full["users"]}))
        .unwrap(),
    )
    .unwrap();
    let user = full["users"][0]["name"].clone();
    let cluster_name = full["clusters"][0]["name"].clone();
    std::fs::write(
        &context,
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "Config",
            "contexts": [{"name": "elsewhere", "context": {"cluster": cluster_name, "user": user, "namespace": "from-context"}}],
            "current-context": "elsewhere"}))
        .unwrap(),
    )
    .unwrap();
    let merged = format!("{}:{}", creds.display(), context.display());
    let out = plugin(
        &[
            "rolling-update",
            "ctx",
            "--image=registry.invalid/ctx:2",
            "--dry-run",
            "-o",
            "json",
        ],
        Some(&merged),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        plan["old"]["name"], "ctx",
        "found in the context's namespace"
    );
    assert_eq!(plan["next"]["desired"], 2);
    // -n overrides the context's namespace.
    let out = plugin(
        &[
            "rolling-update",
            "ctx",
            "--image=registry.invalid/ctx:2",
            "--dry-run",
            "-n",
            "default",
        ],
        Some(&merged),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
}

#[test]
fn impersonation_reaches_the_api_server() {
    let cluster = TestCluster::shared();
    let kubeconfig = cluster.kubeconfig.to_str().unwrap();
    let out = plugin(
        &["nodes", "--kubeconfig", kubeconfig, "--as", OPERATOR_USER],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("forbidden: this user may not list nodes"),
        "{}",
        stderr(&out)
    );
    let out = plugin(
        &[
            "nodes",
            "--kubeconfig",
            kubeconfig,
            "--as",
            OPERATOR_USER,
            "--as-group",
            "system:masters",
            "-o",
            "yaml",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let plan: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(plan["kind"], "Plan");
    assert!(
        out.stderr.is_empty() || !stderr(&out).contains("error"),
        "data on stdout only"
    );
}

#[test]
fn completion_scripts_and_version_come_from_the_command_definitions() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let out = plugin(&["completion", shell], None);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("rolling-update") && script.contains("max-unavailable"),
            "{shell}"
        );
    }
    let out = plugin(&["completion", "tcsh"], None);
    assert_eq!(out.status.code(), Some(2));
    let out = plugin(&["--version"], None);
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.starts_with(&format!(
            "kubectl rollout-ext {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );
    let out = plugin(&["nodes", "--no-such-flag"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty() && stderr(&out).contains("--no-such-flag"));
}

fn read(file: &str) -> String {
    std::fs::read_to_string(workspace_root().join(file)).unwrap()
}

/// The contract version is written once, in the WIT package declaration; the host, the SDK and
/// `--version` derive it. What cannot (a guest in another language, the docs) must agree.
#[test]
fn the_hook_contract_version_is_the_wit_package_version() {
    use rollout_ext::hooks::{WIT_PACKAGE, WIT_VERSION};
    let package = read("hooks-sdk/wit/policy.wit")
        .lines()
        .find_map(|line| line.strip_prefix("package ")?.strip_suffix(';'))
        .expect("policy.wit declares its package")
        .to_string();
    assert_eq!(package, format!("{WIT_PACKAGE}@{WIT_VERSION}"), "host");
    assert_eq!(rollout_ext_hooks::WIT_VERSION, WIT_VERSION, "SDK");

    let out = plugin(&["--version"], None);
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.contains(&format!("(hook contract {package})")),
        "{version}"
    );

    for file in [
        "examples-hooks/oldest-first-py/app.py",
        "hooks-sdk/python/rollout_ext_hooks.py",
    ] {
        assert!(
            read(file).contains(&format!("WIT_VERSION = \"{WIT_VERSION}\"")),
            "{file} states another contract version"
        );
    }
    for file in [
        "examples-hooks/fewest-pods-js/app.js",
        "hooks-sdk/js/rollout_ext_hooks.js",
    ] {
        let app = read(file);
        assert!(
            app.contains(&format!("const WIT_VERSION = '{WIT_VERSION}';"))
                && app.contains(&format!("from '{WIT_PACKAGE}/host@{WIT_VERSION}'")),
            "{file} states another contract version"
        );
    }
    for doc in ["docs/hooks.md", "SECURITY.md"] {
        let text = read(doc);
        for (at, _) in text.match_indices(&format!("{WIT_PACKAGE}@")) {
            assert!(
                text[at..].starts_with(&package),
                "{doc} names another contract version: {}",
                text[at..].lines().next().unwrap_or_default()
            );
        }
    }
}

/// Every command's `--help`, the top one first and each command's after its parent's, read
/// from the binary at the width a pipe gets: the reference docs/commands.md holds.
fn command_helps() -> Vec<(String, String)> {
    fn walk(path: &mut Vec<String>, out: &mut Vec<(String, String)>) {
        let mut args = path.clone();
        args.push("--help".into());
        let help = Command::new(plugin_binary())
            .args(&args)
            .env("COLUMNS", "100")
            .output()
            .expect("the plugin runs");
        assert!(help.status.success(), "{args:?}");
        let help = String::from_utf8(help.stdout).expect("UTF-8 help");
        out.push((path.join(" "), help.clone()));
        // The subcommands: two spaces, a name, then its summary.
        let commands = help
            .split_once("\nCommands:\n")
            .map_or("", |(_, rest)| rest);
        let commands = commands.split("\n\n").next().unwrap_or("");
        for line in commands.lines() {
            let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            else {
                continue;
            };
            if line.starts_with("   ") || name == "help" {
                continue;
            }
            path.push(name.to_string());
            walk(path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(&mut Vec::new(), &mut out);
    out
}

/// docs/commands.md as the binary's `--help` makes it.
fn command_reference(helps: &[(String, String)]) -> String {
    let mut page = String::from(
        "# Commands\n\nEvery command and flag of `kubectl rollout-ext`, as its `--help` prints them. This page is \
         generated (`make docs` writes it again; a test fails when it differs from the binary). \
         What each command does is told by topic: [rotating.md](rotating.md), \
         [on-call.md](on-call.md), [in-cluster-and-fleet.md](in-cluster-and-fleet.md), \
         [rolling-updates.md](rolling-updates.md), [hooks.md](hooks.md).\n",
    );
    for (path, help) in helps {
        let title = if path.is_empty() {
            String::new()
        } else {
            format!(" {path}")
        };
        page.push_str(&format!(
            "\n## kubectl rollout-ext{title}\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
    }
    page
}

/// docs/commands.md is what `--help` says (ROLLOUT_EXT_WRITE_DOCS=1, as `make docs` sets it,
/// writes it again), and the topic pages of docs/ name every command and every flag, so that
/// nothing the binary offers goes undocumented.
#[test]
fn every_command_and_flag_is_documented() {
    let helps = command_helps();
    let reference = command_reference(&helps);
    let file = workspace_root().join("docs/commands.md");
    if std::env::var_os("ROLLOUT_EXT_WRITE_DOCS").is_some() {
        std::fs::write(&file, &reference).unwrap();
    }
    let written = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        written == reference,
        "docs/commands.md differs from what --help says: run `make docs`"
    );

    let mut topics = String::new();
    for entry in std::fs::read_dir(workspace_root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "commands.md" {
            topics.push_str(&std::fs::read_to_string(&path).unwrap());
        }
    }
    let mut missing = Vec::new();
    for (path, help) in &helps {
        if !path.is_empty()
            && !topics.contains(&format!("rollout-ext {path}"))
            && !topics.contains(&format!("`{path}`"))
        {
            missing.push(format!("command {path}"));
        }
        for line in help.lines() {
            // An option's line: indented by two (`-o, --output`) or six (`--now`), never more.
            let option = line.trim_start();
            if !option.starts_with('-') || line.len() - option.len() > 6 {
                continue;
            }
            let long = option.split_once(", ").map_or(option, |(_, long)| long);
            let name = long
                .split([' ', '<', '='])
                .next()
                .map(|n| n.trim_end_matches('.'));
            let Some(name) = name.filter(|n| n.starts_with("--")) else {
                continue;
            };
            if name != "--help"
                && name != "--version"
                && !topics.contains(name)
                && !missing.contains(&name.to_string())
            {
                missing.push(name.to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named nowhere in docs/ but commands.md: {missing:?}"
    );
}
