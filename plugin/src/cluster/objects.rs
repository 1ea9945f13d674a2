//! Objects of any kind the API server serves: `list-objects` for hooks against a live cluster,
//! and the kinds a policy grants its hooks, saved into a snapshot.

use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams};
use tokio::runtime::Handle;

use super::Cluster;
use crate::hooks::ObjectSource;

/// Lists objects for hooks from the API server. Hooks run on a plain thread, so each call
/// blocks on the runtime behind `handle`.
pub struct LiveObjects {
    pub cluster: Cluster,
    pub handle: Handle,
}

impl ObjectSource for LiveObjects {
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<String, String> {
        let cluster = self.cluster.clone();
        self.handle.block_on(async move {
            let items = cluster
                .list_kind(api_version, kind, namespace, selector)
                .await?;
            serde_json::to_string(&items).map_err(|e| e.to_string())
        })
    }
}

impl Cluster {
    /// The objects of `kind` (in `namespace`, else in every namespace) that `selector`
    /// matches, each carrying its `apiVersion` and `kind`, as a snapshot holds them.
    pub async fn list_kind(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<serde_json::Value>, String> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let client = self.client.clone();
        let (resource, _) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .map_err(|e| format!("{api_version} {kind} is not served: {e}"))?;
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let mut params = ListParams::default();
        if let Some(s) = selector {
            params = params.labels(s);
        }
        let list = api
            .list(&params)
            .await
            .map_err(|e| format!("list {api_version} {kind}: {e}"))?;
        (list.items.into_iter())
            .map(|item| {
                let mut value = serde_json::to_value(item).map_err(|e| e.to_string())?;
                value["apiVersion"] = api_version.into();
                value["kind"] = kind.into();
                Ok(value)
            })
            .collect()
    }
}
