//! A fleet's progress, kept in each cluster it touches (ConfigMap
//! `kube-system/rollout-ext-fleet`, a key per fleet): where the cluster's rotation stands for
//! that fleet, and an operator's abort of the fleet. A fleet run reads every cluster's record to
//! resume, so no local state file is needed.

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::{Deserialize, Serialize};

use super::history::{api, request};
use super::lock::LOCK_NAMESPACE;
use super::{Cluster, ClusterError};
use crate::plan::fleet::{Ended, EndedHow, Recorded};

/// The ConfigMap the fleet records live in, in the Lease's namespace.
pub const FLEET_RECORD_NAME: &str = "rollout-ext-fleet";

/// Where one cluster's rotation stands for a fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetRecord {
    /// The stage the cluster belongs to.
    pub stage: String,
    pub state: RecordState,
    /// Seconds since the Unix epoch.
    pub started_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<i64>,
    /// Why it failed or was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Who ran it (user@host/pid).
    pub by: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordState {
    Running,
    Succeeded,
    NodesSetAside,
    Aborted,
    Failed,
}

impl std::fmt::Display for RecordState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecordState::Running => "running",
            RecordState::Succeeded => "succeeded",
            RecordState::NodesSetAside => "nodes-set-aside",
            RecordState::Aborted => "aborted",
            RecordState::Failed => "failed",
        })
    }
}

impl FleetRecord {
    /// What the record says of its run, for the fleet's progress.
    pub fn recorded(&self) -> Recorded {
        let at = self.ended_at.unwrap_or(self.started_at);
        match self.state {
            RecordState::Succeeded => Recorded::Finished(Ended {
                how: EndedHow::Succeeded,
                at,
            }),
            RecordState::NodesSetAside => Recorded::Finished(Ended {
                how: EndedHow::NodesSetAside,
                at,
            }),
            RecordState::Running | RecordState::Aborted | RecordState::Failed => Recorded::Started,
        }
    }
}

/// An operator's request to stop a fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetAbort {
    pub by: String,
    /// Seconds since the Unix epoch.
    pub at: i64,
    pub reason: String,
}

/// The value of `key`, read as JSON.
fn parse<T: serde::de::DeserializeOwned>(
    data: &std::collections::BTreeMap<String, String>,
    key: &str,
) -> Result<Option<T>, ClusterError> {
    (data
        .get(key)
        .map(|text| serde_json::from_str(text))
        .transpose())
    .map_err(|e| ClusterError::Invalid {
        what: format!("{LOCK_NAMESPACE}/{FLEET_RECORD_NAME} key {key}"),
        message: e.to_string(),
    })
}

fn abort_key(fleet: &str) -> String {
    format!("{fleet}.abort")
}

impl Cluster {
    /// The fleet records of this cluster: none when no fleet touched it.
    async fn fleet_records(&self) -> Result<Option<ConfigMap>, ClusterError> {
        api(self)
            .get_opt(FLEET_RECORD_NAME)
            .await
            .map_err(|e| request("get").error(&self.server, e))
    }

    /// This cluster's record for `fleet`, and an abort requested of the fleet. A record that
    /// cannot be read (edited by hand) is an error naming it: the fleet must not guess.
    pub async fn fleet_record(
        &self,
        fleet: &str,
    ) -> Result<(Option<FleetRecord>, Option<FleetAbort>), ClusterError> {
        let Some(map) = self.fleet_records().await? else {
            return Ok((None, None));
        };
        let data = map.data.unwrap_or_default();
        Ok((parse(&data, fleet)?, parse(&data, &abort_key(fleet))?))
    }

    /// Writes this cluster's record for `fleet` (none: removes it).
    pub async fn write_fleet_record(
        &self,
        fleet: &str,
        record: Option<&FleetRecord>,
    ) -> Result<(), ClusterError> {
        let value = record.map(|r| serde_json::to_string(r).expect("a record serialises"));
        self.write_fleet_key(fleet, value).await
    }

    /// Records (or, with none, withdraws) an operator's abort of `fleet`.
    pub async fn write_fleet_abort(
        &self,
        fleet: &str,
        abort: Option<&FleetAbort>,
    ) -> Result<(), ClusterError> {
        let value = abort.map(|a| serde_json::to_string(a).expect("an abort serialises"));
        self.write_fleet_key(&abort_key(fleet), value).await
    }

    /// Each abort of `fleet` recorded in this cluster from now on, as the records change
    /// (watched; a cut watch is resumed with backoff).
    pub fn fleet_aborts(&self, fleet: &str) -> impl Stream<Item = FleetAbort> + Send + 'static {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={FLEET_RECORD_NAME}"));
        let key = abort_key(fleet);
        watcher(api(self), config)
            .default_backoff()
            .applied_objects()
            .filter_map(move |map| {
                let abort = map.ok().and_then(|m| {
                    let data = m.data.unwrap_or_default();
                    parse::<FleetAbort>(&data, &key).ok().flatten()
                });
                std::future::ready(abort)
            })
    }

    /// This cluster's record for `fleet` and the fleet's abort, as they change (watched; first
    /// as listed; a cut watch is resumed with backoff). A record that cannot be read, or a
    /// watch that fails, is said as an error.
    pub fn fleet_record_changes(
        &self,
        fleet: &str,
    ) -> impl Stream<Item = Result<(Option<FleetRecord>, Option<FleetAbort>), String>> + Send + 'static
    {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={FLEET_RECORD_NAME}"));
        let (fleet, abort) = (fleet.to_string(), abort_key(fleet));
        let server = self.server.clone();
        let mut listed = false;
        watcher(api(self), config)
            .default_backoff()
            .filter_map(move |change| {
                let read = |map: ConfigMap| {
                    let data = map.data.unwrap_or_default();
                    let record = parse(&data, &fleet).map_err(|e| e.to_string())?;
                    Ok((record, parse(&data, &abort).map_err(|e| e.to_string())?))
                };
                let said = match change {
                    Ok(watcher::Event::Init) => {
                        listed = false;
                        None
                    }
                    Ok(watcher::Event::InitApply(map) | watcher::Event::Apply(map)) => {
                        listed = true;
                        Some(read(map))
                    }
                    Ok(watcher::Event::Delete(_)) => Some(Ok((None, None))),
                    Ok(watcher::Event::InitDone) => (!listed).then_some(Ok((None, None))),
                    Err(e) => Some(Err(super::follow::watch_error(
                        &server,
                        &request("watch"),
                        e,
                    ))),
                };
                std::future::ready(said)
            })
    }

    /// Sets (or removes) one key: a merge patch of that key alone, so that records of other
    /// fleets, or another cluster's writer, are never overwritten; the ConfigMap is created on
    /// first use.
    async fn write_fleet_key(&self, key: &str, value: Option<String>) -> Result<(), ClusterError> {
        let patch = serde_json::json!({ "data": { key: value } });
        let api = api(self);
        for _ in 0..3 {
            match api
                .patch(
                    FLEET_RECORD_NAME,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 && value.is_none() => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(request("patch").error(&self.server, e)),
            }
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(FLEET_RECORD_NAME.into()),
                    ..Default::default()
                },
                data: Some([(key.to_string(), value.clone().unwrap_or_default())].into()),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &map).await {
                Ok(_) => return Ok(()),
                // Created meanwhile by another writer: patch it.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(request("create").error(&self.server, e)),
            }
        }
        Err(ClusterError::Invalid {
            what: format!("{LOCK_NAMESPACE}/{FLEET_RECORD_NAME}"),
            message: "it kept vanishing and reappearing while written".into(),
        })
    }
}
