//! A StatefulSet as its partitioned update sees it: the object's JSON with accessors for the
//! fields the update reads and writes, the template a request asks for, and where its pods
//! stand (which ordinals run the update revision). Kept as JSON so that fields this tool does
//! not know survive a write untouched.

use serde_json::{Value, json};

use super::in_place::InPlaceWorkload;
use super::pods::{PodInfo, PodRef};
use super::template::TemplateChange;
use crate::policy::IntOrPercent;

/// The label a StatefulSet's pods carry with the name of their revision.
pub const REVISION_LABEL: &str = "controller-revision-hash";

#[derive(Debug, Clone, PartialEq)]
pub struct StatefulSet {
    pub object: Value,
}

/// What the command asks of a StatefulSet.
#[derive(Debug, Clone)]
pub enum PartitionAction {
    Roll(TemplateChange),
    /// Back to the revision the pods ran before the update in progress.
    Rollback,
}

/// How an update starts, from the StatefulSet and its pods as they are (a write holds the
/// partition at the replica count; a rollback names the revision the lower ordinals run).
pub type Start = super::in_place::Start<String>;

impl InPlaceWorkload for StatefulSet {
    const KIND: &'static str = "statefulset";

    fn object(&self) -> &Value {
        &self.object
    }
}

/// How the update `action` asks for starts on `set`, whose controller has seen its spec.
pub fn start(
    set: &StatefulSet,
    pods: &[PodInfo],
    action: &PartitionAction,
) -> Result<Start, String> {
    let ours = set.recorded_strategy().is_some();
    let update = set.update_revision().unwrap_or_default();
    if set.object["spec"]["ordinals"]["start"]
        .as_i64()
        .is_some_and(|s| s != 0)
    {
        return Err(format!(
            "{} numbers its pods from spec.ordinals.start, which this tool does not roll yet",
            set.display()
        ));
    }
    match action {
        PartitionAction::Roll(change) => {
            let template = set.next_template(change)?;
            // With the template in but pods on an older revision (someone set it with a
            // partition), this update takes them on.
            set.roll_start(template, || {
                (floor(set, pods, update) >= set.replicas()).then(|| {
                    format!(
                        "every pod of {} runs this template already (revision {update}): nothing to update",
                        set.display()
                    )
                })
            })
        }
        // Pointed back already by a run that stopped.
        PartitionAction::Rollback if set.rolling_back() => Ok(Start::Resume),
        PartitionAction::Rollback => {
            // The revision the pods not yet updated run: the controller's currentRevision for
            // RollingUpdate; for OnDelete (whose currentRevision does not move), the one of the
            // highest such ordinal, next to the updated ones.
            let current = set
                .current_revision()
                .filter(|c| *c != update && !set.on_delete());
            let old = current.map(String::from).or_else(|| {
                by_ordinal(set, pods)
                    .iter()
                    .rev()
                    .flatten()
                    .filter(|p| !p.terminating)
                    .filter_map(|p| p.labels.get(REVISION_LABEL))
                    .find(|r| r.as_str() != update)
                    .cloned()
            });
            match old {
                Some(old) => Ok(Start::Revert(old)),
                None => Err(format!(
                    "{} has no update in progress to roll back: its pods run revision {update}{}",
                    set.display(),
                    if ours {
                        " (the update finished; running its command again restores the update strategy)"
                    } else {
                        ""
                    }
                )),
            }
        }
    }
}

impl StatefulSet {
    pub fn from_value(object: Value) -> Result<StatefulSet, String> {
        match object["kind"].as_str() {
            Some("StatefulSet") | None => Ok(StatefulSet { object }),
            Some(other) => Err(format!("a {other}, not a StatefulSet")),
        }
    }

    /// `spec.replicas`, 1 when unset (the API's default).
    pub fn replicas(&self) -> i32 {
        self.object["spec"]["replicas"]
            .as_i64()
            .map_or(1, |r| i32::try_from(r).unwrap_or(i32::MAX))
    }

    pub fn on_delete(&self) -> bool {
        self.object["spec"]["updateStrategy"]["type"] == "OnDelete"
    }

    /// The partition: ordinals at or above it run the update revision.
    pub fn partition(&self) -> i32 {
        self.object["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
            .as_i64()
            .map_or(0, |p| i32::try_from(p).unwrap_or(i32::MAX))
    }

    pub fn update_revision(&self) -> Option<&str> {
        self.object["status"]["updateRevision"].as_str()
    }

    pub fn current_revision(&self) -> Option<&str> {
        self.object["status"]["currentRevision"].as_str()
    }

    /// The pods a step may take: `given` (`--max-unavailable`), else the set's own
    /// `rollingUpdate.maxUnavailable` (alpha in 1.24, beta later; 1 where it has none).
    pub fn budget(&self, given: Option<IntOrPercent>) -> IntOrPercent {
        given.unwrap_or_else(|| self.own_max_unavailable())
    }

    /// The StatefulSet as an update starts it, in one write: `template` (when given), the
    /// partition at the replica count so that nothing moves yet (an `OnDelete` StatefulSet
    /// stays so: nothing moves until this tool deletes a pod) with the set's own
    /// `maxUnavailable` kept, and the original strategy recorded (kept when an earlier run
    /// recorded it).
    pub fn begun(&self, template: Option<Value>, rollback: bool) -> StatefulSet {
        let original = self.recorded_strategy().unwrap_or_else(|| self.strategy());
        let held = (!self.on_delete()).then(|| {
            let mut rolling = json!({"partition": self.replicas()});
            let own = &original["rollingUpdate"]["maxUnavailable"];
            if !own.is_null() {
                rolling["maxUnavailable"] = own.clone();
            }
            json!({"type": "RollingUpdate", "rollingUpdate": rolling})
        });
        StatefulSet {
            object: self.begun_object(template, held, rollback),
        }
    }
}

/// The ordinal of `pod` in the StatefulSet `name`, from its name `name-N`.
pub fn ordinal(name: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(name)?.strip_prefix('-')?.parse().ok()
}

/// The pods of `set` in their ordinals' order, `None` where an ordinal has no pod.
pub fn by_ordinal<'a>(set: &StatefulSet, pods: &'a [PodInfo]) -> Vec<Option<&'a PodInfo>> {
    let mut slots = vec![None; usize::try_from(set.replicas()).unwrap_or(0)];
    for pod in pods {
        if let Some(slot) = ordinal(set.name(), &pod.name)
            .and_then(|o| usize::try_from(o).ok())
            .and_then(|o| slots.get_mut(o))
        {
            *slot = Some(pod);
        }
    }
    slots
}

/// Whether `pod` runs `revision` (and is not on its way out).
pub fn on_revision(pod: Option<&PodInfo>, revision: &str) -> bool {
    pod.is_some_and(|p| {
        !p.terminating && p.labels.get(REVISION_LABEL).map(String::as_str) == Some(revision)
    })
}

/// Where the update stands: the partition, or for an `OnDelete` StatefulSet (whose pods this
/// tool deletes itself) the lowest of the top ordinals that all run `revision`.
pub fn partition_of(set: &StatefulSet, pods: &[PodInfo], revision: &str) -> i32 {
    if !set.on_delete() {
        return set.partition();
    }
    let slots = by_ordinal(set, pods);
    let updated_on_top = slots
        .iter()
        .rev()
        .take_while(|p| on_revision(**p, revision))
        .count();
    set.replicas() - i32::try_from(updated_on_top).unwrap_or(0)
}

/// The pods an `OnDelete` step deletes to update the ordinals `to..from`: those not on
/// `revision` yet (nor on their way out), highest ordinal first.
pub fn to_delete(
    set: &StatefulSet,
    pods: &[PodInfo],
    to: i32,
    from: i32,
    revision: &str,
) -> Vec<PodRef> {
    let slots = by_ordinal(set, pods);
    (to.max(0)..from)
        .rev()
        .filter_map(|o| slots.get(usize::try_from(o).ok()?).copied().flatten())
        .filter(|p| !p.terminating && !on_revision(Some(p), revision))
        .map(PodInfo::pod_ref)
        .collect()
}

/// The ordinals without an available pod (missing, starting, not Ready, on their way out),
/// but those of `besides`.
pub fn unavailable_besides(
    set: &StatefulSet,
    pods: &[PodInfo],
    besides: &[PodRef],
    now: i64,
) -> usize {
    by_ordinal(set, pods)
        .iter()
        .enumerate()
        .filter(|(o, p)| {
            let name = format!("{}-{o}", set.name());
            !besides.iter().any(|b| b.name == name)
                && !p.is_some_and(|p| p.available(set.min_ready_seconds(), now))
        })
        .count()
}

/// The lowest ordinal not on `revision` (the replica count when all are): the ordinals below
/// it need no step.
pub fn floor(set: &StatefulSet, pods: &[PodInfo], revision: &str) -> i32 {
    by_ordinal(set, pods)
        .iter()
        .position(|p| !on_revision(*p, revision))
        .map_or(set.replicas(), |o| i32::try_from(o).unwrap_or(i32::MAX))
}

/// The pods at or above `partition` not yet available on `revision`, highest ordinal first;
/// empty once the step's pods are all up.
pub fn waiting_for(
    set: &StatefulSet,
    pods: &[PodInfo],
    partition: i32,
    revision: &str,
    now: i64,
) -> Vec<String> {
    let slots = by_ordinal(set, pods);
    let from = usize::try_from(partition).unwrap_or(0);
    (from..slots.len())
        .rev()
        .filter(|&o| {
            let pod = slots[o];
            !(on_revision(pod, revision)
                && pod.is_some_and(|p| p.available(set.min_ready_seconds(), now)))
        })
        .map(|o| format!("{}-{o}", set.name()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(replicas: i32) -> StatefulSet {
        StatefulSet::from_value(json!({
            "kind": "StatefulSet",
            "metadata": {"name": "web", "generation": 2},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "main", "image": "app:1"}]}}
            },
            "status": {"observedGeneration": 2, "updateRevision": "web-2", "currentRevision": "web-1"}
        }))
        .unwrap()
    }

    fn pod(name: &str, revision: &str, ready: bool) -> PodInfo {
        PodInfo::from_value(&json!({
            "metadata": {"name": name, "uid": format!("{name}@{revision}"), "labels": {REVISION_LABEL: revision}},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
    }

    #[test]
    fn the_floor_is_the_lowest_ordinal_off_the_revision() {
        let s = set(4);
        let pods = [
            pod("web-0", "web-2", true),
            pod("web-1", "web-1", true),
            pod("web-3", "web-2", true),
        ];
        assert_eq!(floor(&s, &pods, "web-2"), 1);
        assert_eq!(floor(&s, &pods, "web-1"), 0);
        let all = [pod("web-0", "web-2", true), pod("web-1", "web-2", true)];
        assert_eq!(floor(&set(2), &all, "web-2"), 2);
        // A missing ordinal is not on any revision.
        assert_eq!(floor(&set(3), &all, "web-2"), 2);
    }

    #[test]
    fn an_on_delete_update_stands_where_its_top_ordinals_run_the_revision() {
        let mut s = set(4);
        s.object["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        let pods = [
            pod("web-0", "web-1", true),
            pod("web-1", "web-1", true),
            pod("web-2", "web-2", true),
            pod("web-3", "web-2", true),
        ];
        assert_eq!(partition_of(&s, &pods, "web-2"), 2);
        assert_eq!(partition_of(&s, &pods, "web-1"), 4);
        let uids = |doomed: Vec<PodRef>| doomed.into_iter().map(|p| p.uid).collect::<Vec<_>>();
        assert_eq!(
            uids(to_delete(&s, &pods, 0, 4, "web-2")),
            ["web-1@web-1", "web-0@web-1"],
            "each pod named with the uid of the object that is off the revision"
        );
        assert!(to_delete(&s, &pods, 2, 4, "web-2").is_empty());
        let mut starting = pods.clone();
        starting[3] = pod("web-3", "web-2", false);
        assert_eq!(unavailable_besides(&s, &starting, &[], 0), 1);
        assert_eq!(
            unavailable_besides(&s, &starting, &[starting[3].pod_ref()], 0),
            0
        );
        // A missing ordinal is unavailable too.
        assert_eq!(unavailable_besides(&s, &pods[..3], &[], 0), 1);
        // A RollingUpdate StatefulSet stands at its partition.
        assert_eq!(partition_of(&set(4), &pods, "web-2"), 0);
    }

    #[test]
    fn a_step_waits_for_its_pods_ready_on_the_revision_highest_first() {
        let s = set(4);
        let pods = [
            pod("web-1", "web-1", true),
            pod("web-2", "web-2", false),
            pod("web-3", "web-2", true),
        ];
        assert_eq!(waiting_for(&s, &pods, 2, "web-2", 0), ["web-2"]);
        assert_eq!(
            waiting_for(&s, &pods, 0, "web-2", 0),
            ["web-2", "web-1", "web-0"]
        );
        assert!(waiting_for(&s, &pods, 3, "web-2", 0).is_empty());
    }

    #[test]
    fn an_image_change_needs_a_known_container_and_a_file_must_keep_the_selector() {
        let s = set(3);
        let change = |container: Option<&str>| TemplateChange::Image {
            image: "app:2".into(),
            container: container.map(String::from),
            pull_policy: None,
        };
        let next = s.next_template(&change(None)).unwrap();
        assert_eq!(next["spec"]["containers"][0]["image"], "app:2");
        assert!(!s.has_template(&next));
        assert!(s.has_template(&s.template().clone()));
        let err = s.next_template(&change(Some("sidecar"))).unwrap_err();
        assert!(err.contains("container \"sidecar\" not found"), "{err}");
        let file = json!({"spec": {"template": {"metadata": {"labels": {"app": "other"}}}}});
        let err = s.next_template(&TemplateChange::File(file)).unwrap_err();
        assert!(err.contains("selector cannot change"), "{err}");
    }

    #[test]
    fn an_update_records_the_strategy_once_and_restoring_puts_it_back() {
        let mut s = set(3);
        s.object["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        let begun = s.begun(None, false);
        assert!(
            begun.on_delete(),
            "OnDelete stays: this tool deletes the pods"
        );
        assert_eq!(begun.recorded_strategy(), Some(json!({"type": "OnDelete"})));
        let rolling = set(3).begun(None, false);
        assert_eq!(rolling.partition(), 3);
        // A second start keeps the first record.
        assert_eq!(
            begun.begun(None, false).recorded_strategy(),
            Some(json!({"type": "OnDelete"}))
        );
        let patch = begun.restoring().unwrap();
        assert_eq!(
            patch["spec"]["updateStrategy"],
            json!({"type": "OnDelete", "rollingUpdate": null})
        );
        assert!(s.restoring().is_none());
    }

    #[test]
    fn the_sets_own_max_unavailable_sizes_the_steps_and_stays_while_the_update_runs() {
        let mut s = set(6);
        s.object["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 2}});
        assert_eq!(s.budget(None), IntOrPercent::Int(2));
        // The flag says otherwise.
        assert_eq!(s.budget(Some(IntOrPercent::Int(1))), IntOrPercent::Int(1));
        let begun = s.begun(None, false);
        assert_eq!(
            begun.object["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 6, "maxUnavailable": 2}})
        );
        // Read from the record while the update runs, and put back exactly as it was.
        assert_eq!(begun.budget(None), IntOrPercent::Int(2));
        let restored = begun.restoring().unwrap();
        assert_eq!(
            restored["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 2}})
        );
        // A percentage, as the API allows it.
        let mut p = set(8);
        p.object["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}});
        assert_eq!(p.budget(None), IntOrPercent::Percent(25));
        // A set without it (or a server that does not serve it): one pod at a time.
        assert_eq!(set(3).budget(None), IntOrPercent::Int(1));
        assert_eq!(
            set(3).begun(None, false).object["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 3}})
        );
    }

    #[test]
    fn an_update_starts_writes_resumes_or_reverts() {
        let image = |i: &str| {
            PartitionAction::Roll(TemplateChange::Image {
                image: i.into(),
                container: None,
                pull_policy: None,
            })
        };
        let s = set(2);
        let on = |rev: &str| [pod("web-0", rev, true), pod("web-1", rev, true)];
        assert!(matches!(
            start(&s, &on("web-1"), &image("app:2")),
            Ok(Start::Write(Some(_)))
        ));
        // Same template, not ours: nothing to do once every pod runs it, else taken on.
        let err = start(&s, &on("web-2"), &image("app:1")).unwrap_err();
        assert!(err.contains("nothing to update"), "{err}");
        assert_eq!(
            start(&s, &on("web-1"), &image("app:1")),
            Ok(Start::Write(None))
        );
        let ours = s.begun(None, false);
        assert_eq!(
            start(&ours, &on("web-1"), &image("app:1")),
            Ok(Start::Resume)
        );
        // Pods on another revision than the update's: a rollback reverts to theirs.
        assert_eq!(
            start(&s, &on("web-1"), &PartitionAction::Rollback),
            Ok(Start::Revert("web-1".into()))
        );
        // Every pod on the update revision, which the controller then calls current.
        let mut done = s.clone();
        done.object["status"]["currentRevision"] = json!("web-2");
        let err = start(&done, &on("web-2"), &PartitionAction::Rollback).unwrap_err();
        assert!(err.contains("no update in progress"), "{err}");
        let err = start(
            &done.begun(None, false),
            &on("web-2"),
            &PartitionAction::Rollback,
        )
        .unwrap_err();
        assert!(err.contains("the update finished"), "{err}");
        // OnDelete: the revision of the highest ordinal not updated, not currentRevision.
        let mut on_delete = s.clone();
        on_delete.object["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        on_delete.object["status"]["currentRevision"] = json!("web-0");
        let mixed = [pod("web-0", "web-0", true), pod("web-1", "web-1", true)];
        assert_eq!(
            start(&on_delete, &mixed, &PartitionAction::Rollback),
            Ok(Start::Revert("web-1".into()))
        );
        // Pointed back: a rollback resumes rather than reverting to what it left, and the
        // update's command is refused until it is over.
        let back = s.begun(None, true);
        assert_eq!(
            start(&back, &on("web-1"), &PartitionAction::Rollback),
            Ok(Start::Resume)
        );
        let err = start(&back, &on("web-1"), &image("app:3")).unwrap_err();
        assert!(err.contains("is being rolled back"), "{err}");
    }

    #[test]
    fn selectors_become_list_queries() {
        let mut s = set(1);
        s.object["spec"]["selector"]["matchExpressions"] =
            json!([{"key": "tier", "operator": "In", "values": ["a", "b"]}]);
        assert_eq!(s.selector_string(), "app=web,tier in (a,b)");
    }
}
