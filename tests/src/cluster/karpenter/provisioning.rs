//! The stand-in's scheduling arithmetic: which pending pods a NodePool is for, and how many new
//! NodeClaims they need once the room left on the pool's nodes (and on those still booting) is
//! counted, as Karpenter's provisioner simulates it before it launches anything.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Pod, PodSpec, Toleration};
use kube::ResourceExt;
use kube::api::DynamicObject;

use super::NODEPOOL_LABEL;

/// What a simulated node offers, as [`super::super::NodeSim`] reports it.
pub(super) const NODE_CPU: f64 = 8.0;
pub(super) const NODE_MEMORY: f64 = 32.0 * 1024.0 * 1024.0 * 1024.0;
const NODE_PODS: usize = 110;
/// How many NodeClaims a pool may have when its `spec.limits.nodes` says nothing: a stand-in
/// that misjudges never floods the cluster.
const DEFAULT_NODE_LIMIT: usize = 50;

/// Room on a node, or what a pod asks for: CPUs, bytes of memory, pod slots.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Room {
    cpu: f64,
    memory: f64,
    pods: f64,
}

impl Room {
    /// An empty node that takes `pods` pods (DaemonSet pods aside).
    fn node(pods: usize) -> Room {
        Room {
            cpu: NODE_CPU,
            memory: NODE_MEMORY,
            pods: pods as f64,
        }
    }
    fn fits(&self, pod: &Room) -> bool {
        const EPSILON: f64 = 1e-9;
        pod.cpu <= self.cpu + EPSILON
            && pod.memory <= self.memory + EPSILON
            && pod.pods <= self.pods + EPSILON
    }
    fn take(&mut self, pod: &Room) {
        self.cpu -= pod.cpu;
        self.memory -= pod.memory;
        self.pods -= pod.pods;
    }
}

/// A Kubernetes quantity ("500m", "2", "1.5Gi", "1e3") in base units.
fn quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(end);
    let number: f64 = number.parse().ok()?;
    let binary = |power: i32| 1024f64.powi(power);
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        exponent if exponent.starts_with(['e', 'E']) => 10f64.powi(exponent[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

/// What `pod` asks of a node: its containers' requests, or its largest init container's if more
/// (as the scheduler counts); a DaemonSet's pod takes no pod slot.
pub(super) fn requests(pod: &Pod) -> Room {
    let Some(spec) = &pod.spec else {
        return Room::default();
    };
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let get = |name: &str| {
            requests
                .and_then(|r| r.get(name))
                .and_then(|q| quantity(&q.0))
                .unwrap_or(0.0)
        };
        (get("cpu"), get("memory"))
    };
    let (mut cpu, mut memory) = spec
        .containers
        .iter()
        .map(of)
        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    for (c, m) in spec.init_containers.iter().flatten().map(of) {
        cpu = f64::max(cpu, c);
        memory = f64::max(memory, m);
    }
    Room {
        cpu,
        memory,
        pods: if is_daemon(pod) { 0.0 } else { 1.0 },
    }
}

pub(super) fn is_daemon(pod: &Pod) -> bool {
    pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the scheduler gave up on `pod` for now: Pending, unbound, PodScheduled=False with
/// reason Unschedulable.
fn is_unschedulable(pod: &Pod) -> bool {
    let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let status = pod.status.as_ref();
    let pending = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending") == "Pending";
    let refused = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
    pending && !bound && refused && pod.metadata.deletion_timestamp.is_none()
}

/// The labels a node of `pool` carries besides those NodeSim gives every node: the template's,
/// the first value of each `In` requirement (the value the stand-in picks), the pool's own, and
/// those Karpenter adds when the node registers and initializes.
pub(super) fn node_labels(pool: &DynamicObject) -> BTreeMap<String, String> {
    let template = &pool.data["spec"]["template"];
    let mut labels = BTreeMap::new();
    for requirement in template["spec"]["requirements"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let first = requirement["values"].as_array().and_then(|v| v.first());
        if let (Some(key), Some("In"), Some(value)) = (
            requirement["key"].as_str(),
            requirement["operator"].as_str(),
            first.and_then(|v| v.as_str()),
        ) {
            labels.insert(key.to_string(), value.to_string());
        }
    }
    for (key, value) in template["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if let Some(value) = value.as_str() {
            labels.insert(key.clone(), value.to_string());
        }
    }
    labels.insert(NODEPOOL_LABEL.into(), pool.name_any());
    labels.insert("karpenter.sh/registered".into(), "true".into());
    labels.insert("karpenter.sh/initialized".into(), "true".into());
    labels
}

fn matches(requirement: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&requirement.key);
    let values = requirement.values.as_deref().unwrap_or_default();
    let compare = |ordering: std::cmp::Ordering| {
        let label = value.and_then(|v| v.parse::<i64>().ok());
        let bound = values.first().and_then(|v| v.parse::<i64>().ok());
        matches!((label, bound), (Some(l), Some(b)) if l.cmp(&b) == ordering)
    };
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => !value.is_some_and(|v| values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

fn tolerates(tolerations: &[Toleration], taint: &serde_json::Value) -> bool {
    let (key, value, effect) = (
        taint["key"].as_str().unwrap_or_default(),
        taint["value"].as_str().unwrap_or_default(),
        taint["effect"].as_str().unwrap_or_default(),
    );
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == effect);
        let key_ok = match t.operator.as_deref() {
            Some("Exists") => t.key.as_deref().is_none_or(|k| k.is_empty() || k == key),
            _ => t.key.as_deref() == Some(key) && t.value.as_deref().unwrap_or_default() == value,
        };
        effect_ok && key_ok
    })
}

/// Whether a node of `pool` (with `labels`) could take a pod of `spec`: its nodeSelector, its
/// required node affinity, its tolerations of the template's taints. Pod (anti-)affinity,
/// topology spread and host ports are not simulated.
fn compatible(spec: &PodSpec, pool: &DynamicObject, labels: &BTreeMap<String, String>) -> bool {
    let mut labels = labels.clone();
    labels.insert("kubernetes.io/os".into(), "linux".into());
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_ok = required.is_none_or(|r| {
        r.node_selector_terms.iter().any(|term| {
            term.match_fields.as_ref().is_none_or(|f| f.is_empty())
                && term
                    .match_expressions
                    .iter()
                    .flatten()
                    .all(|e| matches(e, &labels))
        })
    });
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    let taints_ok = pool.data["spec"]["template"]["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
        .all(|t| tolerates(tolerations, t));
    selector_ok && affinity_ok && taints_ok
}

/// Whether the scheduler may place pods on `node` now: schedulable, not tainted against them,
/// not reporting NotReady. The not-ready and unreachable taints follow the Ready condition, which
/// decides instead (a node that just registered carries them for a moment).
fn takes_pods(node: &Node) -> bool {
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable) == Some(true);
    let transient = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ];
    let tainted = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.effect != "PreferNoSchedule" && !transient.contains(&t.key.as_str()));
    let not_ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "False");
    !cordoned && !tainted && !not_ready
}

/// The pool's `spec.limits.nodes`, a number or a string (the stand-in's own limit).
fn node_limit(pool: &DynamicObject) -> usize {
    let limit = &pool.data["spec"]["limits"]["nodes"];
    limit
        .as_u64()
        .map(|n| n as usize)
        .or_else(|| limit.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(DEFAULT_NODE_LIMIT)
}

/// What the arithmetic looks at, read from the stand-in's watches.
pub(super) struct View<'a> {
    pub pods: &'a [std::sync::Arc<Pod>],
    pub nodes: &'a [std::sync::Arc<Node>],
    pub claims: &'a [std::sync::Arc<DynamicObject>],
    /// NodeClaims created but not yet seen by the watch, with their pools.
    pub unseen: &'a BTreeMap<String, String>,
    /// How many NodePools there are: a pod that names none is for the only one.
    pub pools: usize,
    pub pods_per_node: usize,
}

/// How many NodeClaims `pool` needs for the pending pods that are for it, within its limit.
pub(super) fn needed(pool: &DynamicObject, view: &View) -> usize {
    let name = pool.name_any();
    let labels = node_labels(pool);
    let of_pool =
        |c: &&std::sync::Arc<DynamicObject>| c.labels().get(NODEPOOL_LABEL) == Some(&name);
    let claims: Vec<_> = view.claims.iter().filter(of_pool).collect();
    let unseen: Vec<&String> = (view.unseen.iter())
        .filter(|(claim, pool)| **pool == name && !claims.iter().any(|c| c.name_any() == **claim))
        .map(|(claim, _)| claim)
        .collect();
    let existing = claims.len() + unseen.len();
    let room_left = node_limit(pool).saturating_sub(existing);
    if room_left == 0 {
        return 0;
    }

    // Room on the pool's nodes that take pods, and on those still booting. A node up takes what
    // the scheduler puts there; one booting, the pods provisioning meant it for.
    let booting = Room::node(view.pods_per_node);
    let mut bins: Vec<Room> = unseen.iter().map(|_| booting).collect();
    for claim in claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let node_name = (claim.data["status"]["nodeName"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| super::node_of(&claim.name_any()));
        let node = view.nodes.iter().find(|n| n.name_any() == node_name);
        if node.is_some_and(|n| !takes_pods(n)) {
            continue;
        }
        let mut room = if node.is_some() {
            Room::node(NODE_PODS)
        } else {
            booting
        };
        for pod in view.pods.iter().filter(|p| !is_terminal(p)) {
            if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str()) {
                room.take(&requests(pod));
            }
        }
        bins.push(room);
    }

    let mut pending: Vec<&Pod> = view
        .pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| is_unschedulable(p))
        .filter(|p| {
            let spec = p.spec.as_ref().expect("an unschedulable pod has a spec");
            let named = spec
                .node_selector
                .as_ref()
                .and_then(|s| s.get(NODEPOOL_LABEL));
            let for_pool = named.map_or(view.pools == 1, |n| *n == name);
            for_pool && compatible(spec, pool, &labels)
        })
        .collect();
    pending.sort_by_key(|p| {
        (
            p.metadata.creation_timestamp.clone(),
            p.namespace(),
            p.name_any(),
        )
    });

    let mut new = 0;
    for pod in pending {
        let asks = requests(pod);
        if let Some(bin) = bins.iter_mut().find(|b| b.fits(&asks)) {
            bin.take(&asks);
        } else if booting.fits(&asks) {
            let mut bin = booting;
            bin.take(&asks);
            bins.push(bin);
            new += 1;
        }
        // A pod no node of the pool could ever hold waits: Karpenter would not launch for it.
    }
    new.min(room_left)
}

#[cfg(test)]
mod tests {
    use super::quantity;

    #[test]
    fn quantities_in_base_units() {
        assert_eq!(quantity("500m"), Some(0.5));
        assert_eq!(quantity("3"), Some(3.0));
        assert_eq!(quantity("1Gi"), Some(1024.0 * 1024.0 * 1024.0));
        assert_eq!(quantity("2k"), Some(2000.0));
        assert_eq!(quantity("1e3"), Some(1000.0));
        assert_eq!(quantity("1E"), Some(1e18));
        assert_eq!(quantity("bogus"), None);
    }
}
