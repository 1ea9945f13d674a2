//! Replacements judged by pods: a group whose node manager launches nodes for pods that wait
//! (Karpenter) is not kept at a size, so a batch is replaced once the pods evicted from it are
//! scheduled and Ready again. Before a batch's drain, each controller with pods to evict owes
//! as many Ready pods as it has then; the debt is recorded on the lock, so a run stopped before
//! the pods came back waits for them when it resumes. The controllers' namespaces come into the
//! live view for it: their pods are counted wherever they run.

use std::collections::BTreeMap;

use super::records::run_key;
use super::{RotateError, Rotation};
use crate::cluster::view::{Deadline, Scope, WaitError};
use crate::events::Event;
use crate::plan::drain;
use crate::snapshot::{Pod, Snapshot};

/// Ready pods owed, by controller (`namespace/Kind/name`).
type Owed = BTreeMap<String, usize>;

/// The namespaces of the controllers `owed` names.
fn namespaces(owed: &Owed) -> impl Iterator<Item = Scope> + '_ {
    owed.keys()
        .filter_map(|c| c.split('/').next())
        .map(|ns| Scope::Namespace(ns.to_string()))
}

/// The run-state key of what a group's batch owes.
pub(super) fn pods_back_key(group: &str) -> String {
    run_key("pods-back", group)
}

pub(super) const PODS_BACK_PREFIX: &str = "rollout-ext.io/pods-back.";

fn controller_of(pod: &Pod) -> Option<String> {
    let owner = pod.controller.as_ref()?;
    Some(format!("{}/{}/{}", pod.namespace, owner.kind, owner.name))
}

fn ready(pod: &Pod) -> bool {
    pod.ready && !pod.terminating && !pod.finished
}

/// For each controller with pods on `nodes` that a drain evicts, its Ready pods in
/// `snapshot`: what it must have again once the batch is replaced.
fn owed(snapshot: &Snapshot, nodes: &[String], options: &drain::DrainOptions) -> Owed {
    let mut owed: Owed = snapshot
        .pods
        .iter()
        .filter(|p| p.node_name.as_ref().is_some_and(|n| nodes.contains(n)))
        .filter(|p| drain::classify(p, options).is_evicted() && !p.finished)
        .filter_map(|p| controller_of(p))
        .map(|c| (c, 0))
        .collect();
    for pod in snapshot.pods.iter().filter(|p| ready(p)) {
        if let Some(count) = controller_of(pod).and_then(|c| owed.get_mut(&c)) {
            *count += 1;
        }
    }
    owed
}

/// The controllers of `owed` with fewer Ready pods in `snapshot` than they owe, and how many
/// they lack in all.
fn missing(snapshot: &Snapshot, owed: &Owed) -> (Vec<String>, usize) {
    let mut have: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in snapshot.pods.iter().filter(|p| ready(p)) {
        if let Some(c) = controller_of(pod)
            && let Some((key, _)) = owed.get_key_value(&c)
        {
            *have.entry(key.as_str()).or_default() += 1;
        }
    }
    let mut short = Vec::new();
    let mut lacking = 0;
    for (controller, want) in owed {
        let got = have.get(controller.as_str()).copied().unwrap_or(0);
        if got < *want {
            short.push(format!("{controller} ({got} of {want} Ready)"));
            lacking += want - got;
        }
    }
    (short, lacking)
}

impl Rotation<'_> {
    /// Records what the drain of `nodes` will owe, before it begins, counted from the pods as
    /// they are now: the batch's snapshot may be older than the wait for the last batch's pods
    /// (a resumed run reads it before), and a debt counted while those were still missing would
    /// be paid before this batch's own pods are back.
    pub(super) async fn record_owed(
        &self,
        group: &str,
        nodes: &[String],
    ) -> Result<(), RotateError> {
        let on_nodes = owed(
            &*self.view.caught_up().await?,
            nodes,
            &self.settings.drain.options,
        );
        self.view.look_at(namespaces(&on_nodes));
        let owed = owed(
            &*self.view.caught_up().await?,
            nodes,
            &self.settings.drain.options,
        );
        let record = serde_json::to_string(&owed).expect("records serialize");
        self.lock
            .set_state(&pods_back_key(group), Some(&record))
            .await?;
        Ok(())
    }

    /// Waits, watching pods, until what `group`'s last batch owes is paid, then clears its
    /// record; at once when nothing is owed.
    pub(super) async fn wait_pods_back(&self, group: &str) -> Result<(), RotateError> {
        let key = pods_back_key(group);
        let Some(owed) = self
            .lock
            .state(&key)
            .await?
            .and_then(|r| serde_json::from_str::<Owed>(&r).ok())
        else {
            return Ok(());
        };
        self.view.look_at(namespaces(&owed));
        let what = format!("waiting for the pods evicted from group {group} to be Ready again");
        self.kernel
            .holding(what, None, self.watch_pods_back(group, &owed))
            .await?;
        self.lock.set_state(&key, None).await?;
        Ok(())
    }

    async fn watch_pods_back(&self, group: &str, owed: &Owed) -> Result<(), RotateError> {
        let timeout = self.settings.replacement_timeout;
        let paid = |pods: &Snapshot| match missing(pods, owed) {
            (short, _) if short.is_empty() => Ok(()),
            unpaid => Err(unpaid),
        };
        match self.view.wait_until(Deadline::Within(timeout), paid).await {
            Ok(()) => {
                self.kernel.reporter.report(Event::PodsBack {
                    group: group.to_string(),
                    pods: owed.values().sum(),
                });
                Ok(())
            }
            Err(WaitError::Expired((short, lacking))) => Err(RotateError::PodsNotBack {
                group: group.to_string(),
                timeout,
                lacking,
                controllers: short.join(", "),
            }),
            Err(WaitError::View(e)) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: &str, rs: &str, ready: bool) -> String {
        format!(
            r#"{{"kind": "Pod", "metadata": {{"name": "{name}", "namespace": "shop",
                "ownerReferences": [{{"kind": "ReplicaSet", "name": "{rs}", "controller": true}}]}},
                "spec": {{"nodeName": "{node}"}},
                "status": {{"phase": "Running", "conditions": [{{"type": "Ready", "status": "{}"}}]}}}}"#,
            if ready { "True" } else { "False" }
        )
    }

    fn pods(items: &[String]) -> Snapshot {
        let json = format!(r#"{{"kind": "List", "items": [{}]}}"#, items.join(","));
        Snapshot::from_json(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_batch_owes_its_controllers_ready_pods_and_is_paid_when_they_are_back() {
        let before = pods(&[
            pod("web-1", "old", "web", true),
            pod("web-2", "other", "web", true),
            pod("web-3", "other", "web", false),
            pod("db-1", "other", "db", true),
        ]);
        let owed = owed(&before, &["old".to_string()], &Default::default());
        // Only the controllers the drain evicts from: web, with its two Ready pods.
        assert_eq!(owed, [("shop/ReplicaSet/web".to_string(), 2)].into());
        let evicted = pods(&[
            pod("web-2", "other", "web", true),
            pod("web-4", "new", "web", false),
        ]);
        assert_eq!(
            missing(&evicted, &owed),
            (vec!["shop/ReplicaSet/web (1 of 2 Ready)".to_string()], 1)
        );
        let back = pods(&[
            pod("web-2", "other", "web", true),
            pod("web-4", "new", "web", true),
        ]);
        assert_eq!(missing(&back, &owed), (vec![], 0));
    }
}
