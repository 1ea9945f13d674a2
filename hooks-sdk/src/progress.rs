//! What [`crate::Policy::next_batch`] is told: where the group's update stands, and the
//! instances the next batch may take.

use crate::bindings::rollout_ext::policy::types;
use crate::{Group, Instances};

/// Where the update of a group stands when the next batch is sized.
#[derive(Debug)]
pub struct Progress<'a> {
    pub group: Group,
    /// Batches finished so far (the canary counts as one).
    pub batches_done: u32,
    /// Instances updated so far.
    pub updated: u32,
    /// The largest batch the budget allows right now: the answer's upper bound, and the number
    /// of `pending` instances.
    pub max_batch: u32,
    /// The instances the next batch may take, in update order; a batch is a prefix of them.
    /// Read only what the decision needs: inside the plugin each read is a call into the host.
    pub pending: Instances<'a>,
}

impl<'a> Progress<'a> {
    pub(crate) fn from_host(progress: types::Progress, pending: &'a types::Instances) -> Self {
        Progress {
            group: progress.group,
            batches_done: progress.batches_done,
            updated: progress.updated,
            max_batch: progress.max_batch,
            pending: Instances::host(pending),
        }
    }
}
