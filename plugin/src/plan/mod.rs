//! The pure planner: snapshot + policy + hook answers → [`Plan`]. No I/O happens here; hooks are
//! reached through the [`hook::Hook`] trait, and time is an input.
//!
//! The plan is what the rotation would do if every batch succeeded: groups in seed order, each
//! with its resolved budget, its instances in update order with the reason and who decided, and
//! the batches (surges, canary, waves) the executor would run.

pub mod budget;
pub mod decide;
pub mod drain;
pub mod groups;
pub mod health;
pub mod hook;

use std::collections::{BTreeSet, HashSet};

use serde::Serialize;

use crate::keys;
use crate::policy::{Policy, PolicyError, RollingUpdate};
use crate::snapshot::{Node, Snapshot};
use decide::{BatchDecision, GateDecision, HookFailed, Verdict};
use drain::DrainOptions;
use groups::{NodeGroup, Staleness};
use health::Index;
use hook::{
    BatchInfo, CallContext, Candidate, DecidedBy, GroupInfo, Hook, InstanceKind, Pending, Phase,
    Progress,
};

pub const PLAN_API_VERSION: &str = "rollout-ext/v1alpha1";

/// How long the simulation follows a hook's pauses before giving up on a group.
pub(crate) const MAX_SIMULATED_PAUSE: i64 = 7 * 24 * 3600;

/// The role of an instance group, in update order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Bastion,
    ControlPlane,
    Node,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Bastion => "bastion",
            Role::ControlPlane => "control-plane",
            Role::Node => "node",
        }
    }

    /// Parses kops' and our spellings: `Bastion`, `Master`, `ControlPlane`, `control-plane`, `Node`.
    pub fn parse(text: &str) -> Result<Role, String> {
        match text.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "bastion" => Ok(Role::Bastion),
            "master" | "controlplane" | "apiserver" => Ok(Role::ControlPlane),
            "node" => Ok(Role::Node),
            _ => Err(format!(
                "unknown instance group role {text:?}: expected bastion, control-plane (or master) or node"
            )),
        }
    }
}

/// Everything besides the snapshot and the policy that shapes a plan.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub now: i64,
    pub run_id: String,
    pub dry_run: bool,
    /// `--group-label`, else the policy's.
    pub group_label: Option<String>,
    /// Cluster-wide budget: flags over the policy's `rollingUpdate`.
    pub rolling_update: RollingUpdate,
    pub instance_groups: Vec<String>,
    pub roles: Vec<Role>,
    pub staleness: Staleness,
    pub force: bool,
    pub interactive: bool,
    pub cloud_only: bool,
    pub drain: DrainOptions,
    /// Where a live rotation stands in the groups it re-plans: batches already run and
    /// instances already updated (hooks size the next batch from these).
    pub progress: RunProgress,
    /// A live rotation's instances, fixed when their group started (kops lists them once): a
    /// re-plan orders and sizes what is left of them and never selects another node, such as a
    /// replacement that came up while the group was rotating.
    pub only: Option<BTreeSet<String>>,
}

/// A live rotation's progress within the current group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunProgress {
    pub batches_done: u32,
    pub updated: u32,
    /// How many times the gates already answered `wait` for the next batch (or group).
    pub attempt: u32,
    /// The group has started: its before-group gate was passed and is not asked again.
    pub started: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("instance group {name:?} not found; groups in the cluster: {known}")]
    UnknownGroup { name: String, known: String },
    #[error(transparent)]
    Hook(#[from] HookFailed),
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub groups: Vec<GroupPlan>,
    pub warnings: Vec<String>,
    /// Set when a gate would stop the run: what stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupPlan {
    /// Name, role, size, up-to-date and selected counts, resolved budget.
    #[serde(flatten)]
    pub group: GroupInfo,
    pub concurrency: u32,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
    pub instances: Vec<InstancePlan>,
    pub batches: Vec<BatchPlan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aborted: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstancePlan {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub update: bool,
    pub reason: String,
    pub decided_by: DecidedBy,
    pub pods: u32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchPlan {
    pub instances: Vec<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub canary: bool,
    /// A surge: new instances are created for these before any is drained.
    #[serde(skip_serializing_if = "is_false")]
    pub surge: bool,
    pub decided_by: DecidedBy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateStep>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseStep {
    pub seconds: u64,
    pub reason: String,
    pub decided_by: DecidedBy,
}

impl PauseStep {
    /// Adds a hook's pause to the one pending before the next step; the latest reason and hook
    /// are shown.
    pub(crate) fn add_to(
        pending: &mut Option<PauseStep>,
        seconds: u32,
        reason: String,
        by: DecidedBy,
    ) {
        let step = pending.get_or_insert(PauseStep {
            seconds: 0,
            reason: String::new(),
            decided_by: by.clone(),
        });
        step.seconds += u64::from(seconds);
        step.reason = reason;
        step.decided_by = by;
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateStep {
    pub verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub decided_by: DecidedBy,
}

impl GateStep {
    pub(crate) fn from_decision(d: GateDecision) -> Option<GateStep> {
        if d.by == DecidedBy::BuiltIn {
            return None;
        }
        let (verdict, seconds, reason) = match d.verdict {
            Verdict::Proceed => ("proceed", None, None),
            Verdict::Wait { seconds, reason } => ("wait", Some(seconds), Some(reason)),
            Verdict::Abort(reason) => ("abort", None, Some(reason)),
        };
        Some(GateStep {
            verdict,
            seconds,
            reason,
            decided_by: d.by,
        })
    }
}

/// Plans a node rotation.
pub fn plan_nodes(
    snapshot: &Snapshot,
    policy: &Policy,
    options: &PlanOptions,
    hooks: &mut [Box<dyn Hook>],
) -> Result<Plan, PlanError> {
    let index = Index::new(snapshot);
    let label = options
        .group_label
        .as_deref()
        .or(policy.group_label.as_deref());
    let all_groups = groups::collect(&snapshot.nodes, label);

    for wanted in &options.instance_groups {
        if !all_groups.iter().any(|g| &g.name == wanted) {
            let known: Vec<&str> = all_groups.iter().map(|g| g.name.as_str()).collect();
            return Err(PlanError::UnknownGroup {
                name: wanted.clone(),
                known: known.join(", "),
            });
        }
    }
    let mut warnings = Vec::new();
    for group in &policy.groups {
        if !all_groups.iter().any(|g| g.name == group.name) {
            warnings.push(format!(
                "{}: policy settings for group {:?} match no instance group in the cluster",
                policy.source, group.name
            ));
        }
    }
    let chosen_groups = all_groups.into_iter().filter(|g| {
        (options.instance_groups.is_empty() || options.instance_groups.contains(&g.name))
            && (options.roles.is_empty() || options.roles.contains(&g.role))
    });

    let mut planner = Planner {
        index: &index,
        policy,
        options,
        hooks,
        warnings,
        now: options.now,
    };
    let cluster_health = health::summarize(snapshot, &index, &[], &HashSet::new(), &options.drain);
    if !cluster_health.failures.is_empty() && !options.cloud_only {
        planner.warnings.push(format!(
            "the cluster does not validate now, so a rotation would stop before its first group: {}",
            cluster_health.failures.join("; ")
        ));
    }

    let mut plan = Plan {
        api_version: PLAN_API_VERSION,
        kind: "Plan",
        groups: Vec::new(),
        warnings: Vec::new(),
        stopped: None,
    };
    for group in chosen_groups {
        let group_plan = planner.plan_group(&group, &cluster_health)?;
        let aborted = group_plan.aborted.clone();
        plan.groups.push(group_plan);
        if let Some(reason) = aborted {
            plan.stopped = Some(format!("group {}: {reason}", group.name));
            break;
        }
    }
    let updated: Vec<&str> = plan
        .groups
        .iter()
        .flat_map(|g| g.instances.iter().filter(|i| i.update && !g.disabled))
        .map(|i| i.name.as_str())
        .collect();
    if !options.cloud_only {
        planner
            .warnings
            .extend(health::drain_blockers(&index, &updated, &options.drain));
    }
    plan.warnings = planner.warnings;
    Ok(plan)
}

struct Planner<'a> {
    index: &'a Index<'a>,
    policy: &'a Policy,
    options: &'a PlanOptions,
    hooks: &'a mut [Box<dyn Hook>],
    warnings: Vec<String>,
    /// Simulated time: advances with the pauses hooks ask for.
    now: i64,
}

impl Planner<'_> {
    fn ctx(&self) -> CallContext {
        CallContext {
            now: self.now,
            run_id: self.options.run_id.clone(),
            dry_run: self.options.dry_run,
        }
    }

    fn candidate(&self, node: &Node, group: &NodeGroup, reason: Option<String>) -> Candidate {
        let pods = self.index.pods_on(&node.name);
        let moved: Vec<_> = pods
            .iter()
            .filter(|p| drain::classify(p, &self.options.drain).is_evicted() && !p.finished)
            .collect();
        Candidate {
            kind: InstanceKind::Node,
            name: node.name.clone(),
            group: group.name.clone(),
            role: group.role,
            zone: groups::zone_of(node).map(String::from),
            labels: node.labels.clone(),
            annotations: node.annotations.clone(),
            taints: node.taints.clone(),
            ready: node.ready,
            unschedulable: node.unschedulable,
            created: node.created,
            kubelet_version: node.kubelet_version.clone(),
            pods: moved.len() as u32,
            pods_not_ready: moved.iter().filter(|p| !p.ready).count() as u32,
            reason,
        }
    }

    fn plan_group(
        &mut self,
        group: &NodeGroup,
        cluster_health: &hook::HealthSummary,
    ) -> Result<GroupPlan, PlanError> {
        // Built-in selection: outdated first, then (with --force) up-to-date, detached last,
        // each in name order.
        let mut outdated = Vec::new();
        let mut current = Vec::new();
        let mut detached = Vec::new();
        let mut kept = Vec::new();
        for node in &group.nodes {
            if let Some(only) = &self.options.only
                && !only.contains(&node.name)
            {
                kept.push(*node);
                continue;
            }
            match groups::outdated_reason(node, &self.options.staleness) {
                Some(r) if node.annotations.contains_key(keys::DETACHED) => {
                    detached.push((*node, Some(r)))
                }
                Some(r) => outdated.push((*node, Some(r))),
                None => current.push(*node),
            }
        }
        let up_to_date = (current.len() + kept.len()) as u32;
        let force = self.options.force;
        let candidates: Vec<Candidate> = outdated
            .into_iter()
            .chain(
                current
                    .into_iter()
                    .map(|n| (n, force.then(|| "forced (--force)".to_string()))),
            )
            .chain(kept.into_iter().map(|n| (n, None)))
            .chain(detached)
            .map(|(n, r)| self.candidate(n, group, r))
            .collect();
        let selected_built_in = candidates.iter().filter(|c| c.reason.is_some()).count() as u32;
        let size = group.nodes.len() as u32;

        let overrides = self.policy.group(&group.name);
        let group_ru = overrides.map(|o| o.rolling_update).unwrap_or_default();
        let resolve = |selected| {
            budget::resolve(
                group.role,
                self.options.rolling_update,
                group_ru,
                size,
                selected,
                self.options.interactive,
            )
        };
        let Ok(first_budget) = resolve(selected_built_in) else {
            let line = overrides.map_or(0, |o| o.max_surge_line);
            return Err(PolicyError {
                file: self.policy.source.clone(),
                line,
                column: 0,
                message: format!(
                    "group {:?} is a control-plane group, and control-plane instances cannot surge: remove its maxSurge",
                    group.name
                ),
            }
            .into());
        };
        let mut plan = GroupPlan {
            group: GroupInfo {
                name: group.name.clone(),
                role: group.role,
                size,
                up_to_date,
                selected: selected_built_in,
                max_surge: first_budget.max_surge,
                max_unavailable: first_budget.max_unavailable,
            },
            concurrency: first_budget.concurrency,
            disabled: first_budget.concurrency == 0,
            note: None,
            gate: None,
            instances: Vec::new(),
            batches: Vec::new(),
            aborted: None,
        };

        if plan.disabled {
            plan.note =
                Some("rolling update disabled: maxSurge and maxUnavailable are both 0".into());
            // Nothing of a disabled group is updated; the built-in reason still shows.
            plan.instances = instance_list(&candidates, &[], &DecidedBy::BuiltIn)
                .into_iter()
                .map(|mut i| {
                    if let Some(reason) = candidates
                        .iter()
                        .find(|c| c.name == i.name)
                        .and_then(|c| c.reason.as_ref())
                    {
                        i.reason = format!("group disabled (out of date: {reason})");
                    }
                    i
                })
                .collect();
            return Ok(plan);
        }

        let ctx = self.ctx();
        let selection = decide::select(
            self.hooks,
            &ctx,
            &plan.group,
            &candidates,
            &mut self.warnings,
        )?;
        let mut chosen = selection.chosen;
        // Instances detached by an earlier run always go last.
        chosen.sort_by_key(|c| candidates[c.index].annotations.contains_key(keys::DETACHED));
        let dropped: Vec<&str> = candidates
            .iter()
            .enumerate()
            .filter(|(i, c)| c.reason.is_some() && !chosen.iter().any(|x| x.index == *i))
            .map(|(_, c)| c.name.as_str())
            .collect();
        if !dropped.is_empty() {
            self.warnings.push(format!(
                "group {}: selection hooks left out {} outdated instance(s): {}",
                group.name,
                dropped.len(),
                dropped.join(", ")
            ));
        }
        plan.instances = instance_list(&candidates, &chosen, &selection.by);
        plan.group.selected = chosen.len() as u32;

        let budget = resolve(plan.group.selected).expect("the same settings resolved above");
        plan.concurrency = budget.concurrency;

        let order: Vec<&Candidate> = chosen.iter().map(|c| &candidates[c.index]).collect();
        if order.is_empty() {
            return Ok(plan);
        }

        if !self.options.progress.started {
            let names: Vec<String> = order.iter().map(|c| c.name.clone()).collect();
            let group_gate = decide::gate(
                self.hooks,
                &ctx,
                Phase::BeforeGroup,
                &BatchInfo {
                    index: 0,
                    instances: names.clone(),
                    canary: false,
                    attempt: self.options.progress.attempt,
                },
                cluster_health,
                &mut self.warnings,
            )?;
            if let Verdict::Abort(reason) = &group_gate.verdict {
                plan.aborted = Some(format!(
                    "{} aborted before the group: {reason}",
                    group_gate.by
                ));
            }
            plan.gate = GateStep::from_decision(group_gate);
            if plan.aborted.is_some() {
                return Ok(plan);
            }
        }
        let info = plan.group.clone();
        self.plan_batches(&mut plan, &info, &order, budget, cluster_health)?;
        Ok(plan)
    }

    /// Surges, canary and waves, asking the batching hooks and gates as the executor would.
    fn plan_batches(
        &mut self,
        plan: &mut GroupPlan,
        info: &GroupInfo,
        order: &[&Candidate],
        budget: budget::Budget,
        cluster_health: &hook::HealthSummary,
    ) -> Result<(), PlanError> {
        let canary = info.up_to_date == 0;
        let surge = if self.options.cloud_only {
            0
        } else {
            budget.surge
        };

        // Surges detach the last instances of the update order; those already detached by an
        // earlier run need no new instance.
        let targets: Vec<String> = order
            .iter()
            .rev()
            .take(surge as usize)
            .filter(|c| !c.annotations.contains_key(keys::DETACHED))
            .map(|c| c.name.clone())
            .collect();
        let mut split = targets.as_slice();
        if canary && !split.is_empty() {
            plan.batches.push(surge_step(vec![split[0].clone()], true));
            split = &split[1..];
        }
        if !split.is_empty() {
            plan.batches.push(surge_step(split.to_vec(), false));
        }
        let canary_wave = canary && surge == 0;

        let mut done = 0usize;
        let mut waves = self.options.progress.batches_done;
        let canary_wave = canary_wave && waves == 0;
        let mut paused: i64 = 0;
        let mut pending_pause: Option<PauseStep> = None;
        // Copied once per group; each batch's hooks are shown a window of it.
        let all = Pending::from(order.iter().map(|c| (*c).clone()).collect::<Vec<_>>());
        while done < order.len() {
            let remaining = order.len() - done;
            let limit = if canary_wave && done == 0 {
                1
            } else {
                budget.concurrency
            };
            let max_batch = limit.min(remaining as u32);
            // Hooks see only the instances the next batch can take (see `decide::batch_size`).
            let progress = Progress {
                group: info,
                batches_done: waves,
                updated: self.options.progress.updated + done as u32,
                pending: all.window(done, max_batch as usize),
                max_batch,
            };
            let ctx = self.ctx();
            let (size, by) = match decide::batch_size(
                self.hooks,
                &ctx,
                &progress,
                &mut self.warnings,
            )? {
                BatchDecision::Size { size, by } => (size as usize, by),
                BatchDecision::Pause {
                    seconds,
                    reason,
                    by,
                } => {
                    paused += i64::from(seconds);
                    self.now += i64::from(seconds);
                    PauseStep::add_to(&mut pending_pause, seconds, reason, by.clone());
                    if paused > MAX_SIMULATED_PAUSE {
                        self.warnings.push(format!(
                            "group {}: {by} kept pausing for more than 7 days; the plan stops here and {} instance(s) stay pending",
                            plan.group.name,
                            remaining
                        ));
                        return Ok(());
                    }
                    continue;
                }
            };
            let instances: Vec<String> = order[done..done + size]
                .iter()
                .map(|c| c.name.clone())
                .collect();
            let refs: Vec<&str> = instances.iter().map(String::as_str).collect();
            // The cluster-wide part was judged once for the plan; only the budgets differ.
            let summary = hook::HealthSummary {
                budgets: health::budgets_covering(self.index, &refs, &self.options.drain),
                ..cluster_health.clone()
            };
            let batch_info = BatchInfo {
                index: waves,
                instances: instances.clone(),
                canary: canary_wave && done == 0,
                attempt: if done == 0 {
                    self.options.progress.attempt
                } else {
                    0
                },
            };
            let gate = decide::gate(
                self.hooks,
                &ctx,
                Phase::BeforeBatch,
                &batch_info,
                &summary,
                &mut self.warnings,
            )?;
            let abort = match &gate.verdict {
                Verdict::Abort(reason) => Some(format!(
                    "{} aborted before batch {}: {reason}",
                    gate.by,
                    waves + 1
                )),
                _ => None,
            };
            plan.batches.push(BatchPlan {
                instances,
                canary: batch_info.canary,
                surge: false,
                decided_by: by,
                pause: pending_pause.take(),
                gate: GateStep::from_decision(gate),
            });
            if abort.is_some() {
                plan.aborted = abort;
                return Ok(());
            }
            done += size;
            waves += 1;
        }
        Ok(())
    }
}

fn surge_step(instances: Vec<String>, canary: bool) -> BatchPlan {
    BatchPlan {
        instances,
        canary,
        surge: true,
        decided_by: DecidedBy::BuiltIn,
        pause: None,
        gate: None,
    }
}

/// Every instance of the group: the chosen ones in update order, then the others. `selected_by`
/// decided the choice, and so also who was left out.
fn instance_list(
    candidates: &[Candidate],
    chosen: &[decide::Chosen],
    selected_by: &DecidedBy,
) -> Vec<InstancePlan> {
    let mut out: Vec<InstancePlan> = chosen
        .iter()
        .map(|c| {
            let cand = &candidates[c.index];
            InstancePlan {
                name: cand.name.clone(),
                zone: cand.zone.clone(),
                update: true,
                reason: c.reason.clone(),
                decided_by: c.by.clone(),
                pods: cand.pods,
            }
        })
        .collect();
    for (i, cand) in candidates.iter().enumerate() {
        if chosen.iter().any(|c| c.index == i) {
            continue;
        }
        let (reason, by) = match (&cand.reason, selected_by) {
            (Some(r), DecidedBy::Hook(_)) => (
                format!("left out by {selected_by} (built-in: {r})"),
                selected_by.clone(),
            ),
            (None, DecidedBy::Hook(_)) => ("up to date".to_string(), selected_by.clone()),
            _ => ("up to date".to_string(), DecidedBy::BuiltIn),
        };
        out.push(InstancePlan {
            name: cand.name.clone(),
            zone: cand.zone.clone(),
            update: false,
            reason,
            decided_by: by,
            pods: cand.pods,
        });
    }
    out
}

#[cfg(test)]
mod tests;
