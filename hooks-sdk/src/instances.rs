//! Lists of instances the host holds: the candidates of [`crate::Policy::select`] and the pending
//! instances of [`crate::Progress`].
//!
//! Inside the plugin the instances stay with the host and are read on demand: a chunk of
//! instances per read (packed, `get-packed`: the host hands over two strings per read rather
//! than five per instance, and the strings are cut apart here), and each instance's labels,
//! annotations and taints only when asked for.
//! A policy that looks at the first few of a large group pays for those few. In a native unit
//! test they are held in memory (see [`crate::testing`]).

use std::ops::{Deref, DerefMut};

use crate::bindings::rollout_ext::policy::types;
use crate::{Instance, KeyValue, Taint};

/// How many instances one read from the host brings when iterating.
const CHUNK: usize = 16;
/// The largest read of a long iteration: chunks double up to this, so that reading a few costs
/// a few while reading thousands takes few host calls.
const MAX_CHUNK: usize = 256;

/// Instances in the host's order. Read them with [`Instances::iter`] (lazily, a chunk at a time),
/// [`Instances::get`] or [`Instances::range`]; read labels, annotations and taints through the
/// yielded [`Candidate`]s or by index ([`Instances::label`], …).
#[derive(Debug)]
pub struct Instances<'a>(Source<'a>);

#[derive(Debug)]
enum Source<'a> {
    Host {
        instances: &'a types::Instances,
        len: usize,
    },
    Local {
        items: Vec<LocalInstance>,
        /// Reads of instances so far, for the tests of lazy iteration.
        reads: std::cell::Cell<usize>,
    },
}

/// An instance held in memory together with its labels, annotations and taints: what
/// [`Instances::local`] holds in a native unit test. Built with [`crate::testing::node`]; it
/// dereferences to its [`Instance`], so `node.created = Some(…)` edits the instance.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalInstance {
    pub instance: Instance,
    pub labels: Vec<KeyValue>,
    pub annotations: Vec<KeyValue>,
    pub taints: Vec<Taint>,
}

impl LocalInstance {
    /// `instance` without labels, annotations or taints.
    pub fn new(instance: Instance) -> Self {
        LocalInstance {
            instance,
            labels: Vec::new(),
            annotations: Vec::new(),
            taints: Vec::new(),
        }
    }

    /// With label `key` set to `value` (replacing an earlier value).
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        set(&mut self.labels, key, value);
        self
    }

    /// With annotation `key` set to `value` (replacing an earlier value).
    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        set(&mut self.annotations, key, value);
        self
    }

    /// With one more taint.
    pub fn with_taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.taints.push(Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        });
        self
    }

    /// Up to date, and so not chosen (no reason).
    pub fn up_to_date(mut self) -> Self {
        self.instance.up_to_date = true;
        self.instance.reason = None;
        self
    }

    /// With `reason` as the reason it is in the current choice (none: not chosen).
    pub fn with_reason(mut self, reason: Option<&str>) -> Self {
        self.instance.reason = reason.map(str::to_string);
        self
    }
}

fn set(entries: &mut Vec<KeyValue>, key: &str, value: &str) {
    entries.retain(|kv| kv.key != key);
    entries.push(KeyValue {
        key: key.into(),
        value: value.into(),
    });
}

fn find(entries: &[KeyValue], key: &str) -> Option<String> {
    entries
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.clone())
}

impl Deref for LocalInstance {
    type Target = Instance;
    fn deref(&self) -> &Instance {
        &self.instance
    }
}

impl DerefMut for LocalInstance {
    fn deref_mut(&mut self) -> &mut Instance {
        &mut self.instance
    }
}

impl From<Instance> for LocalInstance {
    fn from(instance: Instance) -> Self {
        LocalInstance::new(instance)
    }
}

/// Instances from a packed read: each string cut from the one text, in the contract's order
/// (name, group, zone, kubelet version, reason). The host packs whole strings; a length that
/// does not fit is a broken host, and a trap says so.
fn unpack(packed: types::PackedInstances) -> Vec<Instance> {
    let text = packed.text.as_str();
    let mut at: usize = 0;
    let mut cut = |len: u32| -> String {
        let end = at.saturating_add(len as usize);
        let s = text
            .get(at..end)
            .expect("the host packs each string whole into the text");
        at = end;
        s.to_string()
    };
    packed
        .instances
        .into_iter()
        .map(|p| {
            let name = cut(p.name_len);
            let group = cut(p.group_len);
            let zone = p.zone_len.map(&mut cut);
            let kubelet_version = p.kubelet_version_len.map(&mut cut);
            let reason = p.reason_len.map(&mut cut);
            Instance {
                kind: p.kind,
                name,
                group,
                role: p.role,
                zone,
                ready: p.ready,
                unschedulable: p.unschedulable,
                created: p.created,
                kubelet_version,
                pods: p.pods,
                pods_not_ready: p.pods_not_ready,
                up_to_date: p.up_to_date,
                reason,
            }
        })
        .collect()
}

/// Clamps an index or count to the contract's `u32`.
fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl<'a> Instances<'a> {
    /// The instances the host lends a call.
    pub(crate) fn host(instances: &'a types::Instances) -> Self {
        Instances(Source::Host {
            instances,
            len: instances.len() as usize,
        })
    }

    /// Instances held in memory (native unit tests).
    pub fn local(items: Vec<LocalInstance>) -> Instances<'static> {
        Instances(Source::Local {
            items,
            reads: std::cell::Cell::new(0),
        })
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        match &self.0 {
            Source::Host { len, .. } => *len,
            Source::Local { items, .. } => items.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `count` instances from index `start` (fewer at the end, none past it), in one read.
    pub fn range(&self, start: usize, count: usize) -> Vec<Instance> {
        if start >= self.len() || count == 0 {
            return Vec::new();
        }
        match &self.0 {
            Source::Host { instances, .. } => {
                unpack(instances.get_packed(clamp(start), clamp(count)))
            }
            // Each read copies the records, as a read from the host does: a native policy
            // pays what a hook pays for what it reads (and benchmarks compare like with like).
            Source::Local { items, reads } => {
                reads.set(reads.get() + 1);
                let end = start.saturating_add(count).min(items.len());
                items[start..end]
                    .iter()
                    .map(|l| l.instance.clone())
                    .collect()
            }
        }
    }

    /// The instance at `index`.
    pub fn get(&self, index: usize) -> Option<Instance> {
        self.range(index, 1).pop()
    }

    /// Every instance in order, read a chunk at a time as the iteration goes (16, then twice as
    /// many each read, up to 256): stopping early reads little more. Each [`Candidate`] reads
    /// its labels, annotations and taints on demand.
    pub fn iter(&self) -> impl Iterator<Item = Candidate<'_>> + '_ {
        let list: &Instances<'_> = self;
        let len = self.len();
        let chunks = std::iter::successors(Some((0, CHUNK)), move |&(start, size)| {
            let next = start + size;
            (next < len).then_some((next, (size * 2).min(MAX_CHUNK)))
        })
        .take_while(move |&(start, _)| start < len);
        chunks.flat_map(move |(start, size)| {
            list.range(start, size)
                .into_iter()
                .enumerate()
                .map(move |(offset, instance)| Candidate {
                    list,
                    index: start + offset,
                    instance,
                })
        })
    }

    /// The local instance at `index`, when held in memory.
    fn local_at(&self, index: usize) -> Option<&LocalInstance> {
        match &self.0 {
            Source::Local { items, .. } => items.get(index),
            Source::Host { .. } => None,
        }
    }

    /// The value of label `key` of the instance at `index`: one host call.
    pub fn label(&self, index: usize, key: &str) -> Option<String> {
        match &self.0 {
            Source::Host { instances, len } if index < *len => instances.label(clamp(index), key),
            Source::Host { .. } => None,
            Source::Local { .. } => self.local_at(index).and_then(|l| find(&l.labels, key)),
        }
    }

    /// The value of annotation `key` of the instance at `index`: one host call.
    pub fn annotation(&self, index: usize, key: &str) -> Option<String> {
        match &self.0 {
            Source::Host { instances, len } if index < *len => {
                instances.annotation(clamp(index), key)
            }
            Source::Host { .. } => None,
            Source::Local { .. } => self.local_at(index).and_then(|l| find(&l.annotations, key)),
        }
    }

    /// Every label of the instance at `index` (none past the end): one host call.
    pub fn labels(&self, index: usize) -> Vec<KeyValue> {
        match &self.0 {
            Source::Host { instances, len } if index < *len => instances.labels(clamp(index)),
            Source::Host { .. } => Vec::new(),
            Source::Local { .. } => self
                .local_at(index)
                .map(|l| l.labels.clone())
                .unwrap_or_default(),
        }
    }

    /// Every annotation of the instance at `index` (none past the end): one host call.
    pub fn annotations(&self, index: usize) -> Vec<KeyValue> {
        match &self.0 {
            Source::Host { instances, len } if index < *len => instances.annotations(clamp(index)),
            Source::Host { .. } => Vec::new(),
            Source::Local { .. } => self
                .local_at(index)
                .map(|l| l.annotations.clone())
                .unwrap_or_default(),
        }
    }

    /// The taints of the instance at `index` (none past the end): one host call.
    pub fn taints(&self, index: usize) -> Vec<Taint> {
        match &self.0 {
            Source::Host { instances, len } if index < *len => instances.taints(clamp(index)),
            Source::Host { .. } => Vec::new(),
            Source::Local { .. } => self
                .local_at(index)
                .map(|l| l.taints.clone())
                .unwrap_or_default(),
        }
    }
}

/// One instance read through [`Instances::iter`]: dereferences to the [`Instance`], and reads
/// its labels, annotations and taints from the host when asked (one call each).
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    list: &'a Instances<'a>,
    index: usize,
    instance: Instance,
}

impl Candidate<'_> {
    /// Its position in the list, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The value of its label `key`.
    pub fn label(&self, key: &str) -> Option<String> {
        self.list.label(self.index, key)
    }

    /// The value of its annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<String> {
        self.list.annotation(self.index, key)
    }

    /// All its labels.
    pub fn labels(&self) -> Vec<KeyValue> {
        self.list.labels(self.index)
    }

    /// All its annotations.
    pub fn annotations(&self) -> Vec<KeyValue> {
        self.list.annotations(self.index)
    }

    /// Its taints.
    pub fn taints(&self) -> Vec<Taint> {
        self.list.taints(self.index)
    }

    /// The instance, without the way back to its labels.
    pub fn into_instance(self) -> Instance {
        self.instance
    }
}

impl Deref for Candidate<'_> {
    type Target = Instance;
    fn deref(&self) -> &Instance {
        &self.instance
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{candidates, node};
    use crate::{InstanceKind, Role};

    fn list(n: usize) -> Instances<'static> {
        candidates((0..n).map(|i| node(&format!("n{i}"), "a")).collect())
    }

    fn reads(list: &Instances) -> usize {
        match &list.0 {
            Source::Local { reads, .. } => reads.get(),
            Source::Host { .. } => unreachable!("tests hold instances locally"),
        }
    }

    #[test]
    fn reads_are_bounded_by_what_there_is() {
        let p = list(40);
        assert_eq!(p.len(), 40);
        assert_eq!(p.range(38, 10).len(), 2);
        assert!(p.range(40, 1).is_empty());
        assert!(p.range(0, 0).is_empty());
        assert_eq!(p.range(0, usize::MAX).len(), 40);
        assert_eq!(p.get(39).map(|i| i.name), Some("n39".to_string()));
        assert_eq!(p.get(40), None);
        assert!(list(0).is_empty());
    }

    #[test]
    fn iteration_yields_every_instance_in_order_across_chunks() {
        // Chunks of 16, 32 and 64 cover 112; the 115th needs a fourth read.
        let p = list(CHUNK * 7 + 3);
        let seen: Vec<(usize, String)> = p.iter().map(|c| (c.index(), c.name.clone())).collect();
        let expected: Vec<(usize, String)> =
            (0..CHUNK * 7 + 3).map(|i| (i, format!("n{i}"))).collect();
        assert_eq!(seen, expected);
        assert_eq!(reads(&p), 4);
    }

    #[test]
    fn long_iterations_read_in_chunks_that_grow_to_the_largest() {
        // 16 + 32 + 64 + 128 = 240, then 256 at a time: 4 + 19 reads for 5,000.
        let p = list(5_000);
        assert_eq!(p.iter().count(), 5_000);
        assert_eq!(reads(&p), 4 + (5_000 - 240usize).div_ceil(MAX_CHUNK));
    }

    #[test]
    fn iteration_stopped_early_reads_no_more() {
        let p = list(CHUNK * 4);
        assert_eq!(p.iter().take(CHUNK + 1).count(), CHUNK + 1);
        assert_eq!(reads(&p), 2);
    }

    #[test]
    fn candidates_read_their_labels_annotations_and_taints() {
        let p = candidates(vec![
            node("a1", "a")
                .with_label("pool", "blue")
                .with_annotation("owner", "team-a")
                .with_taint("dedicated", "gpu", "NoSchedule"),
            node("b1", "b"),
        ]);
        let all: Vec<Candidate> = p.iter().collect();
        assert_eq!(all[0].label("pool").as_deref(), Some("blue"));
        assert_eq!(
            all[0].label("topology.kubernetes.io/zone").as_deref(),
            Some("a")
        );
        assert_eq!(all[0].label("missing"), None);
        assert_eq!(all[0].annotation("owner").as_deref(), Some("team-a"));
        assert_eq!(all[0].labels().len(), 2);
        assert_eq!(all[0].annotations().len(), 1);
        assert_eq!(
            all[0].taints(),
            vec![Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoSchedule".into()
            }]
        );
        assert_eq!(all[1].label("pool"), None);
        assert_eq!(all[1].annotation("owner"), None);
        assert!(all[1].taints().is_empty());
        assert_eq!(all[1].zone.as_deref(), Some("b"));
    }

    #[test]
    fn labels_by_index_read_nothing_past_the_end() {
        let p = candidates(vec![node("a1", "a").with_label("pool", "blue")]);
        assert_eq!(p.label(0, "pool").as_deref(), Some("blue"));
        assert_eq!(p.label(1, "pool"), None);
        assert_eq!(p.annotation(1, "owner"), None);
        assert!(p.labels(1).is_empty());
        assert!(p.annotations(1).is_empty());
        assert!(p.taints(1).is_empty());
    }

    #[test]
    fn packed_reads_cut_each_string_from_the_text_in_order() {
        let packed = types::PackedInstances {
            instances: vec![
                types::PackedInstance {
                    kind: types::InstanceKind::Node,
                    role: types::Role::Node,
                    ready: true,
                    unschedulable: false,
                    created: Some(7),
                    pods: 3,
                    pods_not_ready: 1,
                    up_to_date: false,
                    name_len: 2,
                    group_len: 5,
                    zone_len: Some(1),
                    kubelet_version_len: None,
                    reason_len: Some(8),
                },
                types::PackedInstance {
                    kind: types::InstanceKind::Pod,
                    role: types::Role::ControlPlane,
                    ready: false,
                    unschedulable: true,
                    created: None,
                    pods: 0,
                    pods_not_ready: 0,
                    up_to_date: true,
                    name_len: 3,
                    group_len: 5,
                    zone_len: Some(0),
                    kubelet_version_len: Some(7),
                    reason_len: None,
                },
            ],
            text: "n1nodesaoutdatedé2nodesv1.20.2".into(),
        };
        let unpacked = unpack(packed);
        let mut first = node("n1", "a").instance;
        first.created = Some(7);
        first.pods = 3;
        first.pods_not_ready = 1;
        first.reason = Some("outdated".into());
        assert_eq!(unpacked[0], first);
        let second = Instance {
            kind: InstanceKind::Pod,
            name: "é2".into(),
            group: "nodes".into(),
            role: Role::ControlPlane,
            zone: Some(String::new()),
            ready: false,
            unschedulable: true,
            created: None,
            kubelet_version: Some("v1.20.2".into()),
            pods: 0,
            pods_not_ready: 0,
            up_to_date: true,
            reason: None,
        };
        assert_eq!(unpacked[1], second);
    }

    #[test]
    fn a_later_label_replaces_an_earlier_one() {
        let n = node("a1", "a")
            .with_label("pool", "blue")
            .with_label("pool", "green");
        let p = candidates(vec![n]);
        assert_eq!(p.label(0, "pool").as_deref(), Some("green"));
        assert_eq!(p.labels(0).len(), 2);
    }
}
