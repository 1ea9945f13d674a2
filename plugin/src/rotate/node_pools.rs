//! Karpenter's voluntary disruptions of a group's NodePool, paused while a batch of it is out
//! (see [`crate::cluster::node_pools`]): from right before the batch's cordons until it is
//! replaced and validated, and never past the run's end however it ends. A group a killed run
//! paused is resumed when the next run starts it. A refused write is said once, not a stop: the
//! ledger still counts what Karpenter disrupts.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Rotation;

/// The pools a run paused, and whether a write about them was refused.
#[derive(Default)]
pub struct PausedPools {
    pools: Mutex<BTreeSet<String>>,
    refused: AtomicBool,
}

impl Rotation<'_> {
    /// Pauses Karpenter's disruptions of `group`'s NodePool, when it is one (the `karpenter`
    /// provider's groups are NodePools) and others' disruptions are counted.
    pub(super) async fn pause_node_pool(&self, group: &str) {
        self.set_pool_paused(group, true).await;
    }

    /// Puts back `group`'s NodePool's own budgets, if the run (or a killed one) paused it.
    pub(super) async fn resume_node_pool(&self, group: &str) {
        self.set_pool_paused(group, false).await;
    }

    async fn set_pool_paused(&self, group: &str, paused: bool) {
        if !self.counts_others() || !self.judges_by_pods(group) {
            return;
        }
        let written = match paused {
            true => self.cluster.pause_node_pool(group).await,
            false => self.cluster.resume_node_pool(group).await,
        };
        if let Err(e) = written {
            return self.pool_refused(group, &e);
        }
        let mut pools = (self.paused_pools.pools.lock()).unwrap_or_else(|e| e.into_inner());
        match paused {
            true => pools.insert(group.to_string()),
            false => pools.remove(group),
        };
    }

    /// Resumes every pool the run paused and has not resumed.
    pub(super) async fn resume_node_pools(&self) {
        let paused: Vec<String> = {
            let pools = self
                .paused_pools
                .pools
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            pools.iter().cloned().collect()
        };
        for group in paused {
            self.resume_node_pool(&group).await;
        }
    }

    fn pool_refused(&self, group: &str, error: &dyn std::fmt::Display) {
        if !self.paused_pools.refused.swap(true, Ordering::Relaxed) {
            self.warn(format!(
                "cannot pause Karpenter's own disruptions of NodePool {group} while a batch is out, or put its budgets back: {error}; the run goes on, counting what Karpenter disrupts"
            ));
        }
    }
}
