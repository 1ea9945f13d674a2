//! Whether the pods a batch evicts fit on the nodes that stay schedulable, forecast from the
//! snapshot so that a plan says before anything moves which pods would wait for a replacement
//! and which would find no node at all.
//!
//! The rotation is simulated in wave order, across groups: a node takes a pod when it is
//! schedulable (Ready, not cordoned, not drained by this or an earlier batch), when the pod's
//! `nodeSelector` and required node affinity select it, when the pod tolerates each of its
//! `NoSchedule` and `NoExecute` taints, and when its CPU and memory requests fit in what is
//! left of its allocatable (a node without allocatable is unlimited). The run's own
//! PreferNoSchedule taint on the group's nodes chosen for replacement counts as a preference
//! only: a pod goes to a node without it when one has room, else to one with it (as the
//! scheduler does), and is evicted again when that node's batch comes.
//!
//! A surge adds new nodes at once; a batch's nodes are replaced once it is drained (but for
//! instances surged or detached already, whose new instance exists). A new node is shaped
//! like a representative node of its group (an up-to-date, Ready one when there is one): its
//! labels (but the hostname), its `NoSchedule`/`NoExecute` taints (but the `node.kubernetes.io/`
//! conditions) and its allocatable; it is empty when it turns Ready (the DaemonSet pods it will
//! run are not counted). Evicted pods are placed greedily, largest requests first, each on the
//! first node with room (nodes that no pod can tell apart but by their room are tried together,
//! in the order the first of them appears: see `Partition`); each placement uses up room for
//! the next pod and the next batches. Pods pending now, and evicted pods no controller
//! recreates, are not placed.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use super::drain::DrainOptions;
use super::forecast::Pending;
use super::groups::{self, Staleness};
use super::health::{self, Index};
use crate::keys;
use crate::labels::Labels;
use crate::scheduling::{Placement, Resources, repels};
use crate::snapshot::{Node, Pod, Snapshot, Taint};

mod room;

use room::Room;

/// The label a new node does not inherit from the node it is shaped like.
const HOSTNAME: &str = "kubernetes.io/hostname";

/// Taints the node lifecycle controller and cloud provider set for a node's condition
/// (unschedulable, not ready, uninitialized …): a new node that is Ready carries none.
const CONDITION_TAINTS: &[&str] = &["node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"];

/// The kinds of node a pod is placed on, in [`Room`]: schedulable, schedulable but carrying the
/// run's PreferNoSchedule taint, a replacement of the batch at hand.
const OPEN: usize = 0;
const OPEN_CHOSEN: usize = 1;
const COMING: usize = 2;

/// What the scheduler sees of a node: labels, the taints that keep pods off, allocatable.
#[derive(Debug)]
struct Shape<'a> {
    labels: Cow<'a, Labels>,
    taints: Vec<&'a Taint>,
    allocatable: Resources,
}

impl<'a> Shape<'a> {
    /// `node` as it is.
    fn of(node: &'a Node) -> Shape<'a> {
        Shape {
            labels: Cow::Borrowed(&node.labels),
            taints: node.taints.iter().filter(|t| repels(t)).collect(),
            allocatable: node.allocatable.unwrap_or(Resources::UNLIMITED),
        }
    }

    /// A new node shaped like `node`, once Ready.
    fn fresh(node: &'a Node) -> Shape<'a> {
        let mut labels = node.labels.clone();
        labels.remove(HOSTNAME);
        Shape {
            labels: Cow::Owned(labels),
            taints: node
                .taints
                .iter()
                .filter(|t| repels(t) && !CONDITION_TAINTS.iter().any(|p| t.key.starts_with(p)))
                .collect(),
            allocatable: node.allocatable.unwrap_or(Resources::UNLIMITED),
        }
    }

    fn admits(&self, name: Option<&str>, placement: &Placement) -> bool {
        placement.admits(name, &self.labels, self.taints.iter().copied())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Schedulable.
    Open,
    /// A replacement of the batch at hand, not Ready until the batch is drained.
    Coming,
    /// Cordoned, not Ready, drained or gone.
    Closed,
}

#[derive(Debug)]
struct SimNode<'a> {
    /// None for a new node, whose name is not known yet.
    name: Option<&'a str>,
    shape: Rc<Shape<'a>>,
    used: Resources,
    state: State,
    /// Carries the run's PreferNoSchedule taint: pods go elsewhere first.
    chosen: bool,
    /// Pods placed here by the simulation: evicted again with the node's batch.
    moved: Vec<&'a Pod>,
    /// Its partition, and its slot there.
    partition: usize,
    slot: usize,
}

impl SimNode<'_> {
    fn kind(&self) -> Option<usize> {
        match self.state {
            State::Open if self.chosen => Some(OPEN_CHOSEN),
            State::Open => Some(OPEN),
            State::Coming => Some(COMING),
            State::Closed => None,
        }
    }

    fn free(&self) -> Resources {
        self.shape.allocatable.minus(self.used)
    }
}

/// Nodes that no pod of the snapshot can tell apart but by their room and their name: the same
/// taints, and the same values of the labels pods select on (the hostname aside). Whether a pod
/// may run there is judged once for the partition, and its room found in its [`Room`], so that
/// placing a pod costs the number of partitions, not of nodes.
struct Partition {
    labels: Labels,
    taints: Vec<Taint>,
    room: Room,
    /// The node (in [`Capacity::nodes`]) at each slot.
    members: Vec<usize>,
}

/// What is worked out once per distinct placement (nodeSelector, affinity, tolerations).
struct Class {
    /// The placement names nodes (by hostname or by field): a partition only says whether its
    /// taints are tolerated, and each node is asked.
    by_node: bool,
    /// Whether it may run on each partition's nodes, once asked.
    partitions: Vec<Option<bool>>,
    /// Why no node of any group could run it, or the allocatables of those that could, once
    /// asked.
    anywhere: Option<Result<Vec<Resources>, String>>,
}

impl Class {
    fn new(placement: &Placement) -> Class {
        Class {
            by_node: placement.selects_fields() || placement.label_keys().any(|k| k == HOSTNAME),
            partitions: Vec::new(),
            anywhere: None,
        }
    }

    fn admits(&mut self, placement: &Placement, p: usize, partition: &Partition) -> bool {
        if self.partitions.len() <= p {
            self.partitions.resize(p + 1, None);
        }
        *self.partitions[p].get_or_insert_with(|| {
            if self.by_node {
                placement.repelled_by(&partition.taints).is_none()
            } else {
                placement.admits(None, &partition.labels, &partition.taints)
            }
        })
    }
}

/// What became of the pods a batch evicts that found no room.
#[derive(Debug, Default, PartialEq)]
pub struct Placed {
    /// Pods that wait for room, by reason (in the order the reasons first came up).
    pub pending: Vec<Pending>,
    /// Pods no node of any group could run, by why.
    pub nowhere: Vec<Pending>,
}

/// The simulated cluster, batch after batch.
pub struct Capacity<'a> {
    nodes: Vec<SimNode<'a>>,
    partitions: Vec<Partition>,
    by_signature: HashMap<(Labels, Vec<Taint>), usize>,
    /// The label keys pods select nodes by (the hostname aside).
    keys: BTreeSet<&'a str>,
    classes: HashMap<&'a Placement, Class>,
    /// Where each node of the snapshot is in `nodes`.
    by_name: HashMap<&'a str, usize>,
    /// The shape each group's new nodes take.
    new_node: HashMap<String, Rc<Shape<'a>>>,
    /// Every node of the snapshot as a new one like it would be: where a pod could ever run.
    fresh: Vec<Rc<Shape<'a>>>,
    /// Instances whose new instance exists already: surged by this run, or detached by an
    /// earlier one.
    replaced_early: HashSet<String>,
}

impl<'a> Capacity<'a> {
    /// The cluster as the snapshot shows it, before the rotation. `group_label` and `staleness`
    /// are the plan's, to find each group's representative node.
    pub fn new(
        snapshot: &'a Snapshot,
        index: &Index<'a>,
        group_label: Option<&str>,
        staleness: &Staleness,
    ) -> Self {
        let keys = snapshot
            .pods
            .iter()
            .flat_map(|p| p.placement.label_keys())
            .filter(|k| *k != HOSTNAME)
            .collect();
        let mut capacity = Capacity {
            nodes: Vec::with_capacity(snapshot.nodes.len()),
            partitions: Vec::new(),
            by_signature: HashMap::new(),
            keys,
            classes: HashMap::new(),
            by_name: HashMap::with_capacity(snapshot.nodes.len()),
            new_node: HashMap::new(),
            fresh: Vec::with_capacity(snapshot.nodes.len()),
            replaced_early: HashSet::new(),
        };
        let mut best: HashMap<String, ((bool, bool, bool), usize)> = HashMap::new();
        for (i, node) in snapshot.nodes.iter().enumerate() {
            let used = index
                .pods_on(&node.name)
                .iter()
                .filter(|p| !p.finished)
                .fold(Resources::default(), |sum, p| sum.plus(p.requests));
            let open = node.ready && !node.unschedulable;
            let state = if open { State::Open } else { State::Closed };
            capacity.add_node(Some(&node.name), Rc::new(Shape::of(node)), used, state);
            capacity.by_name.insert(node.name.as_str(), i);
            capacity.fresh.push(Rc::new(Shape::fresh(node)));
            if node.annotations.contains_key(keys::DETACHED) {
                capacity.replaced_early.insert(node.name.clone());
            }
            let rank = (
                groups::outdated_reason(node, staleness).is_none(),
                open,
                node.allocatable.is_some(),
            );
            // The first node (in name order) of the best rank.
            let better = |(r, j): &((bool, bool, bool), usize)| {
                rank > *r || (rank == *r && node.name < snapshot.nodes[*j].name)
            };
            let group = groups::group_of(node, group_label);
            if best.get(&group).is_none_or(better) {
                best.insert(group, (rank, i));
            }
        }
        for (group, (_, i)) in best {
            let shape = capacity.fresh[i].clone();
            capacity.new_node.insert(group, shape);
        }
        capacity
    }

    /// A group starts: the nodes it will replace get the run's PreferNoSchedule taint.
    pub fn begin(&mut self, instances: &[String]) {
        for name in instances {
            if let Some(&i) = self.by_name.get(name.as_str()) {
                self.nodes[i].chosen = true;
                self.refresh(i);
            }
        }
    }

    /// A surge of `group`: a new node for each of `instances`, Ready before any is drained.
    pub fn surge(&mut self, group: &str, instances: &[String]) {
        for name in instances {
            self.replaced_early.insert(name.clone());
            self.add_new_node(group, State::Open);
        }
    }

    /// Drains `batch` of `group`: its nodes are cordoned, the pods it evicts placed where they
    /// fit, then its nodes are gone and its replacements Ready.
    pub fn drain(
        &mut self,
        group: &str,
        batch: &[String],
        index: &Index<'a>,
        drain: &DrainOptions,
    ) -> Placed {
        let mut evicted: Vec<&'a Pod> = Vec::new();
        for name in batch {
            if let Some(&i) = self.by_name.get(name.as_str()) {
                self.nodes[i].state = State::Closed;
                self.refresh(i);
                evicted.append(&mut self.nodes[i].moved);
            }
            // A pod no controller owns is deleted for good.
            evicted.extend(health::evicted(index, name, drain).filter(|p| p.controller.is_some()));
        }
        let coming = self.nodes.len();
        for name in batch {
            if !self.replaced_early.contains(name) {
                self.add_new_node(group, State::Coming);
            }
        }
        evicted.sort_by(|a, b| {
            let size = |p: &Pod| (p.requests.cpu, p.requests.memory);
            size(b)
                .cmp(&size(a))
                .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
        });
        let mut placed = Placed::default();
        for pod in evicted {
            if self.place(pod, &[OPEN, OPEN_CHOSEN]) {
                continue;
            }
            let needs = needs(pod);
            let key = pod.id();
            let reason = if self.place(pod, &[COMING]) {
                format!(
                    "fits on no schedulable node until the batch's replacements are Ready ({needs})"
                )
            } else if let Some(why) = self.why_nowhere(pod) {
                add(&mut placed.nowhere, why.clone(), key.clone());
                format!("fits on no node of any group: {why}")
            } else {
                format!(
                    "fits on no schedulable node, not even once the batch's replacements are Ready ({needs}): it stays Pending until room is made"
                )
            };
            add(&mut placed.pending, reason, key);
        }
        for i in coming..self.nodes.len() {
            self.nodes[i].state = State::Open;
            self.refresh(i);
        }
        placed
    }

    /// Adds a node, in the partition of the nodes pods cannot tell it from.
    fn add_node(
        &mut self,
        name: Option<&'a str>,
        shape: Rc<Shape<'a>>,
        used: Resources,
        state: State,
    ) {
        let labels: Labels = self
            .keys
            .iter()
            .filter_map(|k| Some((k.to_string(), shape.labels.get(*k)?.clone())))
            .collect();
        let taints: Vec<Taint> = shape.taints.iter().map(|t| (*t).clone()).collect();
        let signature = (labels, taints);
        let partition = match self.by_signature.get(&signature) {
            Some(&p) => p,
            None => {
                let p = self.partitions.len();
                self.partitions.push(Partition {
                    labels: signature.0.clone(),
                    taints: signature.1.clone(),
                    room: Room::default(),
                    members: Vec::new(),
                });
                self.by_signature.insert(signature, p);
                p
            }
        };
        let node = SimNode {
            name,
            shape,
            used,
            state,
            chosen: false,
            moved: Vec::new(),
            partition,
            slot: 0,
        };
        let part = &mut self.partitions[partition];
        let slot = part.room.push(node.kind(), node.free());
        part.members.push(self.nodes.len());
        self.nodes.push(SimNode { slot, ..node });
    }

    /// A new, empty node of `group`.
    fn add_new_node(&mut self, group: &str, state: State) {
        if let Some(shape) = self.new_node.get(group).cloned() {
            self.add_node(None, shape, Resources::default(), state);
        }
    }

    /// Tells the node's partition what changed of it.
    fn refresh(&mut self, i: usize) {
        let node = &self.nodes[i];
        let room = &mut self.partitions[node.partition].room;
        room.set(node.slot, node.kind(), node.free());
    }

    /// Puts `pod` on the first node of one of `kinds` (in that order) that takes it; false when
    /// none does.
    fn place(&mut self, pod: &'a Pod, kinds: &[usize]) -> bool {
        let placement = &pod.placement;
        let class = self
            .classes
            .entry(placement)
            .or_insert_with(|| Class::new(placement));
        let (nodes, partitions) = (&self.nodes, &self.partitions);
        let by_node = |partition: &Partition, slot: usize| {
            let node = &nodes[partition.members[slot]];
            node.shape.admits(node.name, placement)
        };
        let found = kinds.iter().find_map(|&kind| {
            partitions.iter().enumerate().find_map(|(p, partition)| {
                if !class.admits(placement, p, partition) {
                    return None;
                }
                let slot = partition.room.first(kind, pod.requests, &mut |slot| {
                    !class.by_node || by_node(partition, slot)
                })?;
                Some(partition.members[slot])
            })
        });
        let Some(i) = found else {
            return false;
        };
        let node = &mut self.nodes[i];
        node.used = node.used.plus(pod.requests);
        if node.name.is_some() {
            node.moved.push(pod);
        }
        if !pod.requests.is_zero() {
            self.refresh(i);
        }
        true
    }

    /// Why no node of any group, new or old, empty or not, could ever run `pod`; none when one
    /// could.
    fn why_nowhere(&mut self, pod: &'a Pod) -> Option<String> {
        let placement = &pod.placement;
        let class = self
            .classes
            .entry(placement)
            .or_insert_with(|| Class::new(placement));
        let fresh = &self.fresh;
        match class
            .anywhere
            .get_or_insert_with(|| anywhere(placement, fresh))
        {
            Err(why) => Some(why.clone()),
            Ok(allocatables) if !allocatables.iter().any(|a| pod.requests.fits_in(*a)) => {
                Some(format!(
                    "it requests more than any node it may run on can hold ({})",
                    pod.requests
                ))
            }
            Ok(_) => None,
        }
    }
}

/// The allocatables of the nodes `shapes` that `placement` may run on, or why there is none.
fn anywhere(placement: &Placement, shapes: &[Rc<Shape>]) -> Result<Vec<Resources>, String> {
    let selected: Vec<&Shape> = shapes
        .iter()
        .map(Rc::as_ref)
        .filter(|s| placement.selector_matches(&s.labels))
        .collect();
    if selected.is_empty() {
        let pairs: Vec<String> = placement
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return Err(format!(
            "no node matches its nodeSelector {}",
            pairs.join(",")
        ));
    }
    let affine: Vec<&Shape> = selected
        .into_iter()
        .filter(|s| placement.affinity_matches(None, &s.labels))
        .collect();
    if affine.is_empty() {
        return Err("no node matches its required node affinity".into());
    }
    let mut repelling = None;
    let mut allocatables: Vec<Resources> = Vec::new();
    for shape in affine {
        match placement.repelled_by(shape.taints.iter().copied()) {
            Some(t) => {
                repelling.get_or_insert(t);
            }
            None => allocatables.push(shape.allocatable),
        }
    }
    if let (Some(t), true) = (repelling, allocatables.is_empty()) {
        let value = if t.value.is_empty() {
            String::new()
        } else {
            format!("={}", t.value)
        };
        return Err(format!(
            "every node it may run on has a taint it does not tolerate (such as {}{value}:{})",
            t.key, t.effect
        ));
    }
    allocatables.sort_unstable();
    allocatables.dedup();
    Ok(allocatables)
}

/// What a pod asks for, for a reason.
fn needs(pod: &Pod) -> String {
    if pod.requests.is_zero() {
        "it requests nothing, but no other schedulable node admits it".into()
    } else {
        format!("needs {}", pod.requests)
    }
}

/// Adds `pod` under `reason`, keeping each entry's pods in name order.
fn add(entries: &mut Vec<Pending>, reason: String, pod: String) {
    let at = match entries.iter().position(|e| e.reason == reason) {
        Some(at) => at,
        None => {
            entries.push(Pending {
                pods: Vec::new(),
                reason,
            });
            entries.len() - 1
        }
    };
    let pods = &mut entries[at].pods;
    let slot = pods.binary_search(&pod).unwrap_or_else(|e| e);
    pods.insert(slot, pod);
}

#[cfg(test)]
mod tests;
