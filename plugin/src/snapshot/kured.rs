//! kured's reboot lock. kured lets a node reboot only while that node holds a lock kept as an
//! annotation on kured's own DaemonSet (`weave.works/kured-node-lock` by default; some
//! installations name it `kured.dev/kured-node-lock` with `--lock-annotation`). Its value is one
//! holder, `{"nodeID": …, "created": …, "TTL": …}`, or with kured's `--concurrency` above one,
//! `{"maxOwners": n, "locks": [holder, …]}`. A holder whose TTL (nanoseconds; 0 for none) has
//! run out since `created` no longer holds it. The nodes named by a live holder are being
//! rebooted by kured.

use serde::Deserialize;

use super::{FromParts, Meta, Snapshot};

/// The annotations kured keeps its lock in.
pub const LOCK_ANNOTATIONS: [&str; 2] =
    ["weave.works/kured-node-lock", "kured.dev/kured-node-lock"];

/// A DaemonSet that is kured's: it runs a `kured` image or carries a lock annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KuredDaemonSet {
    pub namespace: String,
    pub name: String,
    pub holders: Vec<LockHolder>,
    /// Lock annotations whose value kured could not have written: a plan says so; not counted.
    pub unreadable: Vec<String>,
}

/// One node (or other owner) kured's lock names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub node_id: String,
    /// When the lock was taken, Unix seconds; none when unreadable.
    pub created: Option<i64>,
    /// How long it holds from then, in seconds; 0 for as long as it is there.
    pub ttl_seconds: i64,
}

impl LockHolder {
    /// Whether the lock still holds at `now` (Unix seconds).
    pub fn holds_at(&self, now: i64) -> bool {
        match (self.ttl_seconds, self.created) {
            (ttl, Some(created)) if ttl > 0 => now < created + ttl,
            _ => true,
        }
    }
}

impl KuredDaemonSet {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// What a DaemonSet is read as: only what says whether it is kured's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSet {
    pub kured: Option<KuredDaemonSet>,
}

#[derive(Deserialize, Default)]
pub struct DaemonSetSpec {
    #[serde(default)]
    template: Template,
}

#[derive(Deserialize, Default)]
struct Template {
    #[serde(default)]
    spec: TemplateSpec,
}

#[derive(Deserialize, Default)]
struct TemplateSpec {
    #[serde(default)]
    containers: Vec<Container>,
}

#[derive(Deserialize)]
struct Container {
    #[serde(default)]
    image: String,
}

/// Whether `image` is kured's: its repository's last path segment is `kured`.
fn is_kured_image(image: &str) -> bool {
    let repository = image.split('@').next().unwrap_or(image);
    let last = repository.rsplit('/').next().unwrap_or(repository);
    last.split(':').next() == Some("kured")
}

#[derive(Deserialize)]
#[serde(untagged)]
enum LockValue {
    Many {
        #[serde(default)]
        locks: Option<Vec<Holder>>,
        #[serde(rename = "maxOwners")]
        _max_owners: u32,
    },
    One(Holder),
}

#[derive(Deserialize)]
struct Holder {
    #[serde(rename = "nodeID")]
    node_id: String,
    #[serde(default)]
    created: Option<String>,
    #[serde(rename = "TTL", default)]
    ttl: i64,
}

impl From<Holder> for LockHolder {
    fn from(h: Holder) -> LockHolder {
        LockHolder {
            node_id: h.node_id,
            created: h.created.as_deref().and_then(super::parse_timestamp),
            ttl_seconds: h.ttl.div_euclid(1_000_000_000),
        }
    }
}

/// The holders of one lock annotation's value, or why it cannot be read.
pub fn holders(value: &str) -> Result<Vec<LockHolder>, String> {
    match serde_json::from_str::<LockValue>(value) {
        Ok(LockValue::One(h)) => Ok(vec![h.into()]),
        Ok(LockValue::Many { locks, .. }) => Ok(locks
            .unwrap_or_default()
            .into_iter()
            .map(Into::into)
            .collect()),
        Err(e) => Err(e.to_string()),
    }
}

impl FromParts for DaemonSet {
    type Spec = DaemonSetSpec;
    type Status = serde::de::IgnoredAny;
    fn from_parts(meta: Meta, spec: DaemonSetSpec, _: serde::de::IgnoredAny) -> Self {
        let locks: Vec<(&str, &String)> = (LOCK_ANNOTATIONS.iter())
            .filter_map(|k| meta.annotations.get(*k).map(|v| (*k, v)))
            .collect();
        let runs_kured = (spec.template.spec.containers.iter()).any(|c| is_kured_image(&c.image));
        if locks.is_empty() && !runs_kured {
            return DaemonSet { kured: None };
        }
        let mut kured = KuredDaemonSet {
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            holders: Vec::new(),
            unreadable: Vec::new(),
        };
        for (key, value) in locks {
            match holders(value) {
                Ok(h) => kured.holders.extend(h),
                Err(e) => kured.unreadable.push(format!("{key}: {e}")),
            }
        }
        DaemonSet { kured: Some(kured) }
    }
}

impl Snapshot {
    /// The node kured is rebooting at `now`, as the holder of which DaemonSet's lock.
    pub fn kured_lock_on(&self, node: &str, now: i64) -> Option<&KuredDaemonSet> {
        self.kured
            .iter()
            .find(|ds| (ds.holders.iter()).any(|h| h.node_id == node && h.holds_at(now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_and_a_multi_lock_are_read_as_kured_writes_them() {
        let one = holders(
            r#"{"nodeID":"ip-1","metadata":{"unschedulable":false},"created":"2026-11-28T10:00:00Z","TTL":0}"#,
        )
        .unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].node_id, "ip-1");
        assert!(one[0].holds_at(i64::MAX / 2), "no TTL holds for ever");
        let many = holders(
            r#"{"maxOwners":2,"locks":[{"nodeID":"ip-2","created":"2026-11-28T10:00:00Z","TTL":1800000000000},{"nodeID":"ip-3","created":"2026-11-28T10:00:00Z","TTL":0}]}"#,
        )
        .unwrap();
        let created = super::super::parse_timestamp("2026-11-28T10:00:00Z").unwrap();
        assert_eq!(many[0].ttl_seconds, 1800);
        assert!(many[0].holds_at(created + 1799));
        assert!(
            !many[0].holds_at(created + 1800),
            "a TTL that ran out frees it"
        );
        assert_eq!(many[1].node_id, "ip-3");
        assert_eq!(holders(r#"{"maxOwners":2}"#).unwrap(), []);
        assert!(holders("yes").is_err());
    }

    #[test]
    fn a_list_gives_kureds_daemon_set_and_node_maintenances_and_leaves_other_daemon_sets() {
        let lock = r#"{\"nodeID\":\"n1\",\"created\":\"2026-11-28T10:00:00Z\",\"TTL\":0}"#;
        let list = format!(
            r#"{{"kind":"List","apiVersion":"v1","items":[
              {{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{{"name":"kured","namespace":"kube-system","annotations":{{"weave.works/kured-node-lock":"{lock}"}}}},
               "spec":{{"template":{{"spec":{{"containers":[{{"name":"kured","image":"ghcr.io/kubereboot/kured:1.17.1"}}]}}}}}}}},
              {{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{{"name":"fluentd","namespace":"logging"}},
               "spec":{{"template":{{"spec":{{"containers":[{{"name":"f","image":"fluentd:1"}}]}}}}}}}},
              {{"kind":"NodeMaintenance","apiVersion":"nodemaintenance.medik8s.io/v1beta1","metadata":{{"name":"nm"}},
               "spec":{{"nodeName":"n2","reason":"firmware"}},"status":{{"phase":"Running"}}}}]}}"#
        );
        let snapshot = Snapshot::from_json(list.as_bytes()).unwrap();
        assert_eq!(snapshot.kured.len(), 1);
        assert_eq!(snapshot.kured[0].id(), "kube-system/kured");
        assert_eq!(
            snapshot.kured_lock_on("n1", 0).map(|d| d.id()).as_deref(),
            Some("kube-system/kured")
        );
        assert_eq!(
            snapshot.maintenance_of("n2").map(|m| m.reason.as_str()),
            Some("firmware")
        );
        assert!(snapshot.maintenance_of("n1").is_none());
    }

    #[test]
    fn kured_is_known_by_its_image_or_its_lock() {
        for (image, kured) in [
            ("ghcr.io/kubereboot/kured:1.17.1", true),
            ("weaveworks/kured", true),
            ("kured@sha256:abc", true),
            ("registry.invalid/not-kured:1", false),
            ("registry.invalid/kured-exporter:1", false),
        ] {
            assert_eq!(is_kured_image(image), kured, "{image}");
        }
    }
}
