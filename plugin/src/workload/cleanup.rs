//! The end of a rolling update: delete the old controller and rename the next one to the old
//! name (or keep it, in the two-name form), with a record on the pods that lets an interrupted
//! rename be finished; or, after a rollback, delete the next controller.

use serde_json::Value;

use super::execute::{Pair, Request, UpdateError, Updater};
use super::start::parse_count;
use crate::cluster::controllers::Write;
use crate::events::Event;
use crate::keys;
use crate::plan::rolling_update::controller::{Controller, Kind};
use crate::plan::rolling_update::planner::Cleanup;

/// A pending rename, kept on pods until the controller exists under its final name.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct RenameRecord {
    kind: String,
    name: String,
    pub(super) object: Value,
}

impl Updater<'_> {
    /// The old controller is gone: the rollout reached its rename, or the rename itself was
    /// interrupted. Finishes it.
    pub(super) async fn finish_without_old(
        &mut self,
        request: &Request,
    ) -> Result<(), UpdateError> {
        let ns = request.namespace.as_str();
        let kind = request.kind;
        let next = match &request.next_name {
            Some(name) => self.get(kind, ns, name).await?,
            None => {
                let prefix = format!("{}:", request.old_name);
                self.kernel
                    .cluster
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
            self.kernel.reporter.report(Event::OldGone {
                old: format!("{}/{}", kind.short(), request.old_name),
                next: pair.to.name().to_string(),
            });
            // The old side is already gone; only the cleanup is left.
            return self.finish(&pair, ns, &request.old_name, false).await;
        }
        if let Some((pod, record)) = self.find_rename_record(kind, ns, &request.old_name).await? {
            self.kernel.reporter.report(Event::RenameResumed {
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

    /// After the loop: rename or delete, as the form of the command asks.
    pub(super) async fn cleanup(
        &mut self,
        pair: &Pair,
        ns: &str,
        rollback: bool,
    ) -> Result<(), UpdateError> {
        let old_name = pair.from.name().to_string();
        if rollback {
            self.kernel.reporter.report(Event::Deleting {
                controller: pair.from.name().to_string(),
            });
            self.kernel
                .cluster
                .delete_controller(
                    pair.from.kind,
                    ns,
                    pair.from.name(),
                    false,
                    self.settings.timeout,
                )
                .await?;
            self.clear_update_annotations(&pair.to, ns, true).await?;
            self.kernel.reporter.report(Event::RolledBack {
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
                    self.kernel.reporter.report(Event::Deleting {
                        controller: old_name.to_string(),
                    });
                    self.kernel
                        .cluster
                        .delete_controller(kind, ns, old_name, false, self.settings.timeout)
                        .await?;
                }
                self.clear_update_annotations(&pair.to, ns, false).await?;
                self.kernel.reporter.report(Event::UpdateDone {
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
                    self.kernel.reporter.report(Event::Deleting {
                        controller: old_name.to_string(),
                    });
                    self.kernel
                        .cluster
                        .delete_controller(kind, ns, old_name, false, self.settings.timeout)
                        .await?;
                }
                self.kernel.reporter.report(Event::Renaming {
                    from: pair.to.name().to_string(),
                    to: old_name.to_string(),
                });
                self.kernel
                    .cluster
                    .delete_controller(kind, ns, pair.to.name(), true, self.settings.timeout)
                    .await?;
                self.create_renamed(kind, ns, &record).await
            }
        }
    }

    pub(super) async fn clear_update_annotations(
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
        let pods = self
            .kernel
            .cluster
            .list_pods(ns, &next.selector_string())
            .await?;
        for (_, pod) in pods.iter().filter(|(_, p)| !p.terminating).take(3) {
            self.kernel
                .cluster
                .annotate_pod(ns, &pod.name, keys::RENAME_RECORD, Some(&text))
                .await?;
        }
        Ok(())
    }

    pub(super) async fn find_rename_record(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
    ) -> Result<Option<(String, RenameRecord)>, UpdateError> {
        let pods = self.kernel.cluster.list_pods(ns, "").await?;
        Ok(pods.into_iter().find_map(|(_, pod)| {
            let record: RenameRecord =
                serde_json::from_str(pod.annotations.get(keys::RENAME_RECORD)?).ok()?;
            (record.kind == kind.as_str() && record.name == name).then_some((pod.name, record))
        }))
    }

    /// Creates the controller under its final name (it adopts the orphaned pods) and removes
    /// the rename records.
    pub(super) async fn create_renamed(
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
                self.kernel
                    .cluster
                    .create_controller(ns, &controller, Write::Apply)
                    .await?
            }
        };
        let pods = self
            .kernel
            .cluster
            .list_pods(ns, &created.selector_string())
            .await?;
        for (_, pod) in pods
            .iter()
            .filter(|(_, p)| p.annotations.contains_key(keys::RENAME_RECORD))
        {
            self.kernel
                .cluster
                .annotate_pod(ns, &pod.name, keys::RENAME_RECORD, None)
                .await?;
        }
        self.kernel.reporter.report(Event::UpdateDone {
            controller: format!("{}/{}", kind.short(), record.name),
            next: None,
        });
        Ok(())
    }
}
