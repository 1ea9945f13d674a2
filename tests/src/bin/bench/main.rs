//! `bench`: the performance figures of BENCHMARKS.md, each beside a peer measured in the same run
//! (`make bench`; not part of the test command — speed is reported, never asserted in tests).
//!
//! Sections: `plan` (offline plans of synthetic clusters, 500 and 5,000 nodes, hooks off and on,
//! against a bare JSON parse of the same file), `hooks` (one call with 5,000 candidates, cached
//! instantiate and first compile, against the same policy as native Rust), `drain` (a 100-pod
//! node against `kubectl drain`, and a live plan against `kubectl get`), `rotation` (the
//! tool's own share of a 10-node rotation's wall time, without hooks and with the three demo
//! hooks), `calls` (hook calls per live rotation of 12 and 100 instances) on a real test
//! cluster, `estimate` (a plan's estimate over the wall time of the run it plans, from the
//! cluster's history), and `live-scale` (what a 4-node rotation costs the API server beside 0, 3,000 and
//! 10,000 unrelated pods, against `kubectl drain`; and the live view's memory at 150,000 pods).
//! `fleet-scale` (a rotation of 100 of 1,000 kwok nodes running 30,000 pods beside a 10-node one
//! in the same cluster; half an hour on 2 cores) runs only when named.
//! With `--baseline-binary PATH` (another build of the plugin, e.g. the previous release),
//! `rotation`, `calls` and `live-scale` measure it too, in the same run.
//!
//! Usage: `bench [--runs N] [--only plan,hooks,drain,rotation,estimate,calls,live-scale,fleet-scale]
//! [--baseline-binary PATH]`.
//! Prints a Markdown table.
//!
//! `bench --repeat CALL N` makes one hook call (`select`, or `native-select` for the peer) N
//! times after a warm-up and prints only the total: a steady loop for a profiler, e.g.
//! `valgrind --tool=callgrind bench --repeat select 20`.
//!
//! With `BENCH_TRACE_DIR=DIR` set, `rotation` runs the plugin with `-vvv` and keeps each
//! rotation's stderr as `DIR/trace-<revision>.txt`: every API request with when it was answered
//! and its latency, beside the run's events, to see where the tool's time goes.

mod calls;
mod drain;
mod estimate;
mod fleet_scale;
mod hooks;
mod live_scale;
mod measure;
mod plan;
mod rotation;

use std::time::Duration;

use anyhow::{Context, bail};

/// One line of the report.
pub struct Row {
    pub figure: String,
    pub value: String,
    pub peer: String,
    pub peer_value: String,
    pub ratio: String,
    pub target: String,
    /// `Some(true)` met, `Some(false)` missed, `None` when the figure has no target.
    pub met: Option<bool>,
}

impl Row {
    /// A timing beside its peer, as value, peer value and value/peer.
    pub fn timed(figure: String, value: Duration, peer: &str, peer_value: Duration) -> Row {
        Row {
            figure,
            value: measure::show(value),
            peer: peer.into(),
            peer_value: measure::show(peer_value),
            ratio: format!("{:.2}×", measure::ratio(value, peer_value)),
            target: "—".into(),
            met: None,
        }
    }

    pub fn target(mut self, target: &str, met: bool) -> Row {
        self.target = target.into();
        self.met = Some(met);
        self
    }
}

const SECTIONS: &[&str] = &[
    "plan",
    "hooks",
    "drain",
    "rotation",
    "estimate",
    "calls",
    "live-scale",
];

/// Sections run only when named (`--only`): they take long.
const NAMED_ONLY: &[&str] = &["fleet-scale"];

struct Args {
    runs: usize,
    only: Vec<String>,
    /// Another build of the plugin, the peer of the `calls` section.
    baseline: Option<std::path::PathBuf>,
    /// `--repeat CALL N`: one hook call N times, for a profiler, instead of the sections.
    repeat: Option<(String, usize)>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        runs: 5,
        only: SECTIONS.iter().map(|s| s.to_string()).collect(),
        baseline: None,
        repeat: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => {
                let value = it.next().context("--runs needs a number")?;
                args.runs = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--runs: {value:?} is not a positive number"))?;
            }
            "--only" => {
                let value = it.next().context("--only needs a list of sections")?;
                args.only = value.split(',').map(str::to_string).collect();
                if let Some(bad) = (args.only.iter())
                    .find(|s| !SECTIONS.contains(&s.as_str()) && !NAMED_ONLY.contains(&s.as_str()))
                {
                    bail!(
                        "--only: unknown section {bad:?} (known: {})",
                        [SECTIONS, NAMED_ONLY].concat().join(", ")
                    );
                }
            }
            "--baseline-binary" => {
                let value = it
                    .next()
                    .context("--baseline-binary needs the path of a plugin binary")?;
                let path = std::path::PathBuf::from(value);
                if !path.is_file() {
                    bail!("--baseline-binary: {} is not a file", path.display());
                }
                args.baseline = Some(path);
            }
            "--repeat" => {
                let call = it.next().context("--repeat needs a call and a count")?;
                if !hooks::REPEATABLE.contains(&call.as_str()) {
                    bail!(
                        "--repeat: unknown call {call:?} (known: {})",
                        hooks::REPEATABLE.join(", ")
                    );
                }
                let value = it.next().context("--repeat needs a count after the call")?;
                let times = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("--repeat: {value:?} is not a positive number"))?;
                args.repeat = Some((call, times));
            }
            other => bail!(
                "unknown argument {other:?}; usage: bench [--runs N] [--only {}] [--baseline-binary PATH] | bench --repeat CALL N",
                SECTIONS.join(",")
            ),
        }
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let work = tempfile::Builder::new()
        .prefix("rollout-ext-bench-")
        .tempdir()?;
    if let Some((call, times)) = &args.repeat {
        return hooks::repeat(call, *times, work.path());
    }
    let mut rows = Vec::new();
    for section in &args.only {
        match section.as_str() {
            "calls" => eprintln!("bench: {section} (one rotation per size and binary)…"),
            "live-scale" => eprintln!("bench: {section} (one rotation per size and tool)…"),
            "fleet-scale" => eprintln!("bench: {section} (one rotation per group size)…"),
            _ => eprintln!("bench: {section} ({} runs each)…", args.runs),
        }
        let mut section_rows = match section.as_str() {
            "plan" => plan::run(args.runs, work.path())?,
            "hooks" => hooks::run(args.runs, work.path())?,
            "drain" => drain::run(args.runs, work.path())?,
            "rotation" => rotation::run(args.runs, work.path(), args.baseline.as_deref())?,
            "estimate" => estimate::run(args.runs, work.path())?,
            // Counts, not timings: one rotation per size and binary.
            "calls" => calls::run(work.path(), args.baseline.as_deref())?,
            // Counts from the apiserver: one run per size and tool, each on a fresh cluster.
            "live-scale" => live_scale::run(work.path(), args.baseline.as_deref())?,
            // One rotation per group size, in one fleet-sized cluster.
            "fleet-scale" => fleet_scale::run(work.path())?,
            _ => unreachable!("sections are checked when parsing"),
        };
        rows.append(&mut section_rows);
    }
    print_table(&rows, args.runs);
    Ok(())
}

fn print_table(rows: &[Row], runs: usize) {
    println!("Medians of {runs} runs.\n");
    println!("| Figure | Value | Peer | Peer value | Ratio | Target | Met |");
    println!("|---|---:|---|---:|---:|---|---|");
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.figure, r.value, r.peer, r.peer_value, r.ratio, r.target, met
        );
    }
}
