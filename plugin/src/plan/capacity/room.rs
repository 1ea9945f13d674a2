//! Which node has room for a request, found in logarithmic time rather than by trying every
//! node: a segment tree over a set of nodes that keeps, under each branch and for each kind of
//! node, the most CPU and the most memory any one node there has free. A branch whose maxima do
//! not hold the request is skipped whole.

use crate::scheduling::Resources;

/// Kinds of node a search can ask for (schedulable, schedulable but tainted by the run, not
/// Ready yet); a node of no kind (cordoned, gone) is never found.
pub const KINDS: usize = 3;

/// Per kind, the most free CPU and the most free memory below a branch; none without a node of
/// that kind.
type Maxima = [Option<Resources>; KINDS];

#[derive(Debug, Default)]
pub struct Room {
    /// Node 1 is the root, node `i` has children `2i` and `2i + 1`, slot `s` is leaf `size + s`.
    tree: Vec<Maxima>,
    /// Leaves: a power of two, doubled when full.
    size: usize,
    len: usize,
}

impl Room {
    /// Adds a node of `kind` (none: of no kind) with `free` room; returns its slot.
    pub fn push(&mut self, kind: Option<usize>, free: Resources) -> usize {
        if self.len == self.size {
            self.grow();
        }
        let slot = self.len;
        self.len += 1;
        self.set(slot, kind, free);
        slot
    }

    /// The node at `slot` is now of `kind` with `free` room.
    pub fn set(&mut self, slot: usize, kind: Option<usize>, free: Resources) {
        let mut leaf = [None; KINDS];
        if let Some(k) = kind {
            leaf[k] = Some(free);
        }
        let mut i = self.size + slot;
        self.tree[i] = leaf;
        while i > 1 {
            i /= 2;
            let merged = merge(&self.tree[2 * i], &self.tree[2 * i + 1]);
            if self.tree[i] == merged {
                break;
            }
            self.tree[i] = merged;
        }
    }

    /// The first slot of `kind` with room for `request` that `accept` takes.
    pub fn first(
        &self,
        kind: usize,
        request: Resources,
        accept: &mut dyn FnMut(usize) -> bool,
    ) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        self.search(1, kind, request, accept)
    }

    fn search(
        &self,
        i: usize,
        kind: usize,
        request: Resources,
        accept: &mut dyn FnMut(usize) -> bool,
    ) -> Option<usize> {
        if !self.tree[i][kind].is_some_and(|max| request.fits_in(max)) {
            return None;
        }
        if i >= self.size {
            let slot = i - self.size;
            return accept(slot).then_some(slot);
        }
        self.search(2 * i, kind, request, accept)
            .or_else(|| self.search(2 * i + 1, kind, request, accept))
    }

    /// Doubles the leaves and rebuilds the branches above them.
    fn grow(&mut self) {
        let size = (self.size * 2).max(1);
        let mut tree = vec![[None; KINDS]; 2 * size];
        tree[size..size + self.size].copy_from_slice(&self.tree[self.size..]);
        for i in (1..size).rev() {
            tree[i] = merge(&tree[2 * i], &tree[2 * i + 1]);
        }
        self.tree = tree;
        self.size = size;
    }
}

fn merge(a: &Maxima, b: &Maxima) -> Maxima {
    let mut merged = *a;
    for (m, y) in merged.iter_mut().zip(b) {
        *m = match (*m, *y) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpu: u64, memory: u64) -> Resources {
        Resources { cpu, memory }
    }

    #[test]
    fn finds_the_first_node_of_the_kind_with_room() {
        let mut room = Room::default();
        let sizes = [(1, 8), (4, 1), (4, 8), (2, 2), (8, 8)];
        for (i, (cpu, memory)) in sizes.into_iter().enumerate() {
            let kind = if i == 4 { 1 } else { 0 };
            assert_eq!(room.push(Some(kind), r(cpu, memory)), i);
        }
        let mut any = |_| true;
        assert_eq!(room.first(0, r(2, 2), &mut any), Some(2));
        assert_eq!(room.first(0, r(1, 1), &mut any), Some(0));
        assert_eq!(room.first(0, r(8, 8), &mut any), None);
        assert_eq!(room.first(1, r(8, 8), &mut any), Some(4));
        assert_eq!(room.first(2, r(0, 0), &mut any), None);
        // A node `accept` refuses is passed over.
        assert_eq!(room.first(0, r(1, 1), &mut |slot| slot != 0), Some(1));
        // Room used up and kinds changed are seen at once.
        room.set(2, Some(0), r(0, 0));
        assert_eq!(room.first(0, r(2, 2), &mut any), Some(3));
        room.set(3, None, r(2, 2));
        assert_eq!(room.first(0, r(2, 2), &mut any), None);
        assert_eq!(room.first(0, r(0, 0), &mut any), Some(0));
    }

    #[test]
    fn grows_past_any_size_and_keeps_what_it_held() {
        let mut room = Room::default();
        for i in 0..100 {
            room.push(Some(2), r(i, i));
        }
        assert_eq!(room.first(2, r(99, 0), &mut |_| true), Some(99));
        assert_eq!(room.first(2, r(50, 50), &mut |_| true), Some(50));
        assert_eq!(room.first(2, r(100, 0), &mut |_| true), None);
    }
}
