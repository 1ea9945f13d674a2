//! Ports for the servers of a test cluster. Test binaries run side by side (`make test` runs
//! three at once, the fleet tests start three clusters each), and a port found free by binding
//! port 0 and letting go is free only until someone else takes it: another test process
//! choosing the same way, or any outgoing connection, whose local port the kernel takes from
//! the same ephemeral range. So ports come from below that range, where no connection's local
//! port lands, and each is claimed for the life of this process by a file only one process can
//! create; a claim whose process is gone is taken over.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// Where no ephemeral range lies (Linux's default starts at 32768).
const LOWEST: u16 = 20_000;

/// The ports below the kernel's ephemeral range, from [`LOWEST`].
fn range() -> std::ops::Range<u16> {
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    LOWEST..first_ephemeral.max(LOWEST + 1_000)
}

fn claims_dir() -> PathBuf {
    std::env::temp_dir().join("rollout-ext-ports")
}

/// Claims `port` for this process: true when no live process holds it.
fn claim(dir: &Path, port: u16) -> bool {
    let file = dir.join(port.to_string());
    let me = std::process::id().to_string();
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
        {
            Ok(mut f) => return std::io::Write::write_all(&mut f, me.as_bytes()).is_ok(),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(&file).unwrap_or_default();
                let alive = holder.trim().parse::<u32>().is_ok_and(|pid| {
                    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
                });
                // Empty: its holder is writing it now.
                if alive || holder.is_empty() {
                    return false;
                }
                // Its holder is gone: the claim is taken over (one remover wins, then one
                // creator).
                let _ = std::fs::remove_file(&file);
            }
            Err(_) => return false,
        }
    }
    false
}

/// `N` distinct ports, each free now and claimed by this process.
pub fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let dir = claims_dir();
    std::fs::create_dir_all(&dir)?;
    let range = range();
    let span = u32::from(range.end - range.start);
    // Processes start their search at different places, so they seldom meet.
    let start = (std::process::id().wrapping_mul(2_654_435_761)) % span;
    let mut ports = [0; N];
    let mut found = 0;
    for step in 0..span {
        if found == N {
            break;
        }
        let port = range.start + ((start + step) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && claim(&dir, port) {
            ports[found] = port;
            found += 1;
        }
    }
    anyhow::ensure!(
        found == N,
        "no {N} free ports between {} and {}",
        range.start,
        range.end
    );
    Ok(ports)
}
