//! Timing and memory of child processes, and medians.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// One run of a child process.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub wall: Duration,
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

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &[Duration]) -> Duration {
    assert!(!values.is_empty(), "a median needs at least one value");
    let mut sorted = values.to_vec();
    sorted.sort();
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2
    }
}

/// Times `f` `runs` times and returns the median.
pub fn median_of(
    runs: usize,
    mut f: impl FnMut() -> anyhow::Result<Duration>,
) -> anyhow::Result<Duration> {
    let samples = (0..runs).map(|_| f()).collect::<anyhow::Result<Vec<_>>>()?;
    Ok(median(&samples))
}

/// Human units: µs under a millisecond, ms under ten seconds, seconds above.
pub fn show(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1_000.0 {
        format!("{micros:.0} µs")
    } else if micros < 10_000_000.0 {
        format!("{:.1} ms", micros / 1_000.0)
    } else {
        format!("{:.2} s", micros / 1e6)
    }
}

pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(5), ms(1), ms(3)]), ms(3));
        assert_eq!(
            median(&[ms(4), ms(1), ms(3), ms(2)]),
            Duration::from_micros(2_500)
        );
    }
}
