//! Planner types → WIT types (and back for the few enums hooks return).

use super::wit;
use crate::labels::Labels;
use crate::plan::Role;
use crate::plan::hook::{
    BatchInfo, Candidate, GroupInfo, HealthSummary, InstanceKind, Phase, Progress,
};
use crate::policy::HookPoint;

fn key_values(map: &Labels) -> Vec<wit::KeyValue> {
    map.iter()
        .map(|(k, v)| wit::KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

fn role(r: Role) -> wit::Role {
    match r {
        Role::Bastion => wit::Role::Bastion,
        Role::ControlPlane => wit::Role::ControlPlane,
        Role::Node => wit::Role::Node,
    }
}

pub fn point_from_wit(p: wit::HookPoint) -> HookPoint {
    match p {
        wit::HookPoint::Select => HookPoint::Select,
        wit::HookPoint::Batch => HookPoint::Batch,
        wit::HookPoint::Gate => HookPoint::Gate,
    }
}

pub fn instance(c: &Candidate) -> wit::Instance {
    wit::Instance {
        kind: match c.kind {
            InstanceKind::Node => wit::InstanceKind::Node,
            InstanceKind::Pod => wit::InstanceKind::Pod,
        },
        name: c.name.clone(),
        group: c.group.clone(),
        role: role(c.role),
        zone: c.zone.clone(),
        labels: key_values(&c.labels),
        annotations: key_values(&c.annotations),
        taints: c
            .taints
            .iter()
            .map(|t| wit::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        ready: c.ready,
        unschedulable: c.unschedulable,
        created: c.created,
        kubelet_version: c.kubelet_version.clone(),
        pods: c.pods,
        pods_not_ready: c.pods_not_ready,
        reason: c.reason.clone(),
    }
}

pub fn group(g: &GroupInfo) -> wit::Group {
    wit::Group {
        name: g.name.clone(),
        role: role(g.role),
        size: g.size,
        up_to_date: g.up_to_date,
        selected: g.selected,
        max_surge: g.max_surge,
        max_unavailable: g.max_unavailable,
    }
}

pub fn progress(p: &Progress) -> wit::Progress {
    wit::Progress {
        group: group(p.group),
        batches_done: p.batches_done,
        updated: p.updated,
        pending: p.pending.iter().map(instance).collect(),
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

pub fn batch(b: &BatchInfo) -> wit::Batch {
    wit::Batch {
        index: b.index,
        instances: b.instances.clone(),
        canary: b.canary,
        attempt: b.attempt,
    }
}

pub fn summary(s: &HealthSummary) -> wit::ValidationSummary {
    wit::ValidationSummary {
        nodes_total: s.nodes_total,
        nodes_not_ready: s.nodes_not_ready,
        nodes_unschedulable: s.nodes_unschedulable,
        pods_total: s.pods_total,
        pods_not_ready: s.pods_not_ready,
        system_pods_not_ready: s.system_pods_not_ready,
        budgets: s
            .budgets
            .iter()
            .map(|b| wit::Budget {
                namespace: b.namespace.clone(),
                name: b.name.clone(),
                disruptions_allowed: b.disruptions_allowed,
                pods_in_batch: b.pods_in_batch,
            })
            .collect(),
        failures: s.failures.clone(),
    }
}
