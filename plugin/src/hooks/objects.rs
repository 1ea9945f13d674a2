//! Where `list-objects` reads from: the snapshot when planning offline, the cluster when live.

use std::sync::OnceLock;

use crate::labels::{LabelSelector, Labels};

/// Read-only access to cluster objects for hooks. The allow-list is checked before this is asked.
pub trait ObjectSource: Send + Sync {
    /// Objects of `kind` as a JSON array.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<String, String>;
}

/// Serves no objects: a fleet's stage gates are asked about no one cluster.
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn list(
        &self,
        _: &str,
        kind: &str,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<String, String> {
        Err(format!(
            "a fleet's stage gate reads no cluster's objects (asked for {kind})"
        ))
    }
}

/// Serves objects from the snapshot file; parsed in full only when a hook first asks.
pub struct SnapshotObjects {
    bytes: Vec<u8>,
    items: OnceLock<Result<Vec<serde_json::Value>, String>>,
}

impl SnapshotObjects {
    pub fn new(bytes: Vec<u8>) -> Self {
        SnapshotObjects {
            bytes,
            items: OnceLock::new(),
        }
    }

    /// The items, parsed once.
    fn items(&self) -> Result<&[serde_json::Value], String> {
        self.items
            .get_or_init(|| {
                let mut list: serde_json::Value =
                    serde_json::from_slice(&self.bytes).map_err(|e| e.to_string())?;
                match list.get_mut("items").map(serde_json::Value::take) {
                    Some(serde_json::Value::Array(items)) => Ok(items),
                    _ => Ok(Vec::new()),
                }
            })
            .as_ref()
            .map(Vec::as_slice)
            .map_err(Clone::clone)
    }

    /// One warning per kind of `granted` the snapshot holds no object of: a hook reading it
    /// offline sees none, where live it would see the cluster's.
    pub fn absent(&self, granted: &[crate::policy::ContextResource]) -> Vec<String> {
        let items = self.items().unwrap_or_default();
        let mut seen = std::collections::BTreeSet::new();
        (granted.iter())
            .filter(|r| seen.insert((&r.api_version, &r.kind)))
            .filter(|r| {
                !(items.iter())
                    .any(|i| i["kind"] == r.kind.as_str() && i["apiVersion"] == r.api_version.as_str())
            })
            .map(|r| {
                format!(
                    "the snapshot holds no {} {}, which contextResources grants the hooks: offline they read none (`kubectl rollout-ext snapshot --policy POLICY -o FILE` saves the kinds a policy grants)",
                    r.api_version, r.kind
                )
            })
            .collect()
    }
}

impl ObjectSource for SnapshotObjects {
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<String, String> {
        let items = self.items()?;
        let selector = selector
            .map(LabelSelector::parse)
            .transpose()?
            .unwrap_or_default();
        let matching: Vec<&serde_json::Value> = items
            .iter()
            .filter(|item| {
                let meta = &item["metadata"];
                let labels: Labels =
                    serde_json::from_value(meta["labels"].clone()).unwrap_or_default();
                item["kind"] == kind
                    && item["apiVersion"] == api_version
                    && namespace.is_none_or(|ns| meta["namespace"] == ns)
                    && selector.matches(&labels)
            })
            .collect();
        serde_json::to_string(&matching).map_err(|e| e.to_string())
    }
}
