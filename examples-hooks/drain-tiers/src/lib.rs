//! drain-tiers: the `drain-order` point (contract 0.3.1). A node's pods leave tier by tier, as
//! the config lists the values of a label (`tier` unless `label` names another):
//! `{"tiers": ["frontend", "backend"]}` evicts the frontend pods first, and the backend pods
//! only once those are gone; pods of other tiers, or none, go after, in the policy's order.

use rollout_ext_hooks::*;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "tier")]
    label: String,
    tiers: Vec<String>,
}

fn tier() -> String {
    "tier".into()
}

pub struct DrainTiers;

#[policy]
impl Policy for DrainTiers {
    const NAME: &'static str = "drain-tiers";

    fn validate_config(config: &str) -> Result<(), String> {
        check_config::<Config>(config)
    }

    fn drain_order(ctx: &Context, _node: &str, pods: &[DrainPod]) -> Result<DrainOrder, String> {
        let cfg: Config = config(ctx)?;
        let turns = cfg.tiers.iter().map(|tier| {
            let of_tier = pods
                .iter()
                .filter(|p| p.label(&cfg.label) == Some(tier.as_str()));
            of_tier.map(DrainPod::id).collect()
        });
        Ok(DrainOrder::Turns(turns.collect()))
    }
}

export_policy!(DrainTiers);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::testing::context;

    fn pod(name: &str, tier: Option<&str>) -> DrainPod {
        DrainPod {
            namespace: "shop".into(),
            name: name.into(),
            owner_kind: Some("ReplicaSet".into()),
            owner_name: Some("rs".into()),
            priority_class: None,
            ready: true,
            labels: tier
                .map(|t| KeyValue {
                    key: "tier".into(),
                    value: t.into(),
                })
                .into_iter()
                .collect(),
            annotations: vec![],
        }
    }

    #[test]
    fn tiers_leave_in_the_configured_order() {
        let ctx = context(0, serde_json::json!({"tiers": ["frontend", "backend"]}));
        let pods = [
            pod("db", Some("backend")),
            pod("web", Some("frontend")),
            pod("misc", None),
        ];
        let order = DrainTiers::drain_order(&ctx, "n1", &pods).unwrap();
        assert_eq!(
            order,
            DrainOrder::Turns(vec![vec!["shop/web".into()], vec!["shop/db".into()]])
        );
        assert!(DrainTiers::validate_config(r#"{"tier": []}"#).is_err());
    }
}
