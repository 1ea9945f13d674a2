//! A child process run to its end, its wall time and its peak RSS read from `wait4` (by the
//! `peak-rss` helper): what the benchmarks report and what the memory guard compares.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

/// One run of a child process.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub wall: std::time::Duration,
    /// Peak resident set size, in KiB, as the kernel accounted it for the child.
    pub max_rss_kib: u64,
}

/// Runs `cmd` to completion with stdout discarded, timing it from spawn to exit and reading its
/// peak RSS as the `peak-rss` helper saw it from `wait4` (a child spawned from here directly
/// would report this process's memory as its own). A failed run is an error carrying the child's
/// stderr.
pub fn run(cmd: &mut Command, stderr_file: &Path) -> anyhow::Result<Sample> {
    let stderr = File::create(stderr_file)?;
    let rss_file = stderr_file.with_extension("peak-rss");
    let mut measured = Command::new(crate::helper_binary("peak-rss"));
    measured
        .arg(&rss_file)
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => measured.env(key, value),
            None => measured.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        measured.current_dir(dir);
    }
    let started = Instant::now();
    let status = measured
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .status()
        .with_context(|| format!("starting {cmd:?}"))?;
    let wall = started.elapsed();
    if !status.success() {
        let text = std::fs::read_to_string(stderr_file).unwrap_or_default();
        bail!("{cmd:?} failed ({status}):\n{text}");
    }
    let peak = std::fs::read_to_string(&rss_file)
        .with_context(|| format!("reading {}", rss_file.display()))?;
    Ok(Sample {
        wall,
        max_rss_kib: peak.trim().parse().context("peak-rss wrote no number")?,
    })
}
