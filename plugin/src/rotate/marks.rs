//! What the run tells other disruptors about the nodes it takes out: the Node lifecycle
//! conditions of each drain (`DrainInProgress`, then `Drained`; see
//! [`crate::cluster::nodes::DrainCondition`]), cleared when a node is given back; and, from a
//! group's start to the run's end, the cluster-autoscaler's scale-down-disabled annotation on
//! the nodes it will rotate (only where no one else put it), removed when the run ends however
//! it ends, and by the next run after a killed one. A server or a role that refuses them is said
//! once, never a stop: they are a courtesy to other tools.

use std::sync::atomic::Ordering;

use super::{Presence, RotateError, Rotation};
use crate::cluster::nodes::DrainCondition;
use crate::keys;
use crate::snapshot::Node;

impl Rotation<'_> {
    /// Sets `node`'s drain conditions to `condition`.
    pub(super) async fn mark_drain(&self, node: &str, condition: DrainCondition) {
        let written = (self.cluster)
            .set_drain_condition(node, condition, &self.kernel.run_id)
            .await;
        if let Err(e) = written
            && !self.marks_refused.swap(true, Ordering::Relaxed)
        {
            self.warn(format!(
                "cannot tell other disruptors which nodes this run drains (the Node conditions DrainInProgress and Drained): {e}; the run goes on without them"
            ));
        }
    }
}

impl Rotation<'_> {
    /// Marks `node` so that the cluster-autoscaler does not scale it down while the run rotates
    /// its group, unless someone else already did.
    pub(super) async fn keep_from_scale_down(&self, node: &Node) -> Result<Presence, RotateError> {
        if node.annotations.contains_key(keys::SCALE_DOWN_DISABLED) {
            return Ok(Presence::Here);
        }
        let marks = [
            (keys::SCALE_DOWN_DISABLED, Some("true")),
            (keys::SCALE_DOWN_DISABLED_BY_US, Some("true")),
        ];
        let marked = self.cluster.set_node_annotations(&node.name, &marks);
        Ok(Presence::after(marked).await?)
    }

    /// Removes the scale-down marks a run (this one, or a killed one) left on any node. Said,
    /// not a stop, when it cannot.
    pub(super) async fn release_scale_down_marks(&self) {
        let nodes = match self.view.caught_up().await {
            Ok(nodes) => nodes,
            Err(e) => return self.warn(format!("cannot remove the run's scale-down marks: {e}")),
        };
        let marked = (nodes.nodes.iter())
            .filter(|n| n.annotations.contains_key(keys::SCALE_DOWN_DISABLED_BY_US));
        let marks = [
            (keys::SCALE_DOWN_DISABLED, None),
            (keys::SCALE_DOWN_DISABLED_BY_US, None),
        ];
        for node in marked {
            let released = self.cluster.set_node_annotations(&node.name, &marks);
            if let Err(e) = Presence::after(released).await {
                self.warn(format!(
                    "cannot remove the cluster-autoscaler's scale-down mark the run put on node {}: {e}",
                    node.name
                ));
            }
        }
    }
}
