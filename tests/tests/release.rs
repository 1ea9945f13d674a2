//! Every released platform's archive, as `deploy/release.sh` packs it (make test builds them in
//! the release-check profile; the release workflow proves its own): each holds its platform's
//! binary and LICENSE under the checksum the manifest beside it names, and each binary that can
//! run here runs on its platform's stand-in (linux/arm64 under qemu-user, windows/amd64 under
//! wine, linux/amd64 as is), printing its version and the demo plan exactly as the test build
//! does. The macOS binaries, which nothing here runs, are read instead: Mach-O of their
//! architecture, the arm64 one signed (Apple silicon runs nothing unsigned), loading only the
//! system's libraries, and carrying the version the test build prints.

use std::path::{Path, PathBuf};
use std::process::Command;

use rollout_ext_e2e::{
    DEMO_PLAN_AT, plugin_binary, release_archives, run_to_success as run, workspace_root,
};
use serde_json::Value;
use sha2::Digest;

/// The platforms released, as krew names them.
const RELEASED: &[&str] = &[
    "linux/amd64",
    "linux/arm64",
    "darwin/amd64",
    "darwin/arm64",
    "windows/amd64",
];

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
    } else if binary.starts_with(&MACH_O_64.to_le_bytes()) {
        let mach = mach_o(binary);
        format!(
            "Mach-O {}{}",
            mach.arch,
            if mach.signed { " signed" } else { " unsigned" }
        )
    } else {
        panic!("neither ELF, PE nor Mach-O: {:?}", &binary[..4]);
    }
}

/// The magic of a 64-bit little-endian Mach-O file.
const MACH_O_64: u32 = 0xfeed_facf;

/// What a Mach-O binary's load commands say.
struct MachO {
    arch: &'static str,
    /// The libraries it loads (LC_LOAD_DYLIB and its weak, lazy, upward and re-export kinds).
    dylibs: Vec<String>,
    /// Its run-path entries (LC_RPATH).
    rpaths: Vec<String>,
    /// Whether it carries a code signature (LC_CODE_SIGNATURE).
    signed: bool,
}

fn mach_o(binary: &[u8]) -> MachO {
    let u32_at = |at: usize| u32::from_le_bytes(binary[at..at + 4].try_into().unwrap());
    let arch = match u32_at(4) {
        0x0100_0007 => "x86_64",
        0x0100_000c => "arm64",
        other => panic!("Mach-O CPU type {other:#x}"),
    };
    let string_at = |command: usize, size: usize| {
        let start = command + u32_at(command + 8) as usize;
        let bytes = &binary[start..command + size];
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    };
    let mut mach = MachO {
        arch,
        dylibs: Vec::new(),
        rpaths: Vec::new(),
        signed: false,
    };
    // The load commands follow the 32-byte header: each its kind, then its size.
    let mut at = 32;
    for _ in 0..u32_at(16) {
        let (kind, size) = (u32_at(at), u32_at(at + 4) as usize);
        match kind {
            0xc | 0x8000_0018 | 0x20 | 0x8000_0023 | 0x8000_001f => {
                mach.dylibs.push(string_at(at, size))
            }
            0x8000_001c => mach.rpaths.push(string_at(at, size)),
            0x1d => mach.signed = true,
            _ => {}
        }
        at += size;
    }
    mach
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
            // Apple silicon runs only signed code (zig's linker signs ad hoc); Intel Macs run
            // code without a signature, and zig's linker writes none there.
            "darwin/amd64" => "Mach-O x86_64 unsigned",
            "darwin/arm64" => "Mach-O arm64 signed",
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
        .args(DEMO_PLAN_AT));
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
    for platform in platforms()
        .into_iter()
        .filter(|p| !p.name.starts_with("darwin/"))
    {
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
fn each_macos_binary_loads_only_the_system_s_libraries_and_carries_the_test_build_s_version() {
    // What `--version` prints after the program's name, as one constant in every binary.
    let version = run(Command::new(plugin_binary()).arg("--version"));
    let version = String::from_utf8_lossy(&version.stdout);
    let version = version.trim().strip_prefix("kubectl rollout-ext ").unwrap();
    let darwin: Vec<Platform> = (platforms().into_iter())
        .filter(|p| p.name.starts_with("darwin/"))
        .collect();
    assert_eq!(darwin.len(), 2);
    for platform in darwin {
        let dir = tempfile::tempdir().unwrap();
        let (_, binary) = unpack(&platform, dir.path());
        let bytes = std::fs::read(&binary).unwrap();
        let mach = mach_o(&bytes);
        // Every Mac has these; nothing from Homebrew, a framework or the build machine.
        assert!(!mach.dylibs.is_empty(), "{}", platform.name);
        for dylib in &mach.dylibs {
            assert!(
                dylib.starts_with("/usr/lib/") && !dylib.contains(".framework/"),
                "{}: loads {dylib}",
                platform.name
            );
        }
        assert_eq!(mach.rpaths, Vec::<String>::new(), "{}", platform.name);
        assert!(
            (bytes.windows(version.len())).any(|w| w == version.as_bytes()),
            "{}: no {version:?} in the binary",
            platform.name
        );
    }
    // The reader sees what it checks for: a framework and a run path in a made-up binary.
    let command = |kind: u32, offset: usize, text: &str| {
        let size = (offset + text.len() + 1).next_multiple_of(8);
        let mut bytes = [kind, size as u32, offset as u32]
            .map(u32::to_le_bytes)
            .concat();
        bytes.resize(offset, 0);
        bytes.extend(text.as_bytes());
        bytes.resize(size, 0);
        bytes
    };
    let framework = "/System/Library/Frameworks/Security.framework/Versions/A/Security";
    let commands = [
        command(0xc, 24, framework),
        command(0x8000_001c, 12, "/opt/homebrew/lib"),
    ];
    let mut made = [MACH_O_64, 0x0100_000c, 0, 2, 2, 0, 0, 0]
        .map(u32::to_le_bytes)
        .concat();
    made.extend(commands.concat());
    let mach = mach_o(&made);
    assert_eq!(mach.dylibs, [framework]);
    assert_eq!(mach.rpaths, ["/opt/homebrew/lib"]);
    assert!(!mach.signed);
    assert_eq!(kind_of(&made), "Mach-O arm64 unsigned");
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
