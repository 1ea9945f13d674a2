//! Hook calls per live rotation: `nodes --yes` of a group of 12 and of 100 out-of-date
//! instances at concurrency 1 on the real test cluster, with the three demo hooks and a tracing
//! hook (`hostile_hook.wasm` in `trace` mode, at every point) that prints one line per call. Each
//! demo hook is called exactly as often as the tracer at the points it serves, so the tracer's
//! lines count the demo hooks' calls: zone-spread = select + batch, maintenance-window = batch,
//! error-budget = gate.
//!
//! The peer is the same rotation run by another build of the plugin (`--baseline-binary`, the
//! previous release), on a fresh group of the same size in the same cluster.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rollout_ext_e2e::cluster::TestCluster;
use rollout_ext_e2e::plugin_binary;
use serde_json::Value;

use crate::Row;
use crate::measure::show;
use crate::rotation::hooks_policy;

const SIZES: &[usize] = &[12, 100];
/// The simulated cloud's boot time: small, so that 100 batches take minutes, not hours.
const BOOT: Duration = Duration::from_millis(200);
/// A run still going after this long is stopped, and reported with the calls it made so far.
const DEADLINE: Duration = Duration::from_secs(15 * 60);

/// What one rotation asked, counted from the tracer's lines and the run's events.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    select: usize,
    batch: usize,
    gate: usize,
    /// Calls made with `dryRun = true` (included in the counts above).
    dry_run: usize,
    /// Batches the run started (`batch-started` events).
    batches: usize,
    /// Gate waits and batch pauses the run reported (`decided` events; builds without them
    /// report none).
    waits: usize,
    pauses: usize,
    wall: Duration,
    /// Stopped at the deadline: the counts are what it reached.
    stopped: bool,
}

impl Tally {
    fn zone_spread(&self) -> usize {
        self.select + self.batch
    }

    fn maintenance_window(&self) -> usize {
        self.batch
    }

    fn error_budget(&self) -> usize {
        self.gate
    }

    /// Calls of the three demo hooks together.
    fn total(&self) -> usize {
        self.zone_spread() + self.maintenance_window() + self.error_budget()
    }

    /// Once per decision: select once per group; batch once per batch (again per pause); gates
    /// before the group, then before and after each batch (again per wait).
    fn once_per_decision(&self) -> usize {
        let select = 1;
        let batch = self.batches + self.pauses;
        let gate = 1 + 2 * self.batches + self.waits;
        // zone-spread serves select and batch, maintenance-window batch, error-budget gate.
        select + 2 * batch + gate
    }

    fn describe(&self) -> String {
        format!(
            "{}{} (zone-spread {}, maintenance-window {}, error-budget {})",
            if self.stopped { "≥ " } else { "" },
            group_digits(self.total()),
            group_digits(self.zone_spread()),
            group_digits(self.maintenance_window()),
            group_digits(self.error_budget()),
        )
    }

    fn describe_wall(&self) -> String {
        if self.stopped {
            format!("stopped after {}", show(self.wall))
        } else {
            show(self.wall)
        }
    }
}

/// `12345` as `12,345`.
fn group_digits(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Counts the tracer's lines of a run's stderr and the events of its stdout (`-o json`).
fn tally(stderr: &str, stdout: &str) -> Tally {
    let mut t = Tally::default();
    for line in stderr.lines() {
        let Some((_, call)) = line.split_once("[hook tracer] trace ") else {
            continue;
        };
        match call.split(' ').next() {
            Some("select") => t.select += 1,
            Some("batch") => t.batch += 1,
            Some("gate") => t.gate += 1,
            _ => continue,
        }
        if call.ends_with("dry-run=true") {
            t.dry_run += 1;
        }
    }
    for event in stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let decision = event["decision"].as_str().unwrap_or_default();
        match event["event"].as_str() {
            Some("batch-started") => t.batches += 1,
            Some("decided") if event["point"] == "gate" && decision.starts_with("wait") => {
                t.waits += 1
            }
            Some("decided") if event["point"] == "batch" && decision.starts_with("pause") => {
                t.pauses += 1
            }
            _ => {}
        }
    }
    t
}

/// Rotates a fresh group of `size` out-of-date instances with `binary`, then removes the
/// group's nodes so that later runs and sections find the cluster as it was.
fn rotate(
    cluster: &TestCluster,
    binary: &Path,
    policy: &Path,
    group: &str,
    size: usize,
    work: &Path,
) -> anyhow::Result<Tally> {
    cluster.block_on(cluster.outdated_group(group, size))?;
    let mut args = cluster.rotate_args(policy, group);
    // `-v` logs what hooks print (the tracer's lines).
    args.extend(["--max-unavailable", "1", "--max-surge", "0", "-v"].map(String::from));
    let cache = work.join("cache");

    // One unmeasured plan compiles the hooks into the cache, as an operator's first plan does.
    let plan_args: Vec<&String> = args.iter().filter(|a| *a != "--yes").collect();
    let planned = Command::new(binary)
        .args(plan_args)
        .env("XDG_CACHE_HOME", &cache)
        .stdin(Stdio::null())
        .output()?;
    anyhow::ensure!(
        planned.status.success(),
        "planning {group} with {} failed:\n{}",
        binary.display(),
        String::from_utf8_lossy(&planned.stderr)
    );

    let (out_file, err_file) = (work.join("calls-stdout.txt"), work.join("calls-stderr.txt"));
    let started = Instant::now();
    let mut child = Command::new(binary)
        .args(&args)
        .env("XDG_CACHE_HOME", &cache)
        .stdin(Stdio::null())
        .stdout(File::create(&out_file)?)
        .stderr(File::create(&err_file)?)
        .spawn()?;
    let mut stopped = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > DEADLINE {
            eprintln!(
                "bench: {group} with {} still running after {}: stopped",
                binary.display(),
                show(DEADLINE)
            );
            child.kill()?;
            stopped = true;
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let wall = started.elapsed();
    let (stdout, stderr) = (
        std::fs::read_to_string(&out_file)?,
        std::fs::read_to_string(&err_file)?,
    );
    anyhow::ensure!(
        stopped || status.success(),
        "rotating {group} with {} failed ({status}):\n{}",
        binary.display(),
        stderr
            .lines()
            .filter(|l| !l.contains("[hook tracer]"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut t = tally(&stderr, &stdout);
    t.wall = wall;
    t.stopped = stopped;
    anyhow::ensure!(
        stopped || t.batches == size,
        "{group}: concurrency 1 should give {size} batches, the run started {}",
        t.batches
    );
    eprintln!(
        "bench: {group} ({}): {} calls of the demo hooks, tracer select {} batch {} gate {} ({} with dry-run), {} batches, {} waits, {} pauses, {}",
        binary.display(),
        t.total(),
        t.select,
        t.batch,
        t.gate,
        t.dry_run,
        t.batches,
        t.waits,
        t.pauses,
        t.describe_wall()
    );

    // Replacements still booting register after the boot delay; then the group goes.
    std::thread::sleep(BOOT * 2);
    for node in cluster.nodes.nodes_of(group) {
        cluster.block_on(cluster.nodes.remove(&node))?;
    }
    Ok(t)
}

pub fn run(work: &Path, baseline: Option<&Path>) -> anyhow::Result<Vec<Row>> {
    let cluster = TestCluster::shared();
    cluster.cloud.set_boot_delay(BOOT);
    let policy = hooks_policy(cluster, &work.join("calls"), true)?;
    let current: PathBuf = plugin_binary();

    let mut rows = Vec::new();
    for &size in SIZES {
        let after = rotate(
            cluster,
            &current,
            &policy,
            &format!("calls-new-{size}"),
            size,
            work,
        )?;
        let before = baseline
            .map(|b| {
                rotate(
                    cluster,
                    b,
                    &policy,
                    &format!("calls-old-{size}"),
                    size,
                    work,
                )
            })
            .transpose()?;
        let label = format!(
            "{size} instances, concurrency 1, three demo hooks (boot {} s)",
            BOOT.as_secs_f64()
        );
        let peer = match baseline {
            Some(_) => "the previous release (`--baseline-binary`)",
            None => "the previous release (not measured: no `--baseline-binary`)",
        };
        let expected = after.once_per_decision();
        rows.push(
            Row {
                figure: format!("Hook calls per live rotation — {label}"),
                value: after.describe(),
                peer: peer.into(),
                peer_value: before.map_or("—".into(), |b| b.describe()),
                ratio: before.map_or("—".into(), |b| {
                    format!("{:.3}×", after.total() as f64 / b.total().max(1) as f64)
                }),
                target: String::new(),
                met: None,
            }
            .target(
                &format!("once per decision ({})", group_digits(expected)),
                after.total() == expected,
            ),
        );
        rows.push(Row {
            figure: format!("Wall time of that rotation (with the tracer, `-v`) — {label}"),
            value: after.describe_wall(),
            peer: peer.into(),
            peer_value: before.map_or("—".into(), |b| b.describe_wall()),
            ratio: before.map_or("—".into(), |b| {
                format!("{:.2}×", crate::measure::ratio(after.wall, b.wall))
            }),
            target: "—".into(),
            met: None,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_tracer_lines_and_the_events() {
        let stderr = "info: [hook tracer] trace select dry-run=false\n\
                      info: [hook tracer] trace batch 0 dry-run=false\n\
                      info: [hook tracer] trace gate before-group 0 attempt=0 dry-run=true\n\
                      info: [hook tracer] trace gate before-batch 0 attempt=0 dry-run=false\n\
                      info: [hook zone-spread] something else\n";
        let stdout = r#"{"event":"batch-started","group":"g","index":0}
{"event":"decided","point":"gate","decision":"wait 1s: pods"}
{"event":"decided","point":"batch","decision":"size 1"}
not json
"#;
        let t = tally(stderr, stdout);
        assert_eq!((t.select, t.batch, t.gate, t.dry_run), (1, 1, 2, 1));
        assert_eq!((t.batches, t.waits, t.pauses), (1, 1, 0));
        // zone-spread 1 + 1, maintenance-window 1, error-budget 2.
        assert_eq!(t.total(), 5);
        // select 1, batch 1 (twice: two hooks), gates 1 + 2 + 1 wait.
        assert_eq!(t.once_per_decision(), 1 + 2 + 4);
        assert_eq!(group_digits(1234567), "1,234,567");
        assert_eq!(group_digits(999), "999");
    }
}
