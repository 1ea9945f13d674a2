//! A child process run to its end, its wall time and its peak RSS read from `wait4`: what the
//! benchmarks report and what the memory guard compares.

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
/// peak RSS from `wait4`. A failed run is an error carrying the child's stderr.
pub fn run(cmd: &mut Command, stderr_file: &Path) -> anyhow::Result<Sample> {
    let stderr = File::create(stderr_file)?;
    let started = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for the child we just spawned and reaps it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = started.elapsed();
    if reaped != pid {
        bail!("waiting for {cmd:?}: {}", std::io::Error::last_os_error());
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let text = std::fs::read_to_string(stderr_file).unwrap_or_default();
        bail!("{cmd:?} failed (wait status {status}):\n{text}");
    }
    Ok(Sample {
        wall,
        max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
    })
}
