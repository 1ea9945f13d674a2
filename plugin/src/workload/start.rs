//! The start of a rolling update: find or create the next controller and annotate both as
//! legacy kubectl did (a rollout it began, or one of ours that stopped, is continued); or, for
//! a rollback, point the pair the other way.

use serde_json::json;

use super::cleanup::RenameRecord;
use super::execute::{Pair, Request, UpdateError, Updater};
use crate::cluster::controllers::Write;
use crate::events::Event;
use crate::keys;
use crate::plan::rolling_update::controller::Controller;
use crate::plan::rolling_update::planner::Cleanup;
use crate::plan::rolling_update::prepare::{self, NextSource, source_id};

pub(super) fn parse_count(c: &Controller, key: &str) -> Result<Option<i32>, UpdateError> {
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

impl Updater<'_> {
    /// Initialization of a rollout: find or create the next controller and annotate both.
    /// `None` when there is nothing left to scale (a rename was finished instead).
    pub(super) async fn roll_pair(
        &mut self,
        request: &Request,
        source: &NextSource,
    ) -> Result<Option<Pair>, UpdateError> {
        let ns = request.namespace.as_str();
        let kind = request.kind;
        let Some(old) = self.get(kind, ns, &request.old_name).await? else {
            return self.finish_without_old(request).await.map(|()| None);
        };
        if self.finish_stopped_rename(request, &old).await? {
            return Ok(None);
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
        let (next, old_label) = match existing {
            Some(next) => {
                let label = self.continue_with(&old, &next, source)?;
                (next, label)
            }
            None => {
                self.create_next(&old, next_name.as_deref(), source, ns)
                    .await?
            }
        };
        let cleanup = Cleanup::for_next(request.next_name.is_some());
        self.link(&old, next, old_label, ns, cleanup)
            .await
            .map(Some)
    }

    /// A rename stopped after the controller was created under its final name: its pods still
    /// carry the record, and removing it is all that is left. (A record next to the old
    /// controller itself, whose selector differs, means the rename has not begun.)
    async fn finish_stopped_rename(
        &mut self,
        request: &Request,
        old: &Controller,
    ) -> Result<bool, UpdateError> {
        let (kind, ns) = (request.kind, request.namespace.as_str());
        let record = self.find_rename_record(kind, ns, &request.old_name).await?;
        let renamed = |record: &RenameRecord| {
            let created = Controller {
                kind,
                object: record.object.clone(),
            };
            created.selector() == old.selector()
        };
        let Some((pod, record)) = record.filter(|(_, r)| renamed(r)) else {
            return Ok(false);
        };
        self.kernel.reporter.report(Event::RenameResumed {
            controller: format!("{}/{}", kind.short(), request.old_name),
            pod,
        });
        self.create_renamed(kind, ns, &record).await?;
        Ok(true)
    }

    /// Checks that `next`, which exists, continues this very rollout; returns the label the
    /// old controller still needs, if any.
    fn continue_with(
        &self,
        old: &Controller,
        next: &Controller,
        source: &NextSource,
    ) -> Result<Option<(String, String)>, UpdateError> {
        match next.annotation(keys::LEGACY_SOURCE_ID) {
            Some(id) if id == source_id(old) => {}
            other => {
                return Err(UpdateError::Invalid(format!(
                    "{} exists but is not the next controller of {} (its {} is {:?}, expected {:?}); give another NEXT name",
                    next.display(),
                    old.display(),
                    keys::LEGACY_SOURCE_ID,
                    other.unwrap_or(""),
                    source_id(old)
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
        self.kernel.reporter.report(Event::UpdateContinued {
            controller: next.name().to_string(),
        });
        // Labelled already (or a ReplicaSet, whose selector is fixed): nothing to add.
        let labelled = old.selector().contains_key(&self.settings.deployment_key)
            || !old.kind.selector_is_mutable();
        Ok(match source {
            NextSource::Image { .. } if !labelled => Some((
                self.settings.deployment_key.clone(),
                format!("{}-orig", old.hash()),
            )),
            _ => None,
        })
    }

    /// Creates the next controller; returns it and the label the old controller needs.
    async fn create_next(
        &self,
        old: &Controller,
        next_name: Option<&str>,
        source: &NextSource,
        ns: &str,
    ) -> Result<(Controller, Option<(String, String)>), UpdateError> {
        let prepared = prepare::prepare(old, next_name, source, &self.settings.deployment_key)
            .map_err(UpdateError::Invalid)?;
        let next = prepare::next_to_create(old, prepared.next, source.desired(old));
        // A run stopped between creating the next controller and pointing the old one at it
        // left it under the name this run would give it: go on with it.
        if let Some(left) = self.get(next.kind, ns, next.name()).await? {
            let label = self.continue_with(old, &left, source)?;
            return Ok((left, label));
        }
        let created = self
            .kernel
            .cluster
            .create_controller(ns, &next, Write::Apply)
            .await?;
        self.kernel.reporter.report(Event::ControllerCreated {
            controller: created.name().to_string(),
        });
        Ok((created, prepared.old_label))
    }

    /// Points the old controller at the next one (remembering its size, once), labels it if it
    /// needs, and records the desired count on the next one, once.
    async fn link(
        &mut self,
        old: &Controller,
        mut next: Controller,
        old_label: Option<(String, String)>,
        ns: &str,
        cleanup: Cleanup,
    ) -> Result<Pair, UpdateError> {
        let original = old.replicas().to_string();
        let mut entries = vec![(keys::LEGACY_NEXT_CONTROLLER, Some(next.name()))];
        if old.annotation(keys::LEGACY_ORIGINAL_REPLICAS).is_none() {
            entries.push((keys::LEGACY_ORIGINAL_REPLICAS, Some(original.as_str())));
        }
        let mut old = self.annotate(old, ns, &entries).await?;
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
                let entry = [(keys::LEGACY_DESIRED_REPLICAS, Some(d.to_string()))];
                let entries: Vec<(&str, Option<&str>)> =
                    entry.iter().map(|(k, v)| (*k, v.as_deref())).collect();
                next = self.annotate(&next, ns, &entries).await?;
                d
            }
        };
        Ok(Pair {
            from: old,
            to: next,
            desired,
            cleanup,
        })
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
            .kernel
            .cluster
            .patch_controller(old.kind, ns, old.name(), &template, Write::Apply)
            .await?;
        let pods = self
            .kernel
            .cluster
            .list_pods(ns, &old.selector_string())
            .await?;
        for (_, pod) in pods
            .iter()
            .filter(|(_, p)| p.owner_uid.as_deref() == Some(old.uid()))
        {
            self.kernel
                .cluster
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
            .kernel
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

    /// Initialization of a rollback: the next controller is scaled down and the old one back
    /// up to its original size. `None` when only cleanup was left.
    pub(super) async fn rollback_pair(
        &mut self,
        request: &Request,
    ) -> Result<Option<Pair>, UpdateError> {
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
                self.kernel.reporter.report(Event::RolledBack {
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
        self.kernel.reporter.report(Event::RollbackStarted {
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
}
