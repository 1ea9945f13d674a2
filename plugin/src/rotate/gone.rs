//! Nodes someone else removes while the run works (another tool terminates an instance, a
//! person deletes a Node): each is said and dropped from the run, never a stop, at whatever
//! point of its batch it goes.

use super::{GroupRun, Rotation};
use crate::cluster::ClusterError;
use crate::events::Event;
use crate::plan::group_loop::BatchStep;

/// Whether a node was still there for a write to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Presence {
    Here,
    /// Removed by someone else: the write found no such node.
    Gone,
}

impl Presence {
    /// What a write to a node found: the node, or (404) none.
    pub(super) async fn after(
        write: impl std::future::Future<Output = Result<(), ClusterError>>,
    ) -> Result<Presence, ClusterError> {
        match write.await {
            Ok(()) => Ok(Presence::Here),
            Err(e) if e.is_not_found() => Ok(Presence::Gone),
            Err(e) => Err(e),
        }
    }
}

impl Rotation<'_> {
    /// Says that `node` of `group` was removed by someone else: the run goes on without it.
    pub(super) fn node_gone(&self, group: &str, node: &str) {
        self.kernel.reporter.report(Event::NodeGone {
            group: group.into(),
            node: node.into(),
        });
    }

    /// The batch without the nodes removed since it was chosen (neither Node nor machine is
    /// left of them), each said.
    pub(super) fn without_gone(&self, batch: &BatchStep, run: &GroupRun) -> BatchStep {
        let (here, gone): (Vec<String>, Vec<String>) = (batch.instances.iter().cloned())
            .partition(|node| run.latest.nodes.iter().any(|n| &n.name == node));
        for node in &gone {
            self.node_gone(&run.name, node);
        }
        BatchStep {
            instances: here,
            ..batch.clone()
        }
    }
}
