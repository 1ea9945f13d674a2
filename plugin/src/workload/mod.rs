//! The executor of the controller rolling update of the "Simple rolling update" design: a
//! ReplicationController (or ReplicaSet) `foo` rolled to `foo-next` step by step within surge
//! and availability budgets, resumable from the annotations legacy kubectl wrote, then renamed
//! or cleaned up.
//!
//! `partitioned` runs a StatefulSet's update through its own partition and `node_by_node` a
//! DaemonSet's, loops of the same shape.
//!
//! The pure parts (controllers and pods as data, the step arithmetic, the scale loop as a step
//! machine and its dry-run driver) are in [`crate::plan::rolling_update`]. `execute` runs a
//! request through `start`, `scale` (the loop's live driver) and `cleanup`, which do the I/O.

mod cleanup;
mod driving;
pub mod execute;
pub mod node_by_node;
pub mod partitioned;
mod pods;
mod scale;
mod start;
pub mod timing;

/// Said when an update's first write found its workload's status moved since it was read (its
/// controller reported meanwhile) and wrote the same change onto it as it was then.
fn status_moved(workload: &str) -> String {
    format!(
        "{workload} changed while this run started its update (its status only: same spec, labels and annotations); the update was written again onto it as it is now"
    )
}
