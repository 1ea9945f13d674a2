//! What both drivers of the group loop read from a snapshot before any hook is asked: which
//! groups a run covers, and for each group its candidates and budget. Pure functions.

use super::budget::BudgetRule;
use super::drain;
use super::group_loop::GroupStart;
use super::groups::{self, NodeGroup};
use super::health::{self, Index};
use super::hook::{Candidate, DecidedBy, GroupInfo, InstanceKind};
use super::{GroupPlan, InstancePlan, PlanError, PlanOptions};
use crate::duration::human_duration;
use crate::keys;
use crate::policy::{Policy, PolicyError};
use crate::snapshot::{Node, Snapshot};

/// The groups a run covers, in update order, and what is worth saying before it starts.
pub struct Survey<'a> {
    pub groups: Vec<NodeGroup<'a>>,
    pub warnings: Vec<String>,
}

/// Chooses the groups of `snapshot` that `options` name (all by default), in seed order.
pub fn survey<'a>(
    snapshot: &'a Snapshot,
    index: &Index,
    policy: &Policy,
    options: &PlanOptions,
) -> Result<Survey<'a>, PlanError> {
    let all_groups = groups::collect(&snapshot.nodes, group_label(policy, options));
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
    let health = health::summarize(snapshot, index, &[], &Default::default(), &options.drain);
    if !health.failures.is_empty() && !options.cloud_only {
        warnings.push(format!(
            "the cluster does not validate now, so a rotation would stop before its first group: {}",
            health.failures.join("; ")
        ));
    }
    let mut groups: Vec<NodeGroup> = all_groups
        .into_iter()
        .filter(|g| {
            (options.instance_groups.is_empty() || options.instance_groups.contains(&g.name))
                && (options.roles.is_empty() || options.roles.contains(&g.role))
        })
        .collect();
    // A node whose deletion was asked for is already going: replacing it would drain and
    // remove it a second time.
    for group in &mut groups {
        for node in group.nodes.iter().filter(|n| n.deleting) {
            warnings.push(format!(
                "group {}: node {} is being deleted already (by an earlier run or another tool): left out",
                group.name, node.name
            ));
        }
        group.nodes.retain(|n| !n.deleting);
    }
    let paused = policy.others_disruptions == crate::policy::OthersDisruptions::Count;
    warnings.extend(
        groups
            .iter()
            .filter_map(|g| snapshot.node_pool(&g.name)?.warning(paused)),
    );
    warnings.extend(booting_warnings(&groups, &options.staleness));
    if !options.force {
        warnings.extend(groups.iter().flat_map(|g| {
            (g.nodes.iter())
                .filter(|n| groups::outdated_reason(n, &options.staleness).is_some())
                .filter(|n| !n.annotations.contains_key(keys::DETACHED))
                .filter_map(move |n| {
                    let why = groups::left_alone(&n.annotations)?;
                    Some(format!("group {}: node {} is {why}", g.name, n.name))
                })
        }));
    }
    Ok(Survey { groups, warnings })
}

/// One warning per instance left alone because it is still booting: it would be replaced as
/// broken once older than the startup timeout.
fn booting_warnings(groups: &[NodeGroup], rules: &groups::Staleness) -> Vec<String> {
    let timeout = human_duration(rules.node_startup_timeout);
    groups
        .iter()
        .flat_map(|g| g.nodes.iter().map(move |n| (g, n)))
        .filter_map(|(g, n)| {
            let age = groups::booting(n, rules)?;
            Some(format!(
                "group {}: {} has not registered as a node yet ({} after its creation); it is left alone as booting, and replaced as broken once {timeout} old (--node-startup-timeout)",
                g.name,
                n.name,
                human_duration(age)
            ))
        })
        .collect()
}

/// `--group-label`, else the policy's.
pub fn group_label<'a>(policy: &'a Policy, options: &'a PlanOptions) -> Option<&'a str> {
    options
        .group_label
        .as_deref()
        .or(policy.group_label.as_deref())
}

/// A group ready for its loop, or a disabled one (both budgets 0), whose plan is final.
pub enum Prepared {
    Ready(GroupStart),
    Disabled(Box<GroupPlan>),
}

/// Reads a group's candidates and resolves its budget for the built-in selection.
///
/// Built-in selection: outdated instances first, then (with `--force`) up-to-date ones,
/// instances detached by an earlier run last, each in name order but with the nodes that hold a
/// pod asking not to be disrupted after the others (their drains wait for those pods). An
/// outdated node that itself asks not to be disrupted is left out (listed, not chosen) unless
/// `--force`.
pub fn prepare_group(
    index: &Index,
    policy: &Policy,
    options: &PlanOptions,
    group: &NodeGroup,
) -> Result<Prepared, PlanError> {
    let mut outdated = Vec::new();
    let mut current = Vec::new();
    let mut detached = Vec::new();
    // Out of date, but asking not to be disrupted: not chosen unless --force.
    let mut left_alone = Vec::new();
    for node in &group.nodes {
        match groups::outdated_reason(node, &options.staleness) {
            Some(r) if node.annotations.contains_key(keys::DETACHED) => {
                detached.push((*node, Some(r)))
            }
            Some(_) if !options.force && groups::left_alone(&node.annotations).is_some() => {
                left_alone.push(*node)
            }
            Some(r) => outdated.push((*node, Some(r))),
            None => current.push(*node),
        }
    }
    // Stable: name order within each side.
    let holds = |n: &&Node| holds_do_not_disrupt(index, &n.name, &options.drain);
    outdated.sort_by_key(|(n, _)| holds(n));
    current.sort_by_key(holds);
    let up_to_date = current.len() as u32;
    let force = options.force;
    let candidates: Vec<Candidate> = outdated
        .into_iter()
        .chain(
            current
                .into_iter()
                .map(|n| (n, force.then(|| "forced (--force)".to_string()))),
        )
        .chain(detached)
        .map(|(n, r)| candidate(index, &options.drain, n, group, r))
        .chain(left_alone.into_iter().map(|n| Candidate {
            up_to_date: false,
            ..candidate(index, &options.drain, n, group, None)
        }))
        .collect();
    let selected = candidates.iter().filter(|c| c.reason.is_some()).count() as u32;
    let overrides = policy.group(&group.name);
    let rule = BudgetRule {
        role: group.role,
        cluster: options.rolling_update,
        group: overrides.map(|o| o.rolling_update).unwrap_or_default(),
        size: group.nodes.len() as u32,
        interactive: options.interactive,
    };
    let Ok(budget) = rule.resolve(selected) else {
        return Err(PolicyError {
            file: policy.source.clone(),
            line: overrides.map_or(0, |o| o.max_surge_line),
            column: 0,
            message: format!(
                "group {:?} is a control-plane group, and control-plane instances cannot surge: remove its maxSurge",
                group.name
            ),
        }
        .into());
    };
    let info = GroupInfo {
        name: group.name.clone(),
        role: group.role,
        size: rule.size,
        up_to_date,
        selected,
        max_surge: budget.max_surge,
        max_unavailable: budget.max_unavailable,
    };
    if budget.concurrency == 0 {
        return Ok(Prepared::Disabled(Box::new(disabled(info, &candidates))));
    }
    // The flag, else the group's soakTime, else the policy's.
    let soak = options
        .soak
        .or(overrides.and_then(|o| o.soak))
        .or(policy.soak)
        .unwrap_or_default();
    Ok(Prepared::Ready(GroupStart {
        info,
        candidates,
        budget: rule,
        cloud_only: options.cloud_only,
        soak_seconds: u32::try_from(soak.as_secs()).unwrap_or(u32::MAX),
    }))
}

/// A disabled group's plan: nothing is updated; the built-in reason still shows.
fn disabled(info: GroupInfo, candidates: &[Candidate]) -> GroupPlan {
    let instances = candidates
        .iter()
        .map(|c| InstancePlan {
            name: c.name.clone(),
            zone: c.zone.clone(),
            update: false,
            reason: match &c.reason {
                Some(reason) => format!("group disabled (out of date: {reason})"),
                None => "up to date".into(),
            },
            decided_by: DecidedBy::BuiltIn,
            pods: c.pods,
        })
        .collect();
    GroupPlan {
        shadow: Vec::new(),
        group: info,
        concurrency: 0,
        disabled: true,
        note: Some("rolling update disabled: maxSurge and maxUnavailable are both 0".into()),
        gate: None,
        others_disrupting: Vec::new(),
        instances,
        batches: Vec::new(),
        aborted: None,
        estimate: None,
    }
}

/// A node as a hook sees it: its pods counted as a drain would move them.
pub fn candidate(
    index: &Index,
    drain_options: &drain::DrainOptions,
    node: &Node,
    group: &NodeGroup,
    reason: Option<String>,
) -> Candidate {
    let moved: Vec<_> = index
        .pods_on(&node.name)
        .iter()
        .filter(|p| drain::classify(p, drain_options).is_evicted() && !p.finished)
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
        up_to_date: reason.is_none(),
        reason,
    }
}

/// Whether a drain of `node` would wait for a pod that asks not to be disrupted.
fn holds_do_not_disrupt(index: &Index, node: &str, drain_options: &drain::DrainOptions) -> bool {
    drain::asking_not_to_be_disrupted(index.pods_on(node).iter().copied(), drain_options).is_some()
}

/// `candidates` as they are in `snapshot` now, keeping the reasons they were chosen for; an
/// instance that is gone keeps its last known state.
pub fn refresh(
    index: &Index,
    drain_options: &drain::DrainOptions,
    group: &NodeGroup,
    candidates: &[Candidate],
) -> Vec<Candidate> {
    candidates
        .iter()
        .map(|c| match group.nodes.iter().find(|n| n.name == c.name) {
            Some(node) => Candidate {
                up_to_date: c.up_to_date,
                ..candidate(index, drain_options, node, group, c.reason.clone())
            },
            None => c.clone(),
        })
        .collect()
}
