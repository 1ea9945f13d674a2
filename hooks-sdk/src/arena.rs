//! The allocator of a hook built for the plugin (feature `arena`, on by default).
//!
//! The plugin calls every hook in a fresh instance and drops its memory when the call returns, so
//! nothing a call allocates outlives it. A general allocator's bookkeeping (free lists, merging
//! freed blocks) buys nothing then, yet it was a large part of a `select` over thousands of
//! candidates: tens of thousands of strings allocated and freed per call. This allocator hands
//! out memory by moving a pointer, and takes back only the block allocated last (so a string that
//! grows as it is built grows in place). Memory freed out of order stays used until the call
//! ends; to keep that bounded, once it has taken [`LIMIT`] bytes from the memory, what does not
//! fit in them goes to the standard allocator, which reuses what is freed. A call therefore uses
//! at most [`LIMIT`] more memory than it would otherwise, within the hook's memory limit all the
//! same.
//!
//! A hook that brings its own `#[global_allocator]` turns the feature off
//! (`default-features = false`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Bytes taken from the memory for the arena before allocations go to the standard allocator.
pub const LIMIT: usize = 8 << 20;
/// The size of a WebAssembly page, the unit memory grows by.
const PAGE: usize = 64 << 10;
/// The first region asked of the memory; each further one is twice the last, up to [`MAX_GROW`].
const FIRST_GROW: usize = 4 * PAGE;
const MAX_GROW: usize = 64 * PAGE;
/// Regions the arena can hold; memory grows at its end, so a region the standard allocator did
/// not interrupt extends the last one instead of adding one.
const REGIONS: usize = 16;

/// The per-call bump allocator: see the module's documentation.
pub struct Arena(UnsafeCell<State>);

// A hook's component runs on one thread: wasm32-wasip2 has no threads. Natively the arena is
// not an allocator (its memory never grows), and not shared between threads either.
#[cfg(target_arch = "wasm32")]
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Self {
        Arena(UnsafeCell::new(State {
            next: 0,
            end: 0,
            taken: 0,
            grow: FIRST_GROW,
            regions: [(0, 0); REGIONS],
            count: 0,
        }))
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

struct State {
    /// The next free byte of the current region, and the region's end.
    next: usize,
    end: usize,
    /// Bytes taken from the memory so far.
    taken: usize,
    /// How much the next growth asks for.
    grow: usize,
    /// Every region handed out, `(start, end)`, so that a free knows whose block it is.
    regions: [(usize, usize); REGIONS],
    count: usize,
}

impl State {
    /// A block for `layout`, taking more memory with `grow` (pages → the address of the first new
    /// byte) when the region is full.
    fn bump(&mut self, layout: Layout, grow: impl FnOnce(usize) -> Option<usize>) -> Option<usize> {
        let at = self.next.checked_add(layout.align() - 1)? & !(layout.align() - 1);
        let after = at.checked_add(layout.size())?;
        if after <= self.end && self.end != 0 {
            self.next = after;
            return Some(at);
        }
        self.extend(layout, grow)?;
        let at = (self.next + layout.align() - 1) & !(layout.align() - 1);
        self.next = at + layout.size();
        debug_assert!(self.next <= self.end);
        Some(at)
    }

    /// Takes more memory for a block of `layout`; `None` once the arena has its fill or the
    /// memory cannot grow (the standard allocator then answers, or fails as it would have).
    fn extend(&mut self, layout: Layout, grow: impl FnOnce(usize) -> Option<usize>) -> Option<()> {
        let needed = layout.size().checked_add(layout.align())?;
        let bytes = needed.max(self.grow).div_ceil(PAGE) * PAGE;
        if self.taken + bytes > LIMIT {
            return None;
        }
        let start = grow(bytes / PAGE)?;
        self.taken += bytes;
        self.grow = (self.grow * 2).min(MAX_GROW);
        // Memory that ends at the very top of the address space (4 GiB), or that there is no
        // room to record, is left unused (the call ends soon enough); the standard allocator
        // answers from now on.
        let Some(end) = start.checked_add(bytes) else {
            self.taken = LIMIT;
            return None;
        };
        if self.count > 0 && self.regions[self.count - 1].1 == start && self.end == start {
            self.regions[self.count - 1].1 = end;
        } else {
            if self.count == REGIONS {
                self.taken = LIMIT;
                return None;
            }
            self.regions[self.count] = (start, end);
            self.count += 1;
            self.next = start;
        }
        self.end = end;
        Some(())
    }

    fn owns(&self, at: usize) -> bool {
        self.regions[..self.count]
            .iter()
            .rev()
            .any(|&(start, end)| start <= at && at < end)
    }

    /// Takes back the block at `at` if it was the last handed out.
    fn free(&mut self, at: usize, size: usize) {
        if at + size == self.next {
            self.next = at;
        }
    }

    /// Resizes the block at `at` in place: possible for a shrink, and for the last block while
    /// its region has room.
    fn resize_in_place(&mut self, at: usize, size: usize, new_size: usize) -> bool {
        if at + size == self.next && new_size <= self.end - at {
            self.next = at + new_size;
            return true;
        }
        new_size <= size
    }
}

#[cfg(target_arch = "wasm32")]
fn grow_memory(pages: usize) -> Option<usize> {
    let before = core::arch::wasm32::memory_grow(0, pages);
    (before != usize::MAX).then_some(before * PAGE)
}

#[cfg(not(target_arch = "wasm32"))]
fn grow_memory(_pages: usize) -> Option<usize> {
    None
}

unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: one thread, and no call below re-enters the arena.
        let state = unsafe { &mut *self.0.get() };
        match state.bump(layout, grow_memory) {
            Some(at) => at as *mut u8,
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let state = unsafe { &mut *self.0.get() };
        if state.owns(ptr as usize) {
            state.free(ptr as usize, layout.size());
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let state = unsafe { &mut *self.0.get() };
        if !state.owns(ptr as usize) {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if state.resize_in_place(ptr as usize, layout.size(), new_size) {
            return ptr;
        }
        // SAFETY: the caller guarantees a valid size for `layout.align()`.
        let grown = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new = unsafe { self.alloc(grown) };
        if !new.is_null() {
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    //! The arena's bookkeeping over a simulated memory: addresses only, nothing is written.

    use super::*;

    /// A linear memory that grows at its end, as WebAssembly's does; `other` grows it as the
    /// standard allocator would, between the arena's growths.
    struct Memory {
        size: usize,
        limit: usize,
    }

    impl Memory {
        fn grow(&mut self, pages: usize) -> Option<usize> {
            let before = self.size;
            // Its last byte within the limit; at the top of the address space the size wraps, as
            // a wasm32 memory of 4 GiB ends at 2^32.
            let last = before.checked_add(pages * PAGE - 1)?;
            (last <= self.limit).then(|| {
                self.size = self.size.wrapping_add(pages * PAGE);
                before
            })
        }
    }

    fn state() -> State {
        Arena::new().0.into_inner()
    }

    fn bytes(size: usize) -> Layout {
        Layout::from_size_align(size, 1).unwrap()
    }

    fn alloc(s: &mut State, m: &mut Memory, layout: Layout) -> Option<usize> {
        s.bump(layout, |pages| m.grow(pages))
    }

    #[test]
    fn blocks_follow_each_other_aligned_and_the_last_freed_is_reused() {
        let (mut s, mut m) = (
            state(),
            Memory {
                size: PAGE,
                limit: 1 << 30,
            },
        );
        let a = alloc(&mut s, &mut m, bytes(3)).unwrap();
        assert_eq!(a, PAGE, "the first block starts where the memory grew");
        let b = alloc(&mut s, &mut m, Layout::from_size_align(8, 8).unwrap()).unwrap();
        assert_eq!(b, PAGE + 8, "aligned past the first block");
        s.free(a, 3);
        let c = alloc(&mut s, &mut m, bytes(1)).unwrap();
        assert_eq!(c, PAGE + 16, "a block freed out of order is not reused");
        s.free(c, 1);
        assert_eq!(
            alloc(&mut s, &mut m, bytes(1)),
            Some(c),
            "the last block is"
        );
        assert!(s.owns(a) && s.owns(c) && !s.owns(PAGE - 1) && !s.owns(PAGE + FIRST_GROW));
    }

    #[test]
    fn the_last_block_grows_in_place_others_only_shrink() {
        let (mut s, mut m) = (
            state(),
            Memory {
                size: 0,
                limit: 1 << 30,
            },
        );
        let a = alloc(&mut s, &mut m, bytes(10)).unwrap();
        assert!(s.resize_in_place(a, 10, 100));
        let b = alloc(&mut s, &mut m, bytes(10)).unwrap();
        assert_eq!(b, a + 100);
        assert!(!s.resize_in_place(a, 100, 200), "not the last block");
        assert!(s.resize_in_place(a, 100, 50), "a shrink keeps the block");
        assert!(!s.resize_in_place(b, 10, FIRST_GROW), "beyond the region");
    }

    #[test]
    fn a_region_the_memory_extends_is_one_region_and_an_interrupted_one_starts_another() {
        let (mut s, mut m) = (
            state(),
            Memory {
                size: 0,
                limit: 1 << 30,
            },
        );
        alloc(&mut s, &mut m, bytes(FIRST_GROW)).unwrap();
        alloc(&mut s, &mut m, bytes(1)).unwrap();
        assert_eq!(s.count, 1, "grown at its end: the same region");
        m.size += PAGE; // the standard allocator grew the memory meanwhile
        let big = alloc(&mut s, &mut m, bytes(3 * FIRST_GROW)).unwrap();
        assert_eq!(s.count, 2);
        assert_eq!(big % PAGE, 0, "a new region starts at the new pages");
        assert!(
            s.owns(big) && !s.owns(big - 1),
            "the other allocator's page is not the arena's"
        );
    }

    #[test]
    fn past_its_limit_or_when_the_memory_cannot_grow_the_arena_hands_over() {
        let (mut s, mut m) = (
            state(),
            Memory {
                size: 0,
                limit: 1 << 30,
            },
        );
        let mut taken = 0;
        while alloc(&mut s, &mut m, bytes(PAGE)).is_some() {
            taken += PAGE;
            assert!(taken <= LIMIT, "never more than LIMIT");
        }
        assert!(taken > LIMIT / 2, "uses most of its limit first: {taken}");
        assert_eq!(
            alloc(&mut s, &mut m, bytes(1)),
            None,
            "and stays handed over"
        );

        let top = 0usize.wrapping_sub(FIRST_GROW);
        let (mut s, mut m) = (
            state(),
            Memory {
                size: top,
                limit: usize::MAX,
            },
        );
        assert_eq!(
            alloc(&mut s, &mut m, bytes(1)),
            None,
            "memory that ends at the top"
        );
        assert_eq!(s.count, 0, "is not recorded");

        let (mut s, mut m) = (
            state(),
            Memory {
                size: 0,
                limit: 2 * PAGE,
            },
        );
        assert_eq!(
            alloc(&mut s, &mut m, bytes(1)),
            None,
            "memory that cannot grow"
        );
        assert_eq!(m.size, 0, "nothing taken");
    }
}
