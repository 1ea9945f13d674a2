//! The krew path: the committed manifest follows krew's `Plugin` rules and lists no
//! placeholder checksum, and every platform's archive made by `deploy/release.sh` (make test's
//! release-check) is installed by the real krew (built from its Go module by
//! install-control-plane.sh) from the manifest beside it: the linux/amd64 one into a plugin the
//! real kubectl finds and runs, and uninstalls; the others as krew installs them for their own
//! platform (KREW_OS, KREW_ARCH), which checks their entry, checksum and files.

use std::path::Path;
use std::process::{Command, Output};

use rollout_ext_e2e::{release_archives, run_to_success, workspace_root};
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
        check(
            sha.bytes().any(|b| b != b'0'),
            "sha256 is an archive's, not a placeholder",
        );
        let bin = if os == "windows" {
            "kubectl-rollout_ext.exe"
        } else {
            "kubectl-rollout_ext"
        };
        check(p["bin"] == bin, "bin");
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
            files.contains(&(bin, ".")) && files.contains(&("LICENSE", ".")),
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
    broken["spec"]["platforms"][1]["sha256"] = Value::from("0".repeat(64));
    assert_eq!(krew_problems(&broken).len(), 3);
}

/// The real `tool` (krew or its manifest validator) with a krew root and home in `work`.
fn krew_command(tool: &str, work: &Path, env: &[(&str, &str)], args: &[&str]) -> Command {
    let krew = rollout_ext_e2e::cluster::krew_binary().expect("make test builds krew");
    let mut cmd = Command::new(krew.with_file_name(tool));
    cmd.args(args)
        .env("KREW_ROOT", work.join("krew"))
        .env("HOME", work)
        .envs(env.iter().copied());
    cmd
}

/// [`krew_command`] run; a failure panics with what it said.
fn krew_tool(tool: &str, work: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    run_to_success(&mut krew_command(tool, work, env, args))
}

#[test]
fn the_release_manifest_passes_krews_own_validation() {
    let dist = release_archives();
    let work = tempfile::tempdir().unwrap();
    // The validator takes the plugin's name from the file's, as the krew index names them.
    let named = work.path().join("rollout-ext.yaml");
    std::fs::copy(dist.join("krew-manifest.yaml"), &named).unwrap();
    let manifest_arg = format!("-manifest={}", named.display());
    // Its install step downloads each uri: the archives' installs are the test below.
    let out = krew_tool(
        "validate-krew-manifest",
        work.path(),
        &[],
        &[&manifest_arg, "-skip-install"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    for step in [
        "structural validation OK",
        "all spec.platform[] items are used",
        "no overlapping spec.platform[].selector",
    ] {
        assert!(said.contains(step), "{said}");
    }
    assert_eq!(krew_problems(&manifest(&named)), Vec::<String>::new());

    // And it refuses what krew would refuse: two entries for one platform.
    let mut twice = manifest(&named);
    let first = twice["spec"]["platforms"][0].clone();
    twice["spec"]["platforms"]
        .as_array_mut()
        .unwrap()
        .push(first);
    std::fs::write(&named, serde_json::to_string(&twice).unwrap()).unwrap();
    let out = krew_command(
        "validate-krew-manifest",
        work.path(),
        &[],
        &[&manifest_arg, "-skip-install"],
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("overlapping"),
        "{said}"
    );
}

#[test]
fn every_release_archive_installs_with_krew_and_the_linux_one_runs_through_kubectl() {
    let dist = release_archives();
    let manifest_file = dist.join("krew-manifest.yaml");
    let m = manifest(&manifest_file);
    let manifest_arg = format!("--manifest={}", manifest_file.display());
    let version = m["spec"]["version"].as_str().unwrap();
    let mut installed = Vec::new();
    for entry in m["spec"]["platforms"].as_array().unwrap() {
        let labels = &entry["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap(),
        );
        let uri = entry["uri"].as_str().unwrap();
        let archive = dist.join(uri.rsplit('/').next().unwrap());
        let digest = hex::encode(sha2::Sha256::digest(std::fs::read(&archive).unwrap()));
        assert_eq!(entry["sha256"].as_str().unwrap(), digest, "{os}/{arch}");

        // Installed by the real krew, from the archive, as it installs for that platform, into
        // a krew root of its own: the entry's checksum, files and bin checked by krew itself.
        let work = tempfile::tempdir().unwrap();
        let archive_arg = format!("--archive={}", archive.display());
        let platform = [("KREW_OS", os), ("KREW_ARCH", arch)];
        krew_tool(
            "krew",
            work.path(),
            &platform,
            &["install", &manifest_arg, &archive_arg],
        );
        let store = work.path().join("krew/store/rollout-ext").join(version);
        let bin = entry["bin"].as_str().unwrap();
        for file in [bin, "LICENSE"] {
            assert!(
                store.join(file).is_file(),
                "{os}/{arch}: {file} in {}",
                store.display()
            );
        }
        installed.push(format!("{os}/{arch}"));
        if (os, arch) == ("linux", "amd64") {
            runs_through_kubectl(work.path(), bin);
        }
    }
    assert!(
        installed.contains(&"linux/amd64".to_string()),
        "{installed:?}"
    );
}

/// The plugin krew installed into `work`'s krew root is found by kubectl's plugin discovery and
/// runs; krew uninstalls it.
fn runs_through_kubectl(work: &Path, bin: &str) {
    let bin_dir = work.join("krew/bin");
    assert!(bin_dir.join(bin).exists(), "krew links {bin} into its bin");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display());
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .env("PATH", &path)
            .env("HOME", work)
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
    let index = work.join("krew/index/default");
    std::fs::create_dir_all(&index).unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&index)
        .status();
    assert!(git.unwrap().success());
    krew_tool("krew", work, &[], &["uninstall", "rollout-ext"]);
    assert!(!bin_dir.join(bin).exists(), "uninstalled");
}
