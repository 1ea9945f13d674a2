//! What [`crate::Policy::next_batch`] is told: where the group's update stands, and the
//! instances the next batch may take.
//!
//! Inside the plugin the instances stay with the host and are read on demand, a few at a time,
//! so a policy that looks at the first few of a large batch pays for those few. In a native unit
//! test they are a plain list (see [`crate::testing::progress`]).

use crate::Group;
use crate::Instance;
use crate::bindings::rollout_ext::policy::types;

/// How many instances one read from the host brings when iterating.
const CHUNK: usize = 16;

/// Where the update of a group stands when the next batch is sized.
#[derive(Debug)]
pub struct Progress<'a> {
    pub group: Group,
    /// Batches finished so far (the canary counts as one).
    pub batches_done: u32,
    /// Instances updated so far.
    pub updated: u32,
    /// The largest batch the budget allows right now: the answer's upper bound, and the number
    /// of `pending` instances.
    pub max_batch: u32,
    /// The instances the next batch may take, in update order; a batch is a prefix of them.
    pub pending: Pending<'a>,
}

impl<'a> Progress<'a> {
    pub(crate) fn from_host(progress: types::Progress, pending: &'a types::Pending) -> Self {
        Progress {
            group: progress.group,
            batches_done: progress.batches_done,
            updated: progress.updated,
            max_batch: progress.max_batch,
            pending: Pending(Source::Host {
                pending,
                len: pending.len() as usize,
            }),
        }
    }
}

/// The next batch's candidates, in update order. Read them with [`Pending::iter`] (lazily, a
/// chunk at a time), [`Pending::get`] or [`Pending::range`].
#[derive(Debug)]
pub struct Pending<'a>(Source<'a>);

#[derive(Debug)]
enum Source<'a> {
    Host {
        pending: &'a types::Pending,
        len: usize,
    },
    Local(Vec<Instance>),
}

impl Pending<'_> {
    /// Instances held in memory (native unit tests).
    pub fn local(instances: Vec<Instance>) -> Pending<'static> {
        Pending(Source::Local(instances))
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Source::Host { len, .. } => *len,
            Source::Local(all) => all.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `count` instances from index `start` (fewer at the end), in one read.
    pub fn range(&self, start: usize, count: usize) -> Vec<Instance> {
        match &self.0 {
            Source::Host { pending, len } => {
                if start >= *len || count == 0 {
                    return Vec::new();
                }
                let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                pending.get(clamp(start), clamp(count))
            }
            Source::Local(all) => {
                let start = start.min(all.len());
                let end = start.saturating_add(count).min(all.len());
                all[start..end].to_vec()
            }
        }
    }

    /// The instance at `index`.
    pub fn get(&self, index: usize) -> Option<Instance> {
        self.range(index, 1).pop()
    }

    /// Every instance in order, read a chunk at a time as the iteration goes: stopping early
    /// reads no more.
    pub fn iter(&self) -> impl Iterator<Item = Instance> + '_ {
        (0..self.len())
            .step_by(CHUNK)
            .flat_map(move |start| self.range(start, CHUNK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::node;

    fn pending(n: usize) -> Pending<'static> {
        Pending::local((0..n).map(|i| node(&format!("n{i}"), "a")).collect())
    }

    #[test]
    fn reads_are_bounded_by_what_is_pending() {
        let p = pending(40);
        assert_eq!(p.len(), 40);
        assert_eq!(p.range(38, 10).len(), 2);
        assert!(p.range(40, 1).is_empty());
        assert_eq!(p.get(39).map(|i| i.name), Some("n39".to_string()));
        assert_eq!(p.get(40), None);
        assert!(pending(0).is_empty());
    }

    #[test]
    fn iteration_yields_every_instance_in_order_across_chunks() {
        let p = pending(CHUNK * 2 + 3);
        let names: Vec<String> = p.iter().map(|i| i.name).collect();
        let expected: Vec<String> = (0..CHUNK * 2 + 3).map(|i| format!("n{i}")).collect();
        assert_eq!(names, expected);
    }
}
