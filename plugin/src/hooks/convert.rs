//! Planner types → WIT types (and back for the few enums hooks return).
//!
//! Arguments of a hook call are WIT types that borrow from the planner's data, so a call copies
//! each string once, into the guest. What a hook reads through the `instances` resource is
//! built as owned values (`*Result`), since the host returns it.

use super::draining::DrainPod;
use super::flat_selection::FlatChoices;
use super::{stage_gates, wit, wit_host};
use crate::labels::Labels;
use crate::metrics;
use crate::plan::Role;
use crate::plan::decide::{not_a_candidate, positions};
use crate::plan::estimate::Estimate;
use crate::plan::hook::{
    BatchInfo, Candidate, Choice, ClusterOutcome, GroupInfo, HealthSummary, HookFault,
    InstanceKind, Phase, Pick, Progress, StageInfo, StageOutcome, Timing,
};
use crate::policy::HookPoint;
use crate::snapshot::{Pod, Taint};

fn role(r: Role) -> wit::Role {
    match r {
        Role::Bastion => wit::Role::Bastion,
        Role::ControlPlane => wit::Role::ControlPlane,
        Role::Node => wit::Role::Node,
    }
}

fn kind(k: InstanceKind) -> wit::InstanceKind {
    match k {
        InstanceKind::Node => wit::InstanceKind::Node,
        InstanceKind::Pod => wit::InstanceKind::Pod,
    }
}

pub fn point_from_wit(p: wit::HookPoint) -> HookPoint {
    match p {
        wit::HookPoint::Select => HookPoint::Select,
        wit::HookPoint::Batch => HookPoint::Batch,
        wit::HookPoint::Gate => HookPoint::Gate,
    }
}

/// Labels or annotations as the owned pairs the `instances` resource returns.
pub fn pairs(map: &Labels) -> Vec<wit::KeyValueResult> {
    map.iter()
        .map(|(k, v)| wit::KeyValueResult {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

fn owned_pairs(pairs: Vec<(String, String)>) -> Vec<wit::KeyValueResult> {
    pairs
        .into_iter()
        .map(|(key, value)| wit::KeyValueResult { key, value })
        .collect()
}

pub fn sample(s: metrics::Sample) -> wit_host::Sample {
    wit_host::Sample {
        labels: owned_pairs(s.labels),
        value: s.value,
        time: s.time,
    }
}

pub fn series(s: metrics::Series) -> wit_host::Series {
    wit_host::Series {
        labels: owned_pairs(s.labels),
        points: s
            .points
            .into_iter()
            .map(|p| wit_host::Point {
                time: p.time,
                value: p.value,
            })
            .collect(),
    }
}

pub fn timing(t: &Timing) -> wit_host::Timing {
    let told = |e: &Estimate| wit_host::DurationEstimate {
        seconds: e.seconds,
        p90_seconds: e.p90_seconds,
        basis: e.basis.clone(),
    };
    wit_host::Timing {
        batch: t.batch.as_ref().map(told),
        remaining: t.remaining.as_ref().map(told),
    }
}

pub fn metrics_error(e: metrics::MetricsError) -> wit_host::MetricsError {
    use metrics::MetricsError as E;
    match e {
        E::NotAllowed(m) => wit_host::MetricsError::NotAllowed(m),
        E::Unreachable(m) => wit_host::MetricsError::Unreachable(m),
        E::Timeout(m) => wit_host::MetricsError::Timeout(m),
        E::BadQuery(m) => wit_host::MetricsError::BadQuery(m),
        E::TooLarge(m) => wit_host::MetricsError::TooLarge(m),
        E::Failed(m) => wit_host::MetricsError::Failed(m),
    }
}

/// Labels or annotations lent to a call.
pub fn borrowed_pairs(map: &Labels) -> Vec<wit::KeyValueParam<'_>> {
    map.iter()
        .map(|(k, v)| wit::KeyValueParam { key: k, value: v })
        .collect()
}

/// A pod as the `drain-order` point sees it; its labels and annotations are lent separately.
pub fn drain_pod<'a>(
    pod: &'a Pod,
    labels: &'a [wit::KeyValueParam<'a>],
    annotations: &'a [wit::KeyValueParam<'a>],
) -> DrainPod<'a> {
    DrainPod {
        namespace: &pod.namespace,
        name: &pod.name,
        owner_kind: pod.controller.as_ref().map(|c| c.kind.as_str()),
        owner_name: pod.controller.as_ref().map(|c| c.name.as_str()),
        priority_class: pod.priority_class.as_deref(),
        ready: pod.ready,
        labels,
        annotations,
    }
}

pub fn taints(list: &[Taint]) -> Vec<wit::Taint> {
    list.iter()
        .map(|t| wit::Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
        })
        .collect()
}

/// A candidate as the owned value `instances.get` returns: its scalar fields only, since labels,
/// annotations and taints are read one instance at a time when a hook asks.
pub fn instance(c: &Candidate) -> wit::Instance {
    wit::Instance {
        kind: kind(c.kind),
        name: c.name.clone(),
        group: c.group.clone(),
        role: role(c.role),
        zone: c.zone.clone(),
        ready: c.ready,
        unschedulable: c.unschedulable,
        created: c.created,
        kubelet_version: c.kubelet_version.clone(),
        pods: c.pods,
        pods_not_ready: c.pods_not_ready,
        up_to_date: c.up_to_date,
        reason: c.reason.clone(),
    }
}

/// The strings of `list` laid end to end in the contract's order (name, group, zone, kubelet
/// version, reason); `each` is told every instance with the byte lengths of its strings (none
/// for a string that is none).
fn lay_out(list: &[Candidate], mut each: impl FnMut(&Candidate, [Option<u32>; 5])) -> String {
    let optional = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let size = list
        .iter()
        .map(|c| {
            c.name.len()
                + c.group.len()
                + optional(&c.zone)
                + optional(&c.kubelet_version)
                + optional(&c.reason)
        })
        .sum();
    let mut text = String::with_capacity(size);
    for c in list {
        let mut put = |s: &str| {
            text.push_str(s);
            // A Kubernetes name or a reason is far shorter than 4 GiB.
            u32::try_from(s.len()).unwrap_or(u32::MAX)
        };
        let lengths = [
            Some(put(&c.name)),
            Some(put(&c.group)),
            c.zone.as_deref().map(&mut put),
            c.kubelet_version.as_deref().map(&mut put),
            c.reason.as_deref().map(&mut put),
        ];
        each(c, lengths);
    }
    text
}

/// Candidates as `instances.get-packed` returns them: the fields of [`instance`] that are not
/// strings, with the lengths of its strings, and every string in one text.
pub fn packed(list: &[Candidate]) -> wit::PackedInstances {
    let mut instances = Vec::with_capacity(list.len());
    let text = lay_out(list, |c, [name, group, zone, kubelet, reason]| {
        instances.push(wit::PackedInstance {
            kind: kind(c.kind),
            role: role(c.role),
            ready: c.ready,
            unschedulable: c.unschedulable,
            created: c.created,
            pods: c.pods,
            pods_not_ready: c.pods_not_ready,
            up_to_date: c.up_to_date,
            name_len: name.unwrap_or(0),
            group_len: group.unwrap_or(0),
            zone_len: zone,
            kubelet_version_len: kubelet,
            reason_len: reason,
        })
    });
    wit::PackedInstances { instances, text }
}

/// Numbers per instance in `instances.get-flat`.
const FLAT_FIELDS: usize = 12;

/// Candidates as `instances.get-flat` returns them: [`FLAT_FIELDS`] numbers per instance in the
/// WIT's order, and every string in one text.
pub fn flat(list: &[Candidate]) -> wit::FlatInstances {
    let mut fields = Vec::with_capacity(list.len() * FLAT_FIELDS);
    let text = lay_out(list, |c, [name, group, zone, kubelet, reason]| {
        let flags = u32::from(c.ready)
            | u32::from(c.unschedulable) << 1
            | u32::from(c.up_to_date) << 2
            | u32::from(c.created.is_some()) << 3;
        let created = c.created.unwrap_or(0) as u64;
        let optional = |len: Option<u32>| len.map_or(0, |n| n.saturating_add(1));
        fields.extend_from_slice(&[
            kind(c.kind) as u32,
            role(c.role) as u32,
            flags,
            created as u32,
            (created >> 32) as u32,
            c.pods,
            c.pods_not_ready,
            name.unwrap_or(0),
            group.unwrap_or(0),
            optional(zone),
            optional(kubelet),
            optional(reason),
        ]);
    });
    wit::FlatInstances { fields, text }
}

/// Choices answered by name, as the planner takes them.
pub fn choices(list: Vec<wit::Choice>) -> Vec<Choice> {
    list.into_iter()
        .map(|c| Choice {
            name: c.name,
            reason: c.reason,
            force: c.force,
        })
        .collect()
}

/// The choices of a flat answer: three numbers each (name length, reason length, force), the
/// name and the reason cut from the text in turn, each name found among `view`. Numbers that do
/// not lay the text out, or a name that is no candidate, are an invalid answer.
pub fn picks(flat: FlatChoices, view: &[Candidate]) -> Result<Vec<Pick>, HookFault> {
    let invalid = |why: String| HookFault::InvalidAnswer(format!("a flat selection {why}"));
    if !flat.fields.len().is_multiple_of(3) {
        let n = flat.fields.len();
        return Err(invalid(format!("has {n} numbers, not three per choice")));
    }
    let position = positions(view);
    let text = flat.text.as_str();
    let mut at = 0usize;
    let mut cut = |len: u32| {
        let end = at.saturating_add(len as usize);
        let Some(part) = text.get(at..end) else {
            return Err(invalid(format!(
                "gives {len} bytes from byte {at} of its {}-byte text, which are not whole characters of it",
                text.len()
            )));
        };
        at = end;
        Ok(part)
    };
    let picks = flat
        .fields
        .chunks_exact(3)
        .map(|f| {
            let name = cut(f[0])?;
            let reason = cut(f[1])?;
            let force = match f[2] {
                0 => false,
                1 => true,
                n => {
                    return Err(invalid(format!(
                        "marks {name:?} forced with {n}, not 0 or 1"
                    )));
                }
            };
            let Some(&index) = position.get(name) else {
                return Err(not_a_candidate(name));
            };
            Ok(Pick {
                index,
                reason: reason.to_string(),
                force,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if at != text.len() {
        let extra = text.len() - at;
        return Err(invalid(format!(
            "has {extra} bytes of text no choice takes"
        )));
    }
    Ok(picks)
}

pub fn group(g: &GroupInfo) -> wit::Group<'_> {
    wit::Group {
        name: &g.name,
        role: role(g.role),
        size: g.size,
        up_to_date: g.up_to_date,
        selected: g.selected,
        max_surge: g.max_surge,
        max_unavailable: g.max_unavailable,
    }
}

pub fn progress<'a>(p: &'a Progress) -> wit::Progress<'a> {
    wit::Progress {
        group: group(p.group),
        batches_done: p.batches_done,
        updated: p.updated,
        max_batch: p.max_batch,
    }
}

pub fn phase(p: Phase) -> wit::Phase {
    match p {
        Phase::BeforeGroup => wit::Phase::BeforeGroup,
        Phase::BeforeBatch => wit::Phase::BeforeBatch,
        Phase::AfterBatch => wit::Phase::AfterBatch,
    }
}

/// Borrowed strings for a call's string lists.
pub fn strs(list: &[String]) -> Vec<&str> {
    list.iter().map(String::as_str).collect()
}

pub fn batch<'a>(b: &BatchInfo, instances: &'a [&'a str]) -> wit::Batch<'a> {
    wit::Batch {
        index: b.index,
        instances,
        canary: b.canary,
        attempt: b.attempt,
    }
}

pub fn stage<'a>(s: &'a StageInfo, clusters: &'a [&'a str]) -> stage_gates::Stage<'a> {
    stage_gates::Stage {
        fleet: &s.fleet,
        index: s.index,
        name: &s.name,
        clusters,
        attempt: s.attempt,
    }
}

pub fn cluster_results(o: &StageOutcome) -> Vec<stage_gates::ClusterResult<'_>> {
    (o.clusters.iter())
        .map(|c| stage_gates::ClusterResult {
            cluster: &c.cluster,
            outcome: match c.outcome {
                ClusterOutcome::Succeeded => stage_gates::ClusterOutcome::Succeeded,
                ClusterOutcome::NodesSetAside => stage_gates::ClusterOutcome::NodesSetAside,
            },
            finished: c.finished,
        })
        .collect()
}

pub fn stage_outcome<'a>(
    o: &'a StageOutcome,
    clusters: &'a [stage_gates::ClusterResult<'a>],
) -> stage_gates::StageOutcome<'a> {
    stage_gates::StageOutcome {
        name: &o.name,
        clusters,
        soaked_seconds: o.soaked_seconds,
    }
}

pub fn budgets(s: &HealthSummary) -> Vec<wit::Budget<'_>> {
    s.budgets
        .iter()
        .map(|b| wit::Budget {
            namespace: &b.namespace,
            name: &b.name,
            disruptions_allowed: b.disruptions_allowed,
            pods_in_batch: b.pods_in_batch,
        })
        .collect()
}

pub fn summary<'a>(
    s: &HealthSummary,
    budgets: &'a [wit::Budget<'a>],
    failures: &'a [&'a str],
) -> wit::ValidationSummary<'a> {
    wit::ValidationSummary {
        nodes_total: s.nodes_total,
        nodes_not_ready: s.nodes_not_ready,
        nodes_unschedulable: s.nodes_unschedulable,
        pods_total: s.pods_total,
        pods_not_ready: s.pods_not_ready,
        system_pods_not_ready: s.system_pods_not_ready,
        budgets,
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::decide::tests::candidate;

    /// Two candidates whose fields cover every case of a packed or flat read.
    fn two() -> [Candidate; 2] {
        let mut first = candidate("n1", Some("outdated"));
        first.group = "nodes".into();
        first.zone = Some("a".into());
        first.created = Some(7);
        first.pods = 3;
        first.pods_not_ready = 1;
        let mut second = candidate("é2", None);
        second.kind = InstanceKind::Pod;
        second.role = Role::ControlPlane;
        second.group = "nodes".into();
        second.zone = Some(String::new());
        second.kubelet_version = Some("v1.20.2".into());
        second.ready = false;
        second.unschedulable = true;
        [first, second]
    }

    fn flat_choices(fields: &[u32], text: &str) -> FlatChoices {
        FlatChoices {
            fields: fields.to_vec(),
            text: text.into(),
        }
    }

    #[test]
    fn a_flat_answer_cuts_each_name_and_reason_in_order() {
        let view = two();
        let answer = flat_choices(&[3, 3, 0, 2, 0, 1], "é2é!n1");
        let got: Vec<_> = picks(answer, &view)
            .unwrap()
            .into_iter()
            .map(|p| (p.index, p.reason, p.force))
            .collect();
        assert_eq!(
            got,
            [(1, "é!".to_string(), false), (0, String::new(), true)]
        );
    }

    #[test]
    fn a_flat_answer_that_does_not_lay_out_its_text_is_invalid() {
        let view = two();
        for (fields, text, says) in [
            (&[2, 1][..], "n1", "has 2 numbers, not three per choice"),
            (&[2, 2, 0][..], "n1a", "not whole characters"),
            (&[1, 0, 0][..], "é2", "not whole characters"),
            (&[2, u32::MAX, 0][..], "n1", "not whole characters"),
            (
                &[2, 0, 2][..],
                "n1",
                "marks \"n1\" forced with 2, not 0 or 1",
            ),
            (&[2, 1, 0][..], "n1ab", "1 bytes of text no choice takes"),
            (
                &[2, 0, 0][..],
                "n9",
                "chose \"n9\", which is not a candidate",
            ),
        ] {
            let fault = picks(flat_choices(fields, text), &view).unwrap_err();
            assert!(
                matches!(&fault, HookFault::InvalidAnswer(m) if m.contains(says)),
                "{fields:?} {text:?}: {fault}"
            );
        }
    }

    #[test]
    fn a_packed_read_lays_the_strings_end_to_end_in_the_contract_order() {
        let read = packed(&two());
        assert_eq!(read.text, "n1nodesaoutdatedé2nodesv1.20.2");
        let lengths: Vec<_> = read
            .instances
            .iter()
            .map(|p| {
                (
                    p.name_len,
                    p.group_len,
                    p.zone_len,
                    p.kubelet_version_len,
                    p.reason_len,
                )
            })
            .collect();
        assert_eq!(
            lengths,
            [
                (2, 5, Some(1), None, Some(8)),
                (3, 5, Some(0), Some(7), None)
            ]
        );
        let (a, b) = (&read.instances[0], &read.instances[1]);
        assert_eq!((a.created, a.pods, a.up_to_date), (Some(7), 3, false));
        assert_eq!((b.created, b.pods, b.up_to_date), (None, 0, true));
        assert!(packed(&[]).text.is_empty());
    }

    #[test]
    fn a_flat_read_gives_twelve_numbers_per_instance_in_the_contract_order() {
        let [mut first, second] = two();
        first.created = Some(-5_000_000_007); // both halves, and the sign, count
        let read = flat(&[first, second]);
        assert_eq!(read.text, "n1nodesaoutdatedé2nodesv1.20.2");
        let created = -5_000_000_007_i64 as u64;
        assert_eq!(
            read.fields,
            [
                // node, node role, ready + created known, created, pods 3 (1 not ready), lengths
                // 2 and 5, zone 1, no kubelet version, reason 8 (the optional ones plus one).
                0,
                2,
                1 | 8,
                created as u32,
                (created >> 32) as u32,
                3,
                1,
                2,
                5,
                2,
                0,
                9,
                // pod, control plane, unschedulable + up to date, no creation time, no pods,
                // lengths 3 and 5, an empty zone, kubelet version 7, no reason.
                1,
                1,
                2 | 4,
                0,
                0,
                0,
                0,
                3,
                5,
                1,
                8,
                0,
            ]
        );
        assert_eq!(read.fields.len(), 2 * FLAT_FIELDS);
        assert!(flat(&[]).fields.is_empty());
    }
}
