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
    /// Where the kured it runs keeps its lock, from its flags; none when it runs no kured.
    pub lock: Option<LockSpot>,
    /// Lock annotations whose value kured could not have written: a plan says so; not counted.
    pub unreadable: Vec<String>,
}

/// Where and how kured keeps its lock: `--ds-namespace` (default `kube-system`), `--ds-name`
/// (`kured`), `--lock-annotation` (`weave.works/kured-node-lock`) and `--concurrency` (1; above
/// one the lock is a list) of its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockSpot {
    pub namespace: String,
    pub name: String,
    pub annotation: String,
    pub max_owners: u32,
}

impl LockSpot {
    /// The spot kured's command line `words` say, kured's defaults for what they leave out.
    fn from_flags(words: &[String]) -> LockSpot {
        let flag = |name: &str| -> Option<String> {
            let long = format!("--{name}");
            let mut words = words.iter();
            while let Some(w) = words.next() {
                if let Some(value) = w.strip_prefix(&format!("{long}=")) {
                    return Some(value.to_string());
                }
                if *w == long {
                    return words.next().cloned();
                }
            }
            None
        };
        LockSpot {
            namespace: flag("ds-namespace").unwrap_or_else(|| "kube-system".into()),
            name: flag("ds-name").unwrap_or_else(|| "kured".into()),
            annotation: flag("lock-annotation").unwrap_or_else(|| LOCK_ANNOTATIONS[0].into()),
            max_owners: (flag("concurrency").and_then(|c| c.parse().ok()))
                .unwrap_or(1)
                .max(1),
        }
    }
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
        self.expires_at().is_none_or(|end| now < end)
    }

    /// When the lock stops holding by itself (its TTL runs out), Unix seconds; none if never.
    pub fn expires_at(&self) -> Option<i64> {
        match (self.ttl_seconds, self.created) {
            (ttl, Some(created)) if ttl > 0 => Some(created + ttl),
            _ => None,
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
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
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

/// The prefix of the holder a run writes into kured's lock: never a node's name.
pub const RUN_HOLDER: &str = "rollout-ext/";

/// What taking the lock comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The annotation's new value, with the run among its holders.
    Value(String),
    /// Held, and no room: by these holders.
    HeldBy(Vec<String>),
}

/// Takes the lock whose annotation reads `current` (none when absent) for `holder` at `now`,
/// as kured takes it: a single lock when `max_owners` is 1, free when absent, when its TTL ran
/// out, or when a run (this or a killed one) holds it; a list otherwise, with room while fewer
/// than `max_owners` live holders that are not runs hold it (kept as they are).
pub fn acquire(
    current: Option<&str>,
    max_owners: u32,
    holder: &serde_json::Value,
    now: i64,
) -> Acquired {
    let live_other = |h: &serde_json::Value| -> Option<String> {
        let parsed: LockHolder = serde_json::from_value::<Holder>(h.clone()).ok()?.into();
        (parsed.holds_at(now) && !parsed.node_id.starts_with(RUN_HOLDER)).then_some(parsed.node_id)
    };
    let value: serde_json::Value = current
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(serde_json::Value::Null);
    if max_owners <= 1 {
        if let Some(other) = live_other(&value) {
            return Acquired::HeldBy(vec![other]);
        }
        return Acquired::Value(holder.to_string());
    }
    let kept: Vec<serde_json::Value> = (value["locks"].as_array().into_iter().flatten())
        .filter(|h| live_other(h).is_some())
        .cloned()
        .collect();
    if kept.len() as u32 >= max_owners {
        return Acquired::HeldBy(kept.iter().filter_map(live_other).collect());
    }
    let mut locks = kept;
    locks.push(holder.clone());
    Acquired::Value(serde_json::json!({"maxOwners": max_owners, "locks": locks}).to_string())
}

/// The annotation's value without any run among its holders: `None` when nothing changes,
/// `Some(None)` when the annotation goes (a single lock a run held).
pub fn release(current: &str) -> Option<Option<String>> {
    let value: serde_json::Value = serde_json::from_str(current).ok()?;
    let ours = |h: &serde_json::Value| {
        h["nodeID"]
            .as_str()
            .is_some_and(|id| id.starts_with(RUN_HOLDER))
    };
    match value["locks"].as_array() {
        Some(locks) if locks.iter().any(ours) => {
            let mut kept = value.clone();
            kept["locks"] = locks.iter().filter(|h| !ours(h)).cloned().collect();
            Some(Some(kept.to_string()))
        }
        Some(_) => None,
        None => ours(&value).then_some(None),
    }
}

impl FromParts for DaemonSet {
    type Spec = DaemonSetSpec;
    type Status = serde::de::IgnoredAny;
    fn from_parts(meta: Meta, spec: DaemonSetSpec, _: serde::de::IgnoredAny) -> Self {
        let locks: Vec<(&str, &String)> = (LOCK_ANNOTATIONS.iter())
            .filter_map(|k| meta.annotations.get(*k).map(|v| (*k, v)))
            .collect();
        let kured_container =
            (spec.template.spec.containers.iter()).find(|c| is_kured_image(&c.image));
        if locks.is_empty() && kured_container.is_none() {
            return DaemonSet { kured: None };
        }
        let lock = kured_container.map(|c| {
            let words: Vec<String> = c.command.iter().chain(&c.args).cloned().collect();
            LockSpot::from_flags(&words)
        });
        let mut kured = KuredDaemonSet {
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            holders: Vec::new(),
            lock,
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
    /// Where the kured DaemonSets of the cluster keep their locks, each once.
    pub fn kured_lock_spots(&self) -> Vec<&LockSpot> {
        let mut spots: Vec<&LockSpot> = Vec::new();
        for spot in self.kured.iter().filter_map(|k| k.lock.as_ref()) {
            if !spots.contains(&spot) {
                spots.push(spot);
            }
        }
        spots
    }

    /// Whether kured's lock at `spot` has room for a run at `now`: fewer live holders that are
    /// not runs than it allows (a DaemonSet not in view has none).
    pub fn kured_lock_has_room(&self, spot: &LockSpot, now: i64) -> bool {
        let ds = (self.kured.iter()).find(|k| k.namespace == spot.namespace && k.name == spot.name);
        let held = ds.map_or(0, |ds| {
            (ds.holders.iter())
                .filter(|h| h.holds_at(now) && !h.node_id.starts_with(RUN_HOLDER))
                .count()
        });
        (held as u32) < spot.max_owners
    }

    /// The first moment after `now` at which a holder of a kured lock stops holding by itself
    /// (its TTL runs out): what a wait on the view must look again at, as no watch event comes.
    pub fn kured_next_expiry(&self, now: i64) -> Option<i64> {
        (self.kured.iter().flat_map(|ds| ds.holders.iter()))
            .filter_map(LockHolder::expires_at)
            .filter(|end| *end > now)
            .min()
    }

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
        assert_eq!(
            (many[0].expires_at(), many[1].expires_at()),
            (Some(created + 1800), None)
        );
        assert_eq!(holders(r#"{"maxOwners":2}"#).unwrap(), []);
        assert!(holders("yes").is_err());
    }

    /// kured's DaemonSet (its image, kube-system/kured) carrying `lock` (escaped for a JSON
    /// string) in its default lock annotation: a list item.
    fn kured_item(lock: &str) -> String {
        format!(
            r#"{{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{{"name":"kured","namespace":"kube-system","annotations":{{"weave.works/kured-node-lock":"{lock}"}}}},
               "spec":{{"template":{{"spec":{{"containers":[{{"name":"kured","image":"ghcr.io/kubereboot/kured:1.17.1"}}]}}}}}}}}"#
        )
    }

    #[test]
    fn the_next_expiry_is_the_first_ttl_to_run_out_after_now() {
        let lock = r#"{\"maxOwners\":3,\"locks\":[{\"nodeID\":\"a\",\"created\":\"2026-11-28T10:00:00Z\",\"TTL\":60000000000},{\"nodeID\":\"b\",\"created\":\"2026-11-28T10:00:00Z\",\"TTL\":30000000000},{\"nodeID\":\"c\",\"TTL\":0}]}"#;
        let list = format!(
            r#"{{"kind":"List","apiVersion":"v1","items":[{}]}}"#,
            kured_item(lock)
        );
        let snapshot = Snapshot::from_json(list.as_bytes()).unwrap();
        let created = super::super::parse_timestamp("2026-11-28T10:00:00Z").unwrap();
        assert_eq!(snapshot.kured_next_expiry(created), Some(created + 30));
        assert_eq!(snapshot.kured_next_expiry(created + 30), Some(created + 60));
        assert_eq!(
            snapshot.kured_next_expiry(created + 60),
            None,
            "c holds for ever"
        );
    }

    #[test]
    fn a_list_gives_kureds_daemon_set_and_node_maintenances_and_leaves_other_daemon_sets() {
        let lock = r#"{\"nodeID\":\"n1\",\"created\":\"2026-11-28T10:00:00Z\",\"TTL\":0}"#;
        let list = format!(
            r#"{{"kind":"List","apiVersion":"v1","items":[{},
              {{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{{"name":"fluentd","namespace":"logging"}},
               "spec":{{"template":{{"spec":{{"containers":[{{"name":"f","image":"fluentd:1"}}]}}}}}}}},
              {{"kind":"NodeMaintenance","apiVersion":"nodemaintenance.medik8s.io/v1beta1","metadata":{{"name":"nm"}},
               "spec":{{"nodeName":"n2","reason":"firmware"}},"status":{{"phase":"Running"}}}}]}}"#,
            kured_item(lock)
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
    fn a_run_takes_a_free_single_lock_and_waits_for_a_held_one() {
        let ours = serde_json::json!({"nodeID": "rollout-ext/run-1", "TTL": 0});
        let held = r#"{"nodeID":"ip-1","created":"2026-11-28T10:00:00Z","TTL":0}"#;
        assert_eq!(
            acquire(Some(held), 1, &ours, 0),
            Acquired::HeldBy(vec!["ip-1".into()])
        );
        assert_eq!(
            acquire(None, 1, &ours, 0),
            Acquired::Value(ours.to_string())
        );
        let expired = r#"{"nodeID":"ip-1","created":"1970-01-01T00:00:00Z","TTL":1000000000}"#;
        assert_eq!(
            acquire(Some(expired), 1, &ours, 5),
            Acquired::Value(ours.to_string())
        );
        let killed = r#"{"nodeID":"rollout-ext/run-0","TTL":0}"#;
        assert_eq!(
            acquire(Some(killed), 1, &ours, 0),
            Acquired::Value(ours.to_string())
        );
        assert_eq!(release(&ours.to_string()), Some(None));
        assert_eq!(release(held), None);
    }

    #[test]
    fn a_run_takes_room_in_a_list_lock_and_gives_back_only_its_own() {
        let ours = serde_json::json!({"nodeID": "rollout-ext/run-1", "TTL": 0});
        let one = r#"{"maxOwners":2,"locks":[{"nodeID":"ip-1","TTL":0,"metadata":{"unschedulable":true}}]}"#;
        let Acquired::Value(taken) = acquire(Some(one), 2, &ours, 0) else {
            panic!("room for one more")
        };
        let value: serde_json::Value = serde_json::from_str(&taken).unwrap();
        assert_eq!(value["maxOwners"], 2);
        assert_eq!(
            value["locks"][0]["metadata"]["unschedulable"], true,
            "kept as it was"
        );
        assert_eq!(value["locks"][1], ours);
        let full =
            r#"{"maxOwners":2,"locks":[{"nodeID":"ip-1","TTL":0},{"nodeID":"ip-2","TTL":0}]}"#;
        assert_eq!(
            acquire(Some(full), 2, &ours, 0),
            Acquired::HeldBy(vec!["ip-1".into(), "ip-2".into()])
        );
        let given_back: serde_json::Value =
            serde_json::from_str(&release(&taken).unwrap().unwrap()).unwrap();
        assert_eq!(given_back["locks"].as_array().unwrap().len(), 1);
        assert_eq!(release(one), None);
    }

    #[test]
    fn kureds_flags_say_where_its_lock_is() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            LockSpot::from_flags(&words(&["/usr/bin/kured", "--period=1h"])),
            LockSpot {
                namespace: "kube-system".into(),
                name: "kured".into(),
                annotation: LOCK_ANNOTATIONS[0].into(),
                max_owners: 1,
            }
        );
        let spot = LockSpot::from_flags(&words(&[
            "--ds-namespace=kured",
            "--ds-name",
            "kured-ds",
            "--lock-annotation=kured.dev/kured-node-lock",
            "--concurrency=3",
        ]));
        assert_eq!(
            (
                spot.namespace.as_str(),
                spot.name.as_str(),
                spot.annotation.as_str(),
                spot.max_owners
            ),
            ("kured", "kured-ds", "kured.dev/kured-node-lock", 3)
        );
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
