//! One cluster's rotation, run as this binary's own `nodes --yes` in a child process: each
//! cluster keeps its own lock, records, pause/resume/abort and output, exactly as a rotation
//! started by hand. The child dies with the fleet (a fleet killed is a rotation killed, which
//! the next run resumes from its lock).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::FleetOutput;

/// How a cluster's rotation is run: the program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// How a child ended: its exit code (none: killed by a signal) and the last error it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildExit {
    pub cluster: String,
    pub code: Option<i32>,
    pub error: Option<String>,
}

/// A running child, and how to ask it to stop at a safe point.
pub struct Child {
    pub pid: Option<u32>,
}

impl Child {
    /// SIGTERM: the rotation stops at its next safe point, as on Ctrl-C.
    pub fn terminate(&self) {
        #[cfg(unix)]
        if let Some(pid) = self.pid {
            // SAFETY: kill has no memory-safety preconditions; the pid is our child's, and it
            // is not reaped before its task ends.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
    }
}

/// Starts `command` for `cluster`, its output lines going to `output` as they come; the
/// returned task ends with the child.
pub fn spawn(
    cluster: &str,
    command: &ClusterCommand,
    output: Arc<dyn FleetOutput>,
) -> std::io::Result<(Child, impl Future<Output = ChildExit> + Send + 'static)> {
    let mut cmd = tokio::process::Command::new(&command.program);
    cmd.args(&command.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: only async-signal-safe calls (prctl, getppid, _exit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The fleet died before the line above: do not run orphaned.
                if libc::getppid() != parent {
                    libc::_exit(137);
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let name = cluster.to_string();
    let task = async move {
        let out = {
            let (name, output) = (name.clone(), output.clone());
            async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    output.cluster_line(&name, &line, false);
                }
            }
        };
        let err = {
            let (name, output) = (name.clone(), output.clone());
            async move {
                let mut last_error = None;
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(error) = line.strip_prefix("error: ") {
                        last_error = Some(error.to_string());
                    }
                    output.cluster_line(&name, &line, true);
                }
                last_error
            }
        };
        let ((), error) = tokio::join!(out, err);
        let code = child.wait().await.ok().and_then(|s| s.code());
        ChildExit {
            cluster: name,
            code,
            error,
        }
    };
    Ok((Child { pid }, task))
}
