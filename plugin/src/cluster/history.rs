//! What runs measured, kept on the cluster beside the Lease (ConfigMap
//! `kube-system/rollout-ext-history`), so that the next plan estimates from this cluster's own
//! durations. One key per group, each bounded (see [`crate::plan::estimate::KEPT_SAMPLES`]); a
//! write that meets another's (a conflict) reads again and retries, a few times.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};

use super::lock::LOCK_NAMESPACE;
use super::{Cluster, ClusterError, Request};
use crate::plan::estimate::{GroupHistory, History, Stage};

/// The ConfigMap the history lives in, in the Lease's namespace.
pub const HISTORY_NAME: &str = "rollout-ext-history";
/// Groups kept at most; the least recently recorded go first.
const KEPT_GROUPS: usize = 100;
/// Attempts at a write that keeps meeting another run's.
const WRITE_ATTEMPTS: usize = 5;

/// One group's entry: its name (keys may be hashed), when it was last recorded, its history.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    group: String,
    #[serde(default)]
    recorded_at: i64,
    #[serde(flatten)]
    history: GroupHistory,
}

/// The ConfigMaps we keep beside the Lease (the history, the fleets' records).
pub(super) fn api(cluster: &Cluster) -> Api<ConfigMap> {
    Api::namespaced(cluster.client.clone(), LOCK_NAMESPACE)
}

/// A request about those ConfigMaps, for its errors.
pub(super) fn request(verb: &'static str) -> Request<'static> {
    Request {
        verb,
        resource: "configmaps",
        namespace: Some(LOCK_NAMESPACE),
    }
}

/// The ConfigMap key of `group`: `group.NAME`, hashed when NAME cannot be part of a key.
fn key_of(group: &str) -> String {
    let valid = group.len() <= 200
        && (group.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        format!("group.{group}")
    } else {
        use sha2::Digest;
        format!(
            "group.{}",
            hex::encode(&sha2::Sha256::digest(group.as_bytes())[..12])
        )
    }
}

fn entries(map: &ConfigMap) -> BTreeMap<String, Entry> {
    (map.data.iter().flatten())
        .filter(|(key, _)| key.starts_with("group."))
        .filter_map(|(key, text)| Some((key.clone(), serde_json::from_str(text).ok()?)))
        .collect()
}

impl Cluster {
    /// The durations earlier runs recorded; empty when none has.
    pub async fn history(&self) -> Result<History, ClusterError> {
        let found = (api(self).get_opt(HISTORY_NAME).await)
            .map_err(|e| request("get").error(&self.server, e))?;
        let groups = found.as_ref().map(entries).unwrap_or_default();
        Ok(History {
            groups: (groups.into_values())
                .map(|e| (e.group, e.history))
                .collect(),
        })
    }

    /// The history, or none and what to say when it cannot be read: the estimates then rest
    /// on the policy's or the built-in figures, never a reason to stop.
    pub async fn history_or_note(&self) -> (History, Option<String>) {
        match self.history().await {
            Ok(history) => (history, None),
            Err(e) => (
                History::default(),
                Some(format!(
                    "cannot read the durations earlier runs recorded, so estimates rest on the policy's or the built-in figures: {e}"
                )),
            ),
        }
    }

    /// Adds what run `run_id` measured in `group` to the history.
    pub async fn record_history(
        &self,
        group: &str,
        run_id: &str,
        measured: &[(Stage, u64)],
    ) -> Result<(), ClusterError> {
        let api = api(self);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let found = (api.get_opt(HISTORY_NAME).await)
                .map_err(|e| request("get").error(&self.server, e))?;
            let exists = found.is_some();
            let mut map = found.unwrap_or_else(|| ConfigMap {
                metadata: ObjectMeta {
                    name: Some(HISTORY_NAME.into()),
                    namespace: Some(LOCK_NAMESPACE.into()),
                    ..Default::default()
                },
                ..Default::default()
            });
            let key = key_of(group);
            let mut all = entries(&map);
            let entry = all.entry(key.clone()).or_insert_with(|| Entry {
                group: group.to_string(),
                recorded_at: 0,
                history: GroupHistory::default(),
            });
            entry.history.record_all(run_id, measured);
            entry.recorded_at = jiff::Timestamp::now().as_second();
            let mut by_age: Vec<(i64, String)> = (all.iter())
                .map(|(k, e)| (e.recorded_at, k.clone()))
                .collect();
            by_age.sort();
            let forgotten = by_age.len().saturating_sub(KEPT_GROUPS);
            let data = map.data.get_or_insert_with(Default::default);
            for (_, key) in by_age.iter().take(forgotten) {
                data.remove(key);
                all.remove(key);
            }
            if let Some(entry) = all.get(&key) {
                data.insert(
                    key,
                    serde_json::to_string(entry).expect("an entry serializes"),
                );
            }
            let written = match exists {
                true => {
                    api.replace(HISTORY_NAME, &PostParams::default(), &map)
                        .await
                }
                false => api.create(&PostParams::default(), &map).await,
            };
            match written {
                Ok(_) => return Ok(()),
                // Another run wrote (or created) it meanwhile: read it again.
                Err(kube::Error::Api(status))
                    if (status.code == 409) && attempt < WRITE_ATTEMPTS => {}
                Err(e) => {
                    let verb = if exists { "update" } else { "create" };
                    return Err(request(verb).error(&self.server, e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_key_is_its_name_or_a_hash_of_it() {
        assert_eq!(key_of("nodes-a"), "group.nodes-a");
        let hashed = key_of("a group/with spaces");
        assert!(hashed.starts_with("group.") && hashed.len() == "group.".len() + 24);
    }
}
