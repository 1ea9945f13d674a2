//! The controller rolling update of the "Simple rolling update" design: a ReplicationController
//! (or ReplicaSet) `foo` rolled to `foo-next` step by step within surge and availability budgets,
//! resumable from the annotations legacy kubectl wrote, then renamed or cleaned up.
//!
//! `controller`, `pods`, `steps`, `prepare` and `plan` are pure; `execute` does the I/O.

pub mod controller;
pub mod execute;
pub mod plan;
pub mod pods;
pub mod prepare;
mod scale;
pub mod scale_loop;
pub mod steps;
