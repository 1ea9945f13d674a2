//! Which pods a drain moves, skips, waits for or refuses, in what order, and what it does while
//! a budget keeps refusing: kubectl drain's filter chain plus the policy's `drain` rules, without
//! I/O.
//!
//! Each pod passes the filters in kubectl's order (pod selector, DaemonSet, mirror, local
//! storage, unreplicated); the first that decides wins. Before local storage and unreplicated
//! pods, a pod that asks not to be disrupted, or runs to completion (a Job's), is held: the drain
//! waits for it rather than evicting it. Reasons end up in the plan's warnings and, during a
//! live drain, in its errors.

use std::borrow::Borrow;
use std::time::Duration;

use crate::duration::human_duration;
use crate::keys;
use crate::labels::LabelSelector;
use crate::policy::drain::{DrainPolicy, OrderRule, RungAction};
use crate::snapshot::Pod;

/// kubectl drain's options that change which pods go, and the policy's `drain` rules.
#[derive(Debug, Clone, Default)]
pub struct DrainOptions {
    /// Delete pods with emptyDir volumes (their data is lost).
    pub delete_emptydir_data: bool,
    /// Delete pods that no controller manages (kubectl drain's `--force`).
    pub force: bool,
    /// Only pods matching this selector are drained.
    pub pod_selector: Option<LabelSelector>,
    /// Delete instead of evicting: PodDisruptionBudgets are bypassed.
    pub disable_eviction: bool,
    /// The policy's `drain` section.
    pub rules: DrainPolicy,
}

/// What a drain does with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodFate {
    /// Evicted (or deleted with `--disable-eviction`); the warning, if any, says what is lost.
    Evict { warning: Option<&'static str> },
    /// Waited for: the drain leaves it until it goes away or completes, up to its timeout.
    Hold(Hold),
    /// Left on the node.
    Skip(&'static str),
    /// The drain stops: the pod cannot go without an explicit flag.
    Refuse(&'static str),
}

/// Why a drain waits for a pod instead of evicting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// It asks not to be disrupted, by this annotation: waited for until it is gone.
    DoNotDisrupt { annotation: &'static str },
    /// A Job's pod (or one annotated to be waited for): waited for until it completes.
    Completion,
}

impl Hold {
    /// How long a drain waits for such a pod under `rules`.
    pub fn timeout(self, rules: &DrainPolicy) -> Duration {
        match self {
            Hold::DoNotDisrupt { .. } => rules.do_not_disrupt_timeout,
            Hold::Completion => rules.job_timeout,
        }
    }

    /// Why the drain waits, in words: "asks not to be disrupted (karpenter.sh/do-not-disrupt)".
    pub fn why(self) -> String {
        match self {
            Hold::DoNotDisrupt { annotation } => {
                format!("asks not to be disrupted ({annotation})")
            }
            Hold::Completion => "runs to completion".into(),
        }
    }

    /// Why the drain waits, and for what.
    pub fn describe(self) -> String {
        match self {
            Hold::DoNotDisrupt { .. } => format!("{}: waiting for it to go away", self.why()),
            Hold::Completion => format!("{}: waiting for it to complete", self.why()),
        }
    }
}

impl PodFate {
    pub fn is_evicted(&self) -> bool {
        matches!(self, PodFate::Evict { .. })
    }
}

pub fn classify(pod: &Pod, options: &DrainOptions) -> PodFate {
    if let Some(selector) = &options.pod_selector
        && !selector.matches(&pod.labels)
    {
        return PodFate::Skip("not selected by --pod-selector");
    }
    if pod
        .controller
        .as_ref()
        .is_some_and(|c| c.kind == "DaemonSet")
    {
        return PodFate::Skip("DaemonSet-managed");
    }
    if pod.mirror {
        return PodFate::Skip("mirror pod of a static pod");
    }
    if !pod.finished && !pod.terminating {
        if let Some(annotation) = pod.do_not_disrupt {
            return PodFate::Hold(Hold::DoNotDisrupt { annotation });
        }
        if pod.runs_to_completion() {
            return PodFate::Hold(Hold::Completion);
        }
    }
    eviction_fate(pod, options)
}

/// The first of `pods` a drain would wait for because it asks not to be disrupted: what
/// orders a node last in its group, and what `--fail-on-drain-error=false` never passes.
pub fn asking_not_to_be_disrupted<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    options: &DrainOptions,
) -> Option<&'a Pod> {
    pods.into_iter().find(|p| {
        matches!(
            classify(p, options),
            PodFate::Hold(Hold::DoNotDisrupt { .. })
        )
    })
}

/// The end of kubectl's chain (local storage, unreplicated), for a pod that is to go: also what
/// becomes of a held pod whose wait ran out.
pub fn eviction_fate(pod: &Pod, options: &DrainOptions) -> PodFate {
    let mut warning = None;
    if pod.uses_empty_dir && !pod.finished {
        if !options.delete_emptydir_data {
            return PodFate::Refuse(
                "uses emptyDir local storage (use --delete-emptydir-data to delete it)",
            );
        }
        warning = Some("deleting a pod with emptyDir local storage");
    }
    if pod.controller.is_none() && !pod.finished {
        if !options.force {
            return PodFate::Refuse("declares no controller (use --drain-force to delete it)");
        }
        warning = Some("deleting a pod that declares no controller");
    }
    PodFate::Evict { warning }
}

/// Where a pod's eviction comes in a drain: the first `drain.order` rule it matches places it by
/// its order; the pods no rule matches come after those, critical ones
/// (`system-cluster-critical`, `system-node-critical`) after them, and a runner of a run handed
/// to the cluster last of all (its run stops there and resumes in the Job's next pod).
fn turn_of(pod: &Pod, rules: &[OrderRule]) -> (u8, i32) {
    if pod.is_runner() {
        return (3, 0);
    }
    if let Some(rule) = rules.iter().find(|r| matches_rule(pod, r)) {
        return (0, rule.order);
    }
    let critical = pod
        .priority_class
        .as_deref()
        .is_some_and(|p| keys::CRITICAL_PRIORITY_CLASSES.contains(&p));
    (if critical { 2 } else { 1 }, 0)
}

fn matches_rule(pod: &Pod, rule: &OrderRule) -> bool {
    rule.pod_selector
        .as_ref()
        .is_none_or(|s| s.matches(&pod.labels))
        && (rule.namespaces.is_empty() || rule.namespaces.contains(&pod.namespace))
        && (rule.priority_class_names.is_empty()
            || pod
                .priority_class
                .as_ref()
                .is_some_and(|p| rule.priority_class_names.contains(p)))
}

/// `pods` in the turns a drain evicts them in: each turn is evicted, and gone, before the next
/// starts. Within a turn the pods keep their order.
pub fn in_turns<P: Borrow<Pod>>(pods: Vec<P>, rules: &[OrderRule]) -> Vec<Vec<P>> {
    let mut keyed: Vec<((u8, i32), P)> = pods
        .into_iter()
        .map(|p| (turn_of(p.borrow(), rules), p))
        .collect();
    keyed.sort_by_key(|(turn, _)| *turn);
    let mut turns: Vec<Vec<P>> = Vec::new();
    let mut last = None;
    for (turn, pod) in keyed {
        if last != Some(turn) {
            turns.push(Vec::new());
            last = Some(turn);
        }
        turns.last_mut().expect("pushed above").push(pod);
    }
    turns
}

/// The rung of the escalation ladder for an eviction refused for `blocked_for`: each rung lasts
/// its wait, then the next is taken; after the last, the drain stops. No ladder: retry (the
/// drain timeout stops it, as kubectl's does).
pub fn rung_at(rules: &DrainPolicy, blocked_for: Duration) -> RungAction {
    if rules.escalation.is_empty() {
        return RungAction::Retry;
    }
    let mut until = Duration::ZERO;
    for rung in &rules.escalation {
        until += rung.wait;
        if blocked_for < until {
            return rung.action;
        }
    }
    RungAction::Stop
}

/// How long the ladder lasts before its Stop; `None` without a ladder.
pub fn ladder_length(rules: &DrainPolicy) -> Option<Duration> {
    (!rules.escalation.is_empty()).then(|| rules.escalation.iter().map(|r| r.wait).sum())
}

/// The ladder in words, for forecasts, dry runs and errors: "retry the eviction (10m), delete
/// the pod if it is not Ready (5m), stop"; `None` without a ladder.
pub fn ladder_in_words(rules: &DrainPolicy) -> Option<String> {
    if rules.escalation.is_empty() {
        return None;
    }
    let mut steps: Vec<String> = rules
        .escalation
        .iter()
        .map(|r| {
            let what = match r.action {
                RungAction::Retry => "retry the eviction",
                RungAction::DeleteUnready => "delete the pod if it is not Ready",
                RungAction::Delete => "delete the pod, bypassing its budget",
                RungAction::Stop => "stop",
            };
            format!("{what} ({})", human_duration(r.wait.as_secs() as i64))
        })
        .collect();
    steps.push("stop".into());
    Some(steps.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Owner;

    fn pod(controller: Option<&str>) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            node_name: Some("n1".into()),
            labels: [("app".to_string(), "web".to_string())]
                .into_iter()
                .collect(),
            controller: controller.map(|kind| Owner {
                kind: kind.into(),
                name: "owner".into(),
            }),
            mirror: false,
            ready: true,
            finished: false,
            uses_empty_dir: false,
            terminating: false,
            pending: false,
            requests: Default::default(),
            placement: Default::default(),
            do_not_disrupt: None,
            wait_for_completion: false,
            priority_class: None,
            annotations: Default::default(),
        }
    }

    #[test]
    fn the_kubectl_filter_chain() {
        let plain = DrainOptions::default();
        let forced = DrainOptions {
            force: true,
            delete_emptydir_data: true,
            ..Default::default()
        };
        assert_eq!(
            classify(&pod(Some("ReplicaSet")), &plain),
            PodFate::Evict { warning: None }
        );
        assert_eq!(
            classify(&pod(Some("DaemonSet")), &plain),
            PodFate::Skip("DaemonSet-managed")
        );

        let mut mirror = pod(None);
        mirror.mirror = true;
        assert!(matches!(classify(&mirror, &plain), PodFate::Skip(_)));

        let bare = pod(None);
        assert!(
            matches!(classify(&bare, &plain), PodFate::Refuse(r) if r.contains("--drain-force"))
        );
        assert!(matches!(
            classify(&bare, &forced),
            PodFate::Evict { warning: Some(_) }
        ));

        let mut finished = pod(None);
        finished.finished = true;
        assert_eq!(
            classify(&finished, &plain),
            PodFate::Evict { warning: None }
        );

        let mut scratch = pod(Some("ReplicaSet"));
        scratch.uses_empty_dir = true;
        assert!(matches!(classify(&scratch, &plain), PodFate::Refuse(r) if r.contains("emptyDir")));
        assert!(matches!(
            classify(&scratch, &forced),
            PodFate::Evict { warning: Some(_) }
        ));

        let selected = DrainOptions {
            pod_selector: Some(LabelSelector::parse("app=db").unwrap()),
            ..Default::default()
        };
        assert!(matches!(
            classify(&pod(Some("ReplicaSet")), &selected),
            PodFate::Skip(_)
        ));
    }

    #[test]
    fn pods_that_ask_not_to_be_disrupted_and_running_jobs_are_held() {
        let plain = DrainOptions::default();
        let mut asks = pod(Some("ReplicaSet"));
        asks.do_not_disrupt = Some("karpenter.sh/do-not-disrupt");
        assert_eq!(
            classify(&asks, &plain),
            PodFate::Hold(Hold::DoNotDisrupt {
                annotation: "karpenter.sh/do-not-disrupt"
            })
        );
        let job = pod(Some("Job"));
        assert_eq!(classify(&job, &plain), PodFate::Hold(Hold::Completion));
        // A bare pod annotated to be waited for is held, not refused; when its wait ends,
        // kubectl's rule for unreplicated pods applies.
        let mut bare = pod(None);
        bare.wait_for_completion = true;
        assert_eq!(classify(&bare, &plain), PodFate::Hold(Hold::Completion));
        assert!(matches!(eviction_fate(&bare, &plain), PodFate::Refuse(_)));
        // A completed Job pod never holds a drain: it is removed at once.
        let mut done = pod(Some("Job"));
        done.finished = true;
        assert_eq!(classify(&done, &plain), PodFate::Evict { warning: None });
        // DaemonSet pods stay skipped whatever they ask.
        let mut daemon = pod(Some("DaemonSet"));
        daemon.do_not_disrupt = Some("rollout-ext.io/do-not-disrupt");
        assert!(matches!(classify(&daemon, &plain), PodFate::Skip(_)));
        assert_eq!(
            Hold::Completion.timeout(&plain.rules),
            Duration::from_secs(7200)
        );
    }

    fn named(name: &str, namespace: &str, priority: Option<&str>) -> Pod {
        Pod {
            name: name.into(),
            namespace: namespace.into(),
            priority_class: priority.map(String::from),
            ..pod(Some("ReplicaSet"))
        }
    }

    #[test]
    fn a_runner_pod_is_evicted_last_where_another_jobs_pod_is_waited_for() {
        let plain = DrainOptions::default();
        let mut runner = named("rollout-ext-run-1-abc", "kube-system", None);
        runner.controller = pod(Some("Job")).controller;
        runner
            .labels
            .insert(keys::RUNNER.into(), "rollout-ext-run-1".into());
        assert!(classify(&runner, &plain).is_evicted());
        let mut report = named("report", "batch", None);
        report.controller = runner.controller.clone();
        assert_eq!(classify(&report, &plain), PodFate::Hold(Hold::Completion));
        let pods = vec![
            runner,
            named("dns", "kube-system", Some("system-node-critical")),
            named("a", "x", None),
        ];
        let turns: Vec<Vec<String>> = (in_turns(pods, &[]).into_iter())
            .map(|t| t.into_iter().map(|p| p.name).collect())
            .collect();
        assert_eq!(
            turns,
            [vec!["a"], vec!["dns"], vec!["rollout-ext-run-1-abc"]]
        );
    }

    #[test]
    fn eviction_turns_follow_the_rules_then_the_rest_then_critical_pods() {
        let rules = [
            OrderRule {
                order: 2,
                pod_selector: None,
                namespaces: vec!["db".into()],
                priority_class_names: vec![],
            },
            OrderRule {
                order: 1,
                pod_selector: Some(LabelSelector::parse("app=web").unwrap()),
                namespaces: vec!["front".into()],
                priority_class_names: vec![],
            },
        ];
        let pods = vec![
            named("dns", "kube-system", Some("system-cluster-critical")),
            named("db-0", "db", None),
            named("other", "misc", None),
            named("web-1", "front", None),
            named("db-1", "db", Some("system-node-critical")),
            named("web-2", "front", None),
        ];
        let turns: Vec<Vec<String>> = in_turns(pods, &rules)
            .into_iter()
            .map(|t| t.into_iter().map(|p| p.name).collect())
            .collect();
        assert_eq!(
            turns,
            [
                vec!["web-1", "web-2"],
                vec!["db-0", "db-1"],
                vec!["other"],
                vec!["dns"]
            ]
        );
        // No rules: critical pods still go last.
        let plain = in_turns(
            vec![
                named("dns", "kube-system", Some("system-node-critical")),
                named("a", "x", None),
            ],
            &[],
        );
        assert_eq!(plain.len(), 2);
        assert_eq!(plain[0][0].name, "a");
    }

    #[test]
    fn the_escalation_ladder_climbs_rung_by_rung_then_stops() {
        use crate::policy::drain::Rung;
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let mut rules = DrainPolicy::default();
        // No ladder: retry until the drain timeout, as kubectl does.
        assert_eq!(rung_at(&rules, minutes(500)), RungAction::Retry);
        assert_eq!(ladder_length(&rules), None);
        rules.escalation = vec![
            Rung {
                action: RungAction::Retry,
                wait: minutes(10),
            },
            Rung {
                action: RungAction::DeleteUnready,
                wait: minutes(5),
            },
            Rung {
                action: RungAction::Delete,
                wait: minutes(5),
            },
        ];
        assert_eq!(rung_at(&rules, minutes(0)), RungAction::Retry);
        assert_eq!(rung_at(&rules, minutes(10)), RungAction::DeleteUnready);
        assert_eq!(rung_at(&rules, minutes(16)), RungAction::Delete);
        assert_eq!(rung_at(&rules, minutes(20)), RungAction::Stop);
        assert_eq!(ladder_length(&rules), Some(minutes(20)));
        assert_eq!(
            ladder_in_words(&rules).unwrap(),
            "retry the eviction (10m), delete the pod if it is not Ready (5m), delete the pod, bypassing its budget (5m), stop"
        );
    }
}
