//! The `clusterAPI` provider: instances are Cluster API Machines, groups their
//! MachineDeployments (or MachineSets), and everything goes through the API.
//!
//! A Machine is always marked `machine.cluster.x-k8s.io/exclude-node-draining` first: the
//! rotation drained its Node already, and a second drain by the Machine controller would only
//! wait. Then, by default (`ScaleDown`), it is marked `cluster.x-k8s.io/delete-machine` and,
//! once the group has all the Machines its replicas say (the last scale-up's too: see
//! [`await_scaled_up`]), the group's MachineDeployment (else MachineSet) is scaled down by one,
//! so that its MachineSet removes exactly that Machine; once it is gone the group is scaled
//! back up and a new Machine replaces it. Scaling the MachineSet under a MachineDeployment
//! instead would race the
//! MachineDeployment controller, which puts the MachineSet's replicas back, perhaps before
//! anything was removed. `DeleteMachine` deletes the Machine and lets its MachineSet replace
//! it at once.
//!
//! A surge scales the group up by one per detached Machine; terminating a detached Machine
//! scales it down without scaling back. What is scaled and not yet given back is recorded on
//! the scaled object itself ([`SCALED`]) in the same write as the replicas, so that calls are
//! idempotent: a stopped run's next one neither scales twice nor forgets to scale back.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ProviderError, Target};
use crate::cluster::machines::CapiKind;
use crate::cluster::{Cluster, ClusterError};
use crate::policy::provider::CapiTerminate;
use crate::snapshot::{DEPLOYMENT_LABEL, MachineRef};

/// Cluster API's mark of the Machine a MachineSet removes first when scaled down.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";
/// Cluster API's mark of a Machine whose Node its controller must not drain.
pub const EXCLUDE_NODE_DRAINING: &str = "machine.cluster.x-k8s.io/exclude-node-draining";
/// On the scaled MachineDeployment or MachineSet: what this tool changed of its replicas and
/// has yet to give back.
pub const SCALED: &str = "rollout-ext.io/scaled";
/// How often a scaling write refused for a concurrent change is read and tried again.
const CONFLICT_RETRIES: usize = 5;

/// The replicas this tool owes its group: one per surged Machine (scaled up for it), and the
/// Machines being removed by a scale-down, each with whether the group is to be scaled back.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Scaled {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    surged: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    removing: BTreeMap<String, bool>,
}

impl Scaled {
    fn of(object: &Value) -> Scaled {
        object["metadata"]["annotations"][SCALED]
            .as_str()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }

    /// A surge of `machine`: one more replica, once.
    fn surge(&mut self, machine: &str, replicas: &mut i64) -> bool {
        if self.surged.iter().any(|m| m == machine) {
            return false;
        }
        self.surged.push(machine.to_string());
        *replicas += 1;
        true
    }

    /// The scale-down that removes `machine`, once: scaled back afterwards unless it was a
    /// surge's.
    fn remove(&mut self, machine: &str, replicas: &mut i64) -> bool {
        if self.removing.contains_key(machine) {
            return false;
        }
        let surged = self.surged.iter().any(|m| m == machine);
        self.surged.retain(|m| m != machine);
        self.removing.insert(machine.to_string(), !surged);
        *replicas -= 1;
        true
    }

    /// `machine` is gone: its scale-down ends, and the replica comes back unless it was a
    /// surge's.
    fn removed(&mut self, machine: &str, replicas: &mut i64) -> bool {
        match self.removing.remove(machine) {
            None => false,
            Some(back) => {
                if back {
                    *replicas += 1;
                }
                true
            }
        }
    }
}

/// The Machine behind `target`.
pub(super) fn machine_of(target: &Target) -> Result<&MachineRef, ProviderError> {
    target
        .machine
        .as_ref()
        .ok_or_else(|| ProviderError::NoMachine {
            node: target.node.clone(),
        })
}

/// The object whose replicas are the group's size: its MachineDeployment, else its MachineSet.
fn scaled_object(machine: &MachineRef) -> (CapiKind, &str) {
    match (&machine.deployment, &machine.machine_set) {
        (Some(d), _) => (CapiKind::MachineDeployment, d),
        (None, Some(s)) => (CapiKind::MachineSet, s),
        (None, None) => (CapiKind::MachineSet, &machine.group),
    }
}

/// Applies `change` to the group's replicas and [`Scaled`] record in one write, read again and
/// retried when someone else changed the object meanwhile. `change` says whether anything is
/// to be written.
async fn rescale(
    cluster: &Cluster,
    machine: &MachineRef,
    change: impl Fn(&mut Scaled, &mut i64) -> bool,
) -> Result<(), ProviderError> {
    let (kind, name) = scaled_object(machine);
    let namespace = &machine.namespace;
    for _ in 0..CONFLICT_RETRIES {
        let Some(mut object) = cluster.get_capi(kind, namespace, name).await? else {
            return Err(ProviderError::NoGroupObject {
                what: format!("{} {namespace}/{name}", kind.kind()),
            });
        };
        let mut scaled = Scaled::of(&object);
        let mut replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
        if !change(&mut scaled, &mut replicas) {
            return Ok(());
        }
        object["spec"]["replicas"] = Value::from(replicas.max(0));
        let record = (scaled != Scaled::default())
            .then(|| Value::from(serde_json::to_string(&scaled).expect("records serialize")));
        let annotations = &mut object["metadata"]["annotations"];
        match (record, annotations.as_object_mut()) {
            (Some(record), Some(map)) => {
                map.insert(SCALED.into(), record);
            }
            (Some(record), None) => *annotations = serde_json::json!({ SCALED: record }),
            (None, Some(map)) => {
                map.remove(SCALED);
            }
            (None, None) => {}
        }
        match cluster.replace_capi(kind, namespace, &object).await {
            Ok(_) => return Ok(()),
            Err(ClusterError::Api { code: 409, .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ProviderError::NoGroupObject {
        what: format!(
            "{} {namespace}/{name} (changed by someone else {CONFLICT_RETRIES} times while it was scaled)",
            kind.kind()
        ),
    })
}

/// Waits until the group has as many Machines (not being deleted) as its replicas say: a
/// scale-up written just before (the replica given back for the Machine removed before, a
/// surge) has its Machine. Scaled down before that, the two could cancel out before the
/// MachineSet acted on either: it would find itself at its size, the marked Machine among its
/// Machines, and remove nothing.
async fn await_scaled_up(
    cluster: &Cluster,
    machine: &MachineRef,
    timeout: Duration,
) -> Result<(), ProviderError> {
    let (kind, name) = scaled_object(machine);
    let namespace = &machine.namespace;
    let what = format!("{} {namespace}/{name}", kind.kind());
    let Some(object) = cluster.get_capi(kind, namespace, name).await? else {
        return Err(ProviderError::NoGroupObject { what });
    };
    let replicas = object["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
    // A MachineDeployment's Machines carry its name; a lone MachineSet's have it as their owner.
    let (labels, set) = match kind {
        CapiKind::MachineDeployment => (format!("{DEPLOYMENT_LABEL}={name}"), None),
        _ => (String::new(), Some(name)),
    };
    let belongs = |m: &kube::api::DynamicObject| {
        set.is_none_or(|set| {
            m.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == "MachineSet" && o.name == set)
        })
    };
    if cluster
        .wait_machines_created(namespace, &labels, belongs, replicas, timeout)
        .await?
    {
        Ok(())
    } else {
        Err(ProviderError::ScaleUpPending {
            what,
            replicas,
            timeout,
        })
    }
}

/// A surge: the group grows by one for `target`, which stays until terminated.
pub async fn detach(cluster: &Cluster, target: &Target) -> Result<String, ProviderError> {
    let machine = machine_of(target)?;
    rescale(cluster, machine, |s, r| s.surge(&machine.name, r)).await?;
    let (kind, name) = scaled_object(machine);
    Ok(format!(
        "{} {name} scaled up for {}",
        kind.kind(),
        machine.name
    ))
}

/// Removes `target`'s Machine (see the module's doc); a Machine already gone is fine.
pub async fn terminate(
    cluster: &Cluster,
    target: &Target,
    how: CapiTerminate,
    timeout: Duration,
) -> Result<String, ProviderError> {
    let machine = machine_of(target)?;
    let (namespace, name) = (&machine.namespace, &machine.name);
    let (kind, group) = scaled_object(machine);
    let current = cluster.get_capi(CapiKind::Machine, namespace, name).await?;
    if let Some(object) = &current {
        let deleting = !object["metadata"]["deletionTimestamp"].is_null();
        let scaled = match cluster.get_capi(kind, namespace, group).await? {
            Some(group) => Scaled::of(&group),
            None => Scaled::default(),
        };
        let surged = scaled.surged.iter().any(|m| m == name);
        let removing = scaled.removing.contains_key(name.as_str());
        if !deleting {
            cluster
                .annotate_machine(
                    namespace,
                    name,
                    &[
                        (EXCLUDE_NODE_DRAINING, "rollout-ext"),
                        (DELETE_MACHINE, "true"),
                    ],
                )
                .await?;
        }
        if how == CapiTerminate::DeleteMachine && !surged && !removing {
            cluster.delete_machine(namespace, name).await?;
            return Ok(format!("deleted Machine {namespace}/{name}"));
        }
        if !deleting || removing {
            if !removing {
                await_scaled_up(cluster, machine, timeout).await?;
            }
            rescale(cluster, machine, |s, r| s.remove(name, r)).await?;
            if !cluster.wait_machine_gone(namespace, name, timeout).await? {
                return Err(ProviderError::MachineStays {
                    machine: format!("{namespace}/{name}"),
                    timeout,
                });
            }
        }
    }
    // Gone: the group gets its replica back, if it is owed one.
    rescale(cluster, machine, |s, r| s.removed(name, r)).await?;
    Ok(match current {
        Some(_) => format!(
            "removed Machine {namespace}/{name} through {} {group}",
            kind.kind()
        ),
        None => format!("Machine {namespace}/{name} was already gone"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_surge_and_a_removal_are_each_counted_once() {
        let mut scaled = Scaled::default();
        let mut replicas = 3;
        assert!(scaled.surge("a", &mut replicas));
        assert!(!scaled.surge("a", &mut replicas));
        assert_eq!(replicas, 4);
        // Removing the surged Machine gives the surge back, for good.
        assert!(scaled.remove("a", &mut replicas));
        assert!(!scaled.remove("a", &mut replicas));
        assert_eq!(replicas, 3);
        assert!(scaled.removed("a", &mut replicas));
        assert_eq!(replicas, 3);
        // Removing another Machine scales down, then back up once it is gone.
        assert!(scaled.remove("b", &mut replicas));
        assert_eq!(replicas, 2);
        assert!(scaled.removed("b", &mut replicas));
        assert!(!scaled.removed("b", &mut replicas));
        assert_eq!(replicas, 3);
        assert_eq!(scaled, Scaled::default());
    }

    #[test]
    fn the_record_reads_back_from_the_annotation() {
        let mut scaled = Scaled::default();
        let mut replicas = 1;
        scaled.surge("m1", &mut replicas);
        scaled.remove("m2", &mut replicas);
        let text = serde_json::to_string(&scaled).unwrap();
        assert_eq!(text, r#"{"surged":["m1"],"removing":{"m2":true}}"#);
        let object = serde_json::json!({"metadata": {"annotations": {SCALED: text}}});
        assert_eq!(Scaled::of(&object), scaled);
        assert_eq!(Scaled::of(&serde_json::json!({})), Scaled::default());
    }
}
