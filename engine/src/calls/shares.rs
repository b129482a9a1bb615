//! What executions share: the engine-wide memory budget, and per tenant a share of it and the
//! run slots that keep one tenant's busy programs from starving another's.
//!
//! **Memory.** Each execution's linear memory is capped by its own limit; the budget caps all
//! of them together (and, if set, each tenant's together). It counts what executions grow
//! their memory by beyond the sandbox's initial image: that image is mapped copy-on-write from
//! the compiled component and costs about 2 MiB of real memory per execution (see the density
//! table in docs/benchmarks.md), while growth is fresh memory the program will fill. Four executions asking
//! for 2 GiB each once took the server from 0.4 to 8.5 GiB; now growth past the budget fails
//! the growing execution with kind `memory`.
//!
//! **CPU.** A guest yields at every epoch tick (10 ms), and tokio runs ready tasks in turn, so
//! 60 busy loops of one tenant made another tenant's trivial run wait 0.3–1.9 s for its turns.
//! With run slots, at most `tenant_max_running` executions of one tenant *run* at once (paused
//! ones hold no slot); the others wait in a FIFO queue, and a running execution whose tenant
//! has executions waiting gives its slot to the next one after a slice of `SLICE_TICKS` ticks.
//! Not at every tick: a handed-over slot wakes the next execution in the waking worker's LIFO
//! slot, ahead of every other queued task, so per-tick hand-overs kept other tenants' tasks
//! waiting longer than no slots at all did (654 ms against 303 ms median in `just fairness`).
//! With one slot fewer than the cores, another tenant's trivial run stays at its idle latency
//! beside 60 busy loops (4–6 ms median, against 0.5–1.2 s without slots).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Epoch ticks (10 ms each) a running execution keeps its slot while others of its tenant wait.
const SLICE_TICKS: u32 = 10;

use crate::api::config::MIB;

pub(crate) struct Shares {
    budget: u64,
    used: AtomicU64,
    tenant_budget: Option<u64>,
    tenant_running: Option<usize>,
    tenants: Mutex<HashMap<String, Arc<TenantShare>>>,
}

struct TenantShare {
    name: String,
    used: AtomicU64,
    /// Claims alive; the share is forgotten when the last one goes.
    claims: AtomicUsize,
    run: Option<Arc<Semaphore>>,
    waiting: AtomicUsize,
    /// Its executions parked waiting for tool results (`exchange.rs` counts them).
    paused: Arc<AtomicUsize>,
}

impl Shares {
    pub(crate) fn new(budget: u64, tenant_budget: Option<u64>, tenant_running: Option<usize>) -> Arc<Self> {
        Arc::new(Shares {
            budget,
            used: AtomicU64::new(0),
            tenant_budget,
            tenant_running,
            tenants: Mutex::new(HashMap::new()),
        })
    }

    /// Bytes of the budget in use now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// One execution's claim on the budget and, with a tenant, on its run slots.
    pub(crate) fn claim(self: &Arc<Self>, tenant: Option<&str>) -> (MemoryClaim, RunSlot) {
        let share = self.share(tenant);
        let slot = RunSlot {
            gate: share.as_ref().and_then(|s| s.run.clone().map(|run| (run, s.clone()))),
            permit: Arc::new(Mutex::new(None)),
            ticks: Arc::new(std::sync::atomic::AtomicU32::new(0)),
        };
        (MemoryClaim { shares: self.clone(), share, charged: 0 }, slot)
    }

    /// A claim on the budget (and the tenant's share) alone: for memory the host holds on an
    /// execution's behalf, such as tool results the program has not taken yet.
    pub(crate) fn memory_claim(self: &Arc<Self>, tenant: Option<&str>) -> MemoryClaim {
        MemoryClaim { shares: self.clone(), share: self.share(tenant), charged: 0 }
    }

    /// How many of `tenant`'s executions are parked waiting for tool results: a count kept as
    /// they park and wake, so that reading it costs the same at 100,000 as at 1.
    pub(crate) fn paused(&self, tenant: &str) -> usize {
        self.tenants.lock().unwrap().get(tenant).map_or(0, |s| s.paused.load(Ordering::Relaxed))
    }

    /// The tenant's share, counted as claimed once more.
    fn share(&self, tenant: Option<&str>) -> Option<Arc<TenantShare>> {
        tenant.map(|name| {
            let mut tenants = self.tenants.lock().unwrap();
            let share = tenants.entry(name.to_string()).or_insert_with(|| {
                Arc::new(TenantShare {
                    name: name.to_string(),
                    used: AtomicU64::new(0),
                    claims: AtomicUsize::new(0),
                    run: self.tenant_running.map(|n| Arc::new(Semaphore::new(n.max(1)))),
                    waiting: AtomicUsize::new(0),
                    paused: Arc::default(),
                })
            });
            share.claims.fetch_add(1, Ordering::Relaxed);
            share.clone()
        })
    }
}

/// Memory one execution has grown by, charged to the budget (and its tenant's share) until it
/// is dropped with the store.
pub(crate) struct MemoryClaim {
    shares: Arc<Shares>,
    share: Option<Arc<TenantShare>>,
    charged: u64,
}

fn try_add(counter: &AtomicU64, delta: u64, limit: u64) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(delta).filter(|n| *n <= limit))
        .is_ok()
}

impl MemoryClaim {
    /// The tenant it is charged to, if any.
    pub(crate) fn tenant(&self) -> Option<&str> {
        self.share.as_ref().map(|s| s.name.as_str())
    }

    /// The count of its tenant's parked executions, for its exchange to keep.
    pub(crate) fn tenant_paused(&self) -> Option<Arc<AtomicUsize>> {
        self.share.as_ref().map(|s| s.paused.clone())
    }

    /// Charges `delta` more bytes, or says which budget refused them.
    pub(crate) fn grow(&mut self, delta: u64) -> Result<(), String> {
        let shares = &self.shares;
        if !try_add(&shares.used, delta, shares.budget) {
            return Err(format!(
                "the server's memory budget for all executions ({} MiB) is in use; try again later or with less data",
                shares.budget / MIB
            ));
        }
        if let (Some(share), Some(limit)) = (&self.share, shares.tenant_budget)
            && !try_add(&share.used, delta, limit)
        {
            shares.used.fetch_sub(delta, Ordering::AcqRel);
            return Err(format!(
                "the memory budget of tenant {:?} ({} MiB for all its executions) is in use; wait for other executions to finish or use less data",
                share.name,
                limit / MIB
            ));
        }
        self.charged += delta;
        Ok(())
    }

    /// Gives `delta` bytes back (at most what is charged).
    pub(crate) fn shrink(&mut self, delta: u64) {
        let delta = delta.min(self.charged);
        self.shares.used.fetch_sub(delta, Ordering::AcqRel);
        if let Some(share) = &self.share {
            share.used.fetch_sub(delta, Ordering::AcqRel);
        }
        self.charged -= delta;
    }
}

impl Drop for MemoryClaim {
    fn drop(&mut self) {
        self.shares.used.fetch_sub(self.charged, Ordering::AcqRel);
        let Some(share) = self.share.take() else { return };
        share.used.fetch_sub(self.charged, Ordering::AcqRel);
        if share.claims.fetch_sub(1, Ordering::AcqRel) == 1 {
            let mut tenants = self.shares.tenants.lock().unwrap();
            if share.claims.load(Ordering::Acquire) == 0 {
                tenants.remove(&share.name);
            }
        }
    }
}

/// One execution's place among its tenant's running executions. Cloned between the store's
/// epoch callback and the tool broker, which hand the slot back while the guest is parked.
#[derive(Clone)]
pub(crate) struct RunSlot {
    gate: Option<(Arc<Semaphore>, Arc<TenantShare>)>,
    permit: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
    /// Ticks since the slot was last taken.
    ticks: Arc<std::sync::atomic::AtomicU32>,
}

impl RunSlot {
    /// Waits for a slot (at once without a tenant or a limit).
    pub(crate) fn acquire(&self) -> impl Future<Output = ()> + Send + 'static {
        let (gate, permit) = (self.gate.clone(), self.permit.clone());
        async move {
            let Some((run, share)) = gate else { return };
            if permit.lock().unwrap().is_some() {
                return;
            }
            share.waiting.fetch_add(1, Ordering::AcqRel);
            let acquired = run.acquire_owned().await.expect("never closed");
            share.waiting.fetch_sub(1, Ordering::AcqRel);
            *permit.lock().unwrap() = Some(acquired);
        }
    }

    /// Gives the slot back (the guest is about to park).
    pub(crate) fn release(&self) {
        self.permit.lock().unwrap().take();
    }

    /// At an epoch tick: once the slice is used up, a future that hands the slot to the
    /// tenant's next waiting execution and queues for it again; `None` while the slice lasts
    /// or nobody waits.
    pub(crate) fn requeue(&self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        let (_, share) = self.gate.as_ref()?;
        if self.ticks.fetch_add(1, Ordering::Relaxed) + 1 < SLICE_TICKS || share.waiting.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.ticks.store(0, Ordering::Relaxed);
        self.release();
        Some(Box::pin(self.acquire()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_and_tenant_share_are_released_on_drop() {
        let shares = Shares::new(100 * MIB, Some(60 * MIB), Some(1));
        let (mut a, _) = shares.claim(Some("a"));
        let (mut b, _) = shares.claim(Some("b"));
        a.grow(50 * MIB).unwrap();
        assert!(a.grow(20 * MIB).unwrap_err().contains("tenant \"a\""));
        b.grow(50 * MIB).unwrap();
        assert!(b.grow(MIB).unwrap_err().contains("server's memory budget"));
        assert_eq!(shares.used(), 100 * MIB);
        drop(a);
        assert_eq!(shares.used(), 50 * MIB);
        b.grow(10 * MIB).unwrap();
        drop(b);
        assert_eq!(shares.used(), 0);
        assert!(shares.tenants.lock().unwrap().is_empty(), "tenant shares are forgotten with their last claim");
    }

    #[tokio::test]
    async fn run_slots_queue_and_requeue_after_a_slice() {
        let shares = Shares::new(u64::MAX, None, Some(1));
        let (_ca, a) = shares.claim(Some("t"));
        let (_cb, b) = shares.claim(Some("t"));
        a.acquire().await;
        let waiter = tokio::spawn(b.acquire());
        while shares.tenants.lock().unwrap()["t"].waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        for _ in 1..SLICE_TICKS {
            assert!(a.requeue().is_none(), "a's slice is not used up yet");
        }
        let again = a.requeue().expect("b waits and a's slice is up, so a gives way");
        waiter.await.unwrap();
        assert!(b.permit.lock().unwrap().is_some());
        let a_again = tokio::spawn(again);
        b.release();
        a_again.await.unwrap();
        assert!(a.permit.lock().unwrap().is_some());
        for _ in 0..2 * SLICE_TICKS {
            assert!(a.requeue().is_none(), "nobody waits");
        }
    }
}
