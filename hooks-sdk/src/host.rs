//! What the host offers a hook: logging and read-only, allow-listed cluster objects.
//!
//! Compiled natively (in a policy's unit tests) logging goes to stderr and the object listings
//! answer from the thread's [`FakeCluster`](crate::testing::FakeCluster) when a test installed
//! one, an error otherwise, so tests never depend on a cluster.

#[cfg(target_arch = "wasm32")]
use crate::bindings::rollout_ext::policy::host as imports;

pub use crate::bindings::rollout_ext::policy::host::Level;

use serde::de::DeserializeOwned;

use crate::objects::{ConfigMap, Node, Pod, PodDisruptionBudget};

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

/// Nodes (`v1`) matching the label `selector`. Nodes are cluster-scoped, so there is no
/// namespace to give: the host would answer nothing (or deny the call) for one.
pub fn nodes(selector: Option<&str>) -> Result<Vec<Node>, String> {
    list(Node::API_VERSION, Node::KIND, None, selector)
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
}
