//! How an instance is terminated or surged.
//!
//! - `exec`: the site's own commands, given as argument lists with `{node}`, `{providerID}`,
//!   `{group}` and the providerID's fields (`{aws.instanceID}`, `{gce.zone}`, … see
//!   [`provider_id`]) substituted per argument (never through a shell, so a name cannot inject
//!   anything); exit code and output are checked.
//! - `deleteNode`: deletes the Node object, for clusters whose autoscaler or machine controller
//!   replaces what disappears. It cannot surge.
//! - `clusterAPI`: removes and surges Cluster API Machines through the API ([`cluster_api`]).
//! - `karpenter`: deletes the node's NodeClaim; Karpenter's finalizer terminates the instance,
//!   and Karpenter launches nodes for the evicted pods that wait. It cannot surge.

pub mod cluster_api;
mod provider_id;

use std::process::Stdio;
use std::time::Duration;

use crate::cluster::{Cluster, ClusterError};
pub use crate::policy::provider::{CapiTerminate, ExecSpec, ProviderSpec};
use crate::snapshot::MachineRef;

/// How much of a failed command's output an error quotes.
const QUOTED_OUTPUT: usize = 2000;

/// The instance a provider acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub node: String,
    pub provider_id: String,
    pub group: String,
    /// Its Cluster API Machine, if it has one.
    pub machine: Option<MachineRef>,
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
    #[error(transparent)]
    ProviderId(Box<UnfitProviderId>),
    #[error(
        "group {group} has no provider: set spec.provider, or a provider for it under spec.groups, in the policy file, or pass --provider delete-node"
    )]
    None { group: String },
    #[error(
        "the {0} provider cannot surge: set maxSurge to 0, or use an exec provider with a detach command"
    )]
    CannotSurge(&'static str),
    #[error(
        "node {node} has no Cluster API Machine (no Machine names it in status.nodeRef, and it has no cluster.x-k8s.io/machine annotation): the clusterAPI provider cannot remove it"
    )]
    NoMachine { node: String },
    #[error("{what} is not there to scale")]
    NoGroupObject { what: String },
    #[error(
        "Machine {machine} was still there after {timeout:?}: see its conditions (kubectl describe machine); the next run waits for it again"
    )]
    MachineStays { machine: String, timeout: Duration },
    #[error(
        "{what} did not have its {replicas} Machines after {timeout:?}, so scaling it down could remove none: see its MachineSet's conditions; the next run waits for them again"
    )]
    ScaleUpPending {
        what: String,
        replicas: usize,
        timeout: Duration,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// A template names a field the node's providerID does not have.
#[derive(Debug, thiserror::Error)]
#[error(
    "the provider command uses {placeholder}, but node {node} has providerID {provider_id:?}, not of the shape {shape}: use a template for this cloud, or {{node}}, {{providerID}} and {{group}}"
)]
pub struct UnfitProviderId {
    node: String,
    provider_id: String,
    placeholder: String,
    shape: String,
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
    ClusterApi {
        terminate: CapiTerminate,
        timeout: Duration,
    },
    Karpenter,
}

/// The provider of each group: its own (`groups[].provider`), else the policy's
/// (`spec.provider`), else none; `--provider` stands for every group.
#[derive(Debug, Clone)]
pub struct Providers {
    default: Option<Provider>,
    by_group: std::collections::BTreeMap<String, Provider>,
}

impl Providers {
    /// One provider for every group.
    pub fn one(provider: Provider) -> Providers {
        Providers {
            default: Some(provider),
            by_group: Default::default(),
        }
    }

    /// The providers `policy` names; `None` when it names none at all.
    pub fn from_policy(policy: &crate::policy::Policy) -> Result<Option<Providers>, String> {
        let default = policy
            .provider
            .as_ref()
            .map(Provider::from_spec)
            .transpose()?;
        let mut by_group = std::collections::BTreeMap::new();
        for g in &policy.groups {
            if let Some(spec) = &g.provider {
                by_group.insert(g.name.clone(), Provider::from_spec(spec)?);
            }
        }
        Ok((default.is_some() || !by_group.is_empty()).then_some(Providers { default, by_group }))
    }

    /// Whether any group's provider needs Cluster API Machines in the snapshots.
    pub fn reads_machines(&self) -> bool {
        self.any(Provider::reads_machines)
    }

    /// Whether any group's provider is `karpenter`, whose NodePools a plan reads.
    pub fn reads_node_pools(&self) -> bool {
        self.any(Provider::judges_by_pods)
    }

    /// `cluster`, reading in its snapshots what these providers work with.
    pub fn inventory(&self, mut cluster: Cluster) -> Cluster {
        if self.reads_machines() {
            cluster = cluster.with_machines();
        }
        if self.reads_node_pools() {
            cluster = cluster.with_node_pools();
        }
        cluster
    }

    fn any(&self, test: impl Fn(&Provider) -> bool) -> bool {
        self.default.iter().chain(self.by_group.values()).any(test)
    }

    /// The provider of `group`.
    pub fn for_group(&self, group: &str) -> Result<&Provider, ProviderError> {
        self.by_group
            .get(group)
            .or(self.default.as_ref())
            .ok_or_else(|| ProviderError::None {
                group: group.to_string(),
            })
    }
}

impl Provider {
    pub fn from_spec(spec: &ProviderSpec) -> Result<Provider, String> {
        spec.validate()?;
        Ok(match spec {
            ProviderSpec::DeleteNode {} => Provider::DeleteNode,
            ProviderSpec::Karpenter {} => Provider::Karpenter,
            ProviderSpec::ClusterApi(c) => Provider::ClusterApi {
                terminate: c.terminate,
                timeout: match &c.timeout {
                    Some(t) => crate::policy::parse_duration(t)?,
                    None => Duration::from_secs(600),
                },
            },
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
            Provider::ClusterApi { .. } => "clusterAPI",
            Provider::Karpenter => "karpenter",
        }
    }

    pub fn can_surge(&self) -> bool {
        matches!(
            self,
            Provider::Exec {
                detach: Some(_),
                ..
            } | Provider::ClusterApi { .. }
        )
    }

    /// Why a group with a surge cannot have this provider, if it cannot.
    pub fn surge_refusal(&self, group: &str) -> Option<String> {
        match self {
            _ if self.can_surge() => None,
            Provider::Karpenter => Some(format!(
                "group {group} has maxSurge > 0, but the karpenter provider cannot surge: Karpenter launches nodes for pods that wait, not ahead of them; set maxSurge to 0 for it"
            )),
            _ => Some(format!(
                "group {group} has maxSurge > 0, but the {} provider cannot surge: set maxSurge to 0, or use an exec provider with a detach command, or clusterAPI",
                self.name()
            )),
        }
    }

    /// Whether snapshots must include Cluster API Machines for this provider to act.
    pub fn reads_machines(&self) -> bool {
        matches!(self, Provider::ClusterApi { .. })
    }

    /// Whether the group's replacements are judged by the pods evicted from each batch being
    /// Ready again rather than by the group's size: its node manager launches nodes for
    /// pods, not to keep a size.
    pub fn judges_by_pods(&self) -> bool {
        matches!(self, Provider::Karpenter)
    }

    /// Whether the provider's commands can be written for `target`: every placeholder filled
    /// from its providerID. Asked before a group's first change, so a template that does not
    /// fit the cluster's nodes stops the run before anything happened to them.
    pub fn check(&self, target: &Target) -> Result<(), ProviderError> {
        match self {
            Provider::Exec {
                terminate, detach, ..
            } => {
                render(terminate, target)?;
                if let Some(detach) = detach {
                    render(detach, target)?;
                }
            }
            Provider::ClusterApi { .. } => {
                cluster_api::machine_of(target)?;
            }
            Provider::DeleteNode | Provider::Karpenter => {}
        }
        Ok(())
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
                // (A Node already gone is done.)
                cluster.delete_node(&target.node).await?;
                Ok(String::new())
            }
            Provider::ClusterApi { terminate, timeout } => {
                cluster_api::terminate(cluster, target, *terminate, *timeout).await
            }
            Provider::Karpenter => {
                match cluster
                    .node_claim_of(&target.provider_id, &target.node)
                    .await?
                {
                    Some(claim) => {
                        cluster.delete_node_claim(&claim).await?;
                        Ok(format!("deleted NodeClaim {claim}"))
                    }
                    None => Ok(String::new()),
                }
            }
        }
    }

    /// Detaches the instance so that a replacement boots before it goes.
    pub async fn detach(
        &self,
        cluster: &Cluster,
        target: &Target,
    ) -> Result<String, ProviderError> {
        match self {
            Provider::Exec {
                detach: Some(detach),
                timeout,
                ..
            } => run(detach, target, *timeout).await,
            Provider::ClusterApi { .. } => cluster_api::detach(cluster, target).await,
            _ => Err(ProviderError::CannotSurge(self.name())),
        }
    }
}

/// Substitutes the target into each argument: its node, providerID and group, and the fields
/// of its providerID the template names.
pub fn render(template: &[String], target: &Target) -> Result<Vec<String>, ProviderError> {
    template
        .iter()
        .map(|arg| {
            let mut arg = arg
                .replace("{node}", &target.node)
                .replace("{providerID}", &target.provider_id)
                .replace("{group}", &target.group);
            for (placeholder, _) in provider_id::FIELDS {
                if !arg.contains(placeholder) {
                    continue;
                }
                let value =
                    provider_id::field(&target.provider_id, placeholder).map_err(|shape| {
                        ProviderError::ProviderId(Box::new(UnfitProviderId {
                            node: target.node.clone(),
                            provider_id: target.provider_id.clone(),
                            placeholder: placeholder.to_string(),
                            shape: shape.to_string(),
                        }))
                    })?;
                arg = arg.replace(placeholder, &value);
            }
            Ok(arg)
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

/// Windows' process creation flag for a process group of its own, which a console's Ctrl-C
/// does not reach.
#[cfg(windows)]
const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

async fn run(
    template: &[String],
    target: &Target,
    timeout: Duration,
) -> Result<String, ProviderError> {
    let argv = render(template, target)?;
    let command = argv.join(" ");
    let mut child = tokio::process::Command::new(&argv[0]);
    child
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group: a Ctrl-C at the terminal reaches the plugin, which lets the call
    // finish (or, at a second Ctrl-C, drops it and so kills it), not the command.
    #[cfg(unix)]
    child.process_group(0);
    #[cfg(windows)]
    child.creation_flags(CREATE_NEW_PROCESS_GROUP);
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
            machine: None,
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
        )
        .unwrap();
        assert_eq!(argv, ["cloud", "kill", "--id=aws:///a/i-1", "n1; rm -rf /"]);
    }

    #[test]
    fn cloud_fields_come_from_the_provider_id_or_stop_before_anything_runs() {
        let aws = Target {
            provider_id: "aws:///us-east-1c/i-0abc".into(),
            ..target()
        };
        let template: Vec<String> = [
            "aws",
            "--region",
            "{aws.region}",
            "--instance-ids",
            "{aws.instanceID}",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            render(&template, &aws).unwrap(),
            ["aws", "--region", "us-east-1", "--instance-ids", "i-0abc"]
        );
        let gce = Target {
            provider_id: "gce://p/us-central1-b/n1".into(),
            ..target()
        };
        let provider = Provider::from_spec(&exec(&["aws", "{aws.instanceID}"])).unwrap();
        let err = provider.check(&gce).unwrap_err().to_string();
        assert!(
            err.contains("uses {aws.instanceID}, but node n1; rm -rf / has providerID \"gce://p/us-central1-b/n1\", not of the shape aws:///ZONE/INSTANCE-ID"),
            "{err}"
        );
    }

    #[test]
    fn every_provider_id_field_is_a_placeholder_the_policy_allows() {
        for (placeholder, _) in provider_id::FIELDS {
            assert!(
                crate::policy::provider::PLACEHOLDERS.contains(placeholder),
                "{placeholder}"
            );
        }
        assert_eq!(
            crate::policy::provider::PLACEHOLDERS.len(),
            provider_id::FIELDS.len() + 3
        );
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
