//! `hooks new NAME --lang …`: each language's project builds and passes its own tests as
//! written (its unit tests, then `hooks test` against each fixture), with the real binary and
//! the real toolchains; and a project is never written over anything.

use std::path::Path;
use std::process::{Command, Output};

use rollout_ext_e2e::{plugin_binary, workspace_root};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn hooks_new(args: &[&str]) -> Output {
    Command::new(plugin_binary())
        .args(["hooks", "new"])
        .args(args)
        .output()
        .expect("the plugin runs")
}

/// Runs one of the project's scripts, with `hooks test` run by this build of the plugin.
fn script(dir: &Path, name: &str, envs: &[(&str, String)]) -> Output {
    let out = Command::new("bash")
        .arg(dir.join(name))
        .env("ROLLOUT_EXT", plugin_binary())
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{name}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Writes a project, builds it, runs its tests; the fixtures were each met.
fn builds_and_passes(lang: &str, extra: &[&str], envs: &[(&str, String)]) {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("site");
    let args = [
        &["site", "--lang", lang, "--dir", dir.to_str().unwrap()][..],
        extra,
    ]
    .concat();
    let out = hooks_new(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("./build.sh"),
        "{}",
        text(&out.stdout)
    );
    if lang == "rust" {
        // The workspace's own versions of the SDK's dependencies, so that nothing is fetched.
        std::fs::copy(workspace_root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    }
    script(&dir, "build.sh", envs);
    assert!(dir.join("site.wasm").is_file());
    let tested = script(&dir, "test.sh", envs);
    let report = text(&tested.stdout);
    for fixture in ["batches", "gate", "order"] {
        assert!(
            report.contains(&format!("fixtures/{fixture}.yaml: every expectation met")),
            "{lang} {fixture}: {report}\n{}",
            text(&tested.stderr)
        );
    }
}

#[test]
fn a_new_python_hook_builds_and_passes_its_tests() {
    builds_and_passes("python", &[], &[]);
}

#[test]
fn a_new_javascript_hook_builds_and_passes_its_tests() {
    builds_and_passes("js", &[], &[]);
}

/// The Rust project takes the SDK from this checkout (`--sdk`) and builds in a target
/// directory of its own under the workspace's, kept between runs.
#[test]
fn a_new_rust_hook_builds_and_passes_its_tests() {
    let root = workspace_root();
    let sdk = root.join("hooks-sdk");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("hooks-new");
    let envs = [
        ("CARGO_TARGET_DIR", target.display().to_string()),
        ("CARGO_NET_OFFLINE", "true".to_string()),
    ];
    builds_and_passes("rust", &["--sdk", sdk.to_str().unwrap()], &envs);
}

/// A directory that holds anything is left alone; a name that cannot be a module, a crate and
/// an entry is refused; `--sdk` is for Rust.
#[test]
fn nothing_is_written_over_and_bad_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.py"), "mine").unwrap();
    let out = hooks_new(&[
        "site",
        "--lang",
        "python",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("already exists and is not empty: nothing was written"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("app.py")).unwrap(),
        "mine"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let fresh = dir.path().join("fresh");
    let out = hooks_new(&[
        "Site_Policy",
        "--lang",
        "js",
        "--dir",
        fresh.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(r#"hook name "Site_Policy": expected lowercase letters"#));
    let out = hooks_new(&[
        "site",
        "--lang",
        "js",
        "--sdk",
        ".",
        "--dir",
        fresh.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--sdk is for Rust projects"));
    assert!(!fresh.exists());
}
