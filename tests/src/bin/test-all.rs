//! `test-all`: builds every test binary of the workspace and runs them several at a time, then
//! the doc tests. `make test` runs it.
//!
//! Why not `cargo test`: it runs one binary after another, and an end-to-end binary spends most
//! of its time waiting on its own control plane (about a fifth of two cores busy), so a run was
//! mostly an idle machine. Each binary still starts its own cluster on ports of its own, so
//! binaries are independent; within one, tests run as `cargo test` runs them.
//!
//! `TEST_JOBS` sets how many binaries run at once (default 3). Arguments after the program's name
//! go to every test binary (a name filter, `--nocapture`). Each binary's output is printed whole
//! when it ends; a line says when each starts. The longest binaries of the last run start first
//! (their times are kept in the target directory). Exit status 1 when any binary failed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// One test binary cargo built: what to run, where (its package's directory, as cargo does).
struct TestBinary {
    /// `package target` as a reader knows it: `rollout-ext-e2e tests/fleet.rs`.
    name: String,
    executable: PathBuf,
    package_dir: PathBuf,
    package_name: String,
}

/// How one binary ended.
struct Finished {
    name: String,
    passed: bool,
    took: Duration,
    output: String,
}

fn main() -> anyhow::Result<()> {
    let forwarded: Vec<String> = std::env::args().skip(1).collect();
    let jobs = match std::env::var("TEST_JOBS") {
        Ok(n) => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("TEST_JOBS={n}: expected a whole number above 0"))?,
        Err(_) => 3,
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let (binaries, target_dir) = build(&cargo)?;
    let times_file = target_dir.join("test-all-times.json");
    let last_times = read_times(&times_file);
    let mut queue = binaries;
    // Longest first, so that no long binary starts last; unknown ones (new) before known ones.
    queue.sort_by(|a, b| {
        let time = |t: &TestBinary| last_times.get(&t.name).copied().unwrap_or(f64::MAX);
        time(b).total_cmp(&time(a))
    });
    let total = queue.len() + 1;
    println!(
        "test-all: {} test binaries and the doc tests, {jobs} at a time",
        queue.len()
    );

    let started = Instant::now();
    let (done_tx, done_rx) = mpsc::channel::<Finished>();
    let mut running = 0;
    let mut finished: Vec<Finished> = Vec::new();
    let mut pending: Vec<Job> = queue.into_iter().map(Job::Binary).rev().collect();
    pending.insert(0, Job::DocTests(cargo.clone()));
    while !pending.is_empty() || running > 0 {
        while running < jobs {
            let Some(job) = pending.pop() else { break };
            println!("test-all: start {} ({} running)", job.name(), running + 1);
            let (tx, forwarded) = (done_tx.clone(), forwarded.clone());
            std::thread::spawn(move || {
                let ended = job.run(&forwarded);
                let _ = tx.send(ended);
            });
            running += 1;
        }
        let ended = done_rx
            .recv()
            .context("a test job's thread ended without word")?;
        running -= 1;
        println!(
            "\n━━ {} {} in {:.0}s [{}/{total}] ━━",
            ended.name,
            if ended.passed { "ok" } else { "FAILED" },
            ended.took.as_secs_f64(),
            finished.len() + 1
        );
        print!("{}", ended.output);
        finished.push(ended);
    }

    let times: BTreeMap<String, f64> = (finished.iter())
        .map(|f| (f.name.clone(), f.took.as_secs_f64()))
        .collect();
    if forwarded.is_empty() {
        // A filtered run's times say nothing of a whole one.
        let _ = std::fs::write(&times_file, serde_json::to_vec_pretty(&times)?);
    }
    let failed: Vec<&str> = (finished.iter())
        .filter(|f| !f.passed)
        .map(|f| f.name.as_str())
        .collect();
    let (passed_tests, failed_tests) = count_tests(&finished);
    println!(
        "\ntest-all: {passed_tests} tests passed, {failed_tests} failed, in {} binaries and the doc tests, {:.0}s",
        finished.len() - 1,
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        println!("test-all: FAILED: {}", failed.join(", "));
        std::process::exit(1);
    }
}

/// What the pool runs: a test binary, or cargo's doc tests of the workspace.
enum Job {
    Binary(TestBinary),
    DocTests(String),
}

impl Job {
    fn name(&self) -> String {
        match self {
            Job::Binary(b) => b.name.clone(),
            Job::DocTests(_) => "doc tests".into(),
        }
    }

    fn run(self, forwarded: &[String]) -> Finished {
        let name = self.name();
        let mut command = match &self {
            Job::Binary(b) => {
                let mut c = Command::new(&b.executable);
                c.args(forwarded)
                    .current_dir(&b.package_dir)
                    .env("CARGO_MANIFEST_DIR", &b.package_dir)
                    .env("CARGO_PKG_NAME", &b.package_name);
                if let Some(path) = library_path() {
                    c.env(LIBRARY_PATH_VAR, path);
                }
                c
            }
            Job::DocTests(cargo) => {
                let mut c = Command::new(cargo);
                c.args(["test", "--workspace", "--doc", "--"])
                    .args(forwarded);
                c
            }
        };
        let started = Instant::now();
        let (passed, output) = match run_captured(&mut command) {
            Ok(ended) => ended,
            Err(e) => (false, format!("could not run it: {e:#}\n")),
        };
        Finished {
            name,
            passed,
            took: started.elapsed(),
            output,
        }
    }
}

/// The variable the dynamic loader searches: a proc-macro crate's test binary links the
/// toolchain's standard library dynamically, and `cargo test` points it there.
const LIBRARY_PATH_VAR: &str = if cfg!(target_os = "macos") {
    "DYLD_FALLBACK_LIBRARY_PATH"
} else {
    "LD_LIBRARY_PATH"
};

/// The loader's search path with the toolchain's libraries first (as `cargo test` sets it), or
/// none when rustc cannot say where they are.
fn library_path() -> Option<&'static std::ffi::OsString> {
    static PATH: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let out = Command::new(rustc)
            .args(["--print", "target-libdir"])
            .output()
            .ok()?;
        let libdir = String::from_utf8(out.stdout).ok()?;
        let mut dirs = vec![PathBuf::from(libdir.trim())];
        if let Some(old) = std::env::var_os(LIBRARY_PATH_VAR) {
            dirs.extend(std::env::split_paths(&old));
        }
        std::env::join_paths(dirs).ok()
    })
    .as_ref()
}

/// Runs `command` with stdout and stderr into one file (in the order written), returning
/// whether it succeeded and what it wrote.
fn run_captured(command: &mut Command) -> anyhow::Result<(bool, String)> {
    let mut file = tempfile::tempfile()?;
    let status = command
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file.try_clone()?)
        .status()?;
    file.rewind()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok((
        status.success(),
        String::from_utf8_lossy(&bytes).into_owned(),
    ))
}

/// `cargo test --workspace --no-run`, its progress shown; the test binaries it built and the
/// target directory they are in.
fn build(cargo: &str) -> anyhow::Result<(Vec<TestBinary>, PathBuf)> {
    let mut child = Command::new(cargo)
        .args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("cargo runs")?;
    let mut binaries = Vec::new();
    let mut target_dir = None;
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let message: serde_json::Value = match serde_json::from_str(&line?) {
            Ok(m) => m,
            Err(_) => continue,
        };
        if let Some(binary) = test_binary(&message) {
            target_dir.get_or_insert_with(|| target_dir_of(&binary.executable));
            binaries.push(binary);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("cargo test --no-run failed ({status})");
    }
    let target_dir = target_dir.context("cargo built no test binary")?;
    Ok((binaries, target_dir))
}

/// The test binary a compiler-artifact message of cargo names, if it is one.
fn test_binary(message: &serde_json::Value) -> Option<TestBinary> {
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = Path::new(message["manifest_path"].as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let source = Path::new(message["target"]["src_path"].as_str()?);
    let shown = source.strip_prefix(&package_dir).unwrap_or(source);
    let package_name = package_of(message["package_id"].as_str()?, &package_dir);
    Some(TestBinary {
        name: format!("{package_name} {}", shown.display()),
        executable,
        package_dir,
        package_name,
    })
}

/// A package's name from its cargo package id (`path+file:///…/tests#rollout-ext-e2e@0.1.0`,
/// or `…/plugin#0.1.0` when the directory is the name), else its directory's name.
fn package_of(id: &str, dir: &Path) -> String {
    let fragment = id.rsplit_once('#').map(|(_, f)| f).unwrap_or("");
    match fragment.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// `…/target/debug/deps/x-hash` → `…/target`.
fn target_dir_of(executable: &Path) -> PathBuf {
    executable
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn read_times(file: &Path) -> BTreeMap<String, f64> {
    std::fs::read(file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Passed and failed tests, summed over the `test result:` lines of every output.
fn count_tests(finished: &[Finished]) -> (u64, u64) {
    let mut sums = (0, 0);
    for line in finished.iter().flat_map(|f| f.output.lines()) {
        let Some(rest) = line.strip_prefix("test result: ") else {
            continue;
        };
        let number_before = |word: &str| -> u64 {
            rest.split(';')
                .find_map(|part| part.trim().strip_suffix(word))
                .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
                .unwrap_or(0)
        };
        sums.0 += number_before(" passed");
        sums.1 += number_before(" failed");
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_line_is_counted() {
        let f = |output: &str| Finished {
            name: "x".into(),
            passed: true,
            took: Duration::ZERO,
            output: output.into(),
        };
        let finished = [
            f(
                "test result: ok. 17 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 69.88s\n",
            ),
            f(
                "running 2\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s\n",
            ),
        ];
        assert_eq!(count_tests(&finished), (18, 1));
    }

    #[test]
    fn a_package_is_named_from_its_id() {
        let dir = Path::new("/w/tests");
        assert_eq!(
            package_of("path+file:///w/tests#rollout-ext-e2e@0.1.0", dir),
            "rollout-ext-e2e"
        );
        assert_eq!(package_of("path+file:///w/tests#0.1.0", dir), "tests");
    }

    #[test]
    fn the_target_directory_is_three_above_a_test_binary() {
        assert_eq!(
            target_dir_of(Path::new("/w/target/debug/deps/fleet-1a2b")),
            Path::new("/w/target")
        );
    }
}
