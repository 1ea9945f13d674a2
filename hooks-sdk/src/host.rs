//! What the host offers a hook: logging, read-only, allow-listed cluster objects, PromQL
//! queries of the metrics sources the policy grants the hook, and the plugin's estimates of how
//! long the batch at hand and the rest of the run take, and which nodes of the group other tools
//! are taking out.
//!
//! Compiled natively (in a policy's unit tests) logging goes to stderr, the object listings
//! answer from the thread's [`FakeCluster`](crate::testing::FakeCluster) and the queries from
//! its [`FakeMetrics`](crate::testing::FakeMetrics) when a test installed one, an error
//! otherwise, and the estimates from [`testing::with_estimates`](crate::testing::with_estimates)
//! (none otherwise), and others' disruptions from
//! [`testing::with_others`](crate::testing::with_others) (none otherwise), so tests never depend
//! on a cluster or a Prometheus.

#[cfg(target_arch = "wasm32")]
use crate::bindings::rollout_ext::policy::host as imports;

pub use crate::bindings::rollout_ext::policy::host::{
    Disruption, DurationEstimate, Level, MetricsError, Point, Sample, Series, TimeRange, Timing,
};

use serde::de::DeserializeOwned;

use crate::objects::{
    ConfigMap, DaemonSet, Deployment, Node, Pod, PodDisruptionBudget, ReplicaSet, StatefulSet,
};

/// Writes a line into the plugin's log, prefixed with the hook's name.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    imports::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// The host's JSON answer to `list-objects`: from the plugin in a WebAssembly build, from the
/// thread's fake cluster natively.
fn list_json(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<String, String> {
    #[cfg(target_arch = "wasm32")]
    {
        imports::list_objects(api_version, kind, namespace, selector)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::fake_list(api_version, kind, namespace, selector).unwrap_or_else(|| {
            Err(format!(
                "list-objects {api_version}/{kind} is only available inside the plugin"
            ))
        })
    }
}

/// Lists objects the policy's `contextResources` allow, parsed from the host's JSON array.
/// `namespace` none means all namespaces; `selector` is a label selector (`app=web,tier!=db`).
/// Prefer the typed [`pods`], [`nodes`], … or [`list`].
pub fn list_objects(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<serde_json::Value>, String> {
    let json = list_json(api_version, kind, namespace, selector)?;
    serde_json::from_str(&json).map_err(|e| format!("host answered invalid JSON: {e}"))
}

/// Lists objects of `api_version` `kind` as `T`: a type of [`crate::objects`] or a policy's own
/// serde struct for a kind the SDK does not type (give its fields `#[serde(default)]`, the API
/// server omits empty ones). Parsed straight from the host's JSON, with no intermediate
/// [`serde_json::Value`]s.
pub fn list<T: DeserializeOwned>(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<T>, String> {
    let json = list_json(api_version, kind, namespace, selector)?;
    serde_json::from_str(&json).map_err(|e| format!("cannot read {api_version} {kind} list: {e}"))
}

/// Pods (`v1`) in `namespace` (none: all namespaces) matching the label `selector`.
pub fn pods(namespace: Option<&str>, selector: Option<&str>) -> Result<Vec<Pod>, String> {
    list(Pod::API_VERSION, Pod::KIND, namespace, selector)
}

/// The names of the nodes running pods in `namespace` (none: all namespaces) that match the label
/// `selector`: the nodes a selection keeps away from (`critical=true`) or puts first.
pub fn nodes_running(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<std::collections::BTreeSet<String>, String> {
    let running = pods(namespace, selector)?
        .into_iter()
        .filter(|p| !p.is_finished());
    Ok(running.filter_map(|p| p.spec.node_name).collect())
}

/// PodDisruptionBudgets (`policy/v1`) in `namespace` (none: all namespaces) matching the label
/// `selector`.
pub fn pod_disruption_budgets(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<PodDisruptionBudget>, String> {
    list(
        PodDisruptionBudget::API_VERSION,
        PodDisruptionBudget::KIND,
        namespace,
        selector,
    )
}

/// ConfigMaps (`v1`) in `namespace` (none: all namespaces) matching the label `selector`.
pub fn config_maps(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<ConfigMap>, String> {
    list(ConfigMap::API_VERSION, ConfigMap::KIND, namespace, selector)
}

/// Deployments (`apps/v1`) in `namespace` (none: all namespaces) matching the label `selector`.
pub fn deployments(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<Deployment>, String> {
    list(
        Deployment::API_VERSION,
        Deployment::KIND,
        namespace,
        selector,
    )
}

/// StatefulSets (`apps/v1`) in `namespace` (none: all namespaces) matching the label `selector`.
pub fn stateful_sets(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<StatefulSet>, String> {
    list(
        StatefulSet::API_VERSION,
        StatefulSet::KIND,
        namespace,
        selector,
    )
}

/// DaemonSets (`apps/v1`) in `namespace` (none: all namespaces) matching the label `selector`.
pub fn daemon_sets(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<DaemonSet>, String> {
    list(DaemonSet::API_VERSION, DaemonSet::KIND, namespace, selector)
}

/// ReplicaSets (`apps/v1`) in `namespace` (none: all namespaces) matching the label `selector`.
pub fn replica_sets(
    namespace: Option<&str>,
    selector: Option<&str>,
) -> Result<Vec<ReplicaSet>, String> {
    list(
        ReplicaSet::API_VERSION,
        ReplicaSet::KIND,
        namespace,
        selector,
    )
}

/// Nodes (`v1`) matching the label `selector`. Nodes are cluster-scoped, so there is no
/// namespace to give: the host would answer nothing (or deny the call) for one.
pub fn nodes(selector: Option<&str>) -> Result<Vec<Node>, String> {
    list(Node::API_VERSION, Node::KIND, None, selector)
}

/// An instant PromQL query of `source` (a name of the policy's `metricsSources` that the hook's
/// `metrics` grants it) at `time` (seconds since the Unix epoch; none: the source's now).
///
/// Asking a source the policy does not grant fails the whole call, whatever the hook answers;
/// the query's time counts against the hook's deadline.
pub fn query_metrics(
    source: &str,
    promql: &str,
    time: Option<i64>,
) -> Result<Vec<Sample>, MetricsError> {
    #[cfg(target_arch = "wasm32")]
    {
        imports::query_metrics(source, promql, time)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::fake_query(source, promql, time)
    }
}

/// A range PromQL query of `source` over `range`, granted and timed as [`query_metrics`].
pub fn query_metrics_range(
    source: &str,
    promql: &str,
    range: TimeRange,
) -> Result<Vec<Series>, MetricsError> {
    #[cfg(target_arch = "wasm32")]
    {
        imports::query_metrics_range(source, promql, range)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::fake_query_range(source, promql, range)
    }
}

/// How long the batch at hand and the rest of the run likely take (contract 0.3.5), as the
/// plugin's plan estimates them: from what runs measured on this cluster, else the policy's
/// `spec.estimates`, else defaults (each estimate's `basis` says which). `batch` is none for a
/// call about no batch (a selection, a gate before the group or after a batch).
pub fn estimates() -> Timing {
    #[cfg(target_arch = "wasm32")]
    {
        imports::estimates()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::fake_estimates()
    }
}

/// The nodes of the group the call is about that other tools are taking out now (contract
/// 0.3.7): Karpenter, the cluster-autoscaler, kured, medik8s, a cordon the run did not make, a
/// node not Ready, as the run counts them against the group's budget. Empty when the policy
/// ignores them, when no one disrupts any, and in calls about no node group.
pub fn others_disrupting() -> Vec<Disruption> {
    #[cfg(target_arch = "wasm32")]
    {
        imports::others_disrupting()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::fake_others()
    }
}

/// Who else is taking `node` out now, if anyone (see [`others_disrupting`]).
pub fn disrupted_by(node: &str) -> Option<String> {
    (others_disrupting().into_iter())
        .find(|d| d.node == node)
        .map(|d| d.by)
}

impl Timing {
    /// When the batch at hand ends if it starts at `now`, cautiously (at its 90th percentile);
    /// none when the call is about no batch.
    pub fn batch_ends(&self, now: i64) -> Option<i64> {
        cautious_end(now, self.batch.as_ref())
    }

    /// When the rest of the run ends if it goes on from `now`, cautiously (at its 90th
    /// percentile; the batch at hand included); none when the host has no estimate, which a
    /// plan or a run always has for select, batch and gate calls.
    pub fn run_ends(&self, now: i64) -> Option<i64> {
        cautious_end(now, self.remaining.as_ref())
    }
}

/// `now` plus the estimate's 90th percentile; none without an estimate.
fn cautious_end(now: i64, estimate: Option<&DurationEstimate>) -> Option<i64> {
    let p90 = i64::try_from(estimate?.p90_seconds).unwrap_or(i64::MAX);
    Some(now.saturating_add(p90))
}

impl MetricsError {
    /// The host's words, which name the source.
    pub fn message(&self) -> &str {
        match self {
            MetricsError::NotAllowed(m)
            | MetricsError::Unreachable(m)
            | MetricsError::Timeout(m)
            | MetricsError::BadQuery(m)
            | MetricsError::TooLarge(m)
            | MetricsError::Failed(m) => m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natively_without_a_fake_listing_is_an_error() {
        assert_eq!(
            list_objects("v1", "Pod", None, None),
            Err("list-objects v1/Pod is only available inside the plugin".into())
        );
        assert!(pods(None, None).is_err());
        assert!(nodes(None).is_err());
        assert!(config_maps(Some("ops"), None).is_err());
        assert!(pod_disruption_budgets(None, None).is_err());
    }

    #[test]
    fn the_batch_and_the_run_end_cautiously_and_not_without_an_estimate() {
        let estimate = |p90_seconds| DurationEstimate {
            seconds: 1,
            p90_seconds,
            basis: "test".into(),
        };
        let timing = Timing {
            batch: Some(estimate(300)),
            remaining: Some(estimate(3600)),
        };
        assert_eq!(timing.batch_ends(1000), Some(1300));
        assert_eq!(timing.run_ends(1000), Some(4600));
        let none = Timing {
            batch: None,
            remaining: None,
        };
        assert_eq!((none.batch_ends(1000), none.run_ends(1000)), (None, None));
    }
}
