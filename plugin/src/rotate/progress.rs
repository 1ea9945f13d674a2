//! How far the run is, per group, kept on the Lease (`rollout-ext.io/progress`) for `status`
//! and its live view: the instances a group replaces, how many are replaced, and the batch in
//! flight. Advice, like the estimate: a Lease that cannot take it does not stop the run, and it
//! ends with the run (a resumed run counts afresh).

use serde::{Deserialize, Serialize};

use super::Rotation;
use crate::cluster::ClusterError;
use crate::keys;

/// Every group of the run, in the order the run takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunProgress {
    pub groups: Vec<GroupProgress>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupProgress {
    pub group: String,
    /// The instances this run replaces in the group (those replaced included).
    pub instances: usize,
    pub replaced: usize,
    /// The batch being replaced now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchInFlight>,
    /// Its last replacements are Ready: the group is done.
    #[serde(default)]
    pub done: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInFlight {
    /// Counted from 1, as the run's output says it.
    pub number: u32,
    pub nodes: Vec<String>,
}

impl RunProgress {
    fn group(&mut self, group: &str) -> Option<&mut GroupProgress> {
        self.groups.iter_mut().find(|g| g.group == group)
    }

    /// A group the run will rotate, with the instances it would replace now.
    pub(super) fn add(&mut self, group: &str, instances: usize) {
        self.groups.push(GroupProgress {
            group: group.to_string(),
            instances,
            replaced: 0,
            batch: None,
            done: false,
        });
    }

    /// The selection chose `chosen` instances of `group` still to replace.
    pub(super) fn chose(&mut self, group: &str, chosen: usize) {
        if let Some(g) = self.group(group) {
            g.instances = g.replaced + chosen;
        }
    }

    /// `dropped` instances of `group` need no batch any more (removed by someone else).
    pub(super) fn dropped(&mut self, group: &str, dropped: usize) {
        if let Some(g) = self.group(group) {
            g.instances = g.instances.saturating_sub(dropped).max(g.replaced);
            g.batch = None;
        }
    }

    pub(super) fn batch_started(&mut self, group: &str, index: u32, nodes: &[String]) {
        if let Some(g) = self.group(group) {
            g.batch = Some(BatchInFlight {
                number: index + 1,
                nodes: nodes.to_vec(),
            });
        }
    }

    /// A batch of `group` is over, `replaced` of its instances replaced.
    pub(super) fn batch_done(&mut self, group: &str, replaced: usize) {
        if let Some(g) = self.group(group) {
            g.replaced += replaced;
            g.instances = g.instances.max(g.replaced);
            g.batch = None;
        }
    }

    pub(super) fn group_done(&mut self, group: &str) {
        if let Some(g) = self.group(group) {
            g.done = true;
            g.batch = None;
        }
    }

    /// As the Lease keeps it.
    pub fn record(&self) -> String {
        serde_json::to_string(self).expect("progress serialises")
    }

    /// From the Lease's record; `None` when there is none or it cannot be read.
    pub fn from_record(record: &str) -> Option<RunProgress> {
        serde_json::from_str(record).ok()
    }
}

impl Rotation<'_> {
    /// Puts the run's progress on the Lease, for `status`, without waiting for the write; the
    /// error is an earlier write's.
    pub(super) async fn record_progress(&self) -> Result<(), ClusterError> {
        let record = self.estimates.progress.record();
        self.lock.record_soon(keys::PROGRESS, &record).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_counts_its_replaced_instances_and_the_batch_in_flight() {
        let mut p = RunProgress::default();
        p.add("nodes", 5);
        p.chose("nodes", 4);
        p.batch_started("nodes", 0, &["a".into(), "b".into()]);
        assert_eq!(p.groups[0].batch.as_ref().unwrap().number, 1);
        p.batch_done("nodes", 2);
        p.dropped("nodes", 1);
        let g = &p.groups[0];
        assert_eq!((g.instances, g.replaced, g.batch.is_none()), (3, 2, true));
        p.group_done("nodes");
        let back = RunProgress::from_record(&p.record()).unwrap();
        assert_eq!(back, p);
        assert!(back.groups[0].done);
    }
}
