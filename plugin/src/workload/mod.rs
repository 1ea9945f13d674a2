//! The controller rolling update of the "Simple rolling update" design: a ReplicationController
//! (or ReplicaSet) `foo` rolled to `foo-next` step by step within surge and availability budgets,
//! resumable from the annotations legacy kubectl wrote, then renamed or cleaned up.
//!
//! `controller`, `pods`, `steps`, `prepare`, `scale_loop` (the loop as a step machine) and `plan`
//! (its dry-run driver) are pure; `execute` runs a request through `start`, `scale` (the loop's
//! live driver) and `cleanup`, which do the I/O.

mod cleanup;
pub mod controller;
pub mod execute;
pub mod plan;
pub mod pods;
pub mod prepare;
mod scale;
pub mod scale_loop;
mod start;
pub mod steps;
