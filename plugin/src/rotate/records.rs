//! The run state kept on the lock, so that a stopped run is finished by the next one: each
//! group's expected Ready node count, and the provider calls in progress (terminations and
//! surges), each recorded before the call and cleared after it.

use super::pods_back::{PODS_BACK_PREFIX, pods_back_key};
use super::{GroupRun, RotateError, Rotation};
use crate::cluster::lock::LockStatus;
use crate::events::Event;
use crate::keys;
use crate::provider::Target;
use crate::snapshot::Snapshot;

/// The run-state key of a group's expected Ready node count: its size when the group started,
/// plus surges, minus detached instances terminated.
pub(super) fn expected_key(group: &str) -> String {
    run_key("expected", group)
}

const EXPECTED_PREFIX: &str = "rollout-ext.io/expected.";

/// The run-state key of a group's termination in progress: written before its Node is deleted
/// and cleared once the provider terminated the instance, so that a run that dies in between
/// (the Node gone, the instance perhaps still running) is finished by the next one.
pub(super) fn terminating_key(group: &str) -> String {
    run_key("terminating", group)
}

const TERMINATING_PREFIX: &str = "rollout-ext.io/terminating.";

/// The run-state key of a group's surge in progress: written with the group's new expected
/// size before its instances are detached, and cleared once they are marked detached.
pub(super) fn surging_key(group: &str) -> String {
    run_key("surging", group)
}

const SURGING_PREFIX: &str = "rollout-ext.io/surging.";

/// What a record of the run state says of an instance.
pub(super) fn record_of(target: &Target) -> serde_json::Value {
    serde_json::json!({
        "node": target.node,
        "providerID": target.provider_id,
        "group": target.group,
        "machine": target.machine,
    })
}

fn target_of(record: &serde_json::Value) -> Target {
    let field = |name: &str| record[name].as_str().unwrap_or_default().to_string();
    Target {
        node: field("node"),
        provider_id: field("providerID"),
        group: field("group"),
        machine: serde_json::from_value(record["machine"].clone()).unwrap_or_default(),
    }
}

/// A run-state key: `rollout-ext.io/<what>.<group>`, the group hashed when it cannot be part
/// of an annotation key.
pub(super) fn run_key(what: &str, group: &str) -> String {
    let valid = group.len() <= 50
        && group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let name = if valid {
        group.to_string()
    } else {
        use sha2::Digest;
        hex::encode(&sha2::Sha256::digest(group.as_bytes())[..12])
    };
    format!("rollout-ext.io/{what}.{name}")
}

/// The provider's view of a node of `snapshot`.
pub(super) fn target(snapshot: &Snapshot, group: &str, node: &str) -> Target {
    let found = snapshot.nodes.iter().find(|n| n.name == node);
    Target {
        node: node.into(),
        provider_id: found
            .and_then(|n| n.provider_id.clone())
            .unwrap_or_default(),
        group: group.into(),
        machine: found.and_then(|n| n.machine.clone()),
    }
}

impl Rotation<'_> {
    /// The group's expected size: what a stopped run recorded, else its size now (recorded).
    pub(super) async fn expected_size(&self, run: &GroupRun) -> Result<usize, RotateError> {
        // A group kept by pods, not at a size, owes no count of nodes.
        if self.judges_by_pods(&run.name) {
            return Ok(0);
        }
        if let Some(expected) = run.recorded {
            return Ok(expected);
        }
        let key = expected_key(&run.name);
        let label = crate::plan::prepare::group_label(self.policy, &self.settings.plan);
        let size = run
            .latest
            .nodes
            .iter()
            .filter(|n| n.registered && crate::plan::groups::group_of(n, label) == run.name)
            .count();
        self.lock.set_state(&key, Some(&size.to_string())).await?;
        Ok(size)
    }

    /// Finishes the provider calls a stopped run began, each recorded on the lock before it was
    /// made: terminations, then surges.
    ///
    /// A termination whose Node is still there had not deleted it yet: the rotation replaces
    /// that node as usual. One whose Node is gone (whatever its Machine, still there, now
    /// looks like) may have left its instance running: it is
    /// terminated (again, perhaps; it was drained before its termination was recorded, and a
    /// provider's terminate must accept an instance already gone), and its replacement waited
    /// for. A surge whose instance is not yet marked detached is detached (again, perhaps: a
    /// provider's detach must accept an instance already detached) and marked; the group's
    /// expected size already counts it. `left`: the Lease as this run found it.
    pub(super) async fn finish_stopped_steps(
        &mut self,
        left: Option<LockStatus>,
    ) -> Result<(), RotateError> {
        let Some(status) = left else {
            return Ok(());
        };
        let records = |prefix: &str| -> Vec<(String, serde_json::Value)> {
            status
                .state
                .iter()
                .filter(|(key, _)| key.starts_with(prefix))
                .map(|(key, value)| (key.clone(), serde_json::from_str(value).unwrap_or_default()))
                .collect()
        };
        let (terminations, surges) = (records(TERMINATING_PREFIX), records(SURGING_PREFIX));
        if terminations.is_empty() && surges.is_empty() {
            return Ok(());
        }
        let nodes = self.view.caught_up().await?;
        for (key, record) in terminations {
            let target = target_of(&record);
            let expected = status
                .state
                .get(&expected_key(&target.group))
                .and_then(|v| v.parse::<usize>().ok());
            self.finish_termination(&nodes, &key, &target, expected)
                .await?;
        }
        for (key, record) in surges {
            let targets: Vec<Target> = record
                .as_array()
                .into_iter()
                .flatten()
                .map(target_of)
                .collect();
            self.finish_surge(&nodes, &key, &targets).await?;
        }
        Ok(())
    }

    /// The groups chosen with `--instance-group` that have no nodes in `snapshot` but a record
    /// an earlier run left (it stopped in its last wait, after the group's last old node went
    /// and before a replacement registered, as a small Karpenter NodePool's does): nothing is
    /// left to rotate in them, and [`Rotation::finish_left_groups`] waits for them.
    pub(super) async fn emptied_groups(
        &self,
        snapshot: &Snapshot,
    ) -> Result<Vec<String>, RotateError> {
        let chosen = &self.settings.plan.instance_groups;
        let label = crate::plan::prepare::group_label(self.policy, &self.settings.plan);
        let missing: Vec<&String> = chosen
            .iter()
            .filter(|g| {
                !(snapshot.nodes.iter()).any(|n| crate::plan::groups::group_of(n, label) == **g)
            })
            .collect();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let Some(status) = self.cluster.lock_status().await? else {
            return Ok(Vec::new());
        };
        Ok(missing
            .into_iter()
            .filter(|g| {
                let recorded = |key: String| status.state.contains_key(&key);
                recorded(expected_key(g)) || recorded(pods_back_key(g))
            })
            .cloned()
            .collect())
    }

    /// Waits for the replacements of groups an earlier run left unfinished with nothing left to
    /// rotate (it stopped in its last wait): until they are Ready (or, for a group judged by
    /// its pods, until its evicted pods are) the rotation is not complete. Their records go
    /// once they are. Only groups this run rotates (`--instance-group`) are waited for:
    /// another group's record is the business of the run that resumes it.
    pub(super) async fn finish_left_groups(&self) -> Result<(), RotateError> {
        let Some(status) = self.cluster.lock_status().await? else {
            return Ok(());
        };
        // Pods owed first: a group's record of its size goes after them.
        let owed: Vec<&String> = status
            .state
            .keys()
            .filter(|key| key.starts_with(PODS_BACK_PREFIX))
            .collect();
        let left: Vec<(&String, usize)> = owed
            .into_iter()
            .map(|key| (key, 0))
            .chain(
                status
                    .state
                    .iter()
                    .filter(|(key, _)| key.starts_with(EXPECTED_PREFIX))
                    .filter_map(|(key, value)| Some((key, value.parse::<usize>().ok()?))),
            )
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        // A long group name is recorded as a hash: the group is found among the nodes' groups.
        let nodes = self.view.caught_up().await?;
        let label = crate::plan::prepare::group_label(self.policy, &self.settings.plan);
        let mut groups: Vec<String> = nodes
            .nodes
            .iter()
            .map(|n| crate::plan::groups::group_of(n, label))
            .collect();
        groups.extend(left.iter().filter_map(|(k, _)| {
            let name = k.strip_prefix(EXPECTED_PREFIX);
            Some(name.or(k.strip_prefix(PODS_BACK_PREFIX))?.to_string())
        }));
        // A chosen group is found even with no nodes now and a long (hashed) name.
        let chosen = &self.settings.plan.instance_groups;
        groups.extend(chosen.iter().cloned());
        for (key, expected) in left {
            let owes_pods = key.starts_with(PODS_BACK_PREFIX);
            let group = groups
                .iter()
                .find(|g| expected_key(g) == **key || pods_back_key(g) == **key);
            if group.is_some_and(|g| !chosen.is_empty() && !chosen.contains(g)) {
                continue;
            }
            let Some(group) = group else {
                if !chosen.is_empty() {
                    continue;
                }
                let owed = if owes_pods {
                    "its evicted pods Ready again".to_string()
                } else {
                    format!("{expected} Ready nodes")
                };
                self.kernel.reporter.report(Event::Warning {
                    message: format!(
                        "an earlier run expected {owed} in a group that has no nodes now ({key}); not waiting for it"
                    ),
                });
                self.lock.set_state(key, None).await?;
                continue;
            };
            if !self.settings.plan.cloud_only {
                if owes_pods {
                    self.wait_pods_back(group).await?;
                } else {
                    self.wait_ready(group, expected).await?;
                }
            }
            self.lock.set_state(key, None).await?;
            self.kernel.reporter.report(Event::GroupDone {
                group: group.to_string(),
            });
        }
        Ok(())
    }

    async fn finish_termination(
        &self,
        nodes: &Snapshot,
        key: &str,
        target: &Target,
        expected: Option<usize>,
    ) -> Result<(), RotateError> {
        // Only a Node object says the Node was not deleted yet: a Machine whose Node is gone
        // shows in `nodes` too, as an unregistered instance of the same name, and it is the one
        // left to terminate.
        let node_left = nodes
            .nodes
            .iter()
            .any(|n| n.name == target.node && n.registered);
        if target.node.is_empty() || node_left {
            self.lock.set_state(key, None).await?;
            return Ok(());
        }
        self.warn(format!(
            "finishing the termination of {}, which a stopped run began",
            target.node
        ));
        let _step = self.steps.begin().await;
        self.terminate(target, key).await?;
        if let Some(expected) = expected
            && !self.settings.plan.cloud_only
        {
            self.wait_ready(&target.group, expected).await?;
        }
        Ok(())
    }

    async fn finish_surge(
        &self,
        nodes: &Snapshot,
        key: &str,
        targets: &[Target],
    ) -> Result<(), RotateError> {
        let _step = self.steps.begin().await;
        for target in targets {
            let unmarked = nodes
                .nodes
                .iter()
                .any(|n| n.name == target.node && !n.annotations.contains_key(keys::DETACHED));
            if !unmarked {
                continue;
            }
            self.warn(format!(
                "finishing the surge of {}, which a stopped run began",
                target.node
            ));
            self.detach(target).await?;
        }
        self.lock.set_state(key, None).await?;
        Ok(())
    }

    /// Terminates one instance through the provider, removes its termination record `record`,
    /// and only then reports it: a run stopped after the report has nothing left to finish.
    pub(super) async fn terminate(&self, target: &Target, record: &str) -> Result<(), RotateError> {
        let output = async {
            self.providers
                .for_group(&target.group)?
                .terminate(self.cluster, target)
                .await
        }
        .await
        .map_err(|source| RotateError::Provider {
            node: target.node.clone(),
            source,
        })?;
        self.lock.set_state(record, None).await?;
        self.kernel.reporter.report(Event::Terminated {
            node: target.node.clone(),
            output,
        });
        Ok(())
    }

    /// Detaches one instance through the provider, then marks its node detached.
    pub(super) async fn detach(&self, target: &Target) -> Result<(), RotateError> {
        async {
            self.providers
                .for_group(&target.group)?
                .detach(self.cluster, target)
                .await
        }
        .await
        .map_err(|source| RotateError::Provider {
            node: target.node.clone(),
            source,
        })?;
        // A Machine that never registered a Node has no Node to mark: its provider keeps the
        // surge's record (the clusterAPI provider does, on the scaled object).
        match self
            .cluster
            .annotate_node(&target.node, keys::DETACHED, "true")
            .await
        {
            Err(crate::cluster::ClusterError::Api { code: 404, .. })
                if target.machine.is_some() => {}
            other => other?,
        }
        Ok(())
    }
}
