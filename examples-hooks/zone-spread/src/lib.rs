//! Zone spread: update instances so that consecutive updates alternate zones, and never take more
//! than `maxPerZone` instances of one zone in a batch.
//!
//! Config: `{"maxPerZone": 1}` (default 1).

use std::collections::{BTreeMap, HashMap};

use rollout_ext_hooks::{
    BatchSize, Choice, Context, Group, Instance, Instances, Policy, Progress, Selection, config,
    export_policy, parse_config, policy, zone,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default = "one")]
    max_per_zone: u32,
}

fn one() -> u32 {
    1
}

impl Config {
    fn parse(ctx: &Context) -> Result<Config, String> {
        let cfg: Config = config(ctx)?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        if self.max_per_zone == 0 {
            return Err("maxPerZone must be at least 1".into());
        }
        Ok(())
    }
}

pub struct ZoneSpread;

#[policy]
impl Policy for ZoneSpread {
    const NAME: &'static str = "zone-spread";

    fn validate_config(config: &str) -> Result<(), String> {
        parse_config::<Config>(config)?.check()
    }

    /// Interleaves the candidates the built-in rules chose zone by zone, the largest zones first,
    /// keeping the built-in order within a zone. Reads only the zone, a field of each candidate:
    /// no label is asked of the host. An instance an earlier hook forced stays forced.
    ///
    /// Written for groups of thousands: a zone's name is copied once per zone, a round's number
    /// formatted once per round, and each choice takes its candidate's name and extends its
    /// reason rather than copying them.
    fn select(_ctx: &Context, _group: &Group, candidates: &Instances) -> Result<Selection, String> {
        let mut by_zone: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
        for c in candidates.iter().filter(|c| c.reason.is_some()) {
            let instance = c.into_instance();
            match by_zone.get_mut(zone(&instance)) {
                Some(members) => members.push(instance),
                None => {
                    by_zone.insert(zone(&instance).to_string(), vec![instance]);
                }
            }
        }
        let mut zones: Vec<(String, Vec<Instance>)> = by_zone.into_iter().collect();
        zones.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));

        let total = zones.iter().map(|z| z.1.len()).sum();
        let longest = zones.first().map_or(0, |z| z.1.len());
        let mut zones: Vec<(String, std::vec::IntoIter<Instance>)> = zones
            .into_iter()
            .map(|(name, members)| (name, members.into_iter()))
            .collect();
        let mut choices = Vec::with_capacity(total);
        for round in 1..=longest {
            let round = round.to_string();
            for (zone_name, members) in &mut zones {
                let Some(instance) = members.next() else {
                    continue;
                };
                let zone_name = if zone_name.is_empty() {
                    "none"
                } else {
                    zone_name
                };
                let mut reason = instance.reason.unwrap_or_else(|| "selected".into());
                let parts = ["; zone ", zone_name, ", round ", &round];
                reason.reserve(parts.iter().map(|p| p.len()).sum());
                for part in parts {
                    reason.push_str(part);
                }
                // An up-to-date instance is in the choice only because an earlier hook
                // forced it: keep it forced.
                choices.push(if instance.up_to_date {
                    Choice::forced(instance.name, reason)
                } else {
                    Choice::new(instance.name, reason)
                });
            }
        }
        Ok(Selection::Choose(choices))
    }

    /// The longest prefix of the pending instances with at most `maxPerZone` per zone. Reads
    /// pending instances only until a zone is full.
    fn next_batch(ctx: &Context, progress: &Progress) -> Result<BatchSize, String> {
        let cfg = Config::parse(ctx)?;
        let mut per_zone: HashMap<String, u32> = HashMap::new();
        let mut size = 0;
        let mut full = None;
        for instance in progress.pending.iter().take(progress.max_batch as usize) {
            let count = per_zone.entry(zone(&instance).to_string()).or_default();
            if *count == cfg.max_per_zone {
                full = Some(zone(&instance).to_string());
                break;
            }
            *count += 1;
            size += 1;
        }
        let cap = format!("zone cap: at most {} per zone", cfg.max_per_zone);
        let reason = match full {
            Some(z) => format!(
                "{cap}; zone {} would repeat next",
                if z.is_empty() { "none" } else { &z }
            ),
            None => format!("{cap}; no zone repeats"),
        };
        Ok(BatchSize::size(size.max(1), reason))
    }
}

export_policy!(ZoneSpread);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::testing::{candidates, context, group, node, progress};
    use serde_json::json;

    fn names(selection: Selection) -> Vec<String> {
        match selection {
            Selection::Choose(c) => c.into_iter().map(|c| c.name).collect(),
            Selection::Defer => panic!("zone-spread never defers selection"),
        }
    }

    #[test]
    fn interleaves_zones_largest_first() {
        let nodes = vec![
            node("a1", "a"),
            node("a2", "a"),
            node("a3", "a"),
            node("b1", "b"),
            node("c1", "c"),
            node("b2", "b"),
        ];
        let ctx = context(0, json!({}));
        let g = group(&nodes, 0, 1);
        let order = names(ZoneSpread::select(&ctx, &g, &candidates(nodes)).unwrap());
        assert_eq!(order, ["a1", "b1", "c1", "a2", "b2", "a3"]);
    }

    #[test]
    fn leaves_instances_out_of_the_choice_out() {
        let nodes = vec![
            node("a1", "a"),
            node("b1", "b").up_to_date(),
            node("c1", "c").with_reason(None),
        ];
        let ctx = context(0, json!({}));
        let g = group(&nodes, 0, 1);
        let order = names(ZoneSpread::select(&ctx, &g, &candidates(nodes)).unwrap());
        assert_eq!(order, ["a1"]);
    }

    #[test]
    fn forces_only_what_an_earlier_hook_forced() {
        let nodes = vec![
            node("a1", "a"),
            node("b1", "b")
                .up_to_date()
                .with_reason(Some("forced earlier")),
        ];
        let ctx = context(0, json!({}));
        let g = group(&nodes, 0, 1);
        let Selection::Choose(choices) = ZoneSpread::select(&ctx, &g, &candidates(nodes)).unwrap()
        else {
            panic!("zone-spread never defers selection")
        };
        let forced: Vec<_> = choices.iter().map(|c| (c.name.as_str(), c.force)).collect();
        assert_eq!(forced, [("a1", false), ("b1", true)]);
    }

    #[test]
    fn batch_stops_before_a_zone_repeats() {
        let pending = vec![
            node("a1", "a"),
            node("b1", "b"),
            node("a2", "a"),
            node("c1", "c"),
        ];
        let p = progress(group(&pending, 0, 4), pending, 1, 1);
        let size = ZoneSpread::next_batch(&context(0, json!({"maxPerZone": 1})), &p).unwrap();
        assert_eq!(
            size,
            BatchSize::size(2, "zone cap: at most 1 per zone; zone a would repeat next")
        );
        let size = ZoneSpread::next_batch(&context(0, json!({"maxPerZone": 2})), &p).unwrap();
        assert_eq!(
            size,
            BatchSize::size(4, "zone cap: at most 2 per zone; no zone repeats")
        );
    }

    #[test]
    fn rejects_a_zero_zone_cap() {
        let pending = vec![node("a1", "a")];
        let p = progress(group(&pending, 0, 1), pending, 0, 0);
        assert!(ZoneSpread::next_batch(&context(0, json!({"maxPerZone": 0})), &p).is_err());
    }

    #[test]
    fn validates_its_config() {
        assert_eq!(ZoneSpread::validate_config("{}"), Ok(()));
        assert_eq!(ZoneSpread::validate_config(r#"{"maxPerZone": 2}"#), Ok(()));
        assert_eq!(
            ZoneSpread::validate_config(r#"{"maxPerZon": 2}"#),
            Err("unknown field `maxPerZon`, expected `maxPerZone`".into())
        );
        assert_eq!(
            ZoneSpread::validate_config(r#"{"maxPerZone": 0}"#),
            Err("maxPerZone must be at least 1".into())
        );
    }
}
