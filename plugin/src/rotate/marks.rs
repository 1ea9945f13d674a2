//! What the run tells other disruptors about the nodes it takes out: the Node lifecycle
//! conditions of each drain (`DrainInProgress`, then `Drained`; see
//! [`crate::cluster::nodes::DrainCondition`]), cleared when a node is given back. A server or a
//! role that refuses them is said once, never a stop: they are a courtesy to other tools.

use std::sync::atomic::Ordering;

use super::Rotation;
use crate::cluster::nodes::DrainCondition;

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
