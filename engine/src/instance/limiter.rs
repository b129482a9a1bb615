//! The memory limiter of one instance: its own limit, and the engine's memory budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::ResourceLimiter;

use crate::api::config::MIB;
use crate::api::error::HostTrap;
use crate::api::events::FailureKind;
use crate::calls::shares::MemoryClaim;

/// Refuses memory growth past the limit. Growth fails with a trap rather than a `MemoryError`
/// the program could catch, so a memory bomb always ends with kind `memory`. Outside an
/// execution (a session's snapshot or restore, [`Limiter::soft`]) it fails the growth instead,
/// so that the guest gets a `MemoryError`, answers in words and the session lives on: pickling
/// a 100 MiB state once trapped in `sbrk` and took the session with it.
///
/// Growth is also charged to the engine's memory budget (and the tenant's share); the initial
/// memory of an instance (`current == 0`: the snapshot, mapped copy-on-write) is not.
pub(crate) struct Limiter {
    max_memory: u64,
    /// Also charged for a hibernated instance's pages (`hibernation/`).
    pub(crate) claim: MemoryClaim,
    /// The largest the linear memory has been.
    pub(crate) peak: u64,
    /// While set, refused growth fails (`memory.grow` returns -1) instead of trapping.
    soft: Arc<AtomicBool>,
}

impl Limiter {
    pub(crate) fn new(max_memory: u64, claim: MemoryClaim) -> Self {
        Limiter { max_memory, claim, peak: 0, soft: Arc::default() }
    }

    /// The most bytes the memory may grow to.
    pub(crate) fn max_memory(&self) -> u64 {
        self.max_memory
    }

    /// The switch that makes refused growth fail instead of trap (see the type's docs).
    pub(crate) fn soft(&self) -> Arc<AtomicBool> {
        self.soft.clone()
    }

    fn refuse(&self, message: String) -> wasmtime::Result<bool> {
        if self.soft.load(Ordering::Relaxed) { Ok(false) } else { Err(HostTrap::raise(FailureKind::Memory, message)) }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.max_memory {
            let mib = self.max_memory / MIB;
            return self.refuse(format!("memory limit exceeded ({mib} MiB)"));
        }
        if current > 0
            && let Err(message) = self.claim.grow(desired.saturating_sub(current) as u64)
        {
            return self.refuse(format!("Out of memory: {message}"));
        }
        self.peak = self.peak.max(desired as u64);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}
