//! The input of `hooks run`, as JSON: the WIT's fields in camelCase, each with a default, and
//! what they become for the hook.

use serde::Deserialize;
use serde_json::Value;

use crate::cli::Failure;
use crate::labels::Labels;
use crate::plan::Role;
use crate::plan::hook::{
    BatchInfo, CallContext, Candidate, ClusterOutcome, ClusterResult, GroupInfo, HealthSummary,
    InstanceKind, Phase, StageInfo, StageOutcome, Timing,
};
use crate::plan::ledger::Disruption;
use crate::snapshot::Taint;

/// What every call is told, as `context` gives it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ContextIn {
    /// RFC 3339; the time it runs when left out.
    now: Option<String>,
    run_id: Option<String>,
    dry_run: Option<bool>,
    /// What `estimates()` answers: `batch` and `remaining`, each `{seconds, p90Seconds, basis}`.
    #[serde(default)]
    estimates: EstimatesIn,
    /// What `others-disrupting` answers: `[{node, by}]`.
    #[serde(default)]
    others_disrupting: Vec<DisruptionIn>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EstimatesIn {
    batch: Option<EstimateIn>,
    remaining: Option<EstimateIn>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct EstimateIn {
    seconds: u64,
    p90_seconds: Option<u64>,
    #[serde(default = "stated_basis")]
    basis: String,
}

fn stated_basis() -> String {
    "hooks run input".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DisruptionIn {
    node: String,
    by: String,
}

/// A group: its name, role and budget.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct GroupIn {
    #[serde(default = "nodes")]
    name: String,
    #[serde(default)]
    role: RoleIn,
    size: Option<u32>,
    #[serde(default)]
    up_to_date: u32,
    /// The instances chosen for update; when left out, those the input implies (see
    /// [`Input::group_info`]).
    selected: Option<u32>,
    #[serde(default)]
    max_surge: u32,
    #[serde(default = "one")]
    max_unavailable: u32,
}

impl Default for GroupIn {
    fn default() -> GroupIn {
        GroupIn {
            name: nodes(),
            role: RoleIn::Node,
            size: None,
            up_to_date: 0,
            selected: None,
            max_surge: 0,
            max_unavailable: 1,
        }
    }
}

fn nodes() -> String {
    "nodes".into()
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum RoleIn {
    Bastion,
    ControlPlane,
    #[default]
    Node,
}

/// An instance (a candidate, a pending one).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct InstanceIn {
    name: String,
    #[serde(default)]
    pod: bool,
    zone: Option<String>,
    #[serde(default)]
    labels: Labels,
    #[serde(default)]
    annotations: Labels,
    #[serde(default)]
    taints: Vec<TaintIn>,
    #[serde(default = "yes")]
    ready: bool,
    #[serde(default)]
    unschedulable: bool,
    /// RFC 3339.
    created: Option<String>,
    kubelet_version: Option<String>,
    #[serde(default)]
    pods: u32,
    #[serde(default)]
    pods_not_ready: u32,
    #[serde(default)]
    up_to_date: bool,
    /// Why it is in the current choice; none when it is not chosen.
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TaintIn {
    key: String,
    #[serde(default)]
    value: String,
    effect: String,
}

/// Where a group's update stands, at `batch`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ProgressIn {
    #[serde(default)]
    pub(super) batches_done: u32,
    #[serde(default)]
    pub(super) updated: u32,
    /// The budget's batch when left out: the group's maxUnavailable.
    pub(super) max_batch: Option<u32>,
    pub(super) max_batch_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct StageOutcomeIn {
    name: String,
    #[serde(default)]
    clusters: Vec<ClusterResultIn>,
    #[serde(default)]
    soaked_seconds: u64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ClusterResultIn {
    cluster: String,
    #[serde(default)]
    nodes_set_aside: bool,
    /// RFC 3339.
    finished: String,
}

/// A call's input: `context` and what the point takes.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Input {
    #[serde(default)]
    pub(super) context: ContextIn,
    /// select, batch.
    #[serde(default)]
    pub(super) group: GroupIn,
    /// select: the group's instances, the current choice (those with a `reason`) first.
    #[serde(default)]
    pub(super) candidates: Vec<InstanceIn>,
    /// batch: where the update stands, and the instances still to update, in update order.
    #[serde(default)]
    pub(super) progress: ProgressIn,
    #[serde(default)]
    pub(super) pending: Vec<InstanceIn>,
    /// gate.
    pub(super) phase: Option<Phase>,
    #[serde(default)]
    pub(super) batch: BatchInfo,
    #[serde(default)]
    pub(super) summary: HealthSummary,
    /// before-stage.
    pub(super) stage: Option<StageInfo>,
    pub(super) previous: Option<StageOutcomeIn>,
    /// drain-order: the node and the pods its drain evicts (Pod objects).
    pub(super) node: Option<String>,
    #[serde(default)]
    pub(super) pods: Vec<Value>,
}

/// An RFC 3339 time as Unix seconds; a usage error naming `what` otherwise.
fn unix_seconds(text: &str, what: &str, file: &str) -> Result<i64, Failure> {
    let at = text
        .parse::<jiff::Timestamp>()
        .map_err(|e| Failure::usage(format!("{file}: {what} {text:?}: {e}")))?;
    Ok(at.as_second())
}

pub(super) fn context(c: ContextIn, file: &str) -> Result<CallContext, Failure> {
    let now = match &c.now {
        Some(t) => unix_seconds(t, "context.now", file)?,
        None => jiff::Timestamp::now().as_second(),
    };
    let estimate = |e: EstimateIn| crate::plan::estimate::Estimate {
        seconds: e.seconds,
        p90_seconds: e.p90_seconds.unwrap_or(e.seconds).max(e.seconds),
        ends_at: None,
        foreseen_wait_seconds: 0,
        basis: e.basis,
    };
    Ok(CallContext {
        now,
        run_id: c.run_id.unwrap_or_else(|| "hooks-run".into()),
        dry_run: c.dry_run.unwrap_or(true),
        timing: Timing {
            batch: c.estimates.batch.map(estimate),
            remaining: c.estimates.remaining.map(estimate),
        },
        others: (c.others_disrupting.into_iter())
            .map(|d| Disruption {
                node: d.node,
                by: d.by,
            })
            .collect(),
    })
}

impl Input {
    /// The group a call is told of: unless the input says, its size is the instances given (a
    /// selection's candidates; for a batch, those up to date and those pending) and `selected`
    /// those chosen (a selection's candidates with a reason; for a batch, those updated and
    /// those pending).
    pub(super) fn group_info(&self, batch: bool) -> GroupInfo {
        let (instances, chosen) = match batch {
            true => (
                self.group.up_to_date as usize + self.pending.len(),
                self.progress.updated as usize + self.pending.len(),
            ),
            false => (
                self.candidates.len(),
                (self.candidates.iter())
                    .filter(|c| c.reason.is_some())
                    .count(),
            ),
        };
        group_info(&self.group, instances, chosen)
    }
}

fn group_info(g: &GroupIn, instances: usize, chosen: usize) -> GroupInfo {
    GroupInfo {
        name: g.name.clone(),
        role: match g.role {
            RoleIn::Bastion => Role::Bastion,
            RoleIn::ControlPlane => Role::ControlPlane,
            RoleIn::Node => Role::Node,
        },
        size: g.size.unwrap_or(instances as u32),
        up_to_date: g.up_to_date,
        selected: g.selected.unwrap_or(chosen as u32),
        max_surge: g.max_surge,
        max_unavailable: g.max_unavailable,
    }
}

pub(super) fn candidate(
    c: InstanceIn,
    group: &GroupInfo,
    file: &str,
) -> Result<Candidate, Failure> {
    let created = match &c.created {
        Some(t) => Some(unix_seconds(t, &format!("{}: created", c.name), file)?),
        None => None,
    };
    Ok(Candidate {
        kind: match c.pod {
            true => InstanceKind::Pod,
            false => InstanceKind::Node,
        },
        name: c.name,
        group: group.name.clone(),
        role: group.role,
        zone: c.zone,
        labels: c.labels,
        annotations: c.annotations,
        taints: (c.taints.into_iter())
            .map(|t| Taint {
                key: t.key,
                value: t.value,
                effect: t.effect,
            })
            .collect(),
        ready: c.ready,
        unschedulable: c.unschedulable,
        created,
        kubelet_version: c.kubelet_version,
        pods: c.pods,
        pods_not_ready: c.pods_not_ready,
        up_to_date: c.up_to_date,
        reason: c.reason,
    })
}

pub(super) fn stage_outcome(p: StageOutcomeIn, file: &str) -> Result<StageOutcome, Failure> {
    let mut clusters = Vec::new();
    for c in p.clusters {
        clusters.push(ClusterResult {
            finished: unix_seconds(&c.finished, &format!("{}: finished", c.cluster), file)?,
            cluster: c.cluster,
            outcome: match c.nodes_set_aside {
                true => ClusterOutcome::NodesSetAside,
                false => ClusterOutcome::Succeeded,
            },
        });
    }
    Ok(StageOutcome {
        name: p.name,
        clusters,
        soaked_seconds: p.soaked_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(json: &str) -> Input {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_group_counts_what_the_input_gives_unless_it_says() {
        let select = input(
            r#"{"candidates": [{"name": "a", "reason": "outdated"}, {"name": "b"}, {"name": "c", "reason": "outdated"}]}"#,
        )
        .group_info(false);
        assert_eq!((select.size, select.selected), (3, 2));
        let pending: Vec<String> = (0..25).map(|i| format!(r#"{{"name": "n{i}"}}"#)).collect();
        let batch = input(&format!(
            r#"{{"group": {{"upToDate": 4}}, "progress": {{"updated": 4}}, "pending": [{}]}}"#,
            pending.join(",")
        ))
        .group_info(true);
        assert_eq!((batch.size, batch.selected), (29, 29));
        let said = input(r#"{"group": {"size": 40, "selected": 30}}"#).group_info(true);
        assert_eq!((said.size, said.selected), (40, 30));
    }
}
