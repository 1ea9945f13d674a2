//! Karpenter NodePools, for what their own disruption budgets let Karpenter do to their nodes
//! while a rotation runs (drift, consolidation, expiry).

use serde::Deserialize;

use super::{FromParts, Meta, Snapshot};

/// The API group of Karpenter's objects.
pub const API_GROUP: &str = "karpenter.sh";

/// A NodePool as planning needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePool {
    pub name: String,
    /// `spec.disruption.budgets[].nodes` of the budgets without a schedule (always active);
    /// Karpenter's default, `10%`, when the pool sets none.
    pub standing_budgets: Vec<String>,
}

impl NodePool {
    /// Whether Karpenter may disrupt some of its nodes at any moment: no standing budget
    /// allows none.
    pub fn disrupts(&self) -> bool {
        !self
            .standing_budgets
            .iter()
            .any(|b| matches!(b.trim(), "0" | "0%"))
    }

    /// The warning a plan of `group` gives when the pool's own budgets would also act; `paused`
    /// when the run pauses them while each batch is out (it counts others' disruptions).
    pub fn warning(&self, paused: bool) -> Option<String> {
        let budgets = self.standing_budgets.join(", ");
        self.disrupts().then(|| match paused {
            true => format!(
                "NodePool {} lets Karpenter disrupt nodes of its own while the rotation runs (budgets: {budgets}): the run pauses that while each of its batches is out (budgets set to nodes \"0\", its own put back after) and counts what Karpenter disrupts between batches",
                self.name
            ),
            false => format!(
                "NodePool {} lets Karpenter disrupt nodes of its own while the rotation runs (budgets: {budgets}): more nodes than the plan shows may be unavailable at once; set its spec.disruption.budgets to [{{nodes: \"0\"}}] for the rotation",
                self.name
            ),
        })
    }
}

#[derive(Deserialize, Default)]
pub struct NodePoolSpec {
    #[serde(default)]
    disruption: Disruption,
}

#[derive(Deserialize, Default)]
struct Disruption {
    budgets: Option<Vec<Budget>>,
}

#[derive(Deserialize)]
struct Budget {
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    schedule: Option<String>,
}

impl FromParts for NodePool {
    type Spec = NodePoolSpec;
    type Status = serde::de::IgnoredAny;
    fn from_parts(meta: Meta, spec: NodePoolSpec, _: serde::de::IgnoredAny) -> Self {
        let standing_budgets = match spec.disruption.budgets {
            None => vec!["10%".to_string()],
            Some(budgets) => budgets
                .into_iter()
                .filter(|b| b.schedule.is_none())
                .map(|b| b.nodes.unwrap_or_else(|| "10%".into()))
                .collect(),
        };
        NodePool {
            name: meta.name,
            standing_budgets,
        }
    }
}

impl Snapshot {
    /// The NodePool a group of nodes labelled `karpenter.sh/nodepool` belongs to.
    pub fn node_pool(&self, group: &str) -> Option<&NodePool> {
        self.node_pools.iter().find(|p| p.name == group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(budgets: &str) -> NodePool {
        let json = format!(
            r#"{{"kind": "List", "items": [{{"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {{"name": "general"}}, "spec": {{"disruption": {budgets}}}}}]}}"#
        );
        Snapshot::from_json(json.as_bytes()).unwrap().node_pools[0].clone()
    }

    #[test]
    fn a_pool_disrupts_unless_a_standing_budget_allows_no_node() {
        let default = pool("{}");
        assert_eq!(default.standing_budgets, ["10%"]);
        assert!(default.warning(false).unwrap().contains("budgets: 10%"));
        assert!(
            default
                .warning(true)
                .unwrap()
                .contains("the run pauses that")
        );
        assert!(pool(r#"{"budgets": [{"nodes": "20%"}, {"nodes": "5"}]}"#).disrupts());
        assert!(!pool(r#"{"budgets": [{"nodes": "20%"}, {"nodes": "0"}]}"#).disrupts());
        // A scheduled budget is not always active: it does not stop the others.
        let scheduled = pool(
            r#"{"budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "1"}]}"#,
        );
        assert_eq!(scheduled.standing_budgets, ["1"]);
        assert!(scheduled.disrupts());
    }
}
