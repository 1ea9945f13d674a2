//! Test support for rollout-ext: where the built artifacts are, and (in [`cluster`]) a real
//! Kubernetes control plane on loopback with simulated nodes and a simulated cloud.

use std::path::{Path, PathBuf};

/// Runs the plugin with `args` and collects its output; it is killed if the test stops waiting.
pub async fn run_plugin(args: Vec<String>) -> std::process::Output {
    tokio::process::Command::new(plugin_binary())
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("the plugin runs")
}

/// Runs the plugin with `args` (a `-o json` run), handing each event to `on_event` as it comes;
/// returns the exit code and what it printed on stderr.
pub async fn run_watching(
    args: Vec<String>,
    mut on_event: impl FnMut(&serde_json::Value) + Send + 'static,
) -> (Option<i32>, String) {
    tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let stderr = tempfile::tempfile().unwrap();
        let mut child = std::process::Command::new(plugin_binary())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(stderr.try_clone().unwrap())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines {
            on_event(&serde_json::from_str(&line.unwrap()).unwrap());
        }
        let code = child.wait().unwrap().code();
        let mut text = String::new();
        use std::io::{Read, Seek};
        let mut stderr = stderr;
        stderr.rewind().unwrap();
        stderr.read_to_string(&mut text).unwrap();
        (code, text)
    })
    .await
    .unwrap()
}

/// `rolling-update ARGS -n NS` against the cluster of `kubeconfig`, with short waits.
pub fn rolling_update(
    kubeconfig: &std::path::Path,
    ns: &str,
    args: &[&str],
) -> std::process::Command {
    let mut cmd = std::process::Command::new(plugin_binary());
    cmd.arg("rolling-update")
        .args(args)
        .args(["--poll-interval=1s", "--timeout=90s", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["-n", ns]);
    cmd
}

/// Runs `cmd` off the async threads.
pub async fn output(mut cmd: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// A run's exit code, stdout and stderr, for an assertion's message.
pub fn described(out: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The JSON events of kind `kind` a `-o json` run printed.
pub fn events_named(out: &std::process::Output, kind: &str) -> Vec<serde_json::Value> {
    events(out)
        .into_iter()
        .filter(|e| e["event"] == kind)
        .collect()
}

/// A progress line without the timestamp the plain reporter puts before it.
pub fn without_timestamp(line: &str) -> &str {
    match line.split_once(' ') {
        Some((time, rest)) if time.parse::<jiff::Timestamp>().is_ok() => rest,
        _ => line,
    }
}

/// Runs `cmd` and SIGKILLs it at the first progress line containing `at`; returns the progress
/// lines, without their timestamps.
pub async fn run_until(mut cmd: std::process::Command, at: &'static str) -> Vec<String> {
    use std::io::BufRead;
    use std::process::Stdio;
    tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = without_timestamp(&line.unwrap()).to_string();
            let stop = line.contains(at);
            seen.push(line);
            if stop {
                child.kill().unwrap();
                break;
            }
        }
        child.wait().unwrap();
        seen
    })
    .await
    .unwrap()
}

/// Writes `policy.yaml` into `dir`: one hook, `stopper`, whose gate always aborts ("hostile
/// gate says stop").
pub fn aborting_gate_policy(dir: &std::path::Path) -> PathBuf {
    std::fs::copy(wasm_module("hostile-hook"), dir.join("hostile.wasm"))
        .expect("the hostile hook is built");
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: rollout-ext/v1alpha1\nkind: RolloutPolicy\nspec:\n  hooks:\n  - {name: stopper, module: hostile.wasm, points: [gate], config: {gate: abort}}\n",
    )
    .expect("the policy is written");
    policy
}

/// The plan of the run `args` would make: the same command without `--yes`.
pub fn plan_of(args: &[String]) -> Vec<String> {
    args.iter().filter(|a| *a != "--yes").cloned().collect()
}

/// The events a `-o json` run printed, one per line; a line that is no event fails the test.
pub fn events(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line of -o json is an event"))
        .collect()
}

/// Builds, in `dir`, the site-policy example of `language` (`js` or `py`) as `app.<language>`
/// with `edit` applied to its source, by the SDK's build script for that language
/// (hooks-sdk/<js|python>/build.sh), into `app.wasm`; the build's output.
pub fn build_site_policy(
    dir: &Path,
    language: &str,
    edit: impl FnOnce(&str) -> String,
) -> std::process::Output {
    let root = workspace_root();
    let (sdk, app) = match language {
        "js" => ("js", "app.js"),
        _ => ("python", "app.py"),
    };
    let example = root.join(format!("examples-hooks/site-policy-{language}/{app}"));
    let source = std::fs::read_to_string(example).unwrap();
    std::fs::write(dir.join(app), edit(&source)).unwrap();
    std::process::Command::new("bash")
        .arg(root.join(format!("hooks-sdk/{sdk}/build.sh")))
        .args([app, "app.wasm"])
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

/// `hooks test` of the built example hook `module` (as [`wasm_module`] finds it), with `args`.
pub fn hooks_test(module: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(plugin_binary())
        .args(["hooks", "test"])
        .arg(wasm_module(module))
        .args(args)
        .output()
        .expect("the plugin runs")
}

/// `hooks inspect` on a built module: its exit code, stdout and stderr.
pub fn inspect_module(module: &Path) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(plugin_binary())
        .args(["hooks", "inspect"])
        .arg(module)
        .output()
        .expect("the plugin runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// A hook component built by `make wasm` (the test command builds them first).
pub fn wasm_module(crate_name: &str) -> PathBuf {
    let file = target_dir()
        .join("wasm32-wasip2/wasm")
        .join(format!("{}.wasm", crate_name.replace('-', "_")));
    assert!(
        file.exists(),
        "{} is missing: run `make wasm` (or the README's test command) first",
        file.display()
    );
    file
}

/// Where the binaries of the running build live: `target/debug` for the tests (which run from
/// `target/debug/deps`), `target/release` for the benchmarks.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable has a path");
    let dir = exe.parent().expect("an executable sits in a directory");
    match dir.file_name() {
        Some(name) if name == "deps" => dir.parent().unwrap_or(dir).to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// The plugin binary of this build (the test command builds it first with `cargo build --bins`).
/// Runs `cmd` to its end; one that cannot start or fails panics with what it printed.
pub fn run_to_success(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (make test installs it)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Where the release archives under test are, with the manifest that names them beside them:
/// `ROLLOUT_EXT_DIST` (the release workflow's dist/), else those `make test` builds
/// (`make release-check`).
pub fn release_archives() -> PathBuf {
    let dir = std::env::var_os("ROLLOUT_EXT_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("release-check"));
    assert!(
        dir.join("krew-manifest.yaml").is_file(),
        "{} holds no release archives: run `make release-check` (the README's test command does)",
        dir.display()
    );
    dir
}

pub fn plugin_binary() -> PathBuf {
    let file = build_dir().join("kubectl-rollout_ext");
    assert!(
        file.exists(),
        "{} is missing: run `cargo build --bins` (or the README's test command) first",
        file.display()
    );
    file
}

/// `nodes --yes` timings for tests: one validation, no fixed delays, bounded waits.
pub const FAST_ROTATION: &[&str] = &[
    "--validate-count",
    "1",
    "--post-drain-delay",
    "0s",
    "--node-interval",
    "0s",
    "--validation-timeout",
    "60s",
    "--drain-timeout",
    "60s",
    "--replacement-timeout",
    "60s",
];

/// `nodes -o json --provider PROVIDER` of instance group `group`, to kubelet `kubelet`, with the
/// test timings and `flags` (a plan unless they hold `--yes`).
pub fn provider_rotation_args(
    cluster: &cluster::TestCluster,
    provider: &str,
    group: &str,
    kubelet: &str,
    flags: &[&str],
) -> Vec<String> {
    [
        "nodes",
        "--kubeconfig",
        cluster.kubeconfig.to_str().unwrap(),
        "--provider",
        provider,
        "--instance-group",
        group,
        "--kubelet-version",
        kubelet,
        "-o",
        "json",
    ]
    .iter()
    .chain(FAST_ROTATION)
    .chain(flags)
    .map(|s| s.to_string())
    .collect()
}

/// A JSON plan of the demo snapshot as of a fixed instant, after `--from-snapshot` and
/// `--policy`: what a test compares is the same whenever it runs.
pub const DEMO_PLAN_AT: &[&str] = &[
    "--kubelet-version",
    "v1.20.2",
    "--now",
    "2026-11-27T12:00:00Z",
    "-o",
    "json",
];

/// The demo's snapshot and policy.
pub fn demo_file(name: &str) -> PathBuf {
    workspace_root().join("examples-hooks/demo").join(name)
}

/// The demo policy copied into `dir` with the freshly built example hooks beside it (under
/// `dir/hooks`, where its `module` paths point).
pub fn demo_policy_in(dir: &Path) -> PathBuf {
    let hooks = dir.join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for name in ["zone-spread", "maintenance-window", "error-budget"] {
        let module = wasm_module(name);
        std::fs::copy(&module, hooks.join(module.file_name().unwrap())).unwrap();
    }
    let policy = dir.join("policy.yaml");
    std::fs::copy(demo_file("policy.yaml"), &policy).unwrap();
    policy
}

pub mod browser;
pub mod capi_rotation;
pub mod chaos;
pub mod child;
pub mod cluster;
pub mod daemon;
pub mod fingerprint;
pub mod invariants;
pub mod kured;
pub mod metrics;
pub mod observer;
pub mod registry;
pub mod stateful;
pub mod synthetic;
pub mod terminal;
pub mod workloads;

/// A helper binary of this crate and build, built by `cargo build --bins`.
pub fn helper_binary(name: &str) -> PathBuf {
    let file = build_dir().join(name);
    assert!(
        file.exists(),
        "{} is missing: run `cargo build --bins` (or the README's test command) first",
        file.display()
    );
    file
}
