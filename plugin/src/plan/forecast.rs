//! What will slow or stop a batch's drain, forecast from the snapshot alone so that a plan made
//! offline says it before anything moves: the budgets in its way (here) and the pods that find
//! no room ([`super::capacity`]). Budgets are judged as the snapshot shows them
//! (`status.disruptionsAllowed`, which Kubernetes derives from the budget's healthy pods and its
//! `minAvailable` or `maxUnavailable`); the evictions of earlier batches are assumed rescheduled
//! and Ready again, so each batch meets the budgets as they are now.

use serde::Serialize;

use crate::plan::drain::{DrainOptions, Hold, PodFate, classify, ladder_in_words};
use crate::plan::health::{Index, evictions_by_budget, under_several_budgets};

/// A batch's drain, as the budgets it meets will let it go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Forecast {
    /// Budgets that allow fewer evictions at once than the batch makes: the evictions serialize.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<Stall>,
    /// Budgets that allow no eviction now: the drain cannot finish until their pods are healthy.
    /// Pods that more than one budget selects are blocked too (the eviction API refuses them):
    /// their entry's `pdb` names every budget (`ns/a, ns/b`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Stall>,
    /// Evicted pods that fit on no schedulable node: they stay Pending until the batch's
    /// replacements are Ready (or longer, as the reason says). JSON: `[{"pods": ["ns/pod", …],
    /// "reason": "…"}]`, one entry per reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Pending>,
    /// Pods that ask not to be disrupted (`ns/pod`): the drain waits for each to go away, up to
    /// `drain.doNotDisruptTimeout`.
    #[serde(rename = "doNotDisrupt", skip_serializing_if = "Vec::is_empty")]
    pub do_not_disrupt: Vec<String>,
    /// Running pods of Jobs (or annotated to be waited for): the drain waits for each to
    /// complete, up to `drain.jobTimeout`.
    #[serde(rename = "waitForCompletion", skip_serializing_if = "Vec::is_empty")]
    pub wait_for_completion: Vec<String>,
}

/// Pods of a batch that find no room, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pending {
    /// `namespace/name`, in name order.
    pub pods: Vec<String>,
    pub reason: String,
}

/// One budget in the way of a batch's drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stall {
    /// `namespace/name` (several, `, `-separated, for pods more than one budget selects).
    pub pdb: String,
    /// The batch's pods it covers, `namespace/name`.
    pub pods: Vec<String>,
    pub reason: String,
    /// In `waits`: how many waves its evictions go in (the batch's pods it covers, over the
    /// disruptions it allows at once).
    #[serde(skip_serializing_if = "is_zero")]
    pub waves: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Forecast {
    /// `blocks`, `holds`, `waits`, `pending` or `ok`: the worst of it in a word.
    pub fn word(forecast: Option<&Forecast>) -> &'static str {
        match forecast {
            Some(f) if !f.blocks.is_empty() => "blocks",
            Some(f) if !f.do_not_disrupt.is_empty() || !f.wait_for_completion.is_empty() => "holds",
            Some(f) if !f.waits.is_empty() => "waits",
            Some(f) if !f.pending.is_empty() => "pending",
            _ => "ok",
        }
    }
}

/// The pods the drain of `batch` waits for and the budgets in its way; none when nothing is
/// (no drain consults a budget with `--disable-eviction`: it deletes pods).
pub fn of_batch(index: &Index, batch: &[String], drain: &DrainOptions) -> Option<Forecast> {
    let mut forecast = Forecast::default();
    for node in batch {
        for pod in index.pods_on(node) {
            match classify(pod, drain) {
                PodFate::Hold(Hold::DoNotDisrupt { .. }) => forecast.do_not_disrupt.push(pod.id()),
                PodFate::Hold(Hold::Completion) => forecast.wait_for_completion.push(pod.id()),
                _ => {}
            }
        }
    }
    if drain.disable_eviction {
        return (forecast != Forecast::default()).then_some(forecast);
    }
    let nodes: Vec<&str> = batch.iter().map(String::as_str).collect();
    let ladder = ladder_in_words(&drain.rules)
        .map(|l| format!("; escalation ladder: {l}"))
        .unwrap_or_default();
    for ((namespace, name), (budget, evicted)) in evictions_by_budget(index, &nodes, drain) {
        let pdb = format!("{namespace}/{name}");
        let allowed = budget.disruptions_allowed;
        let pods: Vec<String> = evicted.iter().map(|p| p.id()).collect();
        let n = pods.len();
        if allowed <= 0 {
            forecast.blocks.push(Stall {
                pdb,
                pods,
                reason: format!(
                    "allows no disruption now (disruptionsAllowed {allowed}): the drain waits until its pods are healthy, up to the drain timeout{ladder}"
                ),
                waves: 0,
            });
        } else if n as i64 > i64::from(allowed) {
            forecast.waits.push(Stall {
                pdb,
                pods,
                reason: format!(
                    "the batch evicts {n} of its pods and it allows {allowed} at once: the evictions go one wave after another"
                ),
                waves: u32::try_from((n as u64).div_ceil(allowed as u64)).unwrap_or(u32::MAX),
            });
        }
    }
    let mut several: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for node in batch {
        for (budgets, pods) in under_several_budgets(index, node, drain) {
            several
                .entry(budgets)
                .or_default()
                .extend(pods.iter().map(|p| p.id()));
        }
    }
    forecast
        .blocks
        .extend(several.into_iter().map(|(pdb, pods)| Stall {
            pdb,
            pods,
            reason: "more than one budget selects each of these pods, and the eviction API refuses to evict such a pod whatever the budgets allow: the drain stops there".into(),
            waves: 0,
        }));
    (forecast != Forecast::default()).then_some(forecast)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Snapshot;

    fn pod(name: &str, node: &str) -> String {
        format!(
            r#"{{"kind": "Pod", "apiVersion": "v1", "metadata": {{"name": "{name}", "namespace": "shop", "labels": {{"app": "{}"}}, "ownerReferences": [{{"kind": "ReplicaSet", "name": "rs", "controller": true}}]}}, "spec": {{"nodeName": "{node}"}}, "status": {{"phase": "Running", "conditions": [{{"type": "Ready", "status": "True"}}]}}}}"#,
            name.split('-').next().unwrap()
        )
    }

    fn pdb(app: &str, allowed: i32) -> String {
        format!(
            r#"{{"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {{"name": "{app}", "namespace": "shop"}}, "spec": {{"selector": {{"matchLabels": {{"app": "{app}"}}}}}}, "status": {{"disruptionsAllowed": {allowed}}}}}"#
        )
    }

    #[test]
    fn budgets_that_allow_too_few_wait_and_those_that_allow_none_block() {
        let items = [
            pod("web-1", "n1"),
            pod("web-2", "n2"),
            pod("db-1", "n1"),
            pod("cache-1", "n1"),
            pdb("web", 1),
            pdb("db", 0),
            pdb("cache", 3),
        ];
        let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
        let snapshot = Snapshot::from_json(json.as_bytes()).unwrap();
        let index = Index::new(&snapshot);
        let drain = DrainOptions::default();
        let both = of_batch(&index, &["n1".into(), "n2".into()], &drain).unwrap();
        assert_eq!(both.waits.len(), 1);
        assert_eq!(both.waits[0].pdb, "shop/web");
        assert_eq!(both.waits[0].pods, ["shop/web-1", "shop/web-2"]);
        assert_eq!(both.blocks.len(), 1);
        assert_eq!(both.blocks[0].pdb, "shop/db");
        assert_eq!(Forecast::word(Some(&both)), "blocks");

        // One web pod at a time is what the budget allows; the db pod is not on n2.
        assert_eq!(of_batch(&index, &["n2".into()], &drain), None);
        assert_eq!(Forecast::word(None), "ok");
        let deleting = DrainOptions {
            disable_eviction: true,
            ..Default::default()
        };
        assert_eq!(of_batch(&index, &["n1".into()], &deleting), None);
    }

    /// A pod of app `web` on n1 in `phase`, Ready or not.
    fn web_pod(name: &str, phase: &str, ready: bool) -> String {
        format!(
            r#"{{"kind": "Pod", "apiVersion": "v1", "metadata": {{"name": "{name}", "namespace": "shop", "labels": {{"app": "web", "tier": "front"}}, "ownerReferences": [{{"kind": "ReplicaSet", "name": "rs", "controller": true}}]}}, "spec": {{"nodeName": "n1"}}, "status": {{"phase": "{phase}", "conditions": [{{"type": "Ready", "status": "{}"}}]}}}}"#,
            if ready { "True" } else { "False" }
        )
    }

    /// A budget on app `web` allowing no disruption, with its healthy counts and policy (none:
    /// the field absent, as a server before 1.26 sends it).
    fn web_budget(current: i32, desired: i32, policy: Option<&str>) -> String {
        let policy = policy
            .map(|p| format!(r#", "unhealthyPodEvictionPolicy": "{p}""#))
            .unwrap_or_default();
        format!(
            r#"{{"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {{"name": "web", "namespace": "shop"}}, "spec": {{"selector": {{"matchLabels": {{"app": "web"}}}}{policy}}}, "status": {{"disruptionsAllowed": 0, "currentHealthy": {current}, "desiredHealthy": {desired}}}}}"#
        )
    }

    fn forecast_of(items: &[String]) -> Option<Forecast> {
        let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
        let snapshot = Snapshot::from_json(json.as_bytes()).unwrap();
        let index = Index::new(&snapshot);
        let forecast = of_batch(&index, &["n1".into()], &DrainOptions::default());
        let blockers =
            crate::plan::health::drain_blockers(&index, &["n1"], &DrainOptions::default());
        // The plan's warnings say what the forecast blocks on, no more.
        let blocked = forecast.as_ref().map_or(0, |f| f.blocks.len());
        assert_eq!(blockers.len(), blocked, "{blockers:?}");
        forecast
    }

    #[test]
    fn an_unready_pod_is_judged_by_its_budgets_unhealthy_pod_eviction_policy() {
        let unready = web_pod("web-3", "Running", false);
        let blocks = |budget: String| {
            let f = forecast_of(&[unready.clone(), budget]);
            f.is_some_and(|f| f.blocks.iter().any(|b| b.pods == ["shop/web-3"]))
        };
        // AlwaysAllow: it goes, met or not.
        assert!(!blocks(web_budget(2, 3, Some("AlwaysAllow"))));
        assert!(!blocks(web_budget(3, 3, Some("AlwaysAllow"))));
        // IfHealthyBudget, and the field absent (its default): only while the budget is met.
        for policy in [Some("IfHealthyBudget"), None] {
            assert!(!blocks(web_budget(3, 3, policy)), "{policy:?}");
            assert!(!blocks(web_budget(4, 3, policy)), "{policy:?}");
            assert!(blocks(web_budget(2, 3, policy)), "{policy:?}");
            // A budget that asks for no healthy pod is not met by having none.
            assert!(blocks(web_budget(0, 0, policy)), "{policy:?}");
        }
        // A policy value this build does not know is judged as the stricter default.
        assert!(blocks(web_budget(2, 3, Some("SomethingNew"))));

        // A Ready pod takes a disruption whatever the policy says; a Pending one never does.
        let ready = web_pod("web-1", "Running", true);
        assert!(
            forecast_of(&[ready, web_budget(3, 3, Some("AlwaysAllow"))])
                .is_some_and(|f| f.blocks[0].pods == ["shop/web-1"])
        );
        let pending = web_pod("web-2", "Pending", false);
        assert_eq!(forecast_of(&[pending, web_budget(2, 3, None)]), None);
    }

    #[test]
    fn a_pod_under_two_budgets_blocks_whatever_they_allow() {
        let generous = |name: &str, selector: &str| {
            format!(
                r#"{{"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {{"name": "{name}", "namespace": "shop"}}, "spec": {{"selector": {{"matchLabels": {selector}}}}}, "status": {{"disruptionsAllowed": 5}}}}"#
            )
        };
        let items = [
            web_pod("web-1", "Running", true),
            web_pod("web-2", "Running", true),
            // Not running: evicted without any budget being asked.
            web_pod("web-3", "Pending", false),
            generous("by-app", r#"{"app": "web"}"#),
            generous("by-tier", r#"{"tier": "front"}"#),
        ];
        let f = forecast_of(&items).unwrap();
        assert_eq!(f.blocks.len(), 1, "{f:?}");
        assert_eq!(f.blocks[0].pdb, "shop/by-app, shop/by-tier");
        assert_eq!(f.blocks[0].pods, ["shop/web-1", "shop/web-2"]);
        assert!(f.blocks[0].reason.contains("the eviction API refuses"));
        assert!(f.waits.is_empty());
        assert_eq!(Forecast::word(Some(&f)), "blocks");

        let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
        let snapshot = Snapshot::from_json(json.as_bytes()).unwrap();
        let index = Index::new(&snapshot);
        let warning =
            &crate::plan::health::drain_blockers(&index, &["n1"], &DrainOptions::default())[0];
        assert_eq!(
            warning,
            "PodDisruptionBudgets shop/by-app, shop/by-tier all select 2 pod(s), and the eviction API refuses to evict a pod that more than one budget selects: shop/web-1 on n1, shop/web-2 on n1; the drain would stop there"
        );
        // Deleting pods asks no budget.
        let deleting = DrainOptions {
            disable_eviction: true,
            ..Default::default()
        };
        assert_eq!(of_batch(&index, &["n1".into()], &deleting), None);
    }

    #[test]
    fn the_word_is_the_worst_of_blocks_holds_waits_pending_ok() {
        let stall = Stall {
            pdb: "shop/web".into(),
            pods: vec!["shop/web-1".into()],
            reason: "r".into(),
            waves: 0,
        };
        let mut f = Forecast {
            pending: vec![Pending {
                pods: vec!["shop/web-1".into()],
                reason: "r".into(),
            }],
            ..Default::default()
        };
        assert_eq!(Forecast::word(Some(&f)), "pending");
        f.waits.push(stall.clone());
        assert_eq!(Forecast::word(Some(&f)), "waits");
        f.wait_for_completion.push("batch/job-1".into());
        assert_eq!(Forecast::word(Some(&f)), "holds");
        f.blocks.push(stall);
        assert_eq!(Forecast::word(Some(&f)), "blocks");
        assert_eq!(Forecast::word(Some(&Forecast::default())), "ok");
    }

    #[test]
    fn pods_the_drain_waits_for_are_listed_even_when_it_deletes() {
        let held = |name: &str, owner: &str, annotations: &str| {
            format!(
                r#"{{"kind": "Pod", "apiVersion": "v1", "metadata": {{"name": "{name}", "namespace": "shop", "annotations": {{{annotations}}}, "ownerReferences": [{{"kind": "{owner}", "name": "o", "controller": true}}]}}, "spec": {{"nodeName": "n1"}}, "status": {{"phase": "Running"}}}}"#
            )
        };
        let items = [
            held(
                "cache-0",
                "StatefulSet",
                r#""karpenter.sh/do-not-disrupt": "true""#,
            ),
            held("report-1", "Job", ""),
            held(
                "web-1",
                "ReplicaSet",
                r#""karpenter.sh/do-not-disrupt": "false""#,
            ),
        ];
        let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
        let snapshot = Snapshot::from_json(json.as_bytes()).unwrap();
        let index = Index::new(&snapshot);
        for disable_eviction in [false, true] {
            let drain = DrainOptions {
                disable_eviction,
                ..Default::default()
            };
            let f = of_batch(&index, &["n1".into()], &drain).unwrap();
            assert_eq!(f.do_not_disrupt, ["shop/cache-0"]);
            assert_eq!(f.wait_for_completion, ["shop/report-1"]);
            let json = serde_json::to_value(&f).unwrap();
            assert_eq!(json["doNotDisrupt"][0], "shop/cache-0");
            assert_eq!(json["waitForCompletion"][0], "shop/report-1");
        }
    }
}
