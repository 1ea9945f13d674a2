//! Runs a rolling update against the cluster: initialization (create or find the next
//! controller, annotate both sides the way legacy kubectl did), the scale loop with the hooks
//! asked at every step, and cleanup (rename or delete). Every state it leaves between two calls
//! is one the same command recognizes and resumes from.

use std::time::Duration;

use serde_json::{Value, json};

use super::controller::{Controller, Kind};
use super::plan::Cleanup;
use super::prepare::{self, NextSource, source_id};
use crate::cluster::controllers::Write;
use crate::cluster::{Cluster, ClusterError};
use crate::events::{Event, Reporter};
use crate::keys;
use crate::plan::decide::{self, BatchDecision, HookFailed, Verdict};
use crate::plan::hook::{CallContext, DecidedBy, Hook, Phase};
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

/// A pending rename, kept on pods until the controller exists under its final name.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct RenameRecord {
    kind: String,
    name: String,
    object: Value,
}

pub struct Updater<'a> {
    pub cluster: &'a Cluster,
    pub settings: &'a Settings,
    pub hooks: &'a mut [Box<dyn Hook>],
    pub run_id: String,
    /// Where progress goes: the same events and reporters as a node rotation.
    pub reporter: &'a dyn Reporter,
}

fn parse_count(c: &Controller, key: &str) -> Result<Option<i32>, UpdateError> {
    match c.annotation(key) {
        None => Ok(None),
        Some(v) => v.parse::<i32>().map(Some).map_err(|_| {
            UpdateError::Invalid(format!(
                "{} has annotation {key}={v:?}, which is not a replica count",
                c.display()
            ))
        }),
    }
}

fn annotations_patch(entries: &[(&str, Option<&str>)]) -> Value {
    let map: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, Value::from)))
        .collect();
    json!({"metadata": {"annotations": map}})
}

/// A batching decision in the words of [`Event::Decided`].
pub(super) fn batch_decision(decision: &BatchDecision) -> (String, &DecidedBy) {
    match decision {
        BatchDecision::Size { size, by } => (format!("size {size}"), by),
        BatchDecision::Pause {
            seconds,
            reason,
            by,
        } => (format!("pause {seconds}s: {reason}"), by),
    }
}

/// A gate verdict in the words of [`Event::Decided`].
pub(super) fn verdict_text(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Proceed => "proceed".into(),
        Verdict::Wait { seconds, reason } => format!("wait {seconds}s: {reason}"),
        Verdict::Abort(reason) => format!("abort: {reason}"),
    }
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

    async fn get(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<Option<Controller>, UpdateError> {
        Ok(self.cluster.get_controller(kind, ns, name).await?)
    }

    async fn annotate(
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

    /// Initialization of a rollout: find or create the next controller and annotate both.
    /// `None` when there is nothing left to scale (a rename was finished instead).
    async fn roll_pair(
        &mut self,
        request: &Request,
        source: &NextSource,
    ) -> Result<Option<Pair>, UpdateError> {
        let ns = request.namespace.as_str();
        let kind = request.kind;
        let Some(old) = self.get(kind, ns, &request.old_name).await? else {
            return self.finish_without_old(request).await.map(|()| None);
        };
        // A rename stopped after the controller was created under its final name: its pods
        // still carry the record, and removing it is all that is left. (A record next to the
        // old controller itself, whose selector differs, means the rename has not begun.)
        let record = self.find_rename_record(kind, ns, &request.old_name).await?;
        let renamed = |record: &RenameRecord| {
            let created = Controller {
                kind,
                object: record.object.clone(),
            };
            created.selector() == old.selector()
        };
        if let Some((pod, record)) = record.filter(|(_, r)| renamed(r)) {
            self.reporter.report(Event::RenameResumed {
                controller: format!("{}/{}", kind.short(), request.old_name),
                pod,
            });
            return self.create_renamed(kind, ns, &record).await.map(|()| None);
        }
        let next_name = request.next_name.clone().or_else(|| {
            old.annotation(keys::LEGACY_NEXT_CONTROLLER)
                .map(String::from)
        });
        if next_name.as_deref() == Some(old.name()) {
            return Err(UpdateError::Invalid(format!(
                "the next controller cannot have the same name as {}",
                old.display()
            )));
        }
        let existing = match &next_name {
            Some(name) => self.get(kind, ns, name).await?,
            None => None,
        };
        let mut old_label = None;
        let mut next = match existing {
            Some(next) => {
                match next.annotation(keys::LEGACY_SOURCE_ID) {
                    Some(id) if id == source_id(&old) => {}
                    other => {
                        return Err(UpdateError::Invalid(format!(
                            "{} exists but is not the next controller of {} (its {} is {:?}, expected {:?}); give another NEXT name",
                            next.display(),
                            old.display(),
                            keys::LEGACY_SOURCE_ID,
                            other.unwrap_or(""),
                            source_id(&old)
                        )));
                    }
                }
                if let NextSource::Image {
                    image, container, ..
                } = source
                {
                    let index = next
                        .container_index(container.as_deref())
                        .map_err(UpdateError::Invalid)?;
                    let running = next.image(index).unwrap_or("");
                    if running != image {
                        return Err(UpdateError::Invalid(format!(
                            "found an update in progress to image {running} ({}): continue it with --image={running}, or roll it back with --rollback",
                            next.display()
                        )));
                    }
                }
                self.reporter.report(Event::UpdateContinued {
                    controller: next.name().to_string(),
                });
                if old.selector().contains_key(&self.settings.deployment_key)
                    || !kind.selector_is_mutable()
                {
                    // Labelled already (or a ReplicaSet, whose selector is fixed).
                } else if let NextSource::Image { .. } = source {
                    old_label = Some((
                        self.settings.deployment_key.clone(),
                        format!("{}-orig", old.hash()),
                    ));
                }
                next
            }
            None => {
                let prepared = prepare::prepare(
                    &old,
                    next_name.as_deref(),
                    source,
                    &self.settings.deployment_key,
                )
                .map_err(UpdateError::Invalid)?;
                let next = prepare::next_to_create(&old, prepared.next, source.desired(&old));
                let created = self
                    .cluster
                    .create_controller(ns, &next, Write::Apply)
                    .await?;
                self.reporter.report(Event::ControllerCreated {
                    controller: created.name().to_string(),
                });
                old_label = prepared.old_label;
                created
            }
        };
        // The old controller points at the next one and remembers its size, once.
        let original = old.replicas().to_string();
        let mut entries = vec![(keys::LEGACY_NEXT_CONTROLLER, Some(next.name()))];
        if old.annotation(keys::LEGACY_ORIGINAL_REPLICAS).is_none() {
            entries.push((keys::LEGACY_ORIGINAL_REPLICAS, Some(original.as_str())));
        }
        let mut old = self.annotate(&old, ns, &entries).await?;
        if let Some((key, value)) = old_label {
            old = self.label_old(&old, ns, &key, &value).await?;
        }
        let desired = match parse_count(&next, keys::LEGACY_DESIRED_REPLICAS)? {
            Some(d) => d,
            None => {
                let d = old
                    .annotation(keys::LEGACY_ORIGINAL_REPLICAS)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(old.replicas());
                next = self
                    .annotate(
                        &next,
                        ns,
                        &[(keys::LEGACY_DESIRED_REPLICAS, Some(&d.to_string()))],
                    )
                    .await?;
                d
            }
        };
        Ok(Some(Pair {
            from: old,
            to: next,
            desired,
            cleanup: Cleanup::for_next(request.next_name.is_some()),
        }))
    }

    /// Adds the deployment label to the old controller's template, then its pods, then its
    /// selector (a ReplicationController's; a ReplicaSet's cannot change), so the old and next
    /// selectors never overlap.
    async fn label_old(
        &mut self,
        old: &Controller,
        ns: &str,
        key: &str,
        value: &str,
    ) -> Result<Controller, UpdateError> {
        let template = json!({"spec": {"template": {"metadata": {"labels": {key: value}}}}});
        let old = self
            .cluster
            .patch_controller(old.kind, ns, old.name(), &template, Write::Apply)
            .await?;
        let pods = self.cluster.list_pods(ns, &old.selector_string()).await?;
        for (_, pod) in pods
            .iter()
            .filter(|(_, p)| p.owner_uid.as_deref() == Some(old.uid()))
        {
            self.cluster
                .patch_pod(
                    ns,
                    &pod.name,
                    &json!({"metadata": {"labels": {key: value}}}),
                )
                .await?;
        }
        if !old.kind.selector_is_mutable() {
            return Ok(old);
        }
        let mut selector = old.selector();
        selector.insert(key.to_string(), value.to_string());
        Ok(self
            .cluster
            .patch_controller(
                old.kind,
                ns,
                old.name(),
                &json!({"spec": {"selector": selector}}),
                Write::Apply,
            )
            .await?)
    }

    /// The old controller is gone: the rollout reached its rename, or the rename itself was
    /// interrupted. Finishes it.
    async fn finish_without_old(&mut self, request: &Request) -> Result<(), UpdateError> {
        let ns = request.namespace.as_str();
        let kind = request.kind;
        let next = match &request.next_name {
            Some(name) => self.get(kind, ns, name).await?,
            None => {
                let prefix = format!("{}:", request.old_name);
                self.cluster
                    .list_controllers(kind, ns)
                    .await?
                    .into_iter()
                    .find(|c| {
                        c.annotation(keys::LEGACY_SOURCE_ID)
                            .is_some_and(|id| id.starts_with(&prefix))
                    })
            }
        };
        if let Some(next) = next {
            let desired =
                parse_count(&next, keys::LEGACY_DESIRED_REPLICAS)?.unwrap_or(next.replicas());
            let pair = Pair {
                from: next.clone(),
                to: next,
                desired,
                cleanup: Cleanup::for_next(request.next_name.is_some()),
            };
            self.reporter.report(Event::OldGone {
                old: format!("{}/{}", kind.short(), request.old_name),
                next: pair.to.name().to_string(),
            });
            // The old side is already gone; only the cleanup is left.
            return self.finish(&pair, ns, &request.old_name, false).await;
        }
        if let Some((pod, record)) = self.find_rename_record(kind, ns, &request.old_name).await? {
            self.reporter.report(Event::RenameResumed {
                controller: format!("{}/{}", kind.short(), request.old_name),
                pod,
            });
            return self.create_renamed(kind, ns, &record).await;
        }
        Err(UpdateError::Invalid(format!(
            "{} {:?} not found in namespace {ns}",
            kind.as_str(),
            request.old_name
        )))
    }

    /// Initialization of a rollback: the next controller is scaled down and the old one back
    /// up to its original size. `None` when only cleanup was left.
    async fn rollback_pair(&mut self, request: &Request) -> Result<Option<Pair>, UpdateError> {
        let ns = request.namespace.as_str();
        let kind = request.kind;
        let Some(old) = self.get(kind, ns, &request.old_name).await? else {
            return Err(UpdateError::Invalid(format!(
                "{} {:?} not found in namespace {ns}: nothing to roll back to",
                kind.as_str(),
                request.old_name
            )));
        };
        let Some(next_name) = request.next_name.clone().or_else(|| {
            old.annotation(keys::LEGACY_NEXT_CONTROLLER)
                .map(String::from)
        }) else {
            return Err(UpdateError::Invalid(format!(
                "{} has no rollout in progress (no {} annotation): nothing to roll back",
                old.display(),
                keys::LEGACY_NEXT_CONTROLLER
            )));
        };
        let Some(next) = self.get(kind, ns, &next_name).await? else {
            let rolling_back = old
                .annotation(keys::LEGACY_SOURCE_ID)
                .is_some_and(|id| id.starts_with(&format!("{next_name}:")));
            if rolling_back {
                // The rollback had already deleted the next controller: tidy up.
                let pair = Pair {
                    from: old.clone(),
                    to: old,
                    desired: 0,
                    cleanup: Cleanup::DeleteOld,
                };
                self.clear_update_annotations(&pair.to, ns, true).await?;
                self.reporter.report(Event::RolledBack {
                    controller: pair.to.display(),
                });
                return Ok(None);
            }
            return Err(UpdateError::Invalid(format!(
                "could not find {}/{next_name} to roll back; to return to the old version, start a new rollout with it",
                kind.short()
            )));
        };
        let Some(original) = parse_count(&old, keys::LEGACY_ORIGINAL_REPLICAS)? else {
            return Err(UpdateError::Invalid(format!(
                "cannot find the original replica count of {} (annotation {}): a rollback would not know what size to restore",
                old.display(),
                keys::LEGACY_ORIGINAL_REPLICAS
            )));
        };
        self.reporter.report(Event::RollbackStarted {
            controller: old.name().to_string(),
            replicas: original,
        });
        let old = self
            .annotate(
                &old,
                ns,
                &[
                    (keys::LEGACY_DESIRED_REPLICAS, Some(&original.to_string())),
                    (keys::LEGACY_SOURCE_ID, Some(&source_id(&next))),
                ],
            )
            .await?;
        Ok(Some(Pair {
            from: next,
            to: old,
            desired: original,
            cleanup: Cleanup::DeleteOld,
        }))
    }

    /// After the loop: rename or delete, as the form of the command asks.
    async fn cleanup(&mut self, pair: &Pair, ns: &str, rollback: bool) -> Result<(), UpdateError> {
        let old_name = pair.from.name().to_string();
        if rollback {
            self.reporter.report(Event::Deleting {
                controller: pair.from.name().to_string(),
            });
            self.cluster
                .delete_controller(
                    pair.from.kind,
                    ns,
                    pair.from.name(),
                    false,
                    self.settings.timeout,
                )
                .await?;
            self.clear_update_annotations(&pair.to, ns, true).await?;
            self.reporter.report(Event::RolledBack {
                controller: pair.to.display(),
            });
            return Ok(());
        }
        self.finish(pair, ns, &old_name, true).await
    }

    /// Deletes the old controller (if still there) and renames or tidies the next one.
    async fn finish(
        &mut self,
        pair: &Pair,
        ns: &str,
        old_name: &str,
        old_exists: bool,
    ) -> Result<(), UpdateError> {
        let kind = pair.to.kind;
        match pair.cleanup {
            Cleanup::DeleteOld => {
                if old_exists {
                    self.reporter.report(Event::Deleting {
                        controller: old_name.to_string(),
                    });
                    self.cluster
                        .delete_controller(kind, ns, old_name, false, self.settings.timeout)
                        .await?;
                }
                self.clear_update_annotations(&pair.to, ns, false).await?;
                self.reporter.report(Event::UpdateDone {
                    controller: format!("{}/{old_name}", kind.short()),
                    next: Some(pair.to.name().to_string()),
                });
                Ok(())
            }
            Cleanup::Rename => {
                let mut object = Controller {
                    kind,
                    object: pair.to.for_create(),
                };
                object.set_name(old_name);
                object.set_replicas(pair.desired);
                for key in [keys::LEGACY_SOURCE_ID, keys::LEGACY_DESIRED_REPLICAS] {
                    object.set_annotation(key, None);
                }
                let record = RenameRecord {
                    kind: kind.as_str().into(),
                    name: old_name.into(),
                    object: object.object,
                };
                // Recorded before anything is deleted: a rerun finds it if we stop midway.
                self.write_rename_record(&pair.to, ns, &record).await?;
                if old_exists {
                    self.reporter.report(Event::Deleting {
                        controller: old_name.to_string(),
                    });
                    self.cluster
                        .delete_controller(kind, ns, old_name, false, self.settings.timeout)
                        .await?;
                }
                self.reporter.report(Event::Renaming {
                    from: pair.to.name().to_string(),
                    to: old_name.to_string(),
                });
                self.cluster
                    .delete_controller(kind, ns, pair.to.name(), true, self.settings.timeout)
                    .await?;
                self.create_renamed(kind, ns, &record).await
            }
        }
    }

    async fn clear_update_annotations(
        &mut self,
        c: &Controller,
        ns: &str,
        rollback: bool,
    ) -> Result<(), UpdateError> {
        let mut entries = vec![
            (keys::LEGACY_SOURCE_ID, None),
            (keys::LEGACY_DESIRED_REPLICAS, None),
        ];
        if rollback {
            entries.push((keys::LEGACY_NEXT_CONTROLLER, None));
            entries.push((keys::LEGACY_ORIGINAL_REPLICAS, None));
        }
        self.annotate(c, ns, &entries).await?;
        Ok(())
    }

    /// Puts the rename record on (up to three of) the next controller's pods.
    async fn write_rename_record(
        &mut self,
        next: &Controller,
        ns: &str,
        record: &RenameRecord,
    ) -> Result<(), UpdateError> {
        let text = serde_json::to_string(record).expect("records serialize");
        let pods = self.cluster.list_pods(ns, &next.selector_string()).await?;
        for (_, pod) in pods.iter().filter(|(_, p)| !p.terminating).take(3) {
            self.cluster
                .annotate_pod(ns, &pod.name, keys::RENAME_RECORD, Some(&text))
                .await?;
        }
        Ok(())
    }

    async fn find_rename_record(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<Option<(String, RenameRecord)>, UpdateError> {
        let pods = self.cluster.list_pods(ns, "").await?;
        Ok(pods.into_iter().find_map(|(_, pod)| {
            let record: RenameRecord =
                serde_json::from_str(pod.annotations.get(keys::RENAME_RECORD)?).ok()?;
            (record.kind == kind.as_str() && record.name == name).then_some((pod.name, record))
        }))
    }

    /// Creates the controller under its final name (it adopts the orphaned pods) and removes
    /// the rename records.
    async fn create_renamed(
        &mut self,
        kind: Kind,
        ns: &str,
        record: &RenameRecord,
    ) -> Result<(), UpdateError> {
        let controller = Controller {
            kind,
            object: record.object.clone(),
        };
        let created = match self.get(kind, ns, &record.name).await? {
            Some(existing) => existing,
            None => {
                self.cluster
                    .create_controller(ns, &controller, Write::Apply)
                    .await?
            }
        };
        let pods = self
            .cluster
            .list_pods(ns, &created.selector_string())
            .await?;
        for (_, pod) in pods
            .iter()
            .filter(|(_, p)| p.annotations.contains_key(keys::RENAME_RECORD))
        {
            self.cluster
                .annotate_pod(ns, &pod.name, keys::RENAME_RECORD, None)
                .await?;
        }
        self.reporter.report(Event::UpdateDone {
            controller: format!("{}/{}", kind.short(), record.name),
            next: None,
        });
        Ok(())
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
