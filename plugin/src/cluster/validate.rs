//! Cluster validation as kops does it between batches: every node Ready, no unschedulable node
//! the run did not cordon, system pods Ready; `count` consecutive successes, `success_interval`
//! apart, within `timeout`. After a failure it waits for the next change to a node or a system
//! pod (a watch), not for a timer.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod as K8sPod};
use kube::api::Api;
use kube::runtime::watcher;

use super::{Cluster, ClusterError, Request};
use crate::events::{Event, Reporter};
use crate::keys;
use crate::plan::drain::DrainOptions;
use crate::plan::health::{Index, summarize};
use crate::plan::hook::HealthSummary;
use crate::snapshot::Snapshot;

/// How validation is judged.
#[derive(Debug, Clone)]
pub struct ValidationSettings {
    /// Consecutive successes needed (kops' `--validate-count`).
    pub count: u32,
    /// Time between two successful checks.
    pub success_interval: Duration,
    /// The whole validation must succeed within this (kops' `--validation-timeout`).
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    #[error("the cluster did not validate within {timeout:?}: {}", .failures.join("; "))]
    Timeout {
        timeout: Duration,
        failures: Vec<String>,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

impl Cluster {
    /// One validation check: nodes and system pods as they are now.
    pub async fn check_health(
        &self,
        cordoned_by_run: &HashSet<&str>,
    ) -> Result<HealthSummary, ClusterError> {
        let mut snapshot = Snapshot::default();
        for (path, resource, namespace) in [
            ("/api/v1/nodes".to_string(), "nodes", None),
            (
                format!("/api/v1/namespaces/{}/pods", keys::SYSTEM_NAMESPACES[0]),
                "pods",
                Some(keys::SYSTEM_NAMESPACES[0]),
            ),
        ] {
            let body = self
                .get(
                    &path,
                    &Request {
                        verb: "list",
                        resource,
                        namespace,
                    },
                )
                .await?;
            snapshot
                .extend_from_json(body.as_bytes())
                .map_err(|source| ClusterError::Decode {
                    resource: resource.into(),
                    source,
                })?;
        }
        let index = Index::new(&snapshot);
        Ok(summarize(
            &snapshot,
            &index,
            &[],
            cordoned_by_run,
            &DrainOptions::default(),
        ))
    }

    /// Validates until `settings.count` consecutive checks pass, or the timeout.
    pub async fn validate(
        &self,
        settings: &ValidationSettings,
        cordoned_by_run: &HashSet<&str>,
        reporter: &dyn Reporter,
    ) -> Result<HealthSummary, ValidationError> {
        let deadline = Instant::now() + settings.timeout;
        // Changes to nodes or system pods (not the initial listing) wake a failed validation up.
        fn change<K>(
            event: Result<watcher::Event<K>, watcher::Error>,
        ) -> futures::future::Ready<Option<()>> {
            let changed = matches!(
                event,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))
            );
            futures::future::ready(changed.then_some(()))
        }
        let nodes = watcher(
            Api::<Node>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .filter_map(change);
        let pods = watcher(
            Api::<K8sPod>::namespaced(self.client.clone(), keys::SYSTEM_NAMESPACES[0]),
            watcher::Config::default(),
        )
        .filter_map(change);
        let mut changes = stream::select(nodes, pods).boxed();
        let mut passed = 0;
        loop {
            let summary = self.check_health(cordoned_by_run).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            if summary.failures.is_empty() {
                passed += 1;
                reporter.report(Event::Validated {
                    passed,
                    needed: settings.count,
                });
                if passed >= settings.count {
                    return Ok(summary);
                }
                if left < settings.success_interval {
                    return Err(ValidationError::Timeout {
                        timeout: settings.timeout,
                        failures: vec![format!(
                            "only {passed} of {} checks passed in time",
                            settings.count
                        )],
                    });
                }
                tokio::time::sleep(settings.success_interval).await;
                continue;
            }
            passed = 0;
            reporter.report(Event::ValidationFailed {
                failures: summary.failures.clone(),
                seconds_left: left.as_secs(),
            });
            if left.is_zero() || tokio::time::timeout(left, changes.next()).await.is_err() {
                return Err(ValidationError::Timeout {
                    timeout: settings.timeout,
                    failures: summary.failures,
                });
            }
            // One re-check for a burst of changes.
            while let Some(Some(())) = changes.next().now_or_never() {}
        }
    }
}
