//! The safety invariants of a node rotation, checked from the outside.
//!
//! The chaos tests kill and restart the plugin and the API server at random moments; whether
//! the rotation stayed safe is decided here, by a checker that only sees what an independent
//! observer sees (watch events on nodes and pods, the simulated cloud's calls, the final state)
//! and never asks the plugin. It is pure: its input is a sequence of [`Seen`] events, so a
//! recorded sequence of a broken behaviour can be fed to it in a unit test and every violation
//! it must report asserted, without a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// What the rotation under test may do to its group.
#[derive(Debug, Clone)]
pub struct Budget {
    /// The group's nodes when the rotation began: all outdated, each to be replaced once.
    pub outdated: BTreeSet<String>,
    pub max_unavailable: usize,
    pub max_surge: usize,
    /// `--cloudonly`: terminating without draining is what was asked for.
    pub cloud_only: bool,
    /// Outdated nodes whose drain cannot finish, which the rotation must set aside
    /// (`drain.undrainable: Quarantine`): never terminated, still cordoned at the end.
    pub set_aside: BTreeSet<String>,
}

/// A PodDisruptionBudget the workload runs under: pods with all of `match_labels` must keep at
/// least `min_available` healthy (Ready and not terminating).
#[derive(Debug, Clone)]
pub struct Pdb {
    pub name: String,
    pub match_labels: BTreeMap<String, String>,
    pub min_available: usize,
}

/// One observation, in the order the observer made it.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// A node of the group as it is now.
    Node {
        name: String,
        ready: bool,
        unschedulable: bool,
    },
    NodeGone {
        name: String,
    },
    /// A node gone while the watch was interrupted (found missing when it listed again, as after
    /// an API server restart): how it ended was not seen, so whether it was cordoned is
    /// unknown; its drain is judged by the pods left on it alone.
    NodeLost {
        name: String,
    },
    /// A pod of the workload as it is now.
    Pod {
        key: String,
        labels: BTreeMap<String, String>,
        ready: bool,
        terminating: bool,
    },
    PodGone {
        key: String,
    },
    /// A listing of the group's nodes is complete: from here on the count of available nodes
    /// means something.
    NodesSynced,
    /// The nodes are being listed again (the watch was interrupted): until they are synced, the
    /// nodes seen are a mix of before and after, and are not counted.
    NodesListing,
    /// The same for the workload's pods and the disruption budgets.
    PodsSynced,
    PodsListing,
    /// The cloud was asked to terminate `node`; `pods_left` are the pods that still ran there
    /// (not terminating, not DaemonSet or mirror pods) when it was asked.
    Terminate {
        node: String,
        pods_left: Vec<String>,
    },
    /// The cloud was asked to detach `node` for a surge.
    Detach {
        node: String,
    },
}

/// How the group and the lock looked once the rotation said it was done.
#[derive(Debug, Clone, Default)]
pub struct End {
    /// Node objects of the group: name, Ready, unschedulable.
    pub nodes: Vec<(String, bool, bool)>,
    /// Instances the cloud still runs for the group (registered as nodes or not).
    pub instances: Vec<String>,
    /// The rotation lock's holder and the run state on it, if the lock still exists.
    pub lock: Option<String>,
    /// Nodes of the group that still carry a run's scale-down mark for the cluster-autoscaler.
    pub marked: Vec<String>,
    /// Holders of kured's reboot lock that are runs (`rollout-ext/…`).
    pub kured_holders: Vec<String>,
}

/// A broken invariant, with what the observer saw when it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    TerminatedUndrained {
        node: String,
        cordoned: bool,
        pods_left: Vec<String>,
    },
    TerminatedTwice {
        node: String,
    },
    TerminatedNotOutdated {
        node: String,
    },
    TooManyUnavailable {
        available: usize,
        floor: usize,
        unavailable: Vec<String>,
    },
    TooManySurges {
        detached: Vec<String>,
        max_surge: usize,
    },
    PdbBreached {
        pdb: String,
        healthy: usize,
        min_available: usize,
    },
    NotReplaced {
        node: String,
    },
    LeftOver {
        expected: usize,
        instances: Vec<String>,
    },
    NotAvailableAtEnd {
        node: String,
    },
    /// A run's mark that keeps the cluster-autoscaler from scaling a node down outlived it.
    MarkLeft {
        node: String,
    },
    /// A run's hold on kured's reboot lock outlived it.
    KuredLockLeft {
        holder: String,
    },
    LockNotReleased {
        holder: String,
    },
    SetAsideTerminated {
        node: String,
    },
    SetAsideNotCordoned {
        node: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::TerminatedUndrained {
                node,
                cordoned,
                pods_left,
            } => write!(
                f,
                "node {node} was terminated before it was drained ({}; pods still on it: [{}])",
                if *cordoned {
                    "it was cordoned"
                } else {
                    "it was never cordoned"
                },
                pods_left.join(", ")
            ),
            Violation::TerminatedTwice { node } => {
                write!(f, "node {node} was terminated more than once")
            }
            Violation::TerminatedNotOutdated { node } => write!(
                f,
                "node {node} was terminated but was not one of the outdated nodes"
            ),
            Violation::TooManyUnavailable {
                available,
                floor,
                unavailable,
            } => write!(
                f,
                "only {available} nodes of the group were available (Ready and schedulable), \
                 fewer than the {floor} the budget keeps; unavailable: [{}]",
                unavailable.join(", ")
            ),
            Violation::TooManySurges {
                detached,
                max_surge,
            } => write!(
                f,
                "{} instances were detached for surging ([{}]), more than maxSurge {max_surge}",
                detached.len(),
                detached.join(", ")
            ),
            Violation::PdbBreached {
                pdb,
                healthy,
                min_available,
            } => write!(
                f,
                "PodDisruptionBudget {pdb} was breached: {healthy} healthy pods, minAvailable {min_available}"
            ),
            Violation::NotReplaced { node } => {
                write!(f, "outdated node {node} was never terminated")
            }
            Violation::LeftOver {
                expected,
                instances,
            } => write!(
                f,
                "the group ended with {} instances, not {expected}: [{}]",
                instances.len(),
                instances.join(", ")
            ),
            Violation::NotAvailableAtEnd { node } => write!(
                f,
                "node {node} is not an available up-to-date node at the end"
            ),
            Violation::MarkLeft { node } => write!(
                f,
                "node {node} still carries the run's scale-down mark for the cluster-autoscaler at the end"
            ),
            Violation::KuredLockLeft { holder } => write!(
                f,
                "kured's reboot lock is still held by the run ({holder}) at the end"
            ),
            Violation::LockNotReleased { holder } => write!(
                f,
                "the rotation lock was not released at the end (holder: {holder})"
            ),
            Violation::SetAsideTerminated { node } => write!(
                f,
                "node {node}, whose drain cannot finish, was terminated instead of set aside"
            ),
            Violation::SetAsideNotCordoned { node } => write!(
                f,
                "node {node}, whose drain cannot finish, is not set aside (cordoned) at the end"
            ),
        }
    }
}

impl Violation {
    /// What makes two violations the same breach: the kind and the node or budget it is about.
    fn subject(&self) -> (std::mem::Discriminant<Violation>, Option<&str>) {
        let about = match self {
            Violation::TerminatedUndrained { node, .. }
            | Violation::TerminatedTwice { node }
            | Violation::TerminatedNotOutdated { node }
            | Violation::NotReplaced { node }
            | Violation::NotAvailableAtEnd { node }
            | Violation::SetAsideTerminated { node }
            | Violation::SetAsideNotCordoned { node } => Some(node.as_str()),
            Violation::PdbBreached { pdb, .. } => Some(pdb.as_str()),
            _ => None,
        };
        (std::mem::discriminant(self), about)
    }
}

#[derive(Debug, Clone, Copy)]
struct NodeState {
    ready: bool,
    unschedulable: bool,
}

#[derive(Debug, Clone)]
struct PodState {
    labels: BTreeMap<String, String>,
    ready: bool,
    terminating: bool,
}

/// Folds observations into the group's state and records every violation, once per kind of
/// breach and node, as it happens.
#[derive(Debug)]
pub struct Checker {
    budget: Budget,
    pdbs: Vec<Pdb>,
    nodes_synced: bool,
    pods_synced: bool,
    nodes: BTreeMap<String, NodeState>,
    cordoned: BTreeSet<String>,
    /// Nodes whose end the watch did not see (see [`Seen::NodeLost`]).
    lost: BTreeSet<String>,
    pods: BTreeMap<String, PodState>,
    terminated: BTreeMap<String, usize>,
    detached: Vec<String>,
    violations: Vec<Violation>,
    /// The fewest available nodes seen at once, for the report.
    pub fewest_available: Option<usize>,
}

impl Checker {
    pub fn new(budget: Budget, pdbs: Vec<Pdb>) -> Self {
        Checker {
            budget,
            pdbs,
            nodes_synced: false,
            pods_synced: false,
            nodes: BTreeMap::new(),
            cordoned: BTreeSet::new(),
            lost: BTreeSet::new(),
            pods: BTreeMap::new(),
            terminated: BTreeMap::new(),
            detached: Vec::new(),
            violations: Vec::new(),
            fewest_available: None,
        }
    }

    /// The availability floor: the group's original size minus maxUnavailable. A surge adds
    /// capacity before anything is drained, so it never lowers the floor.
    fn floor(&self) -> usize {
        self.budget
            .outdated
            .len()
            .saturating_sub(self.budget.max_unavailable)
    }

    /// Records a violation the first time its breach is seen (a breach lasts many events).
    fn record(&mut self, violation: Violation) {
        if !self
            .violations
            .iter()
            .any(|v| v.subject() == violation.subject())
        {
            self.violations.push(violation);
        }
    }

    pub fn observe(&mut self, seen: Seen) {
        match seen {
            Seen::Node {
                name,
                ready,
                unschedulable,
            } => {
                if unschedulable {
                    self.cordoned.insert(name.clone());
                }
                self.nodes.insert(
                    name,
                    NodeState {
                        ready,
                        unschedulable,
                    },
                );
            }
            Seen::NodeGone { name } => {
                self.nodes.remove(&name);
            }
            Seen::NodeLost { name } => {
                self.nodes.remove(&name);
                self.lost.insert(name);
            }
            Seen::Pod {
                key,
                labels,
                ready,
                terminating,
            } => {
                self.pods.insert(
                    key,
                    PodState {
                        labels,
                        ready,
                        terminating,
                    },
                );
            }
            Seen::PodGone { key } => {
                self.pods.remove(&key);
            }
            Seen::NodesSynced => self.nodes_synced = true,
            Seen::NodesListing => self.nodes_synced = false,
            Seen::PodsSynced => self.pods_synced = true,
            Seen::PodsListing => self.pods_synced = false,
            Seen::Terminate { node, pods_left } => self.terminate(node, pods_left),
            Seen::Detach { node } => {
                if !self.detached.contains(&node) {
                    self.detached.push(node);
                }
                if self.detached.len() > self.budget.max_surge {
                    self.record(Violation::TooManySurges {
                        detached: self.detached.clone(),
                        max_surge: self.budget.max_surge,
                    });
                }
            }
        }
        self.check_counts();
    }

    fn terminate(&mut self, node: String, pods_left: Vec<String>) {
        if !self.budget.outdated.contains(&node) {
            self.record(Violation::TerminatedNotOutdated { node: node.clone() });
        }
        if self.budget.set_aside.contains(&node) {
            self.record(Violation::SetAsideTerminated { node: node.clone() });
        }
        let count = self.terminated.entry(node.clone()).or_default();
        *count += 1;
        if *count > 1 {
            self.record(Violation::TerminatedTwice { node: node.clone() });
        }
        let cordoned = self.cordoned.contains(&node);
        // A cordon the watch could not have seen is not held against the rotation; the pods
        // left on the node (a consistent read) still are.
        let cordon_unknown = !cordoned && self.lost.contains(&node);
        if !self.budget.cloud_only && (!(cordoned || cordon_unknown) || !pods_left.is_empty()) {
            self.record(Violation::TerminatedUndrained {
                node,
                cordoned,
                pods_left,
            });
        }
    }

    fn check_counts(&mut self) {
        if self.nodes_synced {
            self.check_nodes();
        }
        if self.pods_synced {
            self.check_pdbs();
        }
    }

    fn check_nodes(&mut self) {
        let available = self
            .nodes
            .values()
            .filter(|n| n.ready && !n.unschedulable)
            .count();
        self.fewest_available = Some(
            self.fewest_available
                .map_or(available, |f| f.min(available)),
        );
        if available < self.floor() {
            let unavailable = self
                .budget
                .outdated
                .iter()
                .filter(|n| {
                    self.nodes
                        .get(*n)
                        .is_none_or(|s| !s.ready || s.unschedulable)
                })
                .cloned()
                .collect();
            self.record(Violation::TooManyUnavailable {
                available,
                floor: self.floor(),
                unavailable,
            });
        }
    }

    fn check_pdbs(&mut self) {
        for pdb in self.pdbs.clone() {
            let healthy = self
                .pods
                .values()
                .filter(|p| {
                    p.ready
                        && !p.terminating
                        && pdb
                            .match_labels
                            .iter()
                            .all(|(k, v)| p.labels.get(k) == Some(v))
                })
                .count();
            if healthy < pdb.min_available {
                self.record(Violation::PdbBreached {
                    pdb: pdb.name.clone(),
                    healthy,
                    min_available: pdb.min_available,
                });
            }
        }
    }

    /// Checks the end state: each outdated node terminated but those set aside, the group back
    /// to its size with available new nodes only (and the nodes set aside, cordoned), no
    /// instance left behind, no scale-down mark left, the lock gone.
    pub fn finish(&mut self, end: &End) {
        for node in self.budget.outdated.clone() {
            if !self.terminated.contains_key(&node) && !self.budget.set_aside.contains(&node) {
                self.record(Violation::NotReplaced { node });
            }
        }
        let expected = self.budget.outdated.len();
        if end.instances.len() != expected || end.nodes.len() != expected {
            let mut instances = end.instances.clone();
            for (name, _, _) in &end.nodes {
                if !instances.contains(name) {
                    instances.push(name.clone());
                }
            }
            self.record(Violation::LeftOver {
                expected,
                instances,
            });
        }
        for (name, ready, unschedulable) in &end.nodes {
            if self.budget.set_aside.contains(name) {
                if !unschedulable {
                    self.record(Violation::SetAsideNotCordoned { node: name.clone() });
                }
            } else if !ready || *unschedulable || self.budget.outdated.contains(name) {
                self.record(Violation::NotAvailableAtEnd { node: name.clone() });
            }
        }
        for node in self.budget.set_aside.clone() {
            if !end.nodes.iter().any(|(name, _, _)| *name == node) {
                self.record(Violation::SetAsideNotCordoned { node });
            }
        }
        for node in &end.marked {
            self.record(Violation::MarkLeft { node: node.clone() });
        }
        for holder in &end.kured_holders {
            self.record(Violation::KuredLockLeft {
                holder: holder.clone(),
            });
        }
        if let Some(holder) = &end.lock {
            self.record(Violation::LockNotReleased {
                holder: holder.clone(),
            });
        }
    }

    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Every violation, one per line, or `None` when there is none.
    pub fn report(&self) -> Option<String> {
        (!self.violations.is_empty()).then(|| {
            self.violations
                .iter()
                .map(|v| format!("invariant violated: {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// A small seeded generator (SplitMix64): the chaos tests need reproducible randomness, not
/// cryptographic quality, and printing the seed is what makes a failure replayable.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `low..high` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }
}

/// The chaos seed: `ROLLOUT_EXT_CHAOS_SEED` when set (to replay a failure), else the clock.
pub fn chaos_seed() -> u64 {
    std::env::var("ROLLOUT_EXT_CHAOS_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        })
}

#[cfg(test)]
mod tests;
