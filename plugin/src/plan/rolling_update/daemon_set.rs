//! A DaemonSet as its node-by-node update sees it: the object's JSON with accessors for the
//! fields the update reads and writes, its ControllerRevisions (which template each pod runs,
//! by the pods' `controller-revision-hash`), its pods by node, and how an update starts.

use serde_json::{Value, json};

use super::in_place::InPlaceWorkload;
use super::pods::{PodInfo, PodRef};
use super::stateful_set::REVISION_LABEL;
use crate::plan::hook::{Candidate, InstanceKind};
use crate::plan::{Role, groups};
use crate::policy::IntOrPercent;
use crate::snapshot::Node;

pub use crate::keys::ROLLING_BACK;

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSet {
    pub object: Value,
}

/// A ControllerRevision of a DaemonSet: a template, by the hash its pods carry.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub hash: String,
    pub number: i64,
    pub template: Value,
}

/// A pod of a DaemonSet: where it runs and on which revision.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonPod {
    pub name: String,
    pub uid: String,
    pub node: String,
    pub hash: String,
    pub ready: bool,
    pub ready_since: Option<i64>,
    pub terminating: bool,
}

/// What the command asks of a DaemonSet (the same words as for a StatefulSet).
pub use super::stateful_set::PartitionAction as UpdateAction;

/// How an update starts, from the DaemonSet, its pods and its revisions as they are (a write
/// switches it to OnDelete).
pub type Start = super::in_place::Start<Revision>;

impl InPlaceWorkload for DaemonSet {
    const KIND: &'static str = "daemonset";

    fn object(&self) -> &Value {
        &self.object
    }
}

impl DaemonSet {
    pub fn from_value(object: Value) -> Result<DaemonSet, String> {
        match object["kind"].as_str() {
            Some("DaemonSet") | None => Ok(DaemonSet { object }),
            Some(other) => Err(format!("a {other}, not a DaemonSet")),
        }
    }

    /// The nodes a step may take: `given` (`--max-unavailable`), else the DaemonSet's own
    /// maxUnavailable, which must then let at least one pod go.
    pub fn budget(&self, given: Option<IntOrPercent>) -> Result<IntOrPercent, String> {
        match given.unwrap_or_else(|| self.own_max_unavailable()) {
            IntOrPercent::Int(0) | IntOrPercent::Percent(0) => Err(format!(
                "{} allows no unavailable pod (its maxUnavailable is 0; it surges instead): give --max-unavailable to replace its pods node by node",
                self.display()
            )),
            budget => Ok(budget),
        }
    }

    /// The DaemonSet as an update starts it, in one write: `template` (when given), `OnDelete`
    /// so that only this tool replaces pods, the original strategy recorded (kept when an
    /// earlier run recorded it), and whether this is a rollback.
    pub fn begun(&self, template: Option<Value>, rollback: bool) -> DaemonSet {
        let on_delete = json!({"type": "OnDelete"});
        DaemonSet {
            object: self.begun_object(template, Some(on_delete), rollback),
        }
    }
}

impl Revision {
    /// A ControllerRevision owned by the DaemonSet with `uid`; `None` for anything else.
    pub fn owned(object: &Value, uid: &str) -> Option<Revision> {
        let owned = object["metadata"]["ownerReferences"]
            .as_array()?
            .iter()
            .any(|o| o["uid"] == uid && o["controller"] == true);
        let mut template = object["data"]["spec"]["template"].clone();
        template.as_object_mut()?.remove("$patch");
        owned.then(|| Revision {
            hash: object["metadata"]["labels"][REVISION_LABEL]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            number: object["revision"].as_i64().unwrap_or(0),
            template,
        })
    }
}

impl DaemonPod {
    pub fn pod_ref(&self) -> PodRef {
        PodRef {
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }

    /// A pod owned by the DaemonSet with `uid`; `None` for anything else.
    pub fn owned(pod: &PodInfo, uid: &str) -> Option<DaemonPod> {
        (pod.owner_uid.as_deref() == Some(uid)).then(|| DaemonPod {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: pod.node.clone().unwrap_or_default(),
            hash: pod.labels.get(REVISION_LABEL).cloned().unwrap_or_default(),
            ready: pod.ready,
            ready_since: pod.ready_since,
            terminating: pod.terminating,
        })
    }

    fn available(&self, min_ready_seconds: i64, now: i64) -> bool {
        self.ready
            && !self.terminating
            && (min_ready_seconds <= 0
                || self
                    .ready_since
                    .is_some_and(|t| t + min_ready_seconds <= now))
    }
}

/// The revision with the highest number: the one the template is.
pub fn newest(revisions: &[Revision]) -> Option<&Revision> {
    revisions.iter().max_by_key(|r| r.number)
}

/// The nodes running a pod not on revision `hash`, by name.
pub fn pending_nodes(pods: &[DaemonPod], hash: &str) -> Vec<String> {
    let mut nodes: Vec<String> = pods
        .iter()
        .filter(|p| !p.terminating && !p.node.is_empty() && p.hash != hash)
        .map(|p| p.node.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// The nodes running a pod of `hash` and none other but on its way out: the ones an update
/// towards `hash` replaced already.
pub fn updated_nodes(pods: &[DaemonPod], hash: &str) -> Vec<String> {
    let pending = pending_nodes(pods, hash);
    let mut nodes: Vec<String> = pods
        .iter()
        .filter(|p| !p.node.is_empty() && !pending.contains(&p.node))
        .map(|p| p.node.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    nodes
}

/// The nodes of `nodes` without a pod available on revision `hash` yet.
pub fn waiting_for(
    pods: &[DaemonPod],
    nodes: &[String],
    hash: &str,
    min_ready_seconds: i64,
    now: i64,
) -> Vec<String> {
    nodes
        .iter()
        .filter(|n| {
            !pods
                .iter()
                .any(|p| &p.node == *n && p.hash == hash && p.available(min_ready_seconds, now))
        })
        .cloned()
        .collect()
}

/// How the update `action` asks for starts on `set`, whose controller has seen its spec.
pub fn start(
    set: &DaemonSet,
    pods: &[DaemonPod],
    revisions: &[Revision],
    action: &UpdateAction,
) -> Result<Start, String> {
    let hash = newest(revisions).map_or("", |r| r.hash.as_str());
    match action {
        UpdateAction::Roll(change) => {
            let template = set.next_template(change)?;
            set.roll_start(template, || {
                pending_nodes(pods, hash).is_empty().then(|| {
                    format!(
                        "every pod of {} runs this template already: nothing to update",
                        set.display()
                    )
                })
            })
        }
        UpdateAction::Rollback if set.rolling_back() => Ok(Start::Resume),
        UpdateAction::Rollback => {
            // The revision the pods not yet updated run, the newest such.
            let old = revisions
                .iter()
                .filter(|r| r.hash != hash)
                .filter(|r| pods.iter().any(|p| !p.terminating && p.hash == r.hash))
                .max_by_key(|r| r.number);
            match old {
                Some(old) => Ok(Start::Revert(old.clone())),
                None => Err(format!(
                    "{} has no update in progress to roll back: every pod runs its template",
                    set.display()
                )),
            }
        }
    }
}

/// `node` as a selection and batching hook sees it: an instance of kind node, in the group of
/// the DaemonSet `group`, holding its one pod.
pub fn node_candidate(node: Option<&Node>, name: &str, group: &str, pod_ready: bool) -> Candidate {
    Candidate {
        kind: InstanceKind::Node,
        name: name.to_string(),
        group: group.to_string(),
        role: Role::Node,
        zone: node.and_then(groups::zone_of).map(String::from),
        labels: node.map(|n| n.labels.clone()).unwrap_or_default(),
        annotations: node.map(|n| n.annotations.clone()).unwrap_or_default(),
        taints: node.map(|n| n.taints.clone()).unwrap_or_default(),
        ready: node.is_none_or(|n| n.ready),
        unschedulable: node.is_some_and(|n| n.unschedulable),
        created: node.and_then(|n| n.created),
        kubelet_version: node.and_then(|n| n.kubelet_version.clone()),
        pods: 1,
        pods_not_ready: u32::from(!pod_ready),
        up_to_date: false,
        reason: Some(format!("runs an old pod of daemonset/{group}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::rolling_update::template::TemplateChange;

    fn set() -> DaemonSet {
        DaemonSet::from_value(json!({
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "uid": "u1", "generation": 1},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                             "spec": {"containers": [{"name": "main", "image": "agent:1"}]}}
            },
            "status": {"observedGeneration": 1}
        }))
        .unwrap()
    }

    fn pod(node: &str, hash: &str) -> DaemonPod {
        DaemonPod {
            name: format!("agent-{node}"),
            uid: format!("agent-{node}-{hash}"),
            node: node.into(),
            hash: hash.into(),
            ready: true,
            ready_since: Some(0),
            terminating: false,
        }
    }

    fn revision(hash: &str, number: i64, image: &str) -> Revision {
        Revision {
            hash: hash.into(),
            number,
            template: json!({"metadata": {"labels": {"app": "agent"}},
                             "spec": {"containers": [{"name": "main", "image": image}]}}),
        }
    }

    fn image(i: &str) -> UpdateAction {
        UpdateAction::Roll(TemplateChange::Image {
            image: i.into(),
            container: None,
            pull_policy: None,
        })
    }

    #[test]
    fn pending_nodes_run_another_revision_and_a_step_waits_for_new_ready_pods() {
        let pods = [pod("n2", "a"), pod("n1", "a"), pod("n3", "b")];
        assert_eq!(pending_nodes(&pods, "b"), ["n1", "n2"]);
        assert_eq!(updated_nodes(&pods, "b"), ["n3"]);
        let nodes = ["n1".to_string(), "n3".to_string()];
        assert_eq!(waiting_for(&pods, &nodes, "b", 0, 10), ["n1"]);
        // Ready, but not for minReadySeconds yet.
        assert_eq!(waiting_for(&pods, &nodes, "b", 30, 10), ["n1", "n3"]);
    }

    #[test]
    fn an_update_writes_resumes_or_reverts() {
        let s = set();
        let revisions = [revision("a", 1, "agent:1")];
        let pods = [pod("n1", "a")];
        assert!(matches!(
            start(&s, &pods, &revisions, &image("agent:2")),
            Ok(Start::Write(Some(_)))
        ));
        let err = start(&s, &pods, &revisions, &image("agent:1")).unwrap_err();
        assert!(err.contains("nothing to update"), "{err}");
        let err = start(&s, &pods, &revisions, &UpdateAction::Rollback).unwrap_err();
        assert!(err.contains("no update in progress"), "{err}");

        // Mid-update: n1 still on a, the template on b.
        let mut ours = s.begun(Some(revision("b", 2, "agent:2").template), false);
        ours.object["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        let revisions = [revision("a", 1, "agent:1"), revision("b", 2, "agent:2")];
        let pods = [pod("n1", "a"), pod("n2", "b")];
        assert_eq!(
            start(&ours, &pods, &revisions, &image("agent:2")),
            Ok(Start::Resume)
        );
        assert_eq!(
            start(&ours, &pods, &revisions, &UpdateAction::Rollback),
            Ok(Start::Revert(revisions[0].clone()))
        );
        // Pointed back: a rollback resumes rather than reverting to what it left.
        let back = ours.begun(Some(revisions[0].template.clone()), true);
        assert_eq!(
            start(&back, &pods, &revisions, &UpdateAction::Rollback),
            Ok(Start::Resume)
        );
    }

    #[test]
    fn the_strategy_is_recorded_once_switched_to_on_delete_and_restored() {
        let s = set();
        assert_eq!(s.own_max_unavailable(), IntOrPercent::Int(2));
        let mut surging = s.clone();
        surging.object["spec"]["updateStrategy"]["rollingUpdate"] =
            json!({"maxUnavailable": 0, "maxSurge": 1});
        assert!(
            surging
                .budget(None)
                .unwrap_err()
                .contains("give --max-unavailable")
        );
        assert_eq!(
            surging.budget(Some(IntOrPercent::Int(1))),
            Ok(IntOrPercent::Int(1))
        );
        let begun = s.begun(None, true);
        assert_eq!(
            begun.object["spec"]["updateStrategy"],
            json!({"type": "OnDelete"})
        );
        assert!(begun.rolling_back());
        assert_eq!(begun.own_max_unavailable(), IntOrPercent::Int(2));
        assert!(!begun.begun(None, false).rolling_back());
        let patch = begun.restoring().unwrap();
        assert_eq!(
            patch["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}})
        );
        assert!(patch["metadata"]["annotations"][ROLLING_BACK].is_null());
    }
}
