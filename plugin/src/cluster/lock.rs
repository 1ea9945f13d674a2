//! One rotation per cluster at a time: a Lease in kube-system held, and renewed, for the run.
//! A workload's update holds a Lease of its own beside the workload ([`LeaseRef::workload`]).
//!
//! A second run is refused with the holder and how long ago it last renewed; `--force-unlock`
//! takes a stale lock over. The holder notices a takeover at its next renewal and stops.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use tokio::sync::watch;

use super::{Cluster, ClusterError, Request};

pub const LOCK_NAME: &str = "rollout-ext";
pub const LOCK_NAMESPACE: &str = "kube-system";
/// A holder that has not renewed for this long is stale.
pub const LOCK_DURATION: Duration = Duration::from_secs(60);
pub const RENEW_EVERY: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another run holds the lock {lease}: {holder}, last renewed {renewed_ago} ago{}", if *.stale { " (stale: it stopped renewing; rerun with --force-unlock to take over)" } else { " (wait for it to finish, or stop it)" })]
    Held {
        lease: LeaseRef,
        holder: String,
        renewed_ago: String,
        stale: bool,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// Which Lease a lock is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
}

impl LeaseRef {
    /// The one lock of node rotations.
    pub fn rotation() -> LeaseRef {
        LeaseRef {
            namespace: LOCK_NAMESPACE.into(),
            name: LOCK_NAME.into(),
        }
    }

    /// The lock of one workload's update: `rollout-ext-<kind>-<name>` in its namespace.
    pub fn workload(short_kind: &str, namespace: &str, name: &str) -> LeaseRef {
        LeaseRef {
            namespace: namespace.into(),
            name: format!("{LOCK_NAME}-{short_kind}-{name}"),
        }
    }

    fn api(&self, cluster: &Cluster) -> Api<Lease> {
        Api::namespaced(cluster.client.clone(), &self.namespace)
    }

    fn request(&self, verb: &'static str) -> Request<'_> {
        Request {
            verb,
            resource: "leases.coordination.k8s.io",
            namespace: Some(&self.namespace),
        }
    }
}

impl std::fmt::Display for LeaseRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The held lock. Renewed in the background until released; `lost()` turns true if another run
/// took it over.
pub struct LockGuard {
    cluster: Cluster,
    lease: LeaseRef,
    identity: String,
    lost: watch::Receiver<bool>,
    renewer: tokio::task::JoinHandle<()>,
    /// A write of the run's state under way that the run did not wait for (see
    /// [`LockGuard::clear_soon`]).
    pending: tokio::sync::Mutex<Option<PendingWrite>>,
}

type PendingWrite = tokio::task::JoinHandle<Result<(), ClusterError>>;

pub(super) fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

pub(super) fn api(cluster: &Cluster) -> Api<Lease> {
    Api::namespaced(cluster.client.clone(), LOCK_NAMESPACE)
}

pub(super) fn lease_request(verb: &'static str) -> Request<'static> {
    Request {
        verb,
        resource: "leases.coordination.k8s.io",
        namespace: Some(LOCK_NAMESPACE),
    }
}

fn spec(identity: &str) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(LOCK_DURATION.as_secs() as i32),
        acquire_time: Some(now()),
        renew_time: Some(now()),
        ..Default::default()
    }
}

impl Cluster {
    /// Takes the rotation lock for `identity`; with `force_unlock`, takes it from its holder.
    pub async fn lock(&self, identity: &str, force_unlock: bool) -> Result<LockGuard, LockError> {
        self.lock_renewing_every(identity, force_unlock, RENEW_EVERY)
            .await
    }

    /// [`Cluster::lock`] with another renewal period (tests shorten it).
    pub async fn lock_renewing_every(
        &self,
        identity: &str,
        force_unlock: bool,
        renew_every: Duration,
    ) -> Result<LockGuard, LockError> {
        self.lock_lease(&LeaseRef::rotation(), identity, force_unlock, renew_every)
            .await
    }

    /// Takes the lock `lease` for `identity` (from its holder with `force_unlock`), renewed every
    /// `renew_every` until let go.
    pub async fn lock_lease(
        &self,
        lease: &LeaseRef,
        identity: &str,
        force_unlock: bool,
        renew_every: Duration,
    ) -> Result<LockGuard, LockError> {
        let leases = lease.api(self);
        let fresh = Lease {
            metadata: ObjectMeta {
                name: Some(lease.name.clone()),
                ..Default::default()
            },
            spec: Some(spec(identity)),
        };
        // The holder renewing (or letting go) between our read and our write makes the write
        // conflict: the Lease is read again and the decision made again, a few times.
        let mut attempts = 0;
        loop {
            attempts += 1;
            match leases.create(&PostParams::default(), &fresh).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let current = leases
                        .get(&lease.name)
                        .await
                        .map_err(|e| lease.request("get").error(&self.server, e))?;
                    let holder_spec = current.spec.clone().unwrap_or_default();
                    // A run that stopped on an error left its state here but let go of the lock.
                    let free = holder_spec
                        .holder_identity
                        .as_deref()
                        .is_none_or(str::is_empty);
                    let holder = holder_spec.holder_identity.unwrap_or_default();
                    let renewed = holder_spec.renew_time.map(|t| t.0);
                    let age = renewed
                        .map(|t| jiff::Timestamp::now().duration_since(t).as_secs())
                        .unwrap_or(i64::MAX);
                    let stale = age > LOCK_DURATION.as_secs() as i64;
                    // Our own creation, answered by a server that went away before replying and
                    // then sent again by the retry layer: the lock is ours already.
                    let ours = holder == identity;
                    if !force_unlock && !free && !ours {
                        return Err(LockError::Held {
                            lease: lease.clone(),
                            holder,
                            renewed_ago: if renewed.is_some() {
                                crate::duration::human_duration(age)
                            } else {
                                "never".into()
                            },
                            stale,
                        });
                    }
                    let mut taken = current;
                    let transitions = taken
                        .spec
                        .as_ref()
                        .and_then(|s| s.lease_transitions)
                        .unwrap_or(0);
                    taken.spec = Some(LeaseSpec {
                        lease_transitions: Some(transitions + 1),
                        ..spec(identity)
                    });
                    // The resourceVersion of what we read makes this a compare-and-swap.
                    match leases
                        .replace(&lease.name, &PostParams::default(), &taken)
                        .await
                    {
                        Ok(_) => break,
                        Err(kube::Error::Api(s))
                            if s.code == 409 && attempts < TAKEOVER_ATTEMPTS =>
                        {
                            continue;
                        }
                        Err(e) => {
                            return Err(lease.request("update").error(&self.server, e).into());
                        }
                    }
                }
                Err(e) => return Err(lease.request("create").error(&self.server, e).into()),
            }
        }
        let (tx, lost) = watch::channel(false);
        let renewer = tokio::spawn(renew(
            self.clone(),
            lease.clone(),
            identity.to_string(),
            renew_every,
            tx,
        ));
        Ok(LockGuard {
            cluster: self.clone(),
            lease: lease.clone(),
            identity: identity.to_string(),
            lost,
            renewer,
            pending: Default::default(),
        })
    }
}

/// Deletes the Lease as it was read: gone, or changed since (someone else's now), it is left.
pub(super) async fn delete_unchanged(
    cluster: &Cluster,
    lease: Lease,
) -> Result<Unchanged, ClusterError> {
    delete_unchanged_of(cluster, &LeaseRef::rotation(), lease).await
}

async fn delete_unchanged_of(
    cluster: &Cluster,
    at: &LeaseRef,
    lease: Lease,
) -> Result<Unchanged, ClusterError> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.metadata.resource_version,
            uid: lease.metadata.uid,
        }),
        ..Default::default()
    };
    match at.api(cluster).delete(&at.name, &params).await {
        Ok(_) => Ok(Unchanged::Yes),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Unchanged::Yes),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Unchanged::No),
        Err(e) => Err(at.request("delete").error(&cluster.server, e)),
    }
}

/// Whether the Lease was as read when it was deleted (or already gone); when it was not,
/// nothing was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unchanged {
    Yes,
    No,
}

/// How often letting go of the lock reads the Lease again after someone else changed it.
/// How often a takeover that met a concurrent change of the Lease reads it again.
const TAKEOVER_ATTEMPTS: u32 = 5;
const RELEASE_ATTEMPTS: usize = 5;

/// Whether a run left state on the Lease (or an operator a request for the next run).
pub(super) fn has_run_state(lease: &Lease) -> bool {
    has_run_state_but(lease, |_| true)
}

/// [`has_run_state`], counting only the keys `counts` accepts.
fn has_run_state_but(lease: &Lease, counts: impl Fn(&str) -> bool) -> bool {
    lease.metadata.annotations.as_ref().is_some_and(|a| {
        a.keys()
            .any(|k| k.starts_with("rollout-ext.io/") && counts(k))
    })
}

/// Renews the lease until it is lost or the task is stopped.
async fn renew(
    cluster: Cluster,
    at: LeaseRef,
    identity: String,
    every: Duration,
    lost: watch::Sender<bool>,
) {
    let leases = at.api(&cluster);
    let mut ticker = tokio::time::interval(every);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Ok(mut lease) = leases.get(&at.name).await else {
            continue;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(identity.as_str()) {
            let _ = lost.send(true);
            return;
        }
        spec.renew_time = Some(now());
        if let Err(kube::Error::Api(s)) = leases
            .replace(&at.name, &PostParams::default(), &lease)
            .await
            && s.code == 409
        {
            // Someone changed it since we read it; the next round tells whether it is still ours.
            continue;
        }
    }
}

impl LockGuard {
    /// True once another run has taken the lock over.
    pub fn lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Waits until another run takes the lock over.
    pub async fn wait_lost(&mut self) {
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn request_error(&self, verb: &'static str, e: kube::Error) -> ClusterError {
        self.lease.request(verb).error(&self.cluster.server, e)
    }

    /// The run's state entry `key`, kept on the lock so that a resumed run finds it.
    pub async fn state(&self, key: &str) -> Result<Option<String>, ClusterError> {
        let _settled = self.settled().await?;
        let lease = self
            .lease
            .api(&self.cluster)
            .get(&self.lease.name)
            .await
            .map_err(|e| self.request_error("get", e))?;
        Ok(lease.metadata.annotations.and_then(|mut a| a.remove(key)))
    }

    /// Records (or, with `None`, forgets) a state entry of the run.
    pub async fn set_state(&self, key: &str, value: Option<&str>) -> Result<(), ClusterError> {
        self.set_states(&[(key, value)]).await
    }

    /// Records or forgets several state entries at once: a run stopped around the call finds
    /// all of them or none.
    pub async fn set_states(&self, entries: &[(&str, Option<&str>)]) -> Result<(), ClusterError> {
        let _settled = self.settled().await?;
        write_states(&self.cluster, &self.lease, entries).await
    }

    /// Forgets the state entry `key` without waiting for the write: the run goes on meanwhile.
    /// The next read or write of the run's state, and the lock's release, wait for it first
    /// (so writes stay in order) and fail with its error.
    pub async fn clear_soon(&self, key: &str) -> Result<(), ClusterError> {
        self.write_soon(key, None, true).await
    }

    /// Records the state entry `key` without waiting for the write, for a record only onlookers
    /// read (the run's progress, which `status --watch` shows): the run goes on meanwhile, the
    /// next write waits for it (so writes stay in order), and its failure is not the run's: the
    /// next record says the same again.
    pub async fn record_soon(&self, key: &str, value: &str) -> Result<(), ClusterError> {
        self.write_soon(key, Some(value), false).await
    }

    /// Starts writing `key` once the write under way is done; the next write waits for it and
    /// fails with its error when `fails_run`.
    async fn write_soon(
        &self,
        key: &str,
        value: Option<&str>,
        fails_run: bool,
    ) -> Result<(), ClusterError> {
        let mut pending = self.settled().await?;
        let (cluster, lease) = (self.cluster.clone(), self.lease.clone());
        let (key, value) = (key.to_string(), value.map(String::from));
        *pending = Some(tokio::spawn(async move {
            let written = write_states(&cluster, &lease, &[(&key, value.as_deref())]).await;
            if fails_run { written } else { Ok(()) }
        }));
        Ok(())
    }

    /// Waits for the write under way, if any; its error is this call's. The guard keeps the
    /// next write from starting before the caller's.
    async fn settled(
        &self,
    ) -> Result<tokio::sync::MutexGuard<'_, Option<PendingWrite>>, ClusterError> {
        let mut pending = self.pending.lock().await;
        if let Some(write) = pending.take() {
            write
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        }
        Ok(pending)
    }

    /// Lets go of the lock but keeps the run's state, for a run that stopped before the end:
    /// the next run takes the lock without `--force-unlock` and resumes from the state.
    pub async fn abandon(self) -> Result<(), ClusterError> {
        self.let_go(false).await
    }

    /// Gives the lock back at the end of a run, if it is still ours. A Lease that still holds
    /// state (another group's records from an earlier stopped run, a request an operator made
    /// for the next run) is kept, with no holder; one that holds none but what the run was
    /// waiting on is deleted, leaving no trace.
    pub async fn release(self) -> Result<(), ClusterError> {
        self.let_go(true).await
    }

    /// Lets go of the lock, keeping the Lease while state is left on it; `finished`: the run's
    /// own record of what it waits on is not state any more. A change made between reading the
    /// Lease and writing it (an operator's late pause) is read again.
    async fn let_go(self, finished: bool) -> Result<(), ClusterError> {
        drop(self.settled().await?);
        self.renewer.abort();
        let leases = self.lease.api(&self.cluster);
        for _ in 0..RELEASE_ATTEMPTS {
            let Some(mut current) = leases
                .get_opt(&self.lease.name)
                .await
                .map_err(|e| self.request_error("get", e))?
            else {
                return Ok(());
            };
            let holder = current
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref());
            if holder != Some(self.identity.as_str()) {
                return Ok(());
            }
            // A run's estimates end with it; what a finished run waited on is over too.
            let over = |key: &str| {
                [
                    crate::keys::ESTIMATE,
                    crate::keys::SLOW,
                    crate::keys::PROGRESS,
                ]
                .contains(&key)
                    || (finished && key == crate::keys::HOLDING)
            };
            let left = |key: &str| !over(key);
            if !has_run_state_but(&current, left) {
                match delete_unchanged_of(&self.cluster, &self.lease, current).await? {
                    Unchanged::Yes => return Ok(()),
                    Unchanged::No => continue,
                }
            }
            current
                .spec
                .get_or_insert_with(Default::default)
                .holder_identity = None;
            if let Some(annotations) = current.metadata.annotations.as_mut() {
                annotations.retain(|key, _| !over(key));
            }
            match leases
                .replace(&self.lease.name, &PostParams::default(), &current)
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(self.request_error("update", e)),
            }
        }
        Err(ClusterError::Api {
            verb: "update".into(),
            resource: format!("lease {}", self.lease),
            code: 409,
            message: format!(
                "it changed {RELEASE_ATTEMPTS} times while this run let it go; `kubectl rollout-ext status` shows who holds it"
            ),
        })
    }
}

/// What the lock says about the current or last run, for `status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockStatus {
    /// Empty when no run holds the lock.
    pub holder: String,
    pub renewed_seconds_ago: Option<i64>,
    /// The run's state entries (expected Ready nodes per group being rotated).
    pub state: std::collections::BTreeMap<String, String>,
}

/// Merges `entries` into the annotations of `lease` (a `None` value removes its key).
async fn write_states(
    cluster: &Cluster,
    lease: &LeaseRef,
    entries: &[(&str, Option<&str>)],
) -> Result<(), ClusterError> {
    let annotations: serde_json::Map<String, serde_json::Value> = entries
        .iter()
        .map(|(key, value)| (key.to_string(), serde_json::json!(value)))
        .collect();
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    lease
        .api(cluster)
        .patch(
            &lease.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .map_err(|e| lease.request("patch").error(&cluster.server, e))?;
    Ok(())
}

impl Cluster {
    /// The Lease's uid, which Events about the run carry; `None` when it cannot be read.
    pub async fn lock_uid(&self) -> Option<String> {
        api(self).get_opt(LOCK_NAME).await.ok()??.metadata.uid
    }

    /// The Lease as it is now; `None` when no run holds or left it.
    pub(super) async fn read_lease(&self) -> Result<Option<Lease>, ClusterError> {
        api(self)
            .get_opt(LOCK_NAME)
            .await
            .map_err(|e| lease_request("get").error(&self.server, e))
    }

    /// Reads the lock without taking it; `None` when no run holds or left it.
    pub async fn lock_status(&self) -> Result<Option<LockStatus>, ClusterError> {
        Ok(self.read_lease().await?.map(LockStatus::of))
    }
}

impl LockStatus {
    /// What `lease` says of the run.
    pub fn of(lease: Lease) -> LockStatus {
        let spec = lease.spec.unwrap_or_default();
        LockStatus {
            holder: spec.holder_identity.unwrap_or_default(),
            renewed_seconds_ago: spec
                .renew_time
                .map(|t| jiff::Timestamp::now().duration_since(t.0).as_secs()),
            state: lease
                .metadata
                .annotations
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with("rollout-ext.io/"))
                .collect(),
        }
    }
}
