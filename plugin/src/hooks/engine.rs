//! The engine's configuration: how hooks are compiled and where their instances live.
//!
//! Every hook call runs in a fresh instance. Allocated on demand, each one maps its memory
//! anew and the kernel zeroes every page it touches, then unmaps it when the call ends: for a
//! `select` over thousands of candidates that was about a third of the call's time. The pooling
//! allocator keeps instance slots mapped between calls and resets a used memory in place, the
//! pages a call wrote (up to [`KEEP_RESIDENT`] bytes), so the next call finds them already there.
//! The pool reserves address space up front for [`CONCURRENT_CALLS`] calls at once; a call
//! beyond them waits for a slot ([`Slots`]) rather than failing. Where the reservation is refused
//! (a limit on virtual memory), instances are allocated on demand as before.

use std::sync::{Condvar, Mutex, PoisonError};

use super::sandbox::MAX_TABLE_ELEMENTS;
use crate::report;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Hook calls an engine may have running at once (one component instance each). A command asks
/// its hooks one call at a time; tests that share a runtime run a few at once.
const CONCURRENT_CALLS: u32 = 32;
/// Core instances, memories and tables each call may hold: a component built by
/// componentize-py links a dozen core modules.
const CORE_INSTANCES_PER_CALL: u32 = 32;
const MEMORIES_PER_CALL: u32 = 4;
const TABLES_PER_CALL: u32 = 16;
/// A memory may grow to the largest limit a policy may give a hook (4Gi).
const MAX_MEMORY: usize = 4 << 30;
/// Bytes of each memory cleared in place rather than returned to the kernel when a call ends:
/// what a large `select` touches.
const KEEP_RESIDENT: usize = 16 << 20;

/// The engine every hook runs in, pooled when the address space allows.
pub fn engine() -> wasmtime::Result<Engine> {
    let mut config = base();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
    Engine::new(&config).or_else(|e| {
        let why = format!("hook instances allocated on demand, the pool was refused: {e}");
        report::log(report::Level::Debug, &why);
        Engine::new(&base())
    })
}

/// What every hook engine has: components, deadlines by epoch, a bounded stack.
fn base() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.max_wasm_stack(1 << 20);
    config
}

fn pool() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(CONCURRENT_CALLS)
        .total_core_instances(CONCURRENT_CALLS * CORE_INSTANCES_PER_CALL)
        .max_core_instances_per_component(CORE_INSTANCES_PER_CALL)
        .total_memories(CONCURRENT_CALLS * MEMORIES_PER_CALL)
        .max_memories_per_component(MEMORIES_PER_CALL)
        .total_tables(CONCURRENT_CALLS * TABLES_PER_CALL)
        .max_tables_per_component(TABLES_PER_CALL)
        .table_elements(MAX_TABLE_ELEMENTS)
        .max_memory_size(MAX_MEMORY)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        // Clear only the pages a call wrote (Linux 6.7 and later), not all the kept bytes.
        .pagemap_scan(Enabled::Auto);
    pool
}

/// The engine's instance slots: a call takes one for as long as its store lives.
pub struct Slots {
    free: Mutex<u32>,
    freed: Condvar,
}

/// A slot taken; dropped after the call's store, it lets a waiting call go.
pub struct Slot<'a>(&'a Slots);

impl Slots {
    pub fn new() -> Slots {
        Slots {
            free: Mutex::new(CONCURRENT_CALLS),
            freed: Condvar::new(),
        }
    }

    /// A slot, waiting while every one is taken.
    pub fn take(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self)
    }
}

impl Default for Slots {
    fn default() -> Self {
        Slots::new()
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(slots: &Slots) -> u32 {
        *slots.free.lock().unwrap()
    }

    #[test]
    fn a_call_beyond_the_slots_waits_until_one_is_given_back() {
        let slots = Slots::new();
        let mut taken: Vec<Slot> = (0..CONCURRENT_CALLS).map(|_| slots.take()).collect();
        assert_eq!(free(&slots), 0);
        let (got, done) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _slot = slots.take();
                got.send(()).unwrap();
            });
            assert!(done.try_recv().is_err(), "no slot was free");
            taken.pop();
            done.recv()
                .expect("the slot given back went to the waiting call");
        });
        assert_eq!(free(&slots), 1, "and the waiting call gave it back in turn");
        drop(taken);
        assert_eq!(free(&slots), CONCURRENT_CALLS);
    }
}
