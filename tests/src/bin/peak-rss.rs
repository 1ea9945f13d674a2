//! `peak-rss OUT -- PROGRAM [ARGS...]`: runs PROGRAM (stdio inherited), writes its peak RSS in
//! KiB (from `wait4`) to OUT, and exits as it did (128 + the signal that killed it).
//!
//! Why a process between: Linux carries a process's peak RSS across `exec` from the memory it
//! had before, and a child spawned by a benchmark starts with the benchmark's memory; a child of
//! this small process reports its own peak, not the benchmark's (which holds a whole test
//! cluster's state, and was once reported as the plugin's).

use std::process::Command;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [out, dashes, program, rest @ ..] = args.as_slice() else {
        bail!("usage: peak-rss OUT -- PROGRAM [ARGS...]");
    };
    anyhow::ensure!(dashes == "--", "usage: peak-rss OUT -- PROGRAM [ARGS...]");
    let child = Command::new(program)
        .args(rest)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for the child just spawned and reaps it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
        bail!("waiting for {program}: {}", std::io::Error::last_os_error());
    }
    std::fs::write(out, usage.ru_maxrss.to_string()).with_context(|| format!("writing {out}"))?;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    std::process::exit(code)
}
