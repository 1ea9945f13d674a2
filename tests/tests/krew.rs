//! The krew path: the committed manifest follows krew's `Plugin` rules, and an archive made by
//! `deploy/release.sh` carries the sha256 written into the manifest, is installed by the real
//! krew (built from its Go module by install-control-plane.sh) into a plugin the real kubectl
//! finds and runs, and is uninstalled by it.

use std::path::{Path, PathBuf};
use std::process::Command;

use rollout_ext_e2e::{plugin_binary, workspace_root};
use serde_json::Value;
use sha2::Digest;

fn manifest(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// krew's rules for a `krew.googlecontainertools.github.com/v1alpha2` Plugin; returns the
/// problems found.
fn krew_problems(m: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            problems.push(what.to_string());
        }
    };
    check(
        m["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2",
        "apiVersion",
    );
    check(m["kind"] == "Plugin", "kind");
    let name = m["metadata"]["name"].as_str().unwrap_or("");
    check(name == "rollout-ext", "metadata.name");
    let spec = &m["spec"];
    let version = spec["version"].as_str().unwrap_or("");
    let semver = version
        .strip_prefix('v')
        .map(|v| v.split('.').collect::<Vec<_>>())
        .is_some_and(|parts| {
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        });
    check(semver, "spec.version is vMAJOR.MINOR.PATCH");
    check(
        version == format!("v{}", env!("CARGO_PKG_VERSION")),
        "spec.version is the crate's version",
    );
    let short = spec["shortDescription"].as_str().unwrap_or("");
    check(
        !short.is_empty() && short.chars().count() <= 50,
        "shortDescription of 1..=50 characters",
    );
    check(
        spec["description"].as_str().is_some_and(|d| d.len() > 50),
        "a useful description",
    );
    check(
        spec["homepage"]
            .as_str()
            .is_some_and(|h| h.starts_with("https://")),
        "homepage",
    );
    let platforms = spec["platforms"].as_array().cloned().unwrap_or_default();
    check(!platforms.is_empty(), "platforms");
    let mut seen = std::collections::HashSet::new();
    for p in &platforms {
        let labels = &p["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().unwrap_or(""),
            labels["arch"].as_str().unwrap_or(""),
        );
        check(
            !os.is_empty() && !arch.is_empty(),
            "selector.matchLabels os and arch",
        );
        check(seen.insert((os, arch)), "one entry per platform");
        let uri = p["uri"].as_str().unwrap_or("");
        check(
            uri.starts_with("https://")
                && uri.ends_with(&format!("kubectl-rollout_ext-{os}-{arch}.tar.gz"))
                && uri.contains(&format!("/{version}/")),
            "uri: https, this platform's archive, this version",
        );
        let sha = p["sha256"].as_str().unwrap_or("");
        check(
            sha.len() == 64
                && sha
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "sha256 is 64 lowercase hex digits",
        );
        check(p["bin"] == "kubectl-rollout_ext", "bin");
        let files: Vec<(&str, &str)> = p["files"]
            .as_array()
            .map(|f| {
                f.iter()
                    .map(|f| {
                        (
                            f["from"].as_str().unwrap_or(""),
                            f["to"].as_str().unwrap_or(""),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        check(
            files.contains(&("kubectl-rollout_ext", ".")) && files.contains(&("LICENSE", ".")),
            "files install the binary and LICENSE",
        );
    }
    problems
}

#[test]
fn the_committed_manifest_follows_krew_rules() {
    let root = workspace_root();
    let m = manifest(&root.join("krew-manifest.yaml"));
    assert_eq!(krew_problems(&m), Vec::<String>::new());
    assert!(root.join("LICENSE").is_file(), "krew requires a LICENSE");
    // The rules catch what they claim to.
    let mut broken = m.clone();
    broken["spec"]["shortDescription"] = Value::from("x".repeat(51));
    broken["spec"]["platforms"][0]["sha256"] = Value::from("ABC");
    assert_eq!(krew_problems(&broken).len(), 2);
}

fn platform_entry<'a>(m: &'a Value, archive: &Path) -> &'a Value {
    let file = archive.file_name().unwrap().to_str().unwrap();
    m["spec"]["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["uri"].as_str().unwrap().ends_with(file))
        .unwrap_or_else(|| panic!("no manifest entry for {file}"))
}

#[test]
fn a_release_archive_installs_with_krew_and_runs_through_kubectl() {
    let root = workspace_root();
    let work = tempfile::tempdir().unwrap();
    // The release binary is large to build here; the debug one, stripped, packs the same way.
    let binary = work.path().join("kubectl-rollout_ext");
    std::fs::copy(plugin_binary(), &binary).unwrap();
    assert!(
        Command::new("strip")
            .arg(&binary)
            .status()
            .unwrap()
            .success()
    );
    let manifest_copy = work.path().join("krew-manifest.yaml");
    std::fs::copy(root.join("krew-manifest.yaml"), &manifest_copy).unwrap();
    let dist = work.path().join("dist");
    let out = Command::new(root.join("deploy/release.sh"))
        .arg(&binary)
        .arg(&dist)
        .arg(&manifest_copy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive: PathBuf = dist.join(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .map(|p| Path::new(p).file_name().unwrap().to_owned())
            .unwrap(),
    );

    // The manifest now names the archive's real digest, and still follows the rules.
    let m = manifest(&manifest_copy);
    assert_eq!(krew_problems(&m), Vec::<String>::new());
    let entry = platform_entry(&m, &archive);
    let digest = hex::encode(sha2::Sha256::digest(std::fs::read(&archive).unwrap()));
    assert_eq!(entry["sha256"].as_str().unwrap(), digest);

    // Installed by the real krew, from the archive, into a krew root of its own; run through
    // kubectl's plugin discovery; uninstalled.
    let krew_root = work.path().join("krew");
    let krew = |args: &[&str]| {
        Command::new(rollout_ext_e2e::cluster::krew_binary().expect("make test builds krew"))
            .args(args)
            .env("KREW_ROOT", &krew_root)
            .env("HOME", work.path())
            .output()
            .unwrap()
    };
    let manifest_arg = format!("--manifest={}", manifest_copy.display());
    let archive_arg = format!("--archive={}", archive.display());
    let installed = krew(&["install", &manifest_arg, &archive_arg]);
    assert!(
        installed.status.success(),
        "{}",
        String::from_utf8_lossy(&installed.stderr)
    );
    let bin = entry["bin"].as_str().unwrap();
    let bin_dir = krew_root.join("bin");
    assert!(bin_dir.join(bin).exists(), "krew links {bin} into its bin");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display());
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("PATH", &path)
            .env("HOME", work.path())
            .output()
            .unwrap()
    };
    let list = kubectl(&["plugin", "list"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&list.stdout),
        String::from_utf8_lossy(&list.stderr),
    );
    assert!(stdout.contains("kubectl-rollout_ext"), "{stdout}{stderr}");
    assert!(!stderr.to_lowercase().contains("warning"), "{stderr}");
    let version = kubectl(&["rollout-ext", "--version"]);
    assert!(version.status.success());
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.contains(env!("CARGO_PKG_VERSION"))
            && version.contains(&format!(
                "{}@{}",
                rollout_ext::hooks::WIT_PACKAGE,
                rollout_ext::hooks::WIT_VERSION
            )),
        "{version}"
    );
    // krew uninstalls only with a plugin index in place: an empty local one (krew's indexes are
    // git repositories), with nothing fetched.
    let index = krew_root.join("index/default");
    std::fs::create_dir_all(&index).unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&index)
        .status();
    assert!(git.unwrap().success());
    let removed = krew(&["uninstall", "rollout-ext"]);
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    assert!(!bin_dir.join(bin).exists(), "uninstalled");
}
