//! Waiting for replacements to be Ready (a predicate over the live view), and for the cluster
//! to validate; holds are the kernel's.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::{RotateError, Rotation};
use crate::cluster::view::{Deadline, WaitError};
use crate::events::Event;
use crate::keys;
use crate::plan::Role;
use crate::plan::groups::group_of;
use crate::plan::prepare::group_label;
use crate::snapshot::Snapshot;

impl Rotation<'_> {
    /// The wait after terminating an instance of `role`.
    pub(super) fn interval(&self, role: Role) -> Duration {
        match role {
            Role::Bastion => self.settings.bastion_interval,
            Role::ControlPlane => self.settings.master_interval,
            Role::Node => self.settings.node_interval,
        }
    }

    /// Ready nodes of `group` in `snapshot`.
    pub(super) fn ready_in(&self, snapshot: &Snapshot, group: &str) -> usize {
        let label = group_label(self.policy, &self.settings.plan);
        snapshot
            .nodes
            .iter()
            .filter(|n| group_of(n, label) == group && n.ready)
            .count()
    }

    /// Waits, on the live view, until `group` has `expected` Ready nodes.
    /// Returns the cluster as it was when enough were Ready.
    pub(super) async fn wait_ready(
        &self,
        group: &str,
        expected: usize,
    ) -> Result<Arc<Snapshot>, RotateError> {
        // Nothing holds a run whose replacements are there already.
        let now = self.view.caught_up().await?;
        let ready = self.ready_in(&now, group);
        if ready >= expected {
            self.kernel.reporter.report(Event::Replaced {
                group: group.into(),
                ready,
            });
            return Ok(now);
        }
        let what = format!(
            "waiting for group {group} to have {expected} Ready nodes (replacements joining)"
        );
        (self.kernel)
            .holding(what, None, self.watch_ready(group, expected))
            .await
    }

    async fn watch_ready(
        &self,
        group: &str,
        expected: usize,
    ) -> Result<Arc<Snapshot>, RotateError> {
        let timeout = self.settings.replacement_timeout;
        let enough = |snapshot: &Snapshot| match self.ready_in(snapshot, group) {
            ready if ready >= expected => Ok(ready),
            ready => Err(ready),
        };
        match self
            .view
            .wait_until(Deadline::Within(timeout), enough)
            .await
        {
            Ok(ready) => {
                self.kernel.reporter.report(Event::Replaced {
                    group: group.into(),
                    ready,
                });
                Ok(self.view.current()?)
            }
            Err(WaitError::Expired(ready)) => Err(RotateError::NoReplacement {
                group: group.into(),
                timeout,
                ready,
                expected,
            }),
            Err(WaitError::View(e)) => Err(e.into()),
        }
    }

    /// Validates the cluster `--validate-count` times; nodes this tool cordoned (in this run or
    /// an earlier one, as `snapshot` shows) fail no check, nor do those other tools are taking
    /// out while their disruptions are counted (see [`super::others`]): the budget counts them
    /// instead. `found_cordoned`: the group's nodes the run found cordoned, which still fail.
    pub(super) async fn validate(
        &self,
        snapshot: &Snapshot,
        found_cordoned: &HashSet<String>,
    ) -> Result<(), RotateError> {
        if self.settings.plan.cloud_only {
            return Ok(());
        }
        let others = self.others_excused(snapshot, found_cordoned);
        let excused: HashSet<&str> = snapshot
            .nodes
            .iter()
            .filter(|n| n.annotations.contains_key(keys::PHASE) || others.contains(&n.name))
            .map(|n| n.name.as_str())
            .collect();
        match self
            .view
            .validate(&self.settings.validation, &excused, self.kernel.reporter)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if !self.settings.fail_on_validate_error => {
                self.warn(format!("{e}; continuing (--fail-on-validate-error=false)"));
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
