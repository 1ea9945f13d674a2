//! Builders for unit-testing a policy natively: `cargo test` calls the [`crate::Policy`] methods
//! directly with these values, no WebAssembly runtime involved.

use crate::{
    Batch, Context, Group, Instance, InstanceKind, KeyValue, Pending, Progress, Role,
    ValidationSummary,
};

/// A context at `now` (Unix seconds) with the given JSON config.
pub fn context(now: i64, config: serde_json::Value) -> Context {
    Context {
        now,
        run_id: "test-run".into(),
        dry_run: true,
        hook_name: "test".into(),
        config: config.to_string(),
    }
}

/// A Ready node instance in group `nodes`, zone `zone`, outdated.
pub fn node(name: &str, zone: &str) -> Instance {
    Instance {
        kind: InstanceKind::Node,
        name: name.into(),
        group: "nodes".into(),
        role: Role::Node,
        zone: Some(zone.into()),
        labels: vec![KeyValue {
            key: "topology.kubernetes.io/zone".into(),
            value: zone.into(),
        }],
        annotations: vec![],
        taints: vec![],
        ready: true,
        unschedulable: false,
        created: None,
        kubelet_version: None,
        pods: 0,
        pods_not_ready: 0,
        reason: Some("test".into()),
    }
}

/// A node group whose size and selected count are those of `instances`.
pub fn group(instances: &[Instance], max_surge: u32, max_unavailable: u32) -> Group {
    let size = instances.len() as u32;
    let selected = instances.iter().filter(|i| i.reason.is_some()).count() as u32;
    Group {
        name: "nodes".into(),
        role: Role::Node,
        size,
        up_to_date: size - selected,
        selected,
        max_surge,
        max_unavailable,
    }
}

/// Progress of a group after `batches_done` batches that updated `updated` instances, the next
/// batch taken from `pending` (as the host shows it: at most `max_batch` of them).
pub fn progress(
    group: Group,
    mut pending: Vec<Instance>,
    batches_done: u32,
    updated: u32,
) -> Progress<'static> {
    let max_batch = (group.max_surge + group.max_unavailable).min(pending.len() as u32);
    pending.truncate(max_batch as usize);
    Progress {
        group,
        batches_done,
        updated,
        max_batch,
        pending: Pending::local(pending),
    }
}

/// The first batch of a group, holding `instances`.
pub fn batch(instances: &[&str]) -> Batch {
    Batch {
        index: 0,
        instances: instances.iter().map(|s| s.to_string()).collect(),
        canary: false,
        attempt: 0,
    }
}

/// A healthy cluster of `nodes` nodes and `pods` pods.
pub fn healthy(nodes: u32, pods: u32) -> ValidationSummary {
    ValidationSummary {
        nodes_total: nodes,
        nodes_not_ready: 0,
        nodes_unschedulable: 0,
        pods_total: pods,
        pods_not_ready: 0,
        system_pods_not_ready: 0,
        budgets: vec![],
        failures: vec![],
    }
}
