//! Where `list-objects` reads from: the snapshot when planning offline, the cluster when live.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::labels::{LabelSelector, Labels};
use crate::snapshot::KindIndex;

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

/// Serves no objects: where a policy grants hooks no kind (the sandbox refuses every list before
/// it gets here), and to a fleet's stage gates, which are asked about no one cluster.
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
            "no objects are served here (asked for {kind}): a fleet's stage gate reads no cluster's, and a policy that grants no kind gives its hooks none"
        ))
    }
}

/// A kind as hooks name it: apiVersion and kind.
type KindKey = (String, String);

/// Serves objects from the snapshot file. Nothing is read until a hook asks or a grant is
/// checked; then the file is skimmed once for where each kind's items lie, and only the items of
/// a kind asked for are parsed, once per kind.
pub struct SnapshotObjects {
    bytes: Vec<u8>,
    index: OnceLock<Result<KindIndex, String>>,
    parsed: Mutex<HashMap<KindKey, Arc<[Value]>>>,
}

impl SnapshotObjects {
    pub fn new(bytes: Vec<u8>) -> Self {
        SnapshotObjects {
            bytes,
            index: OnceLock::new(),
            parsed: Mutex::new(HashMap::new()),
        }
    }

    /// Where each kind's items lie, skimmed once.
    fn index(&self) -> Result<&KindIndex, String> {
        self.index
            .get_or_init(|| KindIndex::read(&self.bytes).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The items of one kind, parsed the first time they are asked for.
    fn items_of(&self, api_version: &str, kind: &str) -> Result<Arc<[Value]>, String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(items) = self
            .parsed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(items.clone());
        }
        let items: Arc<[Value]> = (self.index()?.items(&self.bytes, api_version, kind))
            .map(serde_json::from_str::<Value>)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{api_version} {kind}: {e}"))?;
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        Ok(parsed.entry(key).or_insert(items).clone())
    }

    /// One warning per kind of `granted` the snapshot holds no object of: a hook reading it
    /// offline sees none, where live it would see the cluster's. Reads nothing when nothing is
    /// granted.
    pub fn absent(&self, granted: &[crate::policy::ContextResource]) -> Vec<String> {
        if granted.is_empty() {
            return Vec::new();
        }
        let index = self.index().ok();
        let mut seen = std::collections::BTreeSet::new();
        (granted.iter())
            .filter(|r| seen.insert((&r.api_version, &r.kind)))
            .filter(|r| !index.is_some_and(|i| i.holds(&r.api_version, &r.kind)))
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
        let selector = selector
            .map(LabelSelector::parse)
            .transpose()?
            .unwrap_or_default();
        let items = self.items_of(api_version, kind)?;
        let matching: Vec<&Value> = items
            .iter()
            .filter(|item| {
                let meta = &item["metadata"];
                let labels: Labels =
                    serde_json::from_value(meta["labels"].clone()).unwrap_or_default();
                namespace.is_none_or(|ns| meta["namespace"] == ns) && selector.matches(&labels)
            })
            .collect();
        serde_json::to_string(&matching).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ContextResource;

    const SNAPSHOT: &str = r#"{"kind": "List", "apiVersion": "v1", "items": [
        {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "shop"}},
        {"kind": "Deployment", "apiVersion": "apps/v1",
         "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}}},
        {"kind": "Deployment", "apiVersion": "apps/v1",
         "metadata": {"name": "api", "namespace": "shop", "labels": {"app": "api"}}},
        {"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "dns", "namespace": "kube-system"}}]}"#;

    fn names(json: &str) -> Vec<String> {
        let items: Vec<Value> = serde_json::from_str(json).unwrap();
        (items.iter())
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn grant(api_version: &str, kind: &str) -> ContextResource {
        ContextResource {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: None,
        }
    }

    #[test]
    fn lists_a_kind_by_namespace_and_selector_parsing_only_that_kind() {
        let objects = SnapshotObjects::new(SNAPSHOT.as_bytes().to_vec());
        let all = objects.list("apps/v1", "Deployment", None, None).unwrap();
        assert_eq!(names(&all), ["web", "api", "dns"]);
        let shop = objects.list("apps/v1", "Deployment", Some("shop"), None);
        assert_eq!(names(&shop.unwrap()), ["web", "api"]);
        let web = objects.list("apps/v1", "Deployment", None, Some("app=web"));
        assert_eq!(names(&web.unwrap()), ["web"]);
        assert_eq!(objects.list("v1", "ConfigMap", None, None).unwrap(), "[]");
        let parsed = objects.parsed.lock().unwrap();
        assert!(parsed.contains_key(&("apps/v1".into(), "Deployment".into())));
        assert!(!parsed.contains_key(&("v1".into(), "Pod".into())));
    }

    #[test]
    fn reads_nothing_when_nothing_is_granted_and_warns_per_absent_kind() {
        let objects = SnapshotObjects::new(SNAPSHOT.as_bytes().to_vec());
        assert!(objects.absent(&[]).is_empty());
        assert!(
            objects.index.get().is_none(),
            "nothing granted, nothing read"
        );

        let granted = [
            grant("apps/v1", "Deployment"),
            grant("v1", "ConfigMap"),
            grant("v1", "ConfigMap"),
        ];
        let warnings = objects.absent(&granted);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("the snapshot holds no v1 ConfigMap"));
        assert!(
            objects.parsed.lock().unwrap().is_empty(),
            "a grant parses no item"
        );
    }

    #[test]
    fn a_malformed_snapshot_is_an_error_for_the_hook() {
        let objects = SnapshotObjects::new(br#"{"items": [{"kind": "Pod"}, 7]}"#.to_vec());
        let error = objects.list("v1", "Pod", None, None).unwrap_err();
        assert!(error.starts_with("item 1:"), "{error}");
    }
}
