//! Builders for what a fleet's gate is told before a stage ([`crate::Policy::check_stage`]).

use crate::{ClusterOutcome, ClusterResult, Stage, StageOutcome};

/// Stage `index` of fleet `test-fleet`, named `name`, over `clusters` (kubeconfig contexts), asked
/// for the first time (attempt 0).
pub fn stage(index: u32, name: &str, clusters: &[&str]) -> Stage {
    Stage {
        fleet: "test-fleet".into(),
        index,
        name: name.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        attempt: 0,
    }
}

/// Stage `name` as it ended, every one of `clusters` succeeded, soaked `soaked_seconds` since.
/// Each cluster finished at 0, the Unix epoch (set `finished` for a policy that reads it); set
/// `outcome.clusters[i].outcome = ClusterOutcome::NodesSetAside` for a cluster that set nodes
/// aside.
pub fn stage_outcome(name: &str, clusters: &[&str], soaked_seconds: u64) -> StageOutcome {
    StageOutcome {
        name: name.into(),
        clusters: clusters
            .iter()
            .map(|c| ClusterResult {
                cluster: c.to_string(),
                outcome: ClusterOutcome::Succeeded,
                finished: 0,
            })
            .collect(),
        soaked_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_asked_for_the_first_time() {
        assert_eq!(
            stage(1, "prod", &["prod-a", "prod-b"]),
            Stage {
                fleet: "test-fleet".into(),
                index: 1,
                name: "prod".into(),
                clusters: vec!["prod-a".into(), "prod-b".into()],
                attempt: 0,
            }
        );
    }

    #[test]
    fn an_outcome_succeeded_in_every_cluster_in_order() {
        let dev = stage_outcome("dev", &["dev-a", "dev-b"], 90);
        assert_eq!(dev.name, "dev");
        assert_eq!(dev.soaked_seconds, 90);
        let result = |cluster: &str| ClusterResult {
            cluster: cluster.into(),
            outcome: ClusterOutcome::Succeeded,
            finished: 0,
        };
        assert_eq!(dev.clusters, [result("dev-a"), result("dev-b")]);
    }
}
