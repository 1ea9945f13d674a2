//! One cluster's rotation, run as this binary's own `nodes --yes` in a child process: each
//! cluster keeps its own lock, records, pause/resume/abort and output, exactly as a rotation
//! started by hand. The child dies with the fleet (a fleet killed is a rotation killed, which
//! the next run resumes from its lock). A rotation handed to the cluster (`--in-cluster`) is
//! followed with `logs -f`, which ends with the run's own exit code.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::io::{AsyncBufReadExt, BufReader};

use super::FleetOutput;

/// How a cluster's rotation is run: the program and its arguments, and for a rotation handed to
/// the cluster, the arguments (global flags and context) of the `logs -f` that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub follow: Option<Vec<String>>,
}

/// A run handed to the cluster: its Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOver {
    pub namespace: String,
    pub job: String,
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
    /// The process running now (0: none yet).
    #[cfg_attr(not(unix), allow(dead_code))]
    pid: Arc<AtomicU32>,
}

impl Child {
    /// SIGTERM: the rotation stops at its next safe point, as on Ctrl-C (a `logs -f` stops
    /// following; the run in the cluster goes on). On Windows the console's Ctrl-C reaches the
    /// children themselves, which stop so on their own.
    pub fn terminate(&self) {
        #[cfg(unix)]
        match self.pid.load(Ordering::SeqCst) {
            0 => {}
            // SAFETY: kill has no memory-safety preconditions; the pid is our child's, and it
            // is not reaped before its task ends.
            pid => unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            },
        }
    }
}

/// How one process ended, and the Job it said it handed the run to.
struct ProcessEnd {
    code: Option<i32>,
    error: Option<String>,
    handed: Option<HandedOver>,
}

/// Starts the rotation of `cluster` (or, for `running`, follows the run already handed to the
/// cluster); its output lines go to `output` as they come. The task ends with the rotation.
pub fn spawn(
    cluster: &str,
    command: &ClusterCommand,
    running: Option<HandedOver>,
    output: Arc<dyn FleetOutput>,
) -> (Child, impl Future<Output = ChildExit> + Send + 'static) {
    let pid = Arc::new(AtomicU32::new(0));
    let child = Child { pid: pid.clone() };
    let (name, command) = (cluster.to_string(), command.clone());
    let task = async move {
        let exit = |end: ProcessEnd| ChildExit {
            cluster: name.clone(),
            code: end.code,
            error: end.error,
        };
        let run = |args: Vec<String>| run_process(&name, &command.program, args, &pid, &output);
        let handed = match running {
            Some(handed) => handed,
            None => {
                let end = run(command.args.clone()).await;
                match (&command.follow, end.code, end.handed.clone()) {
                    (Some(_), Some(0), Some(handed)) => handed,
                    (Some(_), Some(0), None) => {
                        return ChildExit {
                            error: Some("the hand-over named no Job to follow".into()),
                            code: Some(1),
                            ..exit(end)
                        };
                    }
                    _ => return exit(end),
                }
            }
        };
        let mut args = command.follow.clone().unwrap_or_default();
        args.extend(["logs", "-f", &handed.job, "-n", &handed.namespace].map(String::from));
        exit(run(args).await)
    };
    (child, task)
}

/// Runs `program` with `args` to its end, its lines to `output`, its pid kept in `pid`.
async fn run_process(
    cluster: &str,
    program: &std::path::Path,
    args: Vec<String>,
    pid: &AtomicU32,
    output: &Arc<dyn FleetOutput>,
) -> ProcessEnd {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&args)
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
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            return ProcessEnd {
                code: Some(1),
                error: Some(format!("cannot start {}: {e}", program.display())),
                handed: None,
            };
        }
    };
    pid.store(child.id().unwrap_or(0), Ordering::SeqCst);
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let out = async {
        let mut handed = None;
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            handed = handed.or_else(|| handed_over(&line));
            output.cluster_line(cluster, &line, false);
        }
        handed
    };
    let err = async {
        let mut last_error = None;
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(error) = line.strip_prefix("error: ") {
                last_error = Some(error.to_string());
            }
            output.cluster_line(cluster, &line, true);
        }
        last_error
    };
    let (handed, error) = tokio::join!(out, err);
    let code = child.wait().await.ok().and_then(|s| s.code());
    pid.store(0, Ordering::SeqCst);
    ProcessEnd {
        code,
        error,
        handed,
    }
}

/// The Job a `handed-over` event (of `nodes --yes --in-cluster -o json`) names.
fn handed_over(line: &str) -> Option<HandedOver> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    (event["event"] == "handed-over").then_some(())?;
    Some(HandedOver {
        namespace: event["namespace"].as_str()?.to_string(),
        job: event["job"].as_str()?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_a_hand_over_names_is_read_from_its_event() {
        let line = r#"{"event":"handed-over","namespace":"kube-system","job":"rollout-ext-run-1","command":[]}"#;
        assert_eq!(
            handed_over(line),
            Some(HandedOver {
                namespace: "kube-system".into(),
                job: "rollout-ext-run-1".into()
            })
        );
        assert_eq!(handed_over(r#"{"event":"cordoned"}"#), None);
        assert_eq!(handed_over("handed to the cluster: Job a/b"), None);
    }
}
