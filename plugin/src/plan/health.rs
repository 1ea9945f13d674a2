//! The cluster's health as the built-in validation judges it (kops' `validate cluster`: every
//! node Ready, no unschedulable node outside the run, system pods Ready), and the
//! PodDisruptionBudgets that cover a batch.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::keys;
use crate::plan::drain::{DrainOptions, PodFate, classify};
use crate::plan::groups::NodeGroup;
use crate::plan::hook::{BudgetCover, HealthSummary};
use crate::snapshot::{Pdb, Pod, Snapshot};

/// How many failures a summary spells out before it just counts.
const LISTED_FAILURES: usize = 10;

/// Lookups built once per snapshot.
pub struct Index<'a> {
    pub pods_by_node: BTreeMap<&'a str, Vec<&'a Pod>>,
    /// Budgets with `matchLabels`, each under one of its pairs: a pod can only be selected by
    /// those found under its own labels, so matching costs the pod's labels, not the namespace's
    /// budgets (thousands in a large cluster).
    pdbs_by_label: HashMap<(&'a str, &'a str, &'a str), Vec<&'a Pdb>>,
    /// Budgets selecting by expressions only (or everything): checked against every pod of
    /// their namespace.
    pdbs_unindexed: HashMap<&'a str, Vec<&'a Pdb>>,
}

impl<'a> Index<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Self {
        let mut pdbs_by_label: HashMap<(&str, &str, &str), Vec<&Pdb>> = HashMap::new();
        let mut pdbs_unindexed: HashMap<&str, Vec<&Pdb>> = HashMap::new();
        for pdb in &snapshot.pdbs {
            let namespace = pdb.namespace.as_str();
            match pdb.selector.match_labels.iter().next() {
                Some((key, value)) => pdbs_by_label
                    .entry((namespace, key.as_str(), value.as_str()))
                    .or_default()
                    .push(pdb),
                None => pdbs_unindexed.entry(namespace).or_default().push(pdb),
            }
        }
        Index {
            pods_by_node: snapshot.pods_by_node(),
            pdbs_by_label,
            pdbs_unindexed,
        }
    }

    pub fn pods_on(&self, node: &str) -> &[&'a Pod] {
        self.pods_by_node.get(node).map_or(&[], Vec::as_slice)
    }

    /// The runner pods of runs handed to the cluster on `nodes`, as `namespace/pod on node`:
    /// draining their node moves the run (its Job's next pod resumes it).
    pub fn runners_on(&self, nodes: &[String]) -> Vec<String> {
        (nodes.iter())
            .flat_map(|node| {
                (self.pods_on(node).iter())
                    .filter(|p| p.is_runner())
                    .map(move |p| format!("{} on {node}", p.id()))
            })
            .collect()
    }

    /// The budgets that select `pod`. Each is found once: a budget is indexed under one pair
    /// and a pod has one value per key.
    pub fn budgets_of<'p>(&'p self, pod: &'p Pod) -> impl Iterator<Item = &'a Pdb> + 'p {
        let namespace = pod.namespace.as_str();
        let labels = &pod.labels;
        let by_label = labels.iter().flat_map(move |(key, value)| {
            self.pdbs_by_label
                .get(&(namespace, key.as_str(), value.as_str()))
                .into_iter()
                .flatten()
        });
        by_label
            .chain(self.pdbs_unindexed.get(namespace).into_iter().flatten())
            .copied()
            .filter(move |pdb| pdb.selector.matches(labels))
    }
}

/// Whether a pod counts toward readiness: running or about to, not finished or leaving.
fn counts(pod: &Pod) -> bool {
    !pod.finished && !pod.terminating
}

/// Health of the whole cluster plus the budgets covering the pods a drain of `batch` would move.
/// Nodes in `cordoned_by_run` are unschedulable on purpose and do not fail validation.
pub fn summarize(
    snapshot: &Snapshot,
    index: &Index,
    batch: &[&str],
    cordoned_by_run: &HashSet<&str>,
    drain: &DrainOptions,
) -> HealthSummary {
    // Machines without a Node are instances to replace, not nodes of the cluster.
    let nodes = snapshot.nodes.iter().filter(|n| n.registered);
    let mut s = HealthSummary {
        nodes_total: nodes.clone().count() as u32,
        ..Default::default()
    };
    let mut failures = Vec::new();
    for node in nodes {
        if !node.ready {
            s.nodes_not_ready += 1;
            failures.push(format!("node {} is not Ready", node.name));
        }
        if node.unschedulable && !cordoned_by_run.contains(node.name.as_str()) {
            s.nodes_unschedulable += 1;
            failures.push(format!("node {} is unschedulable", node.name));
        }
    }
    for pod in snapshot.pods.iter().filter(|p| counts(p)) {
        s.pods_total += 1;
        if !pod.ready {
            s.pods_not_ready += 1;
            if keys::SYSTEM_NAMESPACES.contains(&pod.namespace.as_str()) {
                s.system_pods_not_ready += 1;
                failures.push(format!(
                    "system pod {}/{} is not Ready",
                    pod.namespace, pod.name
                ));
            }
        }
    }
    if failures.len() > LISTED_FAILURES {
        let more = failures.len() - LISTED_FAILURES;
        failures.truncate(LISTED_FAILURES);
        failures.push(format!("and {more} more"));
    }
    s.failures = failures;
    s.budgets = budgets_covering(index, batch, drain);
    s
}

/// The pods a drain of `node` evicts that are still running or about to (a finished or
/// terminating pod has nothing left to disrupt or to place elsewhere).
pub fn evicted<'a, 'i>(
    index: &'i Index<'a>,
    node: &str,
    drain: &'i DrainOptions,
) -> impl Iterator<Item = &'a Pod> + 'i {
    index
        .pods_on(node)
        .iter()
        .copied()
        .filter(move |pod| classify(pod, drain).is_evicted() && counts(pod))
}

/// What of `snapshot` a live run watches, and so what the health hooks are shown counts: every
/// node, and the pods on the nodes of `groups` and of the system namespaces (a pod elsewhere,
/// which the run never touches, is not read; see `cluster::view`). Budgets are left out: the
/// summary's are the batch's, read from the whole snapshot.
pub fn watched(snapshot: &Snapshot, groups: &[NodeGroup]) -> Snapshot {
    let nodes: HashSet<&str> = groups
        .iter()
        .flat_map(|g| g.nodes.iter().map(|n| n.name.as_str()))
        .collect();
    Snapshot {
        nodes: snapshot.nodes.clone(),
        pods: (snapshot.pods.iter())
            .filter(|p| {
                keys::SYSTEM_NAMESPACES.contains(&p.namespace.as_str())
                    || p.node_name.as_deref().is_some_and(|n| nodes.contains(n))
            })
            .cloned()
            .collect(),
        ..Snapshot::default()
    }
}

/// The cluster's health after a batch, as a plan simulates it: the batch's nodes replaced by
/// up-to-date Ready ones, and the pods it evicted placed as the capacity forecast placed them:
/// those it found no room for are not Ready (and fail validation when they are system pods).
pub fn after_batch(
    before: &HealthSummary,
    forecast: Option<&crate::plan::forecast::Forecast>,
) -> HealthSummary {
    let mut after = before.clone();
    let pending = forecast
        .into_iter()
        .flat_map(|f| &f.pending)
        .flat_map(|p| &p.pods);
    for pod in pending {
        after.pods_not_ready += 1;
        let system = (keys::SYSTEM_NAMESPACES.iter())
            .any(|ns| pod.split_once('/').is_some_and(|(n, _)| n == *ns));
        if system {
            after.system_pods_not_ready += 1;
            if after.failures.len() < LISTED_FAILURES {
                after.failures.push(format!(
                    "system pod {pod} is not Ready (no room for it after the batch)"
                ));
            }
        }
    }
    after
}

/// The pods that draining `batch` would evict, under each budget that covers them (by namespace
/// and name) and that the eviction would take a disruption of (see [`Pdb::guards`]): what the
/// gates are told and what the drain forecast judges.
pub fn evictions_by_budget<'a>(
    index: &Index<'a>,
    batch: &[&str],
    drain: &DrainOptions,
) -> BTreeMap<(&'a str, &'a str), (&'a Pdb, Vec<&'a Pod>)> {
    let mut covered: BTreeMap<(&str, &str), (&Pdb, Vec<&Pod>)> = BTreeMap::new();
    for node in batch {
        for pod in evicted(index, node, drain) {
            for pdb in index.budgets_of(pod).filter(|b| b.guards(pod)) {
                covered
                    .entry((pdb.namespace.as_str(), pdb.name.as_str()))
                    .or_insert_with(|| (pdb, Vec::new()))
                    .1
                    .push(pod);
            }
        }
    }
    covered
}

/// The pods on `node` that a drain evicts and that more than one budget selects, under the
/// budgets' names (`ns/a, ns/b`): the eviction API refuses each of them (500) whatever the
/// budgets allow. A Pending pod is evicted without a budget being asked.
pub fn under_several_budgets<'a>(
    index: &Index<'a>,
    node: &str,
    drain: &DrainOptions,
) -> BTreeMap<String, Vec<&'a Pod>> {
    let mut several: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    if drain.disable_eviction {
        return several;
    }
    for pod in evicted(index, node, drain).filter(|p| !p.pending) {
        let mut names: Vec<String> = (index.budgets_of(pod))
            .map(|b| format!("{}/{}", b.namespace, b.name))
            .collect();
        if names.len() > 1 {
            names.sort_unstable();
            several.entry(names.join(", ")).or_default().push(pod);
        }
    }
    several
}

/// The budgets covering pods that draining `batch` would evict, with how many pods each covers.
pub fn budgets_covering(index: &Index, batch: &[&str], drain: &DrainOptions) -> Vec<BudgetCover> {
    evictions_by_budget(index, batch, drain)
        .into_values()
        .map(|(pdb, pods)| BudgetCover {
            namespace: pdb.namespace.clone(),
            name: pdb.name.clone(),
            disruptions_allowed: pdb.disruptions_allowed,
            pods_in_batch: pods.len() as u32,
        })
        .collect()
}

/// The first five of `items`, and how many more there are: a list a message can carry.
pub fn listed(items: &[String]) -> String {
    let shown: Vec<&str> = items.iter().take(5).map(String::as_str).collect();
    match items.len().saturating_sub(5) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// Why a drain of `nodes` could not finish right now: refused pods and pods whose budget allows
/// no disruption. One line per budget or refusal reason.
pub fn drain_blockers(index: &Index, nodes: &[&str], drain: &DrainOptions) -> Vec<String> {
    let mut refused: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut blocked: BTreeMap<(&str, &str, i32), Vec<String>> = BTreeMap::new();
    for node in nodes {
        for pod in index.pods_on(node) {
            match classify(pod, drain) {
                PodFate::Refuse(reason) => refused
                    .entry(reason)
                    .or_default()
                    .push(format!("{}/{} on {node}", pod.namespace, pod.name)),
                PodFate::Evict { .. } if !drain.disable_eviction && counts(pod) => {
                    let refusing = |p: &&Pdb| p.guards(pod) && p.disruptions_allowed <= 0;
                    for pdb in index.budgets_of(pod).filter(refusing) {
                        blocked
                            .entry((&pdb.namespace, &pdb.name, pdb.disruptions_allowed))
                            .or_default()
                            .push(format!("{}/{} on {node}", pod.namespace, pod.name));
                    }
                }
                _ => {}
            }
        }
    }
    let mut several: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in nodes {
        for (budgets, pods) in under_several_budgets(index, node, drain) {
            let pods = pods.iter().map(|p| format!("{} on {node}", p.id()));
            several.entry(budgets).or_default().extend(pods);
        }
    }
    let mut lines: Vec<String> = refused
        .into_iter()
        .map(|(reason, pods)| {
            format!(
                "drain would refuse {} pod(s) that {reason}: {}",
                pods.len(),
                listed(&pods)
            )
        })
        .collect();
    lines.extend(blocked.into_iter().map(|((ns, name, allowed), pods)| {
        format!(
            "PodDisruptionBudget {ns}/{name} allows {allowed} disruptions now: eviction of {} pod(s) would be refused: {}",
            pods.len(),
            listed(&pods)
        )
    }));
    lines.extend(several.into_iter().map(|(budgets, pods)| {
        format!(
            "PodDisruptionBudgets {budgets} all select {} pod(s), and the eviction API refuses to evict a pod that more than one budget selects: {}; the drain would stop there",
            pods.len(),
            listed(&pods)
        )
    }));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Budgets by labels, by expressions, selecting everything, or in another namespace.
    const SNAPSHOT: &str = r#"{"kind": "List", "apiVersion": "v1", "items": [
      {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "web-1", "namespace": "a", "labels": {"app": "web", "tier": "front"}}, "spec": {"nodeName": "n1"}},
      {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "by-app", "namespace": "a"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}},
      {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "by-both", "namespace": "a"}, "spec": {"selector": {"matchLabels": {"app": "web", "tier": "front"}}}},
      {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "other-tier", "namespace": "a"}, "spec": {"selector": {"matchLabels": {"app": "web", "tier": "back"}}}},
      {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "by-expression", "namespace": "a"}, "spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}}},
      {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "everything", "namespace": "a"}, "spec": {"selector": {}}},
      {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": "elsewhere", "namespace": "b"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}
    ]}"#;

    #[test]
    fn a_pod_is_covered_by_each_matching_budget_of_its_namespace_once() {
        let snapshot = Snapshot::from_json(SNAPSHOT.as_bytes()).unwrap();
        let index = Index::new(&snapshot);
        let mut names: Vec<&str> = index
            .budgets_of(&snapshot.pods[0])
            .map(|p| p.name.as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["by-app", "by-both", "by-expression", "everything"]);
    }
}
