//! `nodes --release-quarantined`: the nodes a rotation set aside (their drain could not finish)
//! are uncordoned and lose this tool's labels and annotations, once the operator has dealt with
//! what held them. Without `--yes` it only lists them.

use super::nodes::NodesArgs;
use super::{Failure, KubeFlags, tokio_runtime};
use crate::cluster::Cluster;
use crate::cluster::drain::QuarantineRecord;
use crate::plan::groups::group_of;
use crate::policy::Policy;
use crate::snapshot::Node;

pub fn run(kube: &KubeFlags, args: &NodesArgs, policy: &Policy) -> Result<(), Failure> {
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let cluster = Cluster::connect(&kube.connect_options()?).await?;
        let label = args.group_label.as_deref().or(policy.group_label.as_deref());
        let snapshot = cluster.snapshot_nodes().await?;
        let chosen: Vec<&Node> = (snapshot.nodes.iter())
            .filter(|n| n.registered && QuarantineRecord::of(n).is_some())
            .filter(|n| {
                args.instance_group.is_empty()
                    || args.instance_group.contains(&group_of(n, label))
            })
            .collect();
        if chosen.is_empty() {
            println!("No node of the chosen groups is set aside.");
            return Ok(());
        }
        if !args.yes {
            println!("Set aside (run again with --yes to uncordon them):");
            for node in &chosen {
                let r = QuarantineRecord::of(node).unwrap_or_default();
                println!("  {} since {}: {}", node.name, r.at, r.reason);
            }
            return Ok(());
        }
        // A running rotation may be trying them again right now.
        if let Some(lease) = cluster.controls().await?
            && !lease.holder.is_empty()
        {
            return Err(Failure {
                code: 4,
                message: format!(
                    "the rotation of {} is running and may be draining these nodes again: release them once it has stopped (`kubectl rollout-ext status`)",
                    lease.holder
                ),
            });
        }
        for node in chosen {
            cluster.release(node).await?;
            println!("released {}: uncordoned, no longer set aside", node.name);
        }
        Ok(())
    })
}
