//! Runs a rolling update against the cluster: initialization (create or find the next
//! controller, annotate both sides the way legacy kubectl did), the scale loop with the hooks
//! asked at every step, and cleanup (rename or delete). Every state it leaves between two calls
//! is one the same command recognizes and resumes from.

use std::time::Duration;

use serde_json::{Value, json};

use super::driving::rolled_back;
pub use super::pods::WatchedPods;
use crate::cluster::ClusterError;
use crate::cluster::controllers::Write;
use crate::kernel::{Kernel, KernelError};
use crate::keys;
use crate::plan::decide::HookFailed;
use crate::plan::rolling_update::controller::{Controller, Kind};
use crate::plan::rolling_update::planner::Cleanup;
use crate::plan::rolling_update::prepare::NextSource;
use crate::policy::IntOrPercent;

/// What the command asks for.
#[derive(Debug, Clone)]
pub enum Action {
    /// Roll to a next controller built from this source.
    Roll(NextSource),
    /// Roll back to the old controller (the seed's Abort).
    Rollback,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub kind: Kind,
    pub namespace: String,
    pub old_name: String,
    pub next_name: Option<String>,
    pub action: Action,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub update_period: Duration,
    pub poll_interval: Duration,
    pub timeout: Duration,
    pub max_surge: IntOrPercent,
    pub max_unavailable: IntOrPercent,
    pub deployment_key: String,
    /// Roll back by itself when a gate aborts.
    pub rollback_on_abort: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The request cannot work; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Hook(#[from] HookFailed),
    #[error("{0}")]
    Aborted(String),
    /// An operator's abort: the update stops where it is, never rolled back.
    #[error("{0}")]
    Stopped(String),
    #[error("the lock was taken over by another run; stopping here")]
    LockLost,
    #[error("timed out waiting for any update progress to be made (nothing changed for {0:?})")]
    NoProgress(Duration),
}

impl From<KernelError> for UpdateError {
    fn from(e: KernelError) -> Self {
        match e {
            KernelError::Hook(e) => UpdateError::Hook(e),
            KernelError::Cluster(e) => UpdateError::Cluster(e),
            e @ KernelError::Stopped { .. } => UpdateError::Stopped(e.to_string()),
            KernelError::LockLost => UpdateError::LockLost,
        }
    }
}

/// Where the two controllers stand when the loop starts.
pub struct Pair {
    /// Scaled down.
    pub from: Controller,
    /// Scaled up to `desired`.
    pub to: Controller,
    pub desired: i32,
    pub cleanup: Cleanup,
}

pub struct Updater<'a> {
    pub settings: &'a Settings,
    /// Hooks, holds, pause and abort and the reporter (the same events as a node rotation);
    /// its controls stand on the workload being updated.
    pub kernel: Kernel<'a>,
    /// The pods it reads and waits on, watched.
    pub pods: WatchedPods,
    /// Its own times, for the cluster's history.
    pub timing: super::timing::StepClock,
}

pub(super) fn annotations_patch(entries: &[(&str, Option<&str>)]) -> Value {
    let map: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, Value::from)))
        .collect();
    json!({"metadata": {"annotations": map}})
}

impl Updater<'_> {
    pub(super) async fn get(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<Option<Controller>, UpdateError> {
        Ok(self.kernel.cluster.get_controller(kind, ns, name).await?)
    }

    pub(super) async fn annotate(
        &self,
        c: &Controller,
        ns: &str,
        entries: &[(&str, Option<&str>)],
    ) -> Result<Controller, UpdateError> {
        Ok(self
            .kernel
            .cluster
            .patch_controller(
                c.kind,
                ns,
                c.name(),
                &annotations_patch(entries),
                Write::Apply,
            )
            .await?)
    }

    /// Runs the whole request: initialization, the loop, cleanup.
    pub async fn run(&mut self, request: &Request) -> Result<(), UpdateError> {
        let pair = match &request.action {
            Action::Rollback => match self.rollback_pair(request).await? {
                Some(pair) => pair,
                None => return Ok(()),
            },
            Action::Roll(source) => match self.roll_pair(request, source).await? {
                Some(pair) => pair,
                None => return Ok(()),
            },
        };
        let ns = request.namespace.as_str();
        let outcome = self.scale_loop(&pair, ns, true).await;
        let Some(reason) = self.rolls_back(&outcome) else {
            outcome?;
            let rollback = matches!(request.action, Action::Rollback);
            return self.cleanup(&pair, ns, rollback).await;
        };
        let back = Request {
            old_name: pair.from.name().to_string(),
            next_name: Some(pair.to.name().to_string()),
            action: Action::Rollback,
            ..request.clone()
        };
        if let Some(pair) = self.rollback_pair(&back).await? {
            self.scale_loop(&pair, ns, false).await?;
            self.cleanup(&pair, ns, true).await?;
        }
        Err(rolled_back(reason))
    }

    /// What `--dry-run=server` sends: the creation of the next controller and the old one's
    /// annotations, both as server dry-runs.
    pub async fn server_dry_run(
        &mut self,
        old: &Controller,
        next: &Controller,
        ns: &str,
    ) -> Result<(), UpdateError> {
        self.kernel
            .cluster
            .create_controller(ns, next, Write::ServerDryRun)
            .await?;
        self.kernel
            .cluster
            .patch_controller(
                old.kind,
                ns,
                old.name(),
                &annotations_patch(&[(keys::LEGACY_NEXT_CONTROLLER, Some(next.name()))]),
                Write::ServerDryRun,
            )
            .await?;
        Ok(())
    }
}
