//! Runs a rolling update against the cluster: initialization (create or find the next
//! controller, annotate both sides the way legacy kubectl did), the scale loop with the hooks
//! asked at every step, and cleanup (rename or delete). Every state it leaves between two calls
//! is one the same command recognizes and resumes from.

use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::controllers::Write;
use crate::cluster::{Cluster, ClusterError};
use crate::events::{Event, Reporter};
use crate::keys;
use crate::plan::decide::{self, HookFailed};
use crate::plan::hook::{CallContext, DecidedBy, Hook, Phase};
use crate::plan::rolling_update::controller::{Controller, Kind};
use crate::plan::rolling_update::planner::Cleanup;
use crate::plan::rolling_update::prepare::NextSource;
use crate::plan::shadow::ShadowDecision;
use crate::policy::{HookPoint, IntOrPercent};

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
    #[error("timed out waiting for any update progress to be made (nothing changed for {0:?})")]
    NoProgress(Duration),
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
    pub cluster: &'a Cluster,
    pub settings: &'a Settings,
    pub hooks: &'a mut [Box<dyn Hook>],
    pub run_id: String,
    /// Where progress goes: the same events and reporters as a node rotation.
    pub reporter: &'a dyn Reporter,
}

pub(super) fn annotations_patch(entries: &[(&str, Option<&str>)]) -> Value {
    let map: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, Value::from)))
        .collect();
    json!({"metadata": {"annotations": map}})
}

impl Updater<'_> {
    /// Reports a decision of the hooks at `point`; nothing when no hook serves it (then the
    /// built-in behaviour is not a decision anyone asked for).
    pub(super) fn decided(
        &self,
        point: HookPoint,
        phase: Option<Phase>,
        (batch, attempt): (u32, u32),
        by: &DecidedBy,
        decision: String,
    ) {
        if decide::serves_any(self.hooks, point) {
            self.reporter.report(Event::Decided {
                point,
                phase,
                batch,
                attempt,
                decided_by: by.to_string(),
                decision,
            });
        }
    }

    /// Reports what shadow hooks would have decided about step `at`.
    pub(super) fn shadowed(&self, (batch, attempt): (u32, u32), said: Vec<ShadowDecision>) {
        for said in said {
            self.reporter.report(Event::Shadow {
                batch,
                attempt,
                said,
            });
        }
    }

    /// Asks the hooks through `ask` (off the async threads, since hooks run synchronously),
    /// then reports the warnings it left, the decision (`describe` says who took it and what it
    /// was) and what shadow hooks would have said, for step `at`.
    pub(super) fn asked<D>(
        &mut self,
        (point, phase): (HookPoint, Option<Phase>),
        at: (u32, u32),
        ask: impl FnOnce(
            &mut [Box<dyn Hook>],
            &CallContext,
            &mut Vec<String>,
        ) -> Result<(D, Vec<ShadowDecision>), HookFailed>,
        describe: impl Fn(&D) -> (DecidedBy, String),
    ) -> Result<D, UpdateError> {
        let ctx = self.ctx();
        let mut warnings = Vec::new();
        let hooks = &mut *self.hooks;
        let (decision, said) = tokio::task::block_in_place(|| ask(hooks, &ctx, &mut warnings))?;
        for message in warnings {
            self.reporter.report(Event::Warning { message });
        }
        let (by, text) = describe(&decision);
        self.decided(point, phase, at, &by, text);
        self.shadowed(at, said);
        Ok(decision)
    }

    /// Reports a wait and sleeps through it.
    pub(super) async fn hold(&self, duration: Duration, reason: String) {
        self.reporter.report(Event::Waiting {
            seconds: duration.as_secs(),
            reason,
        });
        tokio::time::sleep(duration).await;
    }

    pub(super) fn ctx(&self) -> CallContext {
        CallContext {
            now: jiff::Timestamp::now().as_second(),
            run_id: self.run_id.clone(),
            dry_run: false,
        }
    }

    pub(super) async fn get(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<Option<Controller>, UpdateError> {
        Ok(self.cluster.get_controller(kind, ns, name).await?)
    }

    pub(super) async fn annotate(
        &self,
        c: &Controller,
        ns: &str,
        entries: &[(&str, Option<&str>)],
    ) -> Result<Controller, UpdateError> {
        Ok(self
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
        match self.scale_loop(&pair, ns, true).await {
            Err(UpdateError::Aborted(reason)) if self.settings.rollback_on_abort => {
                self.reporter.report(Event::RollingBackOnAbort {
                    reason: reason.clone(),
                });
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
                Err(UpdateError::Aborted(format!("{reason}; rolled back")))
            }
            Err(e) => Err(e),
            Ok(()) => {
                self.cleanup(&pair, ns, matches!(request.action, Action::Rollback))
                    .await
            }
        }
    }

    /// What `--dry-run=server` sends: the creation of the next controller and the old one's
    /// annotations, both as server dry-runs.
    pub async fn server_dry_run(
        &mut self,
        old: &Controller,
        next: &Controller,
        ns: &str,
    ) -> Result<(), UpdateError> {
        self.cluster
            .create_controller(ns, next, Write::ServerDryRun)
            .await?;
        self.cluster
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
