//! The ledger of other disruptors: which nodes of a group someone else is taking out now, read
//! from the marks each tool leaves on them, and how much of the group's budget that leaves a
//! run. No tool counts another's disruptions against its own budget, and there is no lock
//! between them, so a run reads the ledger again right before it sizes a batch and right before
//! it cordons one.
//!
//! Counted, once per node, by the first mark found: the Node being deleted (by whoever tainted
//! it, below, if anyone did), or its Machine;
//! a NodeMaintenance naming it (medik8s' node-maintenance-operator); kured's reboot lock naming
//! it (on kured's DaemonSet, a holder whose TTL has not run out);
//! a taint of Karpenter (`karpenter.sh/disrupted`), the cluster-autoscaler
//! (`ToBeDeletedByClusterAutoscaler`) or medik8s (`medik8s.io/drain`), not the
//! `node.kubernetes.io/unschedulable` taint the server puts on every cordoned node; a
//! `DrainInProgress` or `MaintenanceInProgress` condition that is True (Kubernetes 1.37's Node
//! lifecycle conditions); a cordon the run did not find when it started; and, as Karpenter
//! counts them, nodes that are not Ready. Nodes the run itself marked (its phase, quarantine or
//! detached annotations) are its own, never another's. Pure.

use std::collections::BTreeMap;
use std::collections::HashSet;

use serde::Serialize;

use super::group_loop::Sizing;
use super::groups::NodeGroup;
use crate::keys;
use crate::snapshot::{Node, Snapshot};

/// Who a node that is not Ready is counted as disrupted by.
pub const NOT_READY: &str = "being NotReady";

/// One node someone else is disrupting, and who or what by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    pub node: String,
    pub by: String,
}

/// What others are disrupting in one group now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ledger {
    pub group: String,
    pub disruptions: Vec<Disruption>,
}

impl Ledger {
    /// The ledger of `group`, whose nodes are `nodes`, in `snapshot` at `now` (Unix seconds);
    /// `found_cordoned` are the nodes the run found cordoned when it started (reported then,
    /// not counted).
    pub fn of_group(
        snapshot: &Snapshot,
        group: &str,
        nodes: &[&Node],
        found_cordoned: &HashSet<String>,
        now: i64,
    ) -> Ledger {
        let disruptions = nodes
            .iter()
            .filter(|n| !ours(n))
            .filter_map(|n| {
                let by = cause(snapshot, n, found_cordoned, now)?;
                Some(Disruption {
                    node: n.name.clone(),
                    by,
                })
            })
            .collect();
        Ledger {
            group: group.to_string(),
            disruptions,
        }
    }

    /// The ledger of `group` for a run starting at `now`: the cordons it finds are not others'.
    pub fn at_start(snapshot: &Snapshot, group: &NodeGroup, now: i64) -> Ledger {
        let found: HashSet<String> = (group.nodes.iter())
            .filter(|n| n.unschedulable)
            .map(|n| n.name.clone())
            .collect();
        Ledger::of_group(snapshot, &group.name, &group.nodes, &found, now)
    }

    /// `sizing` narrowed to what others leave of the budget's room: its built-in size, and the
    /// most a hook may answer.
    pub fn narrow(&self, sizing: &Sizing) -> Sizing {
        let room = self.room(sizing.room);
        if room >= sizing.max_batch {
            return sizing.clone();
        }
        Sizing {
            max_batch: room,
            max_batch_reason: format!(
                "{} (others disrupt {} of the group's nodes)",
                sizing.max_batch_reason,
                self.disruptions.len()
            ),
            ..sizing.clone()
        }
    }

    /// How many of `budget` nodes the run may take out now.
    pub fn room(&self, budget: u32) -> u32 {
        budget.saturating_sub(self.disruptions.len() as u32)
    }

    /// Whether `node` is being disrupted by someone else.
    pub fn disrupts(&self, node: &str) -> bool {
        self.disruptions.iter().any(|d| d.node == node)
    }

    /// `2 nodes of group nodes are being disrupted by karpenter: a, b`, or with several
    /// disruptors `3 nodes of group nodes are being disrupted: 2 by karpenter (a, b), 1 by …`.
    pub fn describe(&self) -> String {
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for d in &self.disruptions {
            by.entry(d.by.as_str()).or_default().push(d.node.as_str());
        }
        let count = match self.disruptions.len() {
            1 => format!("1 node of group {} is", self.group),
            n => format!("{n} nodes of group {} are", self.group),
        };
        match by.len() {
            1 => {
                let (who, nodes) = by.iter().next().expect("one disruptor");
                format!("{count} being disrupted by {who}: {}", nodes.join(", "))
            }
            _ => {
                let each: Vec<String> = (by.iter())
                    .map(|(who, nodes)| format!("{} by {who} ({})", nodes.len(), nodes.join(", ")))
                    .collect();
                format!("{count} being disrupted: {}", each.join(", "))
            }
        }
    }
}

/// Whether the run (this one or an earlier one) marked `node` as its own.
fn ours(node: &Node) -> bool {
    [keys::PHASE, keys::QUARANTINED, keys::DETACHED]
        .iter()
        .any(|k| node.annotations.contains_key(*k))
}

/// Who is disrupting `node` at `now`, by the first mark found; none when no one is.
fn cause(
    snapshot: &Snapshot,
    node: &Node,
    found_cordoned: &HashSet<String>,
    now: i64,
) -> Option<String> {
    let tainted_by = (keys::DISRUPTOR_TAINTS.iter())
        .find(|(key, _)| node.taints.iter().any(|t| t.key == *key))
        .map(|(_, who)| (*who).to_string());
    // A disruptor deletes the nodes it tainted (Karpenter, the cluster-autoscaler): the taint
    // says who.
    if node.deleting {
        return Some(tainted_by.unwrap_or_else(|| "a deletion (the Node is being deleted)".into()));
    }
    let machine = node.machine.as_ref().and_then(|m| {
        (snapshot.machines.iter()).find(|x| x.namespace == m.namespace && x.name == m.name)
    });
    if machine.is_some_and(|m| m.deleting) {
        return Some("Cluster API (its Machine is being deleted)".into());
    }
    if let Some(m) = snapshot.maintenance_of(&node.name) {
        return Some(match m.reason.as_str() {
            "" => format!("node-maintenance-operator (NodeMaintenance {})", m.name),
            reason => format!(
                "node-maintenance-operator (NodeMaintenance {}: {reason})",
                m.name
            ),
        });
    }
    if let Some(kured) = snapshot.kured_lock_on(&node.name, now) {
        return Some(format!(
            "kured (its reboot lock on DaemonSet {})",
            kured.id()
        ));
    }
    if tainted_by.is_some() {
        return tainted_by;
    }
    if let Some(condition) = &node.in_progress {
        return Some(format!("whoever set its {condition}"));
    }
    if node.unschedulable && !found_cordoned.contains(&node.name) {
        return Some("someone who cordoned it".into());
    }
    (node.registered && !node.ready).then(|| NOT_READY.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Taint;

    fn node(name: &str) -> Node {
        Node::ready(name)
    }

    fn tainted(name: &str, key: &str) -> Node {
        let mut n = node(name);
        n.taints.push(Taint {
            key: key.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        });
        n
    }

    fn ledger(nodes: &[Node], found: &[&str]) -> Ledger {
        ledger_in(&Snapshot::default(), nodes, found)
    }

    fn ledger_in(snapshot: &Snapshot, nodes: &[Node], found: &[&str]) -> Ledger {
        let refs: Vec<&Node> = nodes.iter().collect();
        let found = found.iter().map(|s| s.to_string()).collect();
        Ledger::of_group(snapshot, "nodes", &refs, &found, NOW)
    }

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_node_maintenance_and_a_live_kured_lock_count_an_expired_lock_does_not() {
        use crate::snapshot::kured::LockHolder;
        use crate::snapshot::{KuredDaemonSet, NodeMaintenance};
        let holder = |node: &str, created: i64, ttl_seconds: i64| LockHolder {
            node_id: node.into(),
            created: Some(created),
            ttl_seconds,
        };
        let snapshot = Snapshot {
            node_maintenances: vec![NodeMaintenance {
                name: "fix-a".into(),
                node: "a".into(),
                reason: "new DIMM".into(),
            }],
            kured: vec![KuredDaemonSet {
                namespace: "kube-system".into(),
                name: "kured".into(),
                holders: vec![holder("b", NOW - 10, 0), holder("c", NOW - 3600, 1800)],
                lock: None,
                unreadable: Vec::new(),
            }],
            ..Snapshot::default()
        };
        let l = ledger_in(&snapshot, &[node("a"), node("b"), node("c")], &[]);
        let by: Vec<(&str, &str)> = (l.disruptions.iter())
            .map(|d| (d.node.as_str(), d.by.as_str()))
            .collect();
        assert_eq!(
            by,
            [
                (
                    "a",
                    "node-maintenance-operator (NodeMaintenance fix-a: new DIMM)"
                ),
                (
                    "b",
                    "kured (its reboot lock on DaemonSet kube-system/kured)"
                ),
            ]
        );
    }

    #[test]
    fn each_mark_counts_once_and_names_who() {
        let mut deleted = node("a");
        deleted.deleting = true;
        let mut consolidated = tainted("a2", "karpenter.sh/disrupted");
        consolidated.deleting = true;
        let mut cordoned = node("e");
        cordoned.unschedulable = true;
        let mut drained = node("f");
        drained.in_progress = Some("DrainInProgress (reason Maintenance)".into());
        let mut down = node("g");
        down.ready = false;
        let l = ledger(
            &[
                deleted,
                consolidated,
                tainted("b", "karpenter.sh/disrupted"),
                tainted("c", "ToBeDeletedByClusterAutoscaler"),
                tainted("d", "medik8s.io/drain"),
                cordoned,
                drained,
                down,
                node("h"),
            ],
            &[],
        );
        let by: Vec<(&str, &str)> = (l.disruptions.iter())
            .map(|d| (d.node.as_str(), d.by.as_str()))
            .collect();
        assert_eq!(
            by,
            [
                ("a", "a deletion (the Node is being deleted)"),
                ("a2", "karpenter"),
                ("b", "karpenter"),
                ("c", "cluster-autoscaler"),
                ("d", "medik8s"),
                ("e", "someone who cordoned it"),
                ("f", "whoever set its DrainInProgress (reason Maintenance)"),
                ("g", "being NotReady"),
            ]
        );
        assert_eq!((l.room(10), l.room(3)), (2, 0));
    }

    #[test]
    fn the_runs_own_nodes_the_servers_cordon_taint_and_cordons_found_are_not_counted() {
        let mut ours = tainted("a", "karpenter.sh/disrupted");
        ours.annotations
            .insert(keys::PHASE.into(), "draining".into());
        ours.unschedulable = true;
        let mut found = tainted("b", "node.kubernetes.io/unschedulable");
        found.unschedulable = true;
        let mut booting = node("c");
        (booting.registered, booting.ready) = (false, false);
        let l = ledger(&[ours, found, booting], &["b"]);
        assert_eq!(l.disruptions, []);
        assert_eq!(l.room(1), 1);
    }

    #[test]
    fn says_who_disrupts_what() {
        let l = ledger(
            &[
                tainted("ip-2", "karpenter.sh/disrupted"),
                tainted("ip-1", "karpenter.sh/disrupted"),
                tainted("ip-3", "ToBeDeletedByClusterAutoscaler"),
            ],
            &[],
        );
        assert_eq!(
            l.describe(),
            "3 nodes of group nodes are being disrupted: 1 by cluster-autoscaler (ip-3), 2 by karpenter (ip-2, ip-1)"
        );
        let one = ledger(&[tainted("ip-2", "karpenter.sh/disrupted")], &[]);
        assert_eq!(
            one.describe(),
            "1 node of group nodes is being disrupted by karpenter: ip-2"
        );
    }
}
