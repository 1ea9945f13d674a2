//! Lists of instances the host holds: the candidates of [`crate::Policy::select`] and the pending
//! instances of [`crate::Progress`].
//!
//! Inside the plugin the instances stay with the host and are read on demand: a chunk of
//! instances per read (flat, `get-flat`: the host hands over one list of numbers and one string
//! per read rather than a record and five strings per instance, and they are cut apart here),
//! and each instance's labels, annotations and taints only when asked for.
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

/// Numbers per instance in a flat read (`get-flat`).
const FLAT_FIELDS: usize = 12;

/// Instances from a flat read: twelve numbers each, and each string cut from the one text, in
/// the contract's order (name, group, zone, kubelet version, reason). The host packs whole
/// strings and known cases; anything else is a broken host, and a trap says so.
fn unflatten(flat: types::FlatInstances) -> Vec<Instance> {
    const BROKEN: &str = "the host lays out a flat read as the contract says";
    assert!(flat.fields.len().is_multiple_of(FLAT_FIELDS), "{BROKEN}");
    let text = flat.text.as_str();
    let mut at: usize = 0;
    let mut cut = |len: u32| -> String {
        let end = at.saturating_add(len as usize);
        let s = text.get(at..end).expect(BROKEN);
        at = end;
        s.to_string()
    };
    flat.fields
        .chunks_exact(FLAT_FIELDS)
        .map(|f| {
            let kind = match f[0] {
                0 => types::InstanceKind::Node,
                1 => types::InstanceKind::Pod,
                _ => panic!("{BROKEN}"),
            };
            let role = match f[1] {
                0 => types::Role::Bastion,
                1 => types::Role::ControlPlane,
                2 => types::Role::Node,
                _ => panic!("{BROKEN}"),
            };
            let flags = f[2];
            let created = (u64::from(f[4]) << 32 | u64::from(f[3])) as i64;
            let name = cut(f[7]);
            let group = cut(f[8]);
            let mut optional = |len: u32| len.checked_sub(1).map(&mut cut);
            let zone = optional(f[9]);
            let kubelet_version = optional(f[10]);
            let reason = optional(f[11]);
            Instance {
                kind,
                name,
                group,
                role,
                zone,
                ready: flags & 1 != 0,
                unschedulable: flags & 2 != 0,
                created: (flags & 8 != 0).then_some(created),
                kubelet_version,
                pods: f[5],
                pods_not_ready: f[6],
                up_to_date: flags & 4 != 0,
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
                unflatten(instances.get_flat(clamp(start), clamp(count)))
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

    /// The instances of the current choice (those with a reason: the built-in rules', or an
    /// earlier hook's), in order: the ones a selection keeps to without replacing healthy nodes.
    pub fn chosen(&self) -> impl Iterator<Item = Candidate<'_>> + '_ {
        self.iter().filter(|c| c.reason.is_some())
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

    /// Whether it carries a taint `key` (any value and effect): one host call.
    pub fn has_taint(&self, key: &str) -> bool {
        self.taints().iter().any(|t| t.key == key)
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
    fn the_chosen_are_those_with_a_reason_in_order() {
        let p = candidates(vec![
            node("a", "z"),
            node("b", "z").up_to_date().with_reason(None),
            node("c", "z"),
        ]);
        let chosen: Vec<String> = p.chosen().map(|c| c.name.clone()).collect();
        assert_eq!(chosen, ["a", "c"]);
        let tainted = candidates(vec![node("t", "z").with_taint(
            "retiring",
            "",
            "NoSchedule",
        )]);
        let first = tainted.iter().next().unwrap();
        assert!(first.has_taint("retiring") && !first.has_taint("other"));
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
    fn flat_reads_take_twelve_numbers_and_cut_each_string_from_the_text_in_order() {
        let created: i64 = 5_000_000_007; // past 32 bits: both halves count
        let flat = types::FlatInstances {
            fields: vec![
                // kind node, role node, ready and created known, created, pods 3 of which 1
                // not ready, name 2, group 5, zone 1, no kubelet version, reason 8.
                0,
                2,
                1 | 8,
                created as u32,
                (created >> 32) as u32,
                3,
                1,
                2,
                5,
                2,
                0,
                9,
                // kind pod, role control plane, unschedulable and up to date, no creation
                // time, name 3 (é is two bytes), group 5, an empty zone, kubelet 7, no reason.
                1,
                1,
                2 | 4,
                0,
                0,
                0,
                0,
                3,
                5,
                1,
                8,
                0,
            ],
            text: "n1nodesaoutdatedé2nodesv1.20.2".into(),
        };
        let unpacked = unflatten(flat);
        assert_eq!(unpacked.len(), 2);
        let mut first = node("n1", "a").instance;
        first.created = Some(created);
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
