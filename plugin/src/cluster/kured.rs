//! Taking and letting go of kured's reboot lock (its format: [`crate::snapshot::kured`]). kured
//! reboots a node only while that node holds the lock, so a run that holds it while it takes
//! nodes out keeps kured from starting a reboot meanwhile. Written as kured writes it: read the
//! DaemonSet, change the annotation, write it back conditional on what was read (a conflict
//! reads again).

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, Patch, PatchParams};

use super::{Cluster, ClusterError, Request};
use crate::snapshot::kured::{self, Acquired, LockSpot};

/// How many times a write that lost a race with another writer (kured, a person) reads again.
const CONFLICTS: usize = 5;

/// What came of asking for the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KuredLock {
    Taken,
    /// Held by these, with no room for the run.
    HeldBy(Vec<String>),
    /// kured's DaemonSet is not there (kured keeps no lock to take).
    NoDaemonSet,
}

impl Cluster {
    fn daemon_sets(&self, namespace: &str) -> Api<DaemonSet> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Takes kured's lock at `spot` for the run `run_id`, which takes out `nodes`.
    pub async fn take_kured_lock(
        &self,
        spot: &LockSpot,
        run_id: &str,
        nodes: &[String],
    ) -> Result<KuredLock, ClusterError> {
        let holder = serde_json::json!({
            "nodeID": format!("{}{run_id}", kured::RUN_HOLDER),
            "metadata": {"unschedulable": false, "nodes": nodes},
            "created": jiff::Timestamp::now().to_string(),
            "TTL": 0,
        });
        let now = jiff::Timestamp::now().as_second();
        self.rewrite_lock(spot, |current| {
            match kured::acquire(current, spot.max_owners, &holder, now) {
                Acquired::Value(v) => Ok(Some(Some(v))),
                Acquired::HeldBy(by) => Err(by),
            }
        })
        .await
    }

    /// Lets go of every hold a run (this one, or a killed one) has on kured's lock at `spot`.
    pub async fn release_kured_lock(&self, spot: &LockSpot) -> Result<(), ClusterError> {
        self.rewrite_lock(spot, |current| Ok(current.and_then(kured::release)))
            .await
            .map(|_| ())
    }

    /// Reads the lock's annotation at `spot` and writes what `change` makes of it (`None`: no
    /// write; `Some(None)`: the annotation goes), or says who holds it.
    async fn rewrite_lock(
        &self,
        spot: &LockSpot,
        change: impl Fn(Option<&str>) -> Result<Option<Option<String>>, Vec<String>>,
    ) -> Result<KuredLock, ClusterError> {
        let api = self.daemon_sets(&spot.namespace);
        let request = |verb| Request {
            verb,
            resource: "daemonsets.apps",
            namespace: Some(&spot.namespace),
        };
        let mut conflicts = 0;
        loop {
            let Some(ds) = (api.get_opt(&spot.name).await)
                .map_err(|e| request("get").error(&self.server, e))?
            else {
                return Ok(KuredLock::NoDaemonSet);
            };
            let current = (ds.metadata.annotations.as_ref()).and_then(|a| a.get(&spot.annotation));
            let value = match change(current.map(String::as_str)) {
                Ok(Some(value)) => value,
                Ok(None) => return Ok(KuredLock::Taken),
                Err(by) => return Ok(KuredLock::HeldBy(by)),
            };
            let patch = serde_json::json!({"metadata": {
                "resourceVersion": ds.metadata.resource_version,
                "annotations": {spot.annotation.as_str(): value},
            }});
            match api
                .patch(&spot.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return Ok(KuredLock::Taken),
                Err(kube::Error::Api(s)) if s.code == 409 && conflicts < CONFLICTS => {
                    conflicts += 1
                }
                Err(e) => return Err(request("patch").error(&self.server, e)),
            }
        }
    }
}
