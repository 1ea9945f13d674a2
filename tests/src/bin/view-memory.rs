//! `view-memory FILE`: the bytes a live view holds when every node and pod of the cluster in
//! FILE (a v1 List, as `gen-snapshot` writes) is in view, beside the bytes the offline plan's
//! snapshot of the same file holds. Counted by this process's allocator: what each structure
//! keeps alive, not what the process touched on the way. Prints JSON
//! `{"snapshot_bytes": N, "view_bytes": N}`.
//!
//! The view's stores are filled as its lists fill them: the nodes whole, then each node's pods
//! as one scope's list (see `rollout_ext::cluster::view::store`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rollout_ext::cluster::view::store::{Entry, Scope, Scoped, Whole};
use rollout_ext::snapshot::{Node, Pdb, Pod, Snapshot};

/// The system allocator, counting the bytes in use.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept beside.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout is passed on as it came.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        IN_USE.fetch_add(new_size, Ordering::Relaxed);
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as for `dealloc`; the system allocator keeps the old block's contents.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn in_use() -> usize {
    IN_USE.load(Ordering::Relaxed)
}

fn entry<T>(uid: &str, version: u64, value: Arc<T>) -> Entry<T> {
    Entry {
        uid: uid.to_string(),
        version,
        value,
    }
}

fn main() -> anyhow::Result<()> {
    let file = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: view-memory FILE"))?;
    let base = in_use();
    let snapshot = {
        let bytes = std::fs::read(&file)?;
        Snapshot::from_json(&bytes)?
    };
    let snapshot_bytes = in_use() - base;

    let mut nodes: Whole<Node> = Whole::default();
    let mut pdbs: Whole<Pdb> = Whole::default();
    let mut pods = Scoped::leaving(&["kube-system"]);
    nodes.begin_list();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        let key = (String::new(), node.name.clone());
        nodes.listed(key, entry(&node.name, i as u64, Arc::new(node.clone())));
    }
    nodes.end_list();
    pdbs.begin_list();
    for (i, pdb) in snapshot.pdbs.iter().enumerate() {
        let key = (pdb.namespace.clone(), pdb.name.clone());
        pdbs.listed(key, entry(&pdb.name, i as u64, Arc::new(pdb.clone())));
    }
    pdbs.end_list();
    let mut by_node: BTreeMap<&str, Vec<&Arc<Pod>>> = BTreeMap::new();
    for pod in &snapshot.pods {
        if let Some(node) = pod.node_name.as_deref() {
            by_node.entry(node).or_default().push(pod);
        }
    }
    let mut version = 0;
    for (node, on_node) in by_node {
        let scope = Scope::Node(node.to_string());
        pods.widen(&scope);
        let listed = on_node
            .into_iter()
            .map(|pod| {
                version += 1;
                let key = (pod.namespace.clone(), pod.name.clone());
                (key, entry(&pod.uid, version, pod.clone()))
            })
            .collect();
        pods.merge_list(&scope, listed, version);
    }
    let in_view = pods.objects.len();
    // The pods now belong to the view alone.
    drop(snapshot);
    let view_bytes = in_use() - base;
    anyhow::ensure!(in_view > 0, "no pod came into view");
    println!(
        "{}",
        serde_json::json!({
            "snapshot_bytes": snapshot_bytes,
            "view_bytes": view_bytes,
            "pods": in_view,
            "nodes": nodes.objects.len(),
            "pdbs": pdbs.objects.len(),
        })
    );
    Ok(())
}
