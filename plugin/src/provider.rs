//! How an instance is terminated or surged.
//!
//! - `exec`: the site's own commands, given as argument lists with `{node}`, `{providerID}` and
//!   `{group}` substituted per argument (never through a shell, so a name cannot inject anything);
//!   exit code and output are checked.
//! - `deleteNode`: deletes the Node object, for clusters whose autoscaler or machine controller
//!   replaces what disappears. It cannot surge.

use std::process::Stdio;
use std::time::Duration;

use crate::cluster::{Cluster, ClusterError};
pub use crate::policy::provider::{ExecSpec, ProviderSpec};

/// How much of a failed command's output an error quotes.
const QUOTED_OUTPUT: usize = 2000;

/// The instance a provider acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub node: String,
    pub provider_id: String,
    pub group: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("`{command}` could not start: {message}")]
    Spawn { command: String, message: String },
    #[error("`{command}` failed ({status}): {output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error("`{command}` did not finish within {timeout:?}; it was killed")]
    Timeout { command: String, timeout: Duration },
    #[error(
        "the {0} provider cannot surge: set maxSurge to 0, or use an exec provider with a detach command"
    )]
    CannotSurge(&'static str),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// A provider ready to act.
#[derive(Debug, Clone)]
pub enum Provider {
    Exec {
        terminate: Vec<String>,
        detach: Option<Vec<String>>,
        timeout: Duration,
    },
    DeleteNode,
}

impl Provider {
    pub fn from_spec(spec: &ProviderSpec) -> Result<Provider, String> {
        spec.validate()?;
        Ok(match spec {
            ProviderSpec::DeleteNode {} => Provider::DeleteNode,
            ProviderSpec::Exec(e) => Provider::Exec {
                terminate: e.terminate.clone(),
                detach: e.detach.clone(),
                timeout: match &e.timeout {
                    Some(t) => crate::policy::parse_duration(t)?,
                    None => Duration::from_secs(300),
                },
            },
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Provider::Exec { .. } => "exec",
            Provider::DeleteNode => "deleteNode",
        }
    }

    pub fn can_surge(&self) -> bool {
        matches!(
            self,
            Provider::Exec {
                detach: Some(_),
                ..
            }
        )
    }

    /// Terminates the instance. Returns what the command printed, if anything.
    pub async fn terminate(
        &self,
        cluster: &Cluster,
        target: &Target,
    ) -> Result<String, ProviderError> {
        match self {
            Provider::Exec {
                terminate, timeout, ..
            } => run(terminate, target, *timeout).await,
            Provider::DeleteNode => {
                cluster.delete_node(&target.node).await?;
                Ok(String::new())
            }
        }
    }

    /// Detaches the instance so that a replacement boots before it goes.
    pub async fn detach(&self, target: &Target) -> Result<String, ProviderError> {
        match self {
            Provider::Exec {
                detach: Some(detach),
                timeout,
                ..
            } => run(detach, target, *timeout).await,
            _ => Err(ProviderError::CannotSurge(self.name())),
        }
    }
}

/// Substitutes the target into each argument.
pub fn render(template: &[String], target: &Target) -> Vec<String> {
    template
        .iter()
        .map(|arg| {
            arg.replace("{node}", &target.node)
                .replace("{providerID}", &target.provider_id)
                .replace("{group}", &target.group)
        })
        .collect()
}

fn quote(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    let text = text.trim();
    if text.len() <= QUOTED_OUTPUT {
        return text.to_string();
    }
    let mut end = QUOTED_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

async fn run(
    template: &[String],
    target: &Target,
    timeout: Duration,
) -> Result<String, ProviderError> {
    let argv = render(template, target);
    let command = argv.join(" ");
    let mut child = tokio::process::Command::new(&argv[0]);
    child
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a Ctrl-C at the terminal reaches the plugin, which lets the
        // call finish (or, at a second Ctrl-C, drops it and so kills it), not the command.
        .process_group(0)
        .kill_on_drop(true);
    let child = child.spawn().map_err(|e| ProviderError::Spawn {
        command: command.clone(),
        message: e.to_string(),
    })?;
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => {
            return Err(ProviderError::Spawn {
                command,
                message: e.to_string(),
            });
        }
        Err(_) => return Err(ProviderError::Timeout { command, timeout }),
    };
    if !output.status.success() {
        let mut text = quote(&output.stderr);
        if text.is_empty() {
            text = quote(&output.stdout);
        }
        return Err(ProviderError::Failed {
            command,
            status: output.status.to_string(),
            output: text,
        });
    }
    Ok(quote(&output.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(terminate: &[&str]) -> ProviderSpec {
        ProviderSpec::Exec(ExecSpec {
            terminate: terminate.iter().map(|s| s.to_string()).collect(),
            detach: None,
            timeout: None,
        })
    }

    fn target() -> Target {
        Target {
            node: "n1; rm -rf /".into(),
            provider_id: "aws:///a/i-1".into(),
            group: "nodes".into(),
        }
    }

    #[test]
    fn templates_substitute_per_argument() {
        let argv = render(
            &[
                "cloud".into(),
                "kill".into(),
                "--id={providerID}".into(),
                "{node}".into(),
            ],
            &target(),
        );
        assert_eq!(argv, ["cloud", "kill", "--id=aws:///a/i-1", "n1; rm -rf /"]);
    }

    #[test]
    fn templates_are_validated() {
        assert!(exec(&["x", "{node}"]).validate().is_ok());
        assert!(exec(&[]).validate().unwrap_err().contains("empty"));
        assert!(
            exec(&["x", "{nodename}"])
                .validate()
                .unwrap_err()
                .contains("unknown placeholder {nodename}")
        );
        assert!(
            exec(&["x", "{node"])
                .validate()
                .unwrap_err()
                .contains("unclosed")
        );
    }

    #[tokio::test]
    async fn a_command_is_run_without_a_shell_and_checked() {
        let ok = Provider::from_spec(&exec(&["echo", "bye {node}"])).unwrap();
        let Provider::Exec { terminate, .. } = &ok else {
            unreachable!()
        };
        assert_eq!(
            run(terminate, &target(), Duration::from_secs(5))
                .await
                .unwrap(),
            "bye n1; rm -rf /"
        );

        let failing = vec![
            "sh".to_string(),
            "-c".into(),
            "echo no such instance >&2; exit 3".into(),
        ];
        match run(&failing, &target(), Duration::from_secs(5)).await {
            Err(ProviderError::Failed { status, output, .. }) => {
                assert!(status.contains('3'), "{status}");
                assert_eq!(output, "no such instance");
            }
            other => panic!("expected a failure, got {other:?}"),
        }

        let slow = vec!["sleep".to_string(), "10".into()];
        assert!(matches!(
            run(&slow, &target(), Duration::from_millis(100)).await,
            Err(ProviderError::Timeout { .. })
        ));

        let missing = vec!["/no/such/program".to_string()];
        assert!(matches!(
            run(&missing, &target(), Duration::from_secs(1)).await,
            Err(ProviderError::Spawn { .. })
        ));
    }

    #[test]
    fn only_exec_with_detach_can_surge() {
        assert!(!Provider::DeleteNode.can_surge());
        assert!(!Provider::from_spec(&exec(&["x"])).unwrap().can_surge());
        let with_detach = ProviderSpec::Exec(ExecSpec {
            terminate: vec!["x".into()],
            detach: Some(vec!["y".into(), "{node}".into()]),
            timeout: Some("30s".into()),
        });
        assert!(Provider::from_spec(&with_detach).unwrap().can_surge());
    }
}
