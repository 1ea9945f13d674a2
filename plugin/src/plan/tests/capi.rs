//! Plans of Cluster API groups: Machines as instances, those whose Node never registered, and
//! those still booting.

use super::{options, plan, shape};
use crate::plan::{PlanOptions, groups};
use crate::snapshot::Snapshot;

/// A Cluster API Machine of MachineDeployment `md`, with its Node's name once one registered
/// and its creation time if known.
fn capi_machine(
    name: &str,
    md: &str,
    version: &str,
    node: Option<&str>,
    created: Option<&str>,
) -> String {
    let node_ref = node.map_or(String::new(), |n| {
        format!(r#", "status": {{"nodeRef": {{"kind": "Node", "name": "{n}"}}}}"#)
    });
    let created = created.map_or(String::new(), |c| {
        format!(r#", "creationTimestamp": "{c}""#)
    });
    format!(
        r#"{{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {{"name": "{name}", "namespace": "capi", "labels": {{"cluster.x-k8s.io/deployment-name": "{md}"}},
                         "ownerReferences": [{{"kind": "MachineSet", "name": "{md}-ms", "controller": true}}]{created}}},
            "spec": {{"version": "{version}"}}{node_ref}}}"#
    )
}

/// A Ready Node whose kubelet runs `version`.
fn capi_node(name: &str, version: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "{name}"}},
            "status": {{"conditions": [{{"type": "Ready", "status": "True"}}], "nodeInfo": {{"kubeletVersion": "{version}"}}}}}}"#
    )
}

fn capi_snapshot(items: &[String]) -> Snapshot {
    let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
    Snapshot::from_json(json.as_bytes()).unwrap()
}

#[test]
fn cluster_api_machines_make_groups_and_a_machine_without_a_node_is_replaced() {
    let machine = |name: &str, md: &str, version: &str, node: Option<&str>| {
        capi_machine(name, md, version, node, None)
    };
    let node = capi_node;
    let items = [
        node("w-1", "v1.19.7"),
        node("w-2", "v1.20.2"),
        node("w-3", "v1.20.2"),
        machine("w-1", "workers", "v1.19.7", Some("w-1")),
        machine("w-2", "workers", "v1.20.2", Some("w-2")),
        machine("w-3", "workers", "v1.20.2", Some("w-3")),
        machine("w-4", "workers", "v1.20.2", None),
    ];
    let snapshot = capi_snapshot(&items);
    let opts = PlanOptions {
        staleness: groups::Staleness {
            kubelet_version: Some("v1.20.2".into()),
            ..Default::default()
        },
        ..options(Some(0), Some(1))
    };
    let p = plan(&snapshot, &opts);
    assert_eq!(p.groups.len(), 1, "{p:?}");
    let g = &p.groups[0];
    assert_eq!(g.group.name, "workers");
    assert_eq!(shape(g), ["w-1", "w-4"]);
    let reasons: Vec<(&str, &str)> = g
        .instances
        .iter()
        .filter(|i| i.update)
        .map(|i| (i.name.as_str(), i.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("w-1", "kubelet v1.19.7, want v1.20.2"),
            ("w-4", "not registered as a node")
        ]
    );
}

#[test]
fn a_machine_still_booting_is_left_alone_and_named_in_a_warning() {
    let items = [
        capi_node("w-1", "v1.20.2"),
        capi_machine(
            "w-1",
            "workers",
            "v1.20.2",
            Some("w-1"),
            Some("2026-01-01T10:00:00Z"),
        ),
        capi_machine(
            "w-2",
            "workers",
            "v1.20.2",
            None,
            Some("2026-01-01T11:55:00Z"),
        ),
        capi_machine(
            "w-3",
            "workers",
            "v1.20.2",
            None,
            Some("2026-01-01T11:40:00Z"),
        ),
    ];
    let snapshot = capi_snapshot(&items);
    let now = "2026-01-01T12:00:00Z"
        .parse::<jiff::Timestamp>()
        .unwrap()
        .as_second();
    let opts = PlanOptions {
        now,
        staleness: groups::Staleness {
            kubelet_version: Some("v1.20.2".into()),
            now,
            ..Default::default()
        },
        ..options(Some(0), Some(1))
    };
    let p = plan(&snapshot, &opts);
    let updated: Vec<(&str, &str)> = p.groups[0]
        .instances
        .iter()
        .filter(|i| i.update)
        .map(|i| (i.name.as_str(), i.reason.as_str()))
        .collect();
    assert_eq!(updated, [("w-3", "not registered as a node")]);
    let booting: Vec<&String> = p
        .warnings
        .iter()
        .filter(|w| w.contains("booting"))
        .collect();
    assert_eq!(
        booting,
        [
            "group workers: w-2 has not registered as a node yet (5m after its creation); it is left alone as booting, and replaced as broken once 10m old (--node-startup-timeout)"
        ]
    );
}
