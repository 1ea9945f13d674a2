//! Synthetic clusters for benchmarks: N nodes in G groups across Z zones, P pods per node (one
//! from a DaemonSet, the rest from ReplicaSets), and PodDisruptionBudgets over the apps, as the
//! `v1` `List` the plugin reads. Deterministic from a seed.

use serde_json::{Value, json};

/// The shape of a synthetic cluster.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub nodes: usize,
    pub groups: usize,
    pub zones: usize,
    pub pods_per_node: usize,
    pub pdbs: usize,
    pub seed: u64,
}

/// A small deterministic generator (SplitMix64): the same seed gives the same cluster.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The synthetic cluster as a `v1` `List`.
pub fn cluster(shape: Shape) -> Value {
    let mut rng = SplitMix(shape.seed);
    // As many apps as budgets (at least 50), each with a PDB when there are enough.
    let apps = shape.pdbs.max(50);
    let mut items = Vec::with_capacity(shape.nodes * (shape.pods_per_node + 1) + shape.pdbs);
    for i in 0..shape.nodes {
        let group = i % shape.groups.max(1);
        let zone = (i / shape.groups.max(1)) % shape.zones.max(1);
        let name = format!("node-{i:05}");
        let outdated = rng.below(10) < 7;
        items.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kops.k8s.io/instancegroup": format!("nodes-{group:02}"),
                    "topology.kubernetes.io/zone": format!("zone-{zone}"),
                },
                "creationTimestamp": format!("2026-{:02}-{:02}T08:00:00Z", 1 + rng.below(9), 1 + rng.below(28)),
            },
            "spec": {"providerID": format!("sim:///zone-{zone}/i-{i:08x}")},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": if outdated { "v1.19.7" } else { "v1.20.2" }},
            },
        }));
        for p in 0..shape.pods_per_node {
            let (owner_kind, owner, app) = if p == 0 {
                (
                    "DaemonSet",
                    "node-agent".to_string(),
                    "node-agent".to_string(),
                )
            } else {
                let app = rng.below(apps);
                (
                    "ReplicaSet",
                    format!("app-{app:04}-5d8f7"),
                    format!("app-{app:04}"),
                )
            };
            items.push(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": format!("{owner}-{i:05}-{p:02}"),
                    "namespace": format!("ns-{:02}", p % 20),
                    "labels": {"app": app},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "uid": format!("uid-{owner}"), "controller": true}],
                },
                "spec": {"nodeName": name, "containers": [{"name": "main", "image": "registry.invalid/app:1"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }));
        }
    }
    for b in 0..shape.pdbs {
        items.push(json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": format!("app-{b:04}"), "namespace": format!("ns-{:02}", b % 20)},
            "spec": {"selector": {"matchLabels": {"app": format!("app-{b:04}")}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": i64::from(rng.below(4) != 0)},
        }));
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_cluster_and_the_shape_holds() {
        let shape = Shape {
            nodes: 20,
            groups: 3,
            zones: 2,
            pods_per_node: 5,
            pdbs: 7,
            seed: 42,
        };
        let a = cluster(shape);
        assert_eq!(a, cluster(shape));
        assert_ne!(a, cluster(Shape { seed: 43, ..shape }));
        let items = a["items"].as_array().unwrap();
        let count = |kind: &str| items.iter().filter(|i| i["kind"] == kind).count();
        assert_eq!(count("Node"), 20);
        assert_eq!(count("Pod"), 100);
        assert_eq!(count("PodDisruptionBudget"), 7);
        let plan = rollout_ext::snapshot::Snapshot::from_json(a.to_string().as_bytes()).unwrap();
        assert_eq!(plan.nodes.len(), 20);
    }
}
