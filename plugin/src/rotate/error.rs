//! How a rotation ends when it does not finish: what stopped it, and the nodes it set aside.

use std::time::Duration;

use crate::cluster::ClusterError;
use crate::cluster::drain::DrainError;
use crate::cluster::validate::ValidationError;
use crate::kernel::KernelError;
use crate::plan::PlanError;
use crate::plan::decide::HookFailed;
use crate::provider::ProviderError;

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Hook(#[from] HookFailed),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Drain(#[from] DrainError),
    #[error(transparent)]
    Validation(#[from] ValidationError),
    #[error("instance {node}: {source}")]
    Provider {
        node: String,
        #[source]
        source: ProviderError,
    },
    #[error(transparent)]
    NoProvider(ProviderError),
    #[error("{0}")]
    CannotSurge(String),
    #[error("aborted by {by} {at}: {reason}")]
    Aborted {
        by: String,
        at: String,
        reason: String,
    },
    #[error("aborted {}; stopped {at}", request.describe())]
    Stopped {
        request: crate::cluster::controls::ControlRequest,
        at: String,
    },
    #[error("stopped at the operator's request before batch {batch} of group {group}")]
    Declined { group: String, batch: u32 },
    #[error("the lock was taken over by another run; stopping here")]
    LockLost,
    #[error(
        "group {group}: {} replacement(s) not Ready after {} ({ready} of {expected} nodes Ready); stopped before the next batch: run the same command to resume once they join",
        expected.saturating_sub(*ready),
        crate::duration::human_duration(timeout.as_secs() as i64)
    )]
    NoReplacement {
        group: String,
        timeout: Duration,
        ready: usize,
        expected: usize,
    },
    #[error(
        "group {group}: {lacking} evicted pod(s) not Ready again after {} ({controllers}); stopped before the next batch: run the same command to resume once they are",
        crate::duration::human_duration(timeout.as_secs() as i64)
    )]
    PodsNotBack {
        group: String,
        timeout: Duration,
        lacking: usize,
        controllers: String,
    },
    /// The run set nodes aside (`drain.undrainable: Quarantine`); exit code 6.
    #[error(
        "{}set aside {} node(s) whose drain could not finish, each left cordoned with its pods and labelled {}: {}; the same command tries them again first, `nodes --release-quarantined --yes` uncordons them",
        .stopped.as_ref().map(|s| format!("{s}; ")).unwrap_or_default(),
        .nodes.len(),
        crate::keys::QUARANTINED,
        .nodes.iter().map(|n| format!("{} ({})", n.node, n.reason)).collect::<Vec<_>>().join("; ")
    )]
    SetAside {
        nodes: Vec<SetAside>,
        /// Why the run stopped before the end, when it did.
        stopped: Option<String>,
    },
}

/// A node the run set aside, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SetAside {
    pub node: String,
    pub reason: String,
}

impl From<KernelError> for RotateError {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Hook(e) => RotateError::Hook(e),
            KernelError::Cluster(e) => RotateError::Cluster(e),
            KernelError::Stopped { request, at } => RotateError::Stopped { request, at },
            KernelError::LockLost => RotateError::LockLost,
        }
    }
}

impl RotateError {
    /// Whether a gate or an operator stopped the run (exit code 3), as opposed to a failure.
    pub fn is_abort(&self) -> bool {
        matches!(
            self,
            RotateError::Aborted { .. }
                | RotateError::Declined { .. }
                | RotateError::Stopped { .. }
        )
    }
}
