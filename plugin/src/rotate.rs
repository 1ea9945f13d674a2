//! The node rotation executor: kops' rolling update, one step at a time.
//!
//! Before every step it reads the cluster again and asks the planner (and so the hooks) what the
//! next step is; it then does that one step. Progress lives in the cluster itself: replaced
//! instances are up to date, instances it cordoned carry the phase annotation, detached ones the
//! detached annotation. Running the same command again therefore continues where a crashed or
//! interrupted run stopped, without draining or surging anything twice.
//!
//! Per group: validate, gate `before-group`, taint the chosen nodes, surge (a canary surge alone
//! first when nothing is up to date), then batches: gate `before-batch`, cordon, drain,
//! post-drain delay, delete the Node, terminate, the role's interval, wait for replacements to be
//! Ready (a watch), validate, gate `after-batch`.

use std::collections::{BTreeSet, HashSet};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::watcher;

use crate::cluster::drain::{DrainError, DrainSettings};
use crate::cluster::lock::LockGuard;
use crate::cluster::validate::{ValidationError, ValidationSettings};
use crate::cluster::{Cluster, ClusterError, Request};
use crate::keys;
use crate::plan::decide::{self, HookFailed, Verdict};
use crate::plan::hook::{BatchInfo, CallContext, Hook, Phase};
use crate::plan::{
    self, BatchPlan, GateStep, GroupPlan, PlanError, PlanOptions, Role, RunProgress,
};
use crate::policy::{HookPoint, Policy};
use crate::progress::{Event, Reporter};
use crate::provider::{Provider, ProviderError, Target};
use crate::snapshot::Snapshot;

/// Everything that shapes a rotation besides the policy.
#[derive(Debug, Clone)]
pub struct RotateSettings {
    pub plan: PlanOptions,
    pub drain: DrainSettings,
    pub validation: ValidationSettings,
    pub post_drain_delay: Duration,
    pub bastion_interval: Duration,
    pub master_interval: Duration,
    pub node_interval: Duration,
    pub taint_key: String,
    pub fail_on_drain_error: bool,
    pub fail_on_validate_error: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Hook(#[from] HookFailed),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Drain(#[from] DrainError),
    #[error(transparent)]
    Validation(#[from] ValidationError),
    #[error("instance {node}: {source}")]
    Provider {
        node: String,
        #[source]
        source: ProviderError,
    },
    #[error("aborted by {by}: {reason}")]
    Aborted { by: String, reason: String },
    #[error("stopped at the operator's request before batch {batch} of group {group}")]
    Declined { group: String, batch: u32 },
    #[error("the lock was taken over by another run; stopping here")]
    LockLost,
    #[error(
        "group {group}: the replacements did not become Ready within {timeout:?} ({ready} of {expected} nodes Ready)"
    )]
    NoReplacement {
        group: String,
        timeout: Duration,
        ready: usize,
        expected: usize,
    },
}

impl RotateError {
    /// Whether a gate stopped the run (exit code 3), as opposed to a failure.
    pub fn is_abort(&self) -> bool {
        matches!(
            self,
            RotateError::Aborted { .. } | RotateError::Declined { .. }
        )
    }
}

/// A rotation in progress.
pub struct Rotation<'a> {
    pub cluster: &'a Cluster,
    pub policy: &'a Policy,
    pub settings: &'a RotateSettings,
    pub hooks: &'a mut [Box<dyn Hook>],
    pub provider: &'a Provider,
    pub reporter: &'a dyn Reporter,
    pub lock: &'a LockGuard,
    pub steps: &'a Steps,
}

/// The steps Ctrl-C must not cut in half: a termination or a surge, from its record to the
/// record's removal, so that an interrupted run never leaves a provider call for the next one
/// to repeat. A step holds a read guard; the command stops once it gets the write guard.
#[derive(Debug, Default)]
pub struct Steps {
    running: tokio::sync::RwLock<()>,
}

impl Steps {
    async fn begin(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.running.read().await
    }

    /// Resolves when no step is running, and keeps new ones from starting.
    pub async fn settled(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.running.write().await
    }

    /// Whether a step is running now.
    pub fn busy(&self) -> bool {
        self.running.try_write().is_err()
    }
}

/// The run-state key of a group's expected Ready node count (an annotation on the lock).
fn state_key(group: &str) -> String {
    run_key("expected", group)
}

/// The run-state key of a group's termination in progress: written before its Node is deleted
/// and cleared once the provider terminated the instance, so that a run that dies in between
/// (the Node gone, the instance perhaps still running) is finished by the next one.
fn terminating_key(group: &str) -> String {
    run_key("terminating", group)
}

const TERMINATING_PREFIX: &str = "rollout-ext.io/terminating.";

/// The run-state key of a group's surge in progress: written with the group's new expected
/// size before its instances are detached, and cleared once they are marked detached.
fn surging_key(group: &str) -> String {
    run_key("surging", group)
}

const SURGING_PREFIX: &str = "rollout-ext.io/surging.";

/// What a record of the run state says of an instance.
fn record_of(target: &Target) -> serde_json::Value {
    serde_json::json!({
        "node": target.node,
        "providerID": target.provider_id,
        "group": target.group,
    })
}

fn target_of(record: &serde_json::Value) -> Target {
    let field = |name: &str| record[name].as_str().unwrap_or_default().to_string();
    Target {
        node: field("node"),
        provider_id: field("providerID"),
        group: field("group"),
    }
}

/// A run-state key: `rollout-ext.io/<what>.<group>`, the group hashed when it cannot be part
/// of an annotation key.
fn run_key(what: &str, group: &str) -> String {
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

/// Runs sync hook calls off the async workers' hot path (hooks may block on `list-objects`).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

impl Rotation<'_> {
    /// Reports a wait and sleeps through it.
    async fn hold(&self, duration: Duration, reason: String) {
        self.reporter.report(Event::Waiting {
            seconds: duration.as_secs(),
            reason,
        });
        tokio::time::sleep(duration).await;
    }

    /// Sleeps through a gate's `wait`.
    async fn hold_for_gate(&self, gate: &GateStep) {
        let seconds = u64::from(gate.seconds.unwrap_or(1));
        let reason = format!(
            "{} [{}]",
            gate.reason.clone().unwrap_or_default(),
            gate.decided_by
        );
        self.hold(Duration::from_secs(seconds), reason).await;
    }

    fn check_lock(&self) -> Result<(), RotateError> {
        if self.lock.lost() {
            return Err(RotateError::LockLost);
        }
        Ok(())
    }

    /// Re-reads the cluster and plans `group` from where the rotation stands; `only` restricts
    /// the selection to the instances a started group chose.
    async fn replan(
        &mut self,
        group: Option<&str>,
        progress: RunProgress,
        only: Option<&BTreeSet<String>>,
    ) -> Result<(Snapshot, plan::Plan), RotateError> {
        let snapshot = self.cluster.snapshot().await?;
        let mut options = self.settings.plan.clone();
        options.now = jiff::Timestamp::now().as_second();
        options.staleness.now = options.now;
        options.progress = progress;
        options.only = only.cloned();
        if let Some(g) = group {
            options.instance_groups = vec![g.to_string()];
        }
        let (policy, hooks) = (self.policy, &mut *self.hooks);
        let plan = match blocking(|| plan::plan_nodes(&snapshot, policy, &options, hooks)) {
            // Every node of the group is gone (terminated, replacements not yet registered):
            // nothing is left to plan in it.
            Err(PlanError::UnknownGroup { .. }) if group.is_some() => plan::Plan {
                api_version: plan::PLAN_API_VERSION,
                kind: "Plan",
                groups: Vec::new(),
                warnings: Vec::new(),
                stopped: None,
            },
            other => other?,
        };
        Ok((snapshot, plan))
    }

    /// Rotates every group the plan chooses, in order.
    pub async fn run(&mut self) -> Result<(), RotateError> {
        self.finish_stopped_steps().await?;
        let (_, plan) = self.replan(None, RunProgress::default(), None).await?;
        for warning in &plan.warnings {
            self.reporter.report(Event::Warning {
                message: warning.clone(),
            });
        }
        // A disabled group is not an error, but it is said: its outdated instances stay.
        for g in plan
            .groups
            .iter()
            .filter(|g| g.disabled && g.group.selected > 0)
        {
            self.reporter.report(Event::Warning {
                message: format!(
                    "group {}: {}; its {} out-of-date instances are left as they are",
                    g.group.name,
                    g.note.as_deref().unwrap_or("rolling update disabled"),
                    g.group.selected
                ),
            });
        }
        let groups: Vec<(String, Role)> = plan
            .groups
            .iter()
            .filter(|g| !g.disabled && g.group.selected > 0)
            .map(|g| (g.group.name.clone(), g.group.role))
            .collect();
        for (group, role) in groups {
            self.rotate_group(&group, role).await?;
        }
        Ok(())
    }

    /// Finishes the provider calls a stopped run began, each recorded on the lock before it was
    /// made: terminations, then surges.
    ///
    /// A termination whose Node is still there had not deleted it yet: the rotation replaces
    /// that node as usual. One whose Node is gone may have left its instance running: it is
    /// terminated (again, perhaps; it was drained before its termination was recorded, and a
    /// provider's terminate must accept an instance already gone), and its replacement waited
    /// for. A surge whose instance is not yet marked detached is detached (again, perhaps: a
    /// provider's detach must accept an instance already detached) and marked; the group's
    /// expected size already counts it.
    async fn finish_stopped_steps(&mut self) -> Result<(), RotateError> {
        let Some(status) = self.cluster.lock_status().await? else {
            return Ok(());
        };
        let records: Vec<(&String, &String)> = status
            .state
            .iter()
            .filter(|(key, _)| {
                key.starts_with(TERMINATING_PREFIX) || key.starts_with(SURGING_PREFIX)
            })
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        let nodes = self.cluster.snapshot_nodes().await?;
        let node = |name: &str| nodes.nodes.iter().find(|n| n.name == name);
        for (key, value) in records
            .iter()
            .filter(|(k, _)| k.starts_with(TERMINATING_PREFIX))
        {
            let record: serde_json::Value = serde_json::from_str(value).unwrap_or_default();
            let target = target_of(&record);
            if target.node.is_empty() || node(&target.node).is_some() {
                self.lock.set_state(key, None).await?;
                continue;
            }
            self.reporter.report(Event::Warning {
                message: format!(
                    "finishing the termination of {}, which a stopped run began",
                    target.node
                ),
            });
            let _step = self.steps.begin().await;
            self.terminate(&target, key).await?;
            let expected = status
                .state
                .get(&state_key(&target.group))
                .and_then(|v| v.parse::<usize>().ok());
            if let Some(expected) = expected
                && !self.settings.plan.cloud_only
            {
                self.wait_ready(&target.group, expected).await?;
            }
        }
        for (key, value) in records
            .iter()
            .filter(|(k, _)| k.starts_with(SURGING_PREFIX))
        {
            let record: serde_json::Value = serde_json::from_str(value).unwrap_or_default();
            let _step = self.steps.begin().await;
            for target in record.as_array().into_iter().flatten().map(target_of) {
                let unmarked =
                    node(&target.node).is_some_and(|n| !n.annotations.contains_key(keys::DETACHED));
                if !unmarked {
                    continue;
                }
                self.reporter.report(Event::Warning {
                    message: format!(
                        "finishing the surge of {}, which a stopped run began",
                        target.node
                    ),
                });
                self.detach(&target).await?;
            }
            self.lock.set_state(key, None).await?;
        }
        Ok(())
    }

    /// Terminates one instance through the provider, removes its termination record `record`,
    /// and only then reports it: a run stopped after the report has nothing left to finish.
    async fn terminate(&self, target: &Target, record: &str) -> Result<(), RotateError> {
        let output = self
            .provider
            .terminate(self.cluster, target)
            .await
            .map_err(|source| RotateError::Provider {
                node: target.node.clone(),
                source,
            })?;
        self.lock.set_state(record, None).await?;
        self.reporter.report(Event::Terminated {
            node: target.node.clone(),
            output,
        });
        Ok(())
    }

    fn interval(&self, role: Role) -> Duration {
        match role {
            Role::Bastion => self.settings.bastion_interval,
            Role::ControlPlane => self.settings.master_interval,
            Role::Node => self.settings.node_interval,
        }
    }

    /// Nodes this tool cordoned, in this run or an earlier one: their cordon fails no validation.
    fn ours(snapshot: &Snapshot) -> Vec<String> {
        snapshot
            .nodes
            .iter()
            .filter(|n| n.annotations.contains_key(keys::PHASE))
            .map(|n| n.name.clone())
            .collect()
    }

    async fn validate(&self, snapshot: &Snapshot) -> Result<(), RotateError> {
        if self.settings.plan.cloud_only {
            return Ok(());
        }
        let ours = Self::ours(snapshot);
        let excused: HashSet<&str> = ours.iter().map(String::as_str).collect();
        match self
            .cluster
            .validate(&self.settings.validation, &excused, self.reporter)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if !self.settings.fail_on_validate_error => {
                self.reporter.report(Event::Warning {
                    message: format!("{e}; continuing (--fail-on-validate-error=false)"),
                });
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn ctx(&self) -> CallContext {
        CallContext {
            now: jiff::Timestamp::now().as_second(),
            run_id: self.lock.identity().to_string(),
            dry_run: false,
        }
    }

    async fn rotate_group(&mut self, group: &str, role: Role) -> Result<(), RotateError> {
        let mut progress = RunProgress::default();
        // Validation and the before-group gate, until the gate lets the group start.
        let chosen = loop {
            let (snapshot, plan) = self.replan(Some(group), progress, None).await?;
            let Some(first) = plan.groups.into_iter().next() else {
                return Ok(());
            };
            if role != Role::Bastion && progress.attempt == 0 {
                self.validate(&snapshot).await?;
            }
            if let Some(reason) = first.aborted {
                return Err(RotateError::Aborted {
                    by: "a gate".into(),
                    reason,
                });
            }
            match &first.gate {
                Some(gate) if gate.verdict == "wait" => {
                    self.hold_for_gate(gate).await;
                    progress.attempt += 1;
                }
                _ => {
                    let label = self.group_label();
                    let size = snapshot
                        .nodes
                        .iter()
                        .filter(|n| plan::groups::group_of(n, label) == group)
                        .count();
                    let chosen: Vec<String> = first
                        .instances
                        .iter()
                        .filter(|i| i.update)
                        .map(|i| i.name.clone())
                        .collect();
                    break (chosen, size);
                }
            }
        };
        let (chosen, size) = chosen;
        // How many Ready nodes the group must have between batches: its size when the group
        // started, plus surges, minus detached instances terminated. Kept with the lock so that
        // a resumed run still waits for the replacements the stopped run started.
        let key = state_key(group);
        let resumed = self.lock.state(&key).await?;
        let mut target = match resumed.and_then(|v| v.parse::<usize>().ok()) {
            Some(expected) => expected,
            None => {
                self.lock.set_state(&key, Some(&size.to_string())).await?;
                size
            }
        };
        progress = RunProgress {
            started: true,
            ..Default::default()
        };
        self.reporter.report(Event::GroupStarted {
            group: group.into(),
            instances: chosen.clone(),
        });
        if !self.settings.plan.cloud_only && role != Role::Bastion {
            let taints = chosen.iter().map(|node| {
                self.cluster.taint_prefer_no_schedule(
                    node,
                    &self.settings.taint_key,
                    false,
                    self.reporter,
                )
            });
            futures::future::try_join_all(taints).await?;
        }

        // The group's instances are fixed now; re-plans only order and size what is left.
        let only: BTreeSet<String> = chosen.iter().cloned().collect();
        loop {
            self.check_lock()?;
            let (snapshot, plan) = self.replan(Some(group), progress, Some(&only)).await?;
            let Some(current) = plan.groups.into_iter().next() else {
                break;
            };
            if let Some(reason) = &current.aborted {
                return Err(RotateError::Aborted {
                    by: "a gate".into(),
                    reason: reason.clone(),
                });
            }
            let Some(step) = current.batches.first().cloned() else {
                break;
            };
            if step.surge {
                let surges: Vec<BatchPlan> = current
                    .batches
                    .iter()
                    .take_while(|b| b.surge)
                    .cloned()
                    .collect();
                self.surge(group, &snapshot, &surges, &mut target).await?;
                continue;
            }
            if let Some(pause) = &step.pause {
                let reason = format!("{} [{}]", pause.reason, pause.decided_by);
                self.hold(Duration::from_secs(pause.seconds), reason).await;
                continue;
            }
            if let Some(gate) = &step.gate {
                match gate.verdict {
                    "abort" => {
                        return Err(RotateError::Aborted {
                            by: gate.decided_by.to_string(),
                            reason: gate.reason.clone().unwrap_or_default(),
                        });
                    }
                    "wait" => {
                        self.hold_for_gate(gate).await;
                        progress.attempt += 1;
                        continue;
                    }
                    _ => {}
                }
            }
            progress.attempt = 0;
            self.batch(
                &current,
                &step,
                &snapshot,
                progress.batches_done,
                role,
                &mut target,
            )
            .await?;
            progress.batches_done += 1;
            progress.updated += step.instances.len() as u32;
        }
        if !self.settings.plan.cloud_only {
            self.wait_ready(group, target).await?;
        }
        self.lock.set_state(&key, None).await?;
        self.reporter.report(Event::GroupDone {
            group: group.into(),
        });
        Ok(())
    }

    fn target(snapshot: &Snapshot, group: &str, node: &str) -> Target {
        let provider_id = snapshot
            .nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(|n| n.provider_id.clone())
            .unwrap_or_default();
        Target {
            node: node.into(),
            provider_id,
            group: group.into(),
        }
    }

    fn group_label(&self) -> Option<&str> {
        self.settings
            .plan
            .group_label
            .as_deref()
            .or(self.policy.group_label.as_deref())
    }

    /// Ready nodes of `group` in `snapshot`.
    fn ready_in(&self, snapshot: &Snapshot, group: &str) -> usize {
        let label = self.group_label();
        snapshot
            .nodes
            .iter()
            .filter(|n| plan::groups::group_of(n, label) == group && n.ready)
            .count()
    }

    /// Waits, by watching nodes, until `group` has `expected` Ready nodes.
    /// Returns the nodes as they were when enough were Ready.
    async fn wait_ready(&self, group: &str, expected: usize) -> Result<Snapshot, RotateError> {
        let timeout = self.settings.validation.timeout;
        let deadline = Instant::now() + timeout;
        let mut changes = watcher(
            Api::<K8sNode>::all(self.cluster.client.clone()),
            watcher::Config::default(),
        )
        .boxed();
        loop {
            let nodes = self.cluster.snapshot_nodes().await?;
            let ready = self.ready_in(&nodes, group);
            if ready >= expected {
                self.reporter.report(Event::Replaced {
                    group: group.into(),
                    ready,
                });
                return Ok(nodes);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changes.next()).await.is_err() {
                return Err(RotateError::NoReplacement {
                    group: group.into(),
                    timeout,
                    ready,
                    expected,
                });
            }
        }
    }

    /// Detaches the surge targets (the canary alone first), waits for their replacements and
    /// validates.
    async fn surge(
        &mut self,
        group: &str,
        snapshot: &Snapshot,
        surges: &[BatchPlan],
        target: &mut usize,
    ) -> Result<(), RotateError> {
        for step in surges {
            self.check_lock()?;
            *target += step.instances.len();
            let targets: Vec<Target> = step
                .instances
                .iter()
                .map(|node| Self::target(snapshot, group, node))
                .collect();
            let record = serde_json::Value::from_iter(targets.iter().map(record_of)).to_string();
            let key = surging_key(group);
            // The new expected size and the surge's record go together: a run stopped at any
            // point finds the surge counted once, and finishes it (see `finish_stopped_steps`).
            let step_guard = self.steps.begin().await;
            self.lock
                .set_states(&[
                    (&state_key(group), Some(&target.to_string())),
                    (&key, Some(&record)),
                ])
                .await?;
            self.reporter.report(Event::Surging {
                group: group.into(),
                detached: step.instances.clone(),
                canary: step.canary,
            });
            for target in &targets {
                self.detach(target).await?;
            }
            self.lock.set_state(&key, None).await?;
            drop(step_guard);
            let fresh = self.wait_ready(group, *target).await?;
            self.validate(&fresh).await?;
        }
        Ok(())
    }

    /// Detaches one instance through the provider, then marks its node detached.
    async fn detach(&self, target: &Target) -> Result<(), RotateError> {
        self.provider
            .detach(target)
            .await
            .map_err(|source| RotateError::Provider {
                node: target.node.clone(),
                source,
            })?;
        self.annotate(&target.node, keys::DETACHED, "true").await
    }

    async fn annotate(&self, node: &str, key: &str, value: &str) -> Result<(), RotateError> {
        let api: Api<K8sNode> = Api::all(self.cluster.client.clone());
        api.patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .map_err(|e| {
            Request {
                verb: "patch",
                resource: "nodes",
                namespace: None,
            }
            .error(&self.cluster.server, e)
        })?;
        Ok(())
    }

    /// Asks the operator before a batch (`-i`). Anything but yes stops the run, resumably.
    fn confirm(group: &str, index: u32, nodes: &[String]) -> bool {
        eprint!(
            "Replace batch {} of group {group} ({})? [y/N] ",
            index + 1,
            nodes.join(", ")
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer).is_ok()
            && matches!(answer.trim(), "y" | "Y" | "yes")
    }

    async fn batch(
        &mut self,
        group_plan: &GroupPlan,
        step: &BatchPlan,
        snapshot: &Snapshot,
        index: u32,
        role: Role,
        target: &mut usize,
    ) -> Result<(), RotateError> {
        let group = group_plan.group.name.as_str();
        // Replacements of earlier batches first: never disrupt more than the budget. The
        // snapshot this batch was planned from is a moment old; only when it lacks Ready nodes
        // is the cluster watched for them.
        if !self.settings.plan.cloud_only && self.ready_in(snapshot, group) < *target {
            self.wait_ready(group, *target).await?;
        }
        if self.settings.plan.interactive && !Self::confirm(group, index, &step.instances) {
            return Err(RotateError::Declined {
                group: group.into(),
                batch: index + 1,
            });
        }
        self.reporter.report(Event::BatchStarted {
            group: group.into(),
            index,
            nodes: step.instances.clone(),
            canary: step.canary,
            decided_by: step.decided_by.to_string(),
        });
        let detached = snapshot
            .nodes
            .iter()
            .filter(|n| {
                step.instances.contains(&n.name) && n.annotations.contains_key(keys::DETACHED)
            })
            .count();

        let move_pods = !self.settings.plan.cloud_only && role != Role::Bastion;
        let results = futures::future::join_all(
            step.instances
                .iter()
                .map(|node| self.drain_one(node, move_pods)),
        )
        .await;
        for result in results {
            result?;
        }
        if move_pods && !self.settings.post_drain_delay.is_zero() {
            self.hold(
                self.settings.post_drain_delay,
                "post-drain delay: connections to the evicted pods close".into(),
            )
            .await;
        }
        self.check_lock()?;
        if detached > 0 {
            // Detached instances are not replaced: the group shrinks back.
            *target = target.saturating_sub(detached);
            self.lock
                .set_state(&state_key(group), Some(&target.to_string()))
                .await?;
        }
        for node in &step.instances {
            let target = Self::target(snapshot, group, node);
            let key = terminating_key(group);
            let _step = self.steps.begin().await;
            self.lock
                .set_state(&key, Some(&record_of(&target).to_string()))
                .await?;
            self.delete_node(node).await?;
            self.terminate(&target, &key).await?;
        }
        let interval = self.interval(role);
        if !interval.is_zero() {
            self.hold(
                interval,
                format!("{} interval after terminating", role.as_str()),
            )
            .await;
        }
        if !self.settings.plan.cloud_only {
            let fresh = self.wait_ready(group, *target).await?;
            self.validate(&fresh).await?;
        }

        // The gates are asked until they proceed or abort; a wait holds the run and asks again
        // with the health as it is then. Without a gate hook the built-in verdict is to go on,
        // and the health it would be shown need not be read.
        if !decide::serves_any(self.hooks, HookPoint::Gate) {
            return Ok(());
        }
        let mut attempt = 0;
        loop {
            let health = self.cluster.check_health(&HashSet::new()).await?;
            let info = BatchInfo {
                index,
                instances: step.instances.clone(),
                canary: step.canary,
                attempt,
            };
            let ctx = self.ctx();
            let mut warnings = Vec::new();
            let hooks = &mut *self.hooks;
            let verdict = blocking(|| {
                decide::gate(
                    hooks,
                    &ctx,
                    Phase::AfterBatch,
                    &info,
                    &health,
                    &mut warnings,
                )
            })?;
            for message in warnings {
                self.reporter.report(Event::Warning { message });
            }
            match verdict.verdict {
                Verdict::Abort(reason) => {
                    return Err(RotateError::Aborted {
                        by: verdict.by.to_string(),
                        reason,
                    });
                }
                Verdict::Wait { seconds, reason } => {
                    let reason = format!("{reason} [{}]", verdict.by);
                    self.hold(Duration::from_secs(u64::from(seconds)), reason)
                        .await;
                    attempt += 1;
                }
                Verdict::Proceed => return Ok(()),
            }
        }
    }

    /// Cordons and drains one node (unless pods are not moved), recording the phase.
    async fn drain_one(&self, node: &str, move_pods: bool) -> Result<(), RotateError> {
        if !move_pods {
            return Ok(());
        }
        self.cluster.cordon(node, false, self.reporter).await?;
        match self
            .cluster
            .drain(node, &self.settings.drain, self.reporter)
            .await
        {
            Ok(()) => {}
            Err(e) if !self.settings.fail_on_drain_error => {
                self.reporter.report(Event::Warning {
                    message: format!("{e}; continuing (--fail-on-drain-error=false)"),
                });
            }
            Err(e) => return Err(e.into()),
        }
        self.cluster
            .set_phase(node, "drained", false, false)
            .await?;
        Ok(())
    }

    async fn delete_node(&self, node: &str) -> Result<(), RotateError> {
        let api: Api<K8sNode> = Api::all(self.cluster.client.clone());
        match api.delete(node, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Request {
                verb: "delete",
                resource: "nodes",
                namespace: None,
            }
            .error(&self.cluster.server, e)
            .into()),
        }
    }
}
