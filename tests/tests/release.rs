//! Every released platform's archive, as `deploy/release.sh` packs it (make test builds them in
//! the dev profile; the release workflow proves its own): each holds its platform's binary and
//! LICENSE under the checksum the manifest beside it names, and each binary runs on its
//! platform's stand-in (linux/arm64 under qemu-user, windows/amd64 under wine, linux/amd64 as
//! is), printing its version and the demo plan exactly as the test build does.

use std::path::{Path, PathBuf};
use std::process::Command;

use rollout_ext_e2e::{plugin_binary, release_archives, run_to_success as run, workspace_root};
use serde_json::Value;
use sha2::Digest;

/// The platforms released, as krew names them.
const RELEASED: &[&str] = &["linux/amd64", "linux/arm64", "windows/amd64"];

struct Platform {
    name: String,
    archive: PathBuf,
    bin: String,
    sha256: String,
}

fn platforms() -> Vec<Platform> {
    let dir = release_archives();
    let text = std::fs::read_to_string(dir.join("krew-manifest.yaml")).unwrap();
    let manifest: Value = serde_saphyr::from_str(&text).unwrap();
    let entries = manifest["spec"]["platforms"].as_array().unwrap();
    entries
        .iter()
        .map(|p| {
            let labels = &p["selector"]["matchLabels"];
            let uri = p["uri"].as_str().unwrap();
            Platform {
                name: format!(
                    "{}/{}",
                    labels["os"].as_str().unwrap(),
                    labels["arch"].as_str().unwrap()
                ),
                archive: dir.join(uri.rsplit('/').next().unwrap()),
                bin: p["bin"].as_str().unwrap().to_string(),
                sha256: p["sha256"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

/// The archive's entries, and its binary unpacked into `into`.
fn unpack(platform: &Platform, into: &Path) -> (Vec<String>, PathBuf) {
    let listed = run(Command::new("tar").arg("-tzf").arg(&platform.archive));
    let mut entries: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(String::from)
        .collect();
    entries.sort();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&platform.archive)
        .arg("-C")
        .arg(into));
    (entries, into.join(&platform.bin))
}

/// What the binary's headers say it is: its format and machine, and for ELF whether it asks
/// for a program interpreter (a dynamic loader: not there on another distribution's machine).
fn kind_of(binary: &[u8]) -> String {
    let u16_at = |at: usize| u16::from_le_bytes([binary[at], binary[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(binary[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(binary[at..at + 8].try_into().unwrap());
    if binary.starts_with(b"\x7fELF") {
        assert_eq!(binary[4], 2, "64-bit ELF");
        let machine = match u16_at(18) {
            0x3e => "x86_64",
            0xb7 => "aarch64",
            other => panic!("ELF machine {other:#x}"),
        };
        // Program headers: PT_INTERP (3) names the dynamic loader.
        let (at, size, count) = (
            u64_at(32) as usize,
            u16_at(54) as usize,
            u16_at(56) as usize,
        );
        let interp = (0..count).any(|i| u32_at(at + i * size) == 3);
        format!(
            "ELF {machine}{}",
            if interp { " dynamic" } else { " static" }
        )
    } else if binary.starts_with(b"MZ") {
        let pe = u32_at(0x3c) as usize;
        assert_eq!(&binary[pe..pe + 4], b"PE\0\0");
        match u16_at(pe + 4) {
            0x8664 => "PE x86_64".into(),
            other => panic!("PE machine {other:#x}"),
        }
    } else {
        panic!("neither ELF nor PE: {:?}", &binary[..4]);
    }
}

#[test]
fn every_released_platform_has_its_archive_under_the_manifests_checksum() {
    let platforms = platforms();
    let names: Vec<&str> = platforms.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, RELEASED);
    for platform in &platforms {
        let bytes = std::fs::read(&platform.archive).unwrap();
        let digest = hex::encode(sha2::Sha256::digest(&bytes));
        assert_eq!(platform.sha256, digest, "{}", platform.name);
        let dir = tempfile::tempdir().unwrap();
        let (entries, binary) = unpack(platform, dir.path());
        let mut expected = vec!["LICENSE".to_string(), platform.bin.clone()];
        expected.sort();
        assert_eq!(entries, expected, "{}", platform.name);
        let kind = kind_of(&std::fs::read(&binary).unwrap());
        let wanted = match platform.name.as_str() {
            "linux/amd64" => "ELF x86_64 static",
            "linux/arm64" => "ELF aarch64 static",
            "windows/amd64" => "PE x86_64",
            other => panic!("{other}"),
        };
        assert_eq!(kind, wanted, "{}", platform.name);
    }
    // The header reader tells the kinds apart.
    assert_eq!(
        kind_of(&std::fs::read(plugin_binary()).unwrap()),
        "ELF x86_64 dynamic"
    );
}

/// The command that runs `binary` of `platform` here, with a home and caches of its own.
fn on_platform(platform: &str, binary: &Path, home: &Path) -> Command {
    let mut cmd = match platform {
        "linux/amd64" => Command::new(binary),
        "linux/arm64" => {
            let mut c = Command::new("qemu-aarch64-static");
            c.arg(binary);
            c
        }
        "windows/amd64" => {
            wine_shim(binary.parent().unwrap());
            let mut c = Command::new("wine");
            c.arg(binary)
                .env("WINEPREFIX", home.join("wine"))
                .env("WINEDEBUG", "-all")
                // No Mono or Gecko to offer to install: a console program needs neither.
                .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
                .env_remove("DISPLAY");
            c
        }
        other => panic!("no way to run {other} here"),
    };
    cmd.env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("cache"));
    cmd
}

/// Builds, into `dir` (where Windows looks for a program's libraries first), the one library
/// of Windows 10 that Debian's wine 8 lacks and the binary imports (see
/// `tests/cluster/wine/bcryptprimitives.c`).
fn wine_shim(dir: &Path) {
    let source = workspace_root().join("tests/cluster/wine/bcryptprimitives.c");
    run(Command::new("x86_64-w64-mingw32-gcc")
        .args(["-O2", "-shared", "-o"])
        .arg(dir.join("bcryptprimitives.dll"))
        .arg(source)
        .arg("-ladvapi32"));
}

/// The demo plan (as `make demo` prints it) as JSON.
fn demo_plan(mut cmd: Command) -> Value {
    let demo = workspace_root().join("examples-hooks/demo");
    let out = run(cmd
        .arg("nodes")
        .arg("--from-snapshot")
        .arg(demo.join("snapshot.json"))
        .arg("--policy")
        .arg(demo.join("policy.yaml"))
        .args([
            "--kubelet-version",
            "v1.20.2",
            "--now",
            "2026-11-27T12:00:00Z",
            "-o",
            "json",
        ]));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn each_binary_prints_its_version_and_the_demo_plan_as_the_test_build_does() {
    let home = tempfile::tempdir().unwrap();
    let native = demo_plan(on_platform("linux/amd64", &plugin_binary(), home.path()));
    assert!(
        native["groups"].as_array().is_some_and(|g| !g.is_empty()),
        "{native}"
    );
    for platform in platforms() {
        let dir = tempfile::tempdir().unwrap();
        let (_, binary) = unpack(&platform, dir.path());
        let version = run(on_platform(&platform.name, &binary, dir.path()).arg("--version"));
        let version = String::from_utf8_lossy(&version.stdout);
        assert!(
            version.contains(env!("CARGO_PKG_VERSION")),
            "{}: {version}",
            platform.name
        );
        let plan = demo_plan(on_platform(&platform.name, &binary, dir.path()));
        assert_eq!(plan, native, "{}", platform.name);
    }
}

#[test]
fn the_release_workflow_passes_actionlint() {
    let actionlint = rollout_ext_e2e::cluster::actionlint_binary().expect("make test builds it");
    let lint = |file: &Path| {
        Command::new(&actionlint)
            .arg("-no-color")
            .arg(file)
            .current_dir(workspace_root())
            .output()
            .unwrap()
    };
    let workflow = workspace_root().join(".github/workflows/release.yml");
    let out = lint(&workflow);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // It reads the scripts too (shellcheck) and would name a mistake.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("release.yml");
    let text = std::fs::read_to_string(&workflow).unwrap();
    let text = text.replacen("\"$GITHUB_REF_NAME\"", "$GITHUB_REF_NAME", 1);
    std::fs::write(&broken, text.replace("github.token", "github.tokn")).unwrap();
    let out = lint(&broken);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("tokn") && said.contains("SC2086"), "{said}");
}
