//! Ports for the servers of a test cluster. Test binaries run side by side (`make test` runs
//! three at once, the fleet tests start three clusters each), and a port found free by binding
//! port 0 and letting go is free only until someone else takes it: another test process
//! choosing the same way, or any outgoing connection, whose local port the kernel takes from
//! the same ephemeral range. So ports come from below that range, where no connection's local
//! port lands, and each is claimed for the life of this process by an exclusive lock on a file
//! of its own, which the kernel lets go when the process ends. (A claim by file creation, with
//! a dead holder's file taken over, let two processes take over one stale claim at once: both
//! started an etcd on the port, and one found it in use.)

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
    std::env::temp_dir().join("rollout-ext-port-locks")
}

/// The claims' files, held open (and locked) for the life of this process.
static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// Claims `port` for this process: true when no live process holds it, this one included.
fn claim(dir: &Path, port: u16) -> bool {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()));
    // Each open is a lock of its own: a second claim of this process conflicts with the first.
    match file.map(|f| f.try_lock().map(|()| f)) {
        Ok(Ok(f)) => {
            HELD.lock().unwrap().push(f);
            true
        }
        _ => false,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_claimed_once_and_its_lock_goes_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        assert!(claim(dir.path(), 20_001));
        assert!(!claim(dir.path(), 20_001), "held by this process already");
        assert!(claim(dir.path(), 20_002));
        // The holder gone (its file closed, as at a process's end): the port is free again.
        HELD.lock().unwrap().clear();
        assert!(claim(dir.path(), 20_001));
        let [a, b] = free_ports::<2>().unwrap();
        assert_ne!(a, b);
    }
}
