//! What a rolling update's plan and run estimate from: the cluster's history of durations, else
//! the policy's figures, else the defaults.

use super::RollingUpdateArgs;
use crate::cluster::Cluster;
use crate::plan::estimate::{Durations, Estimate, FixedWaits, History, StepEstimates};
use crate::plan::rolling_update::planning::StepDecisions;
use crate::policy::Policy;
use crate::progress::Reporter;

/// The cluster's history of durations, for a plan's estimates; one it cannot read is a warning
/// of the plan's.
pub(super) async fn history_for_plan(cluster: &Cluster, warnings: &mut Vec<String>) -> History {
    let (history, unread) = cluster.history_or_note().await;
    warnings.extend(unread);
    history
}

/// What an update of the workload `subject` (`KIND/NS/NAME`) is estimated from: `history`,
/// else the policy's figures, else the defaults.
pub(super) fn step_estimates(history: History, policy: &Policy, subject: String) -> StepEstimates {
    StepEstimates {
        durations: Durations {
            history,
            stated: policy.estimates,
            fixed: FixedWaits::default(),
        },
        subject,
    }
}

/// What a live update of `subject` estimates from: the cluster's history (one it cannot read
/// is said, never a reason to stop), else the policy's figures, else the defaults.
pub(super) async fn live_estimates(
    cluster: &Cluster,
    policy: &Policy,
    subject: String,
    reporter: &dyn Reporter,
) -> StepEstimates {
    let (history, unread) = cluster.history_or_note().await;
    if let Some(message) = unread {
        reporter.report(crate::progress::Event::Warning { message });
    }
    step_estimates(history, policy, subject)
}

/// Fills the estimates of an update's `steps`; the update's.
pub(super) fn estimate_update<'s>(
    estimates: &StepEstimates,
    steps: impl Iterator<Item = &'s mut StepDecisions>,
    args: &RollingUpdateArgs,
) -> Estimate {
    (estimates.durations.estimator()).update(&estimates.subject, steps, args.plan_time())
}
