//! Zone spread: update instances so that consecutive updates alternate zones, and never take more
//! than `maxPerZone` instances of one zone in a batch.
//!
//! Config: `{"maxPerZone": 1}` (default 1).

use std::collections::{BTreeMap, HashMap};

use rollout_ext_hooks::{
    BatchSize, Choice, Context, Group, HookPoint, Instance, Policy, Progress, Selection, config,
    export_policy, zone,
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

pub struct ZoneSpread;

impl Policy for ZoneSpread {
    const NAME: &'static str = "zone-spread";
    const POINTS: &'static [HookPoint] = &[HookPoint::Select, HookPoint::Batch];

    /// Interleaves the outdated candidates zone by zone, the largest zones first, keeping the
    /// built-in order within a zone.
    fn select(
        _ctx: &Context,
        _group: &Group,
        candidates: &[Instance],
    ) -> Result<Selection, String> {
        let mut by_zone: BTreeMap<&str, Vec<&Instance>> = BTreeMap::new();
        for c in candidates.iter().filter(|c| c.reason.is_some()) {
            by_zone.entry(zone(c)).or_default().push(c);
        }
        let mut zones: Vec<(&str, Vec<&Instance>)> = by_zone.into_iter().collect();
        zones.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));

        let mut choices = Vec::new();
        let longest = zones.first().map_or(0, |z| z.1.len());
        for round in 0..longest {
            for (zone_name, members) in &zones {
                if let Some(instance) = members.get(round) {
                    let zone_name = if zone_name.is_empty() {
                        "none"
                    } else {
                        zone_name
                    };
                    choices.push(Choice {
                        name: instance.name.clone(),
                        reason: format!(
                            "{}; zone {zone_name}, round {}",
                            instance.reason.as_deref().unwrap_or("selected"),
                            round + 1
                        ),
                    });
                }
            }
        }
        Ok(Selection::Choose(choices))
    }

    /// The longest prefix of the pending instances with at most `maxPerZone` per zone. Reads
    /// pending instances only until a zone is full.
    fn next_batch(ctx: &Context, progress: &Progress) -> Result<BatchSize, String> {
        let cfg: Config = config(ctx)?;
        if cfg.max_per_zone == 0 {
            return Err("maxPerZone must be at least 1".into());
        }
        let mut per_zone: HashMap<String, u32> = HashMap::new();
        let mut size = 0;
        for instance in progress.pending.iter().take(progress.max_batch as usize) {
            let count = per_zone.entry(zone(&instance).to_string()).or_default();
            if *count == cfg.max_per_zone {
                break;
            }
            *count += 1;
            size += 1;
        }
        Ok(BatchSize::Size(size.max(1)))
    }
}

export_policy!(ZoneSpread);

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_ext_hooks::testing::{context, group, node, progress};
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
        let order = names(ZoneSpread::select(&ctx, &group(&nodes, 0, 1), &nodes).unwrap());
        assert_eq!(order, ["a1", "b1", "c1", "a2", "b2", "a3"]);
    }

    #[test]
    fn leaves_up_to_date_instances_out() {
        let mut fresh = node("b1", "b");
        fresh.reason = None;
        let nodes = vec![node("a1", "a"), fresh];
        let ctx = context(0, json!({}));
        let order = names(ZoneSpread::select(&ctx, &group(&nodes, 0, 1), &nodes).unwrap());
        assert_eq!(order, ["a1"]);
    }

    #[test]
    fn batch_stops_before_a_zone_repeats() {
        let pending = vec![
            node("a1", "a"),
            node("b1", "b"),
            node("a2", "a"),
            node("c1", "c"),
        ];
        let p = progress(group(&pending, 0, 4), pending.clone(), 1, 1);
        let size = ZoneSpread::next_batch(&context(0, json!({"maxPerZone": 1})), &p).unwrap();
        assert_eq!(size, BatchSize::Size(2));
        let size = ZoneSpread::next_batch(&context(0, json!({"maxPerZone": 2})), &p).unwrap();
        assert_eq!(size, BatchSize::Size(4));
    }

    #[test]
    fn rejects_a_zero_zone_cap() {
        let pending = vec![node("a1", "a")];
        let p = progress(group(&pending, 0, 1), pending.clone(), 0, 0);
        assert!(ZoneSpread::next_batch(&context(0, json!({"maxPerZone": 0})), &p).is_err());
    }
}
