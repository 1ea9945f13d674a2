//! An OCI registry for the hook-module tests: Debian's `docker-registry` (2.8, cached by
//! `tests/cluster/install-server.sh docker-registry 2.8.2 5000`) on a loopback port of its own,
//! storing into a temporary directory, optionally behind basic auth.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::cluster::Processes;

const REGISTRY_VERSION: &str = "2.8.2";

/// The cached registry binary.
pub fn registry_binary() -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
        });
    let binary = cache.join(format!(
        "rollout-ext/docker-registry-{REGISTRY_VERSION}/bin/docker-registry"
    ));
    if !binary.exists() {
        bail!(
            "{} is missing: run `bash tests/cluster/install-server.sh docker-registry {REGISTRY_VERSION} 5000` (the README's test command does)",
            binary.display()
        );
    }
    Ok(binary)
}

/// A running registry; stopped when dropped.
pub struct OciRegistry {
    processes: Processes,
    port: u16,
    _dir: tempfile::TempDir,
}

impl OciRegistry {
    /// Starts a registry anyone may push to and pull from.
    pub fn start() -> anyhow::Result<OciRegistry> {
        Self::start_with(None)
    }

    /// Starts a registry that asks for `user`'s password, given as an htpasswd (bcrypt) line.
    pub fn start_with_login(htpasswd_line: &str) -> anyhow::Result<OciRegistry> {
        Self::start_with(Some(htpasswd_line))
    }

    fn start_with(htpasswd: Option<&str>) -> anyhow::Result<OciRegistry> {
        let binary = registry_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("rollout-ext-registry-")
            .tempdir()?;
        let [port] = crate::cluster::free_ports()?;
        let auth = match htpasswd {
            Some(line) => {
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{line}\n"))?;
                format!(
                    "auth:\n  htpasswd: {{realm: tests, path: {}}}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
                dir.path().join("data").display()
            ),
        )?;
        let processes = Processes::new();
        processes.spawn(
            "docker-registry",
            &binary,
            &["serve".to_string(), config.display().to_string()],
            &dir.path().join("registry.log"),
        )?;
        let registry = OciRegistry {
            processes,
            port,
            _dir: dir,
        };
        registry.wait_until_up()?;
        Ok(registry)
    }

    /// `127.0.0.1:PORT`, the registry part of a reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/REPOSITORY_AND_TAG`.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.host())
    }

    /// Stops the registry: its port refuses connections from now on.
    pub fn stop(&self) {
        self.processes.kill("docker-registry");
    }

    /// Waits until `/v2/` answers (200, or 401 behind a login).
    fn wait_until_up(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.processes.check_alive()?;
            if let Ok(status) = self.status_of("/v2/")
                && (status == 200 || status == 401)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the registry did not answer on port {} within 30s",
                    self.port
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn status_of(&self, path: &str) -> anyhow::Result<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        let status = text.split_whitespace().nth(1).unwrap_or_default();
        Ok(status.parse()?)
    }
}
