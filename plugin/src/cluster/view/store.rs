//! What a view holds, and how watch events and lists change it. No I/O: the watch tasks feed
//! these stores, and readers copy out of them.
//!
//! A kind watched whole ([`Whole`]) follows kube's watcher: a (re)list replaces everything at
//! once, events apply in order. Bound pods are watched cluster-wide but kept only where the run
//! looks ([`Scoped`]: the pods of chosen nodes and namespaces, each listed when it comes into
//! scope), so that a pod the run never touches costs nothing but its watch event. A scope's
//! list and the watch race each other; resourceVersions settle it: a pod's newest version wins,
//! and a deletion seen while a list is in flight keeps a listed copy from coming back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use crate::snapshot::Pod;

/// An object's namespace (empty for a cluster-scoped kind) and name.
pub type Key = (String, String);

/// One object as the view holds it.
#[derive(Debug)]
pub struct Entry<T> {
    pub uid: String,
    /// Its resourceVersion, as a number.
    pub version: u64,
    pub value: Arc<T>,
}

impl<T> Clone for Entry<T> {
    fn clone(&self) -> Self {
        Entry {
            uid: self.uid.clone(),
            version: self.version,
            value: self.value.clone(),
        }
    }
}

/// A kind listed and watched whole.
#[derive(Debug)]
pub struct Whole<T> {
    pub objects: BTreeMap<Key, Entry<T>>,
    /// A list under way: it replaces `objects` once complete.
    relisting: Option<BTreeMap<Key, Entry<T>>>,
    /// A first list is complete.
    pub synced: bool,
    /// The newest resourceVersion seen.
    pub newest: u64,
}

impl<T> Default for Whole<T> {
    fn default() -> Self {
        Whole {
            objects: BTreeMap::new(),
            relisting: None,
            synced: false,
            newest: 0,
        }
    }
}

impl<T> Whole<T> {
    /// A (re)list begins.
    pub fn begin_list(&mut self) {
        self.relisting = Some(BTreeMap::new());
    }

    /// One object of the list under way (or, outside one, an object added or changed).
    pub fn listed(&mut self, key: Key, entry: Entry<T>) {
        self.newest = self.newest.max(entry.version);
        match &mut self.relisting {
            Some(list) => list.insert(key, entry),
            None => self.objects.insert(key, entry),
        };
    }

    /// The list is complete: what it did not name is gone.
    pub fn end_list(&mut self) {
        if let Some(list) = self.relisting.take() {
            self.objects = list;
        }
        self.synced = true;
    }

    pub fn applied(&mut self, key: Key, entry: Entry<T>) {
        self.newest = self.newest.max(entry.version);
        self.objects.insert(key, entry);
    }

    pub fn deleted(&mut self, key: &Key, version: u64) {
        self.newest = self.newest.max(version);
        self.objects.remove(key);
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<T>> {
        self.objects.values().map(|e| &e.value)
    }
}

/// Where the run looks for pods: on a node, or in a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Node(String),
    Namespace(String),
}

impl Scope {
    pub fn holds(&self, pod: &Pod) -> bool {
        match self {
            Scope::Node(node) => pod.node_name.as_deref() == Some(node.as_str()),
            Scope::Namespace(namespace) => pod.namespace == *namespace,
        }
    }
}

/// Bound pods, kept where the run looks.
#[derive(Debug, Default)]
pub struct Scoped {
    nodes: HashSet<String>,
    namespaces: HashSet<String>,
    /// Namespaces another store holds whole (kube-system): never kept here.
    elsewhere: HashSet<String>,
    pub objects: BTreeMap<Key, Entry<Pod>>,
    /// Pods deleted while a list was in flight, with the version of their deletion.
    tombstones: HashMap<Key, u64>,
    /// The version each scope was last listed at: an event no newer about a pod its list did
    /// not name is stale (the pod was gone by then).
    listed_at: HashMap<Scope, u64>,
    /// Scopes listed now (a scope is listed again after the watch lost its place).
    pub listing: usize,
    pub newest: u64,
}

impl Scoped {
    /// A store that leaves `namespaces` to another.
    pub fn leaving(namespaces: &[&str]) -> Self {
        Scoped {
            elsewhere: namespaces.iter().map(|n| n.to_string()).collect(),
            ..Scoped::default()
        }
    }

    pub fn holds(&self, pod: &Pod) -> bool {
        !self.elsewhere.contains(&pod.namespace)
            && (pod
                .node_name
                .as_ref()
                .is_some_and(|n| self.nodes.contains(n))
                || self.namespaces.contains(&pod.namespace))
    }

    /// Whether `scope` is looked at already.
    pub fn covers(&self, scope: &Scope) -> bool {
        match scope {
            Scope::Node(n) => self.nodes.contains(n),
            Scope::Namespace(n) => self.namespaces.contains(n) || self.elsewhere.contains(n),
        }
    }

    /// Every scope looked at.
    pub fn scopes(&self) -> Vec<Scope> {
        let nodes = self.nodes.iter().cloned().map(Scope::Node);
        nodes
            .chain(self.namespaces.iter().cloned().map(Scope::Namespace))
            .collect()
    }

    /// `scope` comes into view: from now on its events count, and its list is under way.
    /// Widens the view to those of `scopes` it does not cover yet, and returns them: each is
    /// for its caller to list.
    pub fn claim(&mut self, scopes: impl IntoIterator<Item = Scope>) -> Vec<Scope> {
        let new: HashSet<Scope> = scopes.into_iter().filter(|s| !self.covers(s)).collect();
        for scope in &new {
            self.widen(scope);
        }
        new.into_iter().collect()
    }

    pub fn widen(&mut self, scope: &Scope) {
        match scope {
            Scope::Node(n) => self.nodes.insert(n.clone()),
            Scope::Namespace(n) => self.namespaces.insert(n.clone()),
        };
        self.listing += 1;
    }

    /// Every scope is listed again (the watch lost its place and starts anew).
    pub fn relist_all(&mut self) -> Vec<Scope> {
        let scopes = self.scopes();
        self.listing += scopes.len();
        scopes
    }

    /// A pod added or changed. Returns whether the view changed.
    pub fn applied(&mut self, key: Key, entry: Entry<Pod>) -> bool {
        self.newest = self.newest.max(entry.version);
        if !self.holds(&entry.value) {
            return false;
        }
        let listed = self.listed_at(&entry.value);
        if !self.objects.contains_key(&key) && entry.version > 0 && entry.version <= listed {
            return false;
        }
        self.keep_newer(key, entry)
    }

    /// The newest list of a scope that holds `pod`.
    fn listed_at(&self, pod: &Pod) -> u64 {
        let node = pod.node_name.clone().map(Scope::Node);
        let namespace = Some(Scope::Namespace(pod.namespace.clone()));
        [node, namespace]
            .into_iter()
            .flatten()
            .filter_map(|s| self.listed_at.get(&s))
            .copied()
            .max()
            .unwrap_or(0)
    }

    fn keep_newer(&mut self, key: Key, entry: Entry<Pod>) -> bool {
        if let Some(gone) = self.tombstones.get(&key)
            && *gone >= entry.version
        {
            return false;
        }
        match self.objects.get(&key) {
            Some(held) if held.version >= entry.version && entry.version > 0 => false,
            _ => {
                self.objects.insert(key, entry);
                true
            }
        }
    }

    /// A pod deleted (at `version`). Returns whether the view changed.
    pub fn deleted(&mut self, key: Key, uid: &str, version: u64) -> bool {
        self.newest = self.newest.max(version);
        if self.listing > 0 {
            let gone = self.tombstones.entry(key.clone()).or_default();
            *gone = (*gone).max(version);
        }
        match self.objects.get(&key) {
            Some(held) if held.uid == uid || held.version < version => {
                self.objects.remove(&key);
                true
            }
            _ => false,
        }
    }

    /// The list of `scope`, taken at `version`: its pods join the view unless the watch has
    /// shown newer; pods of the scope it does not name, and that changed no later than the
    /// list, are gone.
    pub fn merge_list(&mut self, scope: &Scope, pods: Vec<(Key, Entry<Pod>)>, version: u64) {
        self.newest = self.newest.max(version);
        let named: HashSet<Key> = pods.iter().map(|(k, _)| k.clone()).collect();
        for (key, entry) in pods {
            if scope.holds(&entry.value) && !self.elsewhere.contains(&entry.value.namespace) {
                self.keep_newer(key, entry);
            }
        }
        self.objects.retain(|key, held| {
            !scope.holds(&held.value) || named.contains(key) || held.version > version
        });
        let at = self.listed_at.entry(scope.clone()).or_default();
        *at = (*at).max(version);
        self.listing = self.listing.saturating_sub(1);
        if self.listing == 0 {
            self.tombstones.clear();
        }
    }

    /// A list that failed: the scope stays, to be listed again.
    pub fn list_failed(&mut self) {
        self.listing = self.listing.saturating_sub(1);
    }
}

/// The pods of two stores that hold different namespaces, in `(namespace, name)` order.
pub fn merged<'a>(
    scoped: &'a BTreeMap<Key, Entry<Pod>>,
    whole: &'a BTreeMap<Key, Entry<Pod>>,
) -> Vec<Arc<Pod>> {
    let mut out = Vec::with_capacity(scoped.len() + whole.len());
    let mut left = scoped.iter().peekable();
    let mut right = whole.iter().peekable();
    loop {
        let next = match (left.peek(), right.peek()) {
            (Some((a, _)), Some((b, _))) if a <= b => left.next(),
            (Some(_), Some(_)) => right.next(),
            (Some(_), None) => left.next(),
            (None, Some(_)) => right.next(),
            (None, None) => break,
        };
        if let Some((_, entry)) = next {
            out.push(entry.value.clone());
        }
    }
    out
}

/// The entries of `namespace` in a store keyed by `(namespace, name)`.
pub fn in_namespace<'a, T>(
    objects: &'a BTreeMap<Key, Entry<T>>,
    namespace: &str,
) -> impl Iterator<Item = &'a Entry<T>> {
    let from = (namespace.to_string(), String::new());
    objects
        .range((Bound::Included(from), Bound::Unbounded))
        .take_while(move |(k, _)| k.0 == namespace)
        .map(|(_, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Snapshot;

    fn pod(namespace: &str, name: &str, node: &str, uid: &str, version: u64) -> (Key, Entry<Pod>) {
        let json = format!(
            r#"{{"kind": "PodList", "items": [{{"metadata": {{"name": "{name}", "namespace": "{namespace}", "uid": "{uid}"}},
                "spec": {{"nodeName": "{node}"}}}}]}}"#
        );
        let value = Snapshot::from_json(json.as_bytes()).unwrap().pods.remove(0);
        let key = (namespace.to_string(), name.to_string());
        let entry = Entry {
            uid: uid.into(),
            version,
            value,
        };
        (key, entry)
    }

    fn names(store: &Scoped) -> Vec<String> {
        store.objects.keys().map(|(_, n)| n.clone()).collect()
    }

    #[test]
    fn only_pods_in_scope_are_kept() {
        let mut store = Scoped::leaving(&["kube-system"]);
        store.widen(&Scope::Node("n1".into()));
        store.merge_list(&Scope::Node("n1".into()), vec![], 10);
        let (k, e) = pod("shop", "a", "n1", "u-a", 11);
        assert!(store.applied(k, e));
        let (k, e) = pod("shop", "b", "n2", "u-b", 12);
        assert!(!store.applied(k, e), "another node's pod is not kept");
        let (k, e) = pod("kube-system", "dns", "n1", "u-d", 13);
        assert!(
            !store.applied(k, e),
            "kube-system's pods are another store's"
        );
        assert_eq!(names(&store), ["a"]);
        assert_eq!(store.newest, 13);
    }

    #[test]
    fn a_list_racing_the_watch_keeps_the_newest_and_never_revives_a_deleted_pod() {
        let mut store = Scoped::leaving(&[]);
        let scope = Scope::Node("n1".into());
        store.widen(&scope);
        // While the list is in flight the watch shows a newer `a` and deletes `b`.
        let (k, e) = pod("shop", "a", "n1", "u-a", 20);
        store.applied(k, e);
        let (k, _) = pod("shop", "b", "n1", "u-b", 0);
        store.deleted(k, "u-b", 21);
        // The list was taken before both.
        let listed = vec![
            pod("shop", "a", "n1", "u-a", 15),
            pod("shop", "b", "n1", "u-b", 16),
            pod("shop", "c", "n1", "u-c", 17),
        ];
        store.merge_list(&scope, listed, 18);
        assert_eq!(names(&store), ["a", "c"]);
        assert_eq!(store.objects[&("shop".into(), "a".into())].version, 20);
        assert_eq!(store.listing, 0);
    }

    #[test]
    fn a_relist_drops_what_went_while_the_watch_was_away() {
        let mut store = Scoped::leaving(&[]);
        let scope = Scope::Node("n1".into());
        store.widen(&scope);
        store.merge_list(
            &scope,
            vec![
                pod("shop", "a", "n1", "u-a", 5),
                pod("shop", "b", "n1", "u-b", 6),
            ],
            7,
        );
        assert_eq!(store.relist_all(), vec![scope.clone()]);
        // `b` was deleted while the watch was down; a new `d` came.
        store.merge_list(
            &scope,
            vec![
                pod("shop", "a", "n1", "u-a", 5),
                pod("shop", "d", "n1", "u-d", 30),
            ],
            31,
        );
        assert_eq!(names(&store), ["a", "d"]);
    }

    #[test]
    fn an_event_the_list_already_outran_does_not_bring_a_pod_back() {
        let mut store = Scoped::leaving(&[]);
        let scope = Scope::Node("n1".into());
        store.widen(&scope);
        // Listed at 50, after `a` was changed (40) and deleted (45); the watch delivers both
        // events only now.
        store.merge_list(&scope, vec![], 50);
        let (k, e) = pod("shop", "a", "n1", "u-a", 40);
        assert!(!store.applied(k, e), "stale: the list shows it gone");
        let (k, e) = pod("shop", "b", "n1", "u-b", 51);
        assert!(store.applied(k, e), "newer than the list");
        assert_eq!(names(&store), ["b"]);
    }

    #[test]
    fn a_late_deletion_of_an_old_pod_spares_its_successor() {
        let mut store = Scoped::leaving(&[]);
        let scope = Scope::Namespace("shop".into());
        store.widen(&scope);
        store.merge_list(&scope, vec![pod("shop", "a", "n9", "new", 40)], 41);
        let (k, _) = pod("shop", "a", "n9", "old", 0);
        assert!(
            !store.deleted(k, "old", 35),
            "the deletion of the pod before it"
        );
        assert_eq!(names(&store), ["a"]);
    }

    #[test]
    fn a_whole_kind_is_replaced_by_its_relist() {
        let mut nodes: Whole<Pod> = Whole::default();
        nodes.begin_list();
        let (k, e) = pod("", "a", "", "u", 1);
        nodes.listed(k, e);
        assert!(nodes.objects.is_empty(), "a list shows once complete");
        nodes.end_list();
        assert!(nodes.synced && nodes.objects.len() == 1);
        nodes.begin_list();
        let (k, e) = pod("", "b", "", "u", 2);
        nodes.listed(k, e);
        assert_eq!(nodes.objects.len(), 1, "the old state serves meanwhile");
        nodes.end_list();
        let kept: Vec<&str> = nodes.objects.keys().map(|k| k.1.as_str()).collect();
        assert_eq!(kept, ["b"]);
    }

    #[test]
    fn two_stores_merge_in_key_order() {
        let mut a = BTreeMap::new();
        let mut b = BTreeMap::new();
        for (ns, name) in [("apps", "x"), ("shop", "y")] {
            let (k, e) = pod(ns, name, "n", "u", 1);
            a.insert(k, e);
        }
        let (k, e) = pod("kube-system", "dns", "n", "u", 1);
        b.insert(k, e);
        let order: Vec<String> = merged(&a, &b).iter().map(|p| p.id()).collect();
        assert_eq!(order, ["apps/x", "kube-system/dns", "shop/y"]);
        assert_eq!(in_namespace(&a, "shop").count(), 1);
        assert_eq!(in_namespace(&a, "sho").count(), 0);
    }
}
