//! Instance groups, roles and the built-in "out of date" rules.

use crate::duration::human_duration;
use std::collections::BTreeMap;

use crate::keys;
use crate::plan::Role;
use crate::snapshot::Node;

/// The nodes of one group, sorted by name.
#[derive(Debug)]
pub struct NodeGroup<'a> {
    pub name: String,
    pub role: Role,
    pub nodes: Vec<&'a Node>,
}

pub fn role_of(node: &Node) -> Role {
    if node.labels.contains_key(keys::ROLE_CONTROL_PLANE)
        || node.labels.contains_key(keys::ROLE_MASTER)
    {
        Role::ControlPlane
    } else {
        Role::Node
    }
}

pub fn zone_of(node: &Node) -> Option<&str> {
    node.labels
        .get(keys::ZONE)
        .or_else(|| node.labels.get(keys::ZONE_LEGACY))
        .map(String::as_str)
}

/// The group a node belongs to: the value of `label` when given, else of the first known group
/// label it has, else its Cluster API Machine's MachineDeployment or MachineSet, else its
/// role's name.
pub fn group_of(node: &Node, label: Option<&str>) -> String {
    let value = match label {
        Some(l) => node.labels.get(l),
        None => keys::GROUP_LABELS
            .iter()
            .find_map(|l| node.labels.get(*l))
            .or(node.machine.as_ref().map(|m| &m.group)),
    };
    match value {
        Some(v) if !v.is_empty() => v.clone(),
        _ => role_of(node).as_str().to_string(),
    }
}

/// Groups nodes, ordered bastion → control-plane → node, then by name. A group's role is the
/// most privileged role among its nodes.
pub fn collect<'a>(nodes: &'a [Node], label: Option<&str>) -> Vec<NodeGroup<'a>> {
    let mut by_name: BTreeMap<String, Vec<&Node>> = BTreeMap::new();
    for node in nodes {
        by_name.entry(group_of(node, label)).or_default().push(node);
    }
    let mut groups: Vec<NodeGroup> = by_name
        .into_iter()
        .map(|(name, mut nodes)| {
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            let role = nodes.iter().map(|n| role_of(n)).min().unwrap_or(Role::Node);
            NodeGroup { name, role, nodes }
        })
        .collect();
    groups.sort_by(|a, b| a.role.cmp(&b.role).then_with(|| a.name.cmp(&b.name)));
    groups
}

/// How long, from its creation, an instance may go without registering as a node before it
/// counts as broken (seconds): as long as Cluster API's MachineHealthCheck waits by default
/// (`nodeStartupTimeout`, 10m).
pub const NODE_STARTUP_TIMEOUT: i64 = 600;

/// The built-in rules that make an instance out of date.
#[derive(Debug, Clone)]
pub struct Staleness {
    pub kubelet_version: Option<String>,
    pub expect_labels: Vec<(String, String)>,
    /// Maximum age in seconds.
    pub max_age: Option<i64>,
    /// Seconds an instance is given to register as a node: a younger one is booting (a
    /// replacement, an autoscaler's scale-up), not broken, and is left alone.
    pub node_startup_timeout: i64,
    pub now: i64,
}

impl Default for Staleness {
    fn default() -> Self {
        Staleness {
            kubelet_version: None,
            expect_labels: Vec::new(),
            max_age: None,
            node_startup_timeout: NODE_STARTUP_TIMEOUT,
            now: 0,
        }
    }
}

/// The age of `node` if it is an instance still booting: not registered as a node yet, and
/// created less than the startup timeout ago. Unknown creation: not booting.
pub fn booting(node: &Node, rules: &Staleness) -> Option<i64> {
    let age = rules.now - node.created?;
    (!node.registered && age < rules.node_startup_timeout).then_some(age)
}

/// Why `node` is out of date, or none. Several reasons are joined.
/// Why a node that asks not to be disrupted (see [`keys::NODE_DO_NOT_DISRUPT`]) is left alone,
/// from its annotations; none when it does not ask.
pub fn left_alone(annotations: &crate::labels::Labels) -> Option<String> {
    let (key, value) = keys::NODE_DO_NOT_DISRUPT
        .iter()
        .find(|(key, value)| annotations.get(*key).map(String::as_str) == Some(*value))?;
    Some(format!(
        "out of date, but the node asks not to be disrupted ({key}: \"{value}\"): left alone (--force replaces it)"
    ))
}

pub fn outdated_reason(node: &Node, rules: &Staleness) -> Option<String> {
    let mut reasons = Vec::new();
    if !node.registered {
        // kops replaces an instance that never became a node: it is broken, not spare. One
        // still booting is neither.
        return booting(node, rules)
            .is_none()
            .then(|| "not registered as a node".into());
    }
    for key in [keys::KOPS_NEEDS_UPDATE, keys::NEEDS_UPDATE] {
        if node.annotations.contains_key(key) {
            reasons.push(format!("needs-update annotation ({key})"));
        }
    }
    if node.annotations.contains_key(keys::DETACHED) {
        reasons.push("detached for surge by an earlier run".to_string());
    }
    // A node not Ready whose kubelet has not reported its version yet is still coming up (a
    // replacement just registered): it is judged once it reports, never replaced unseen.
    let reported = node.kubelet_version.is_some() || node.ready;
    if let Some(want) = rules.kubelet_version.as_ref().filter(|_| reported) {
        let have = node.kubelet_version.as_deref().unwrap_or("unknown");
        if have.trim_start_matches('v') != want.trim_start_matches('v') {
            reasons.push(format!("kubelet {have}, want {want}"));
        }
    }
    for (key, want) in &rules.expect_labels {
        match node.labels.get(key) {
            Some(have) if have == want => {}
            Some(have) => reasons.push(format!("label {key}={have}, want {key}={want}")),
            None => reasons.push(format!("label {key} missing, want {key}={want}")),
        }
    }
    if let (Some(max), Some(created)) = (rules.max_age, node.created) {
        let age = rules.now - created;
        if age > max {
            reasons.push(format!(
                "age {} exceeds --max-age {}",
                human_duration(age),
                human_duration(max)
            ));
        }
    }
    (!reasons.is_empty()).then(|| reasons.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            labels: (labels.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            created: Some(0),
            kubelet_version: Some("v1.20.2".into()),
            ..Node::ready(name)
        }
    }

    #[test]
    fn groups_in_seed_order() {
        let nodes = vec![
            node("w2", &[("kops.k8s.io/instancegroup", "nodes-b")]),
            node("w1", &[("eks.amazonaws.com/nodegroup", "nodes-a")]),
            node("m1", &[("node-role.kubernetes.io/master", "")]),
            node("m0", &[("node-role.kubernetes.io/control-plane", "")]),
            node("x", &[]),
        ];
        let groups = collect(&nodes, None);
        let summary: Vec<_> = groups
            .iter()
            .map(|g| {
                (
                    g.name.as_str(),
                    g.role,
                    g.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("control-plane", Role::ControlPlane, vec!["m0", "m1"]),
                ("node", Role::Node, vec!["x"]),
                ("nodes-a", Role::Node, vec!["w1"]),
                ("nodes-b", Role::Node, vec!["w2"]),
            ]
        );
        let by_label = collect(&nodes, Some("eks.amazonaws.com/nodegroup"));
        assert!(by_label.iter().any(|g| g.name == "nodes-a"));
        assert!(!by_label.iter().any(|g| g.name == "nodes-b"));
    }

    #[test]
    fn an_unregistered_instance_is_booting_until_its_startup_timeout() {
        let rules = Staleness {
            now: 1_000,
            ..Default::default()
        };
        let mut lone = node("m", &[]);
        lone.registered = false;
        for (created, booting_for, reason) in [
            (Some(1_000 - 599), Some(599), None),
            (Some(1_000 - 600), None, Some("not registered as a node")),
            (None, None, Some("not registered as a node")),
        ] {
            lone.created = created;
            assert_eq!(booting(&lone, &rules), booting_for, "{created:?}");
            assert_eq!(outdated_reason(&lone, &rules).as_deref(), reason);
        }
        let mut joined = node("n", &[]);
        joined.created = Some(1_000);
        assert_eq!(booting(&joined, &rules), None, "registered: not booting");
        lone.created = Some(1_000);
        let impatient = Staleness {
            node_startup_timeout: 0,
            ..rules
        };
        assert_eq!(booting(&lone, &impatient), None);
    }

    #[test]
    fn outdated_reasons() {
        let rules = Staleness {
            kubelet_version: Some("1.21.0".into()),
            expect_labels: vec![("spec".into(), "v2".into())],
            max_age: Some(86_400),
            now: 3 * 86_400,
            ..Default::default()
        };
        let mut n = node("n", &[("spec", "v1")]);
        n.annotations
            .insert(keys::KOPS_NEEDS_UPDATE.into(), String::new());
        let reason = outdated_reason(&n, &rules).unwrap();
        assert_eq!(
            reason,
            "needs-update annotation (kops.k8s.io/needs-update), kubelet v1.20.2, want 1.21.0, \
             label spec=v1, want spec=v2, age 3d exceeds --max-age 1d"
        );
        let fresh = Staleness {
            kubelet_version: Some("v1.20.2".into()),
            now: 10,
            max_age: Some(86_400),
            ..Default::default()
        };
        assert_eq!(outdated_reason(&node("n", &[]), &fresh), None);
    }

    #[test]
    fn a_node_coming_up_before_its_kubelet_reports_is_not_judged_by_its_version() {
        let rules = Staleness {
            kubelet_version: Some("v1.20.2".into()),
            ..Default::default()
        };
        let mut coming = node("n", &[]);
        coming.kubelet_version = None;
        coming.ready = false;
        assert_eq!(outdated_reason(&coming, &rules), None);
        coming.ready = true;
        assert_eq!(
            outdated_reason(&coming, &rules).as_deref(),
            Some("kubelet unknown, want v1.20.2"),
            "Ready and still silent about its version: judged"
        );
    }
}
