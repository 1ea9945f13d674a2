//! The `provider` section of a policy: which commands terminate and detach instances, as plain
//! data checked at load. Running them is `crate::provider`'s job.

use serde::Deserialize;

/// What a provider command may contain besides literal text: the node, its providerID and
/// group, and the fields of a providerID of AWS, GCE or Azure (`crate::provider`'s
/// `provider_id::FIELDS`, which checks this list in its tests).
pub const PLACEHOLDERS: &[&str] = &[
    "{node}",
    "{providerID}",
    "{group}",
    "{aws.instanceID}",
    "{aws.zone}",
    "{aws.region}",
    "{gce.project}",
    "{gce.zone}",
    "{gce.region}",
    "{gce.instance}",
    "{gce.instanceGroup}",
    "{azure.subscription}",
    "{azure.resourceGroup}",
    "{azure.scaleSet}",
    "{azure.instanceID}",
];

/// The `provider` section of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum ProviderSpec {
    Exec(ExecSpec),
    DeleteNode {},
    #[serde(rename = "clusterAPI")]
    ClusterApi(ClusterApiSpec),
    Karpenter {},
}

/// The `clusterAPI` provider: instances are Cluster API Machines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterApiSpec {
    /// How a Machine goes (default `ScaleDown`).
    #[serde(default)]
    pub terminate: CapiTerminate,
    /// How long a Machine may take to go (default 10m).
    #[serde(default)]
    pub timeout: Option<String>,
}

/// How the `clusterAPI` provider removes a Machine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum CapiTerminate {
    /// Mark it `cluster.x-k8s.io/delete-machine` and scale its MachineDeployment (or
    /// MachineSet) down by one, so that exactly that Machine goes; then back up, so that a
    /// new one replaces it.
    #[default]
    ScaleDown,
    /// Delete the Machine; its MachineSet creates the replacement at once.
    DeleteMachine,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecSpec {
    /// Terminates an instance; its group replaces it unless it was detached.
    pub terminate: Vec<String>,
    /// Detaches an instance so that its group boots a replacement first (a surge).
    #[serde(default)]
    pub detach: Option<Vec<String>>,
    /// How long one command may run (default 5m).
    #[serde(default)]
    pub timeout: Option<String>,
}

impl ProviderSpec {
    /// Checks templates: non-empty, known placeholders only.
    pub fn validate(&self) -> Result<(), String> {
        let exec = match self {
            ProviderSpec::Exec(exec) => exec,
            ProviderSpec::ClusterApi(capi) => {
                if let Some(t) = &capi.timeout {
                    super::parse_duration(t)
                        .map_err(|e| format!("provider clusterAPI timeout: {e}"))?;
                }
                return Ok(());
            }
            ProviderSpec::DeleteNode {} | ProviderSpec::Karpenter {} => return Ok(()),
        };
        for (name, template) in [
            ("terminate", Some(&exec.terminate)),
            ("detach", exec.detach.as_ref()),
        ] {
            let Some(template) = template else { continue };
            if template.is_empty() {
                return Err(format!("provider exec {name}: the command is empty"));
            }
            for arg in template {
                let mut rest = arg.as_str();
                while let Some(start) = rest.find('{') {
                    let end = rest[start..]
                        .find('}')
                        .ok_or_else(|| format!("provider exec {name}: unclosed '{{' in {arg:?}"))?;
                    let placeholder = &rest[start..start + end + 1];
                    if !PLACEHOLDERS.contains(&placeholder) {
                        return Err(format!(
                            "provider exec {name}: unknown placeholder {placeholder} in {arg:?}; expected {}",
                            PLACEHOLDERS.join(", ")
                        ));
                    }
                    rest = &rest[start + end + 1..];
                }
            }
        }
        if let Some(t) = &exec.timeout {
            super::parse_duration(t).map_err(|e| format!("provider exec timeout: {e}"))?;
        }
        Ok(())
    }
}
