//! Instances made ahead of demand. Instantiating the default runtime's component costs about
//! 0.7 ms of a fresh `pass`'s 2.6 ms (`phases`, issue 12), nearly all of it wasmtime wiring
//! CPython's 14 core modules together (function references, imports); none of it depends on
//! the request. So the engine keeps a few instances instantiated with a placeholder host
//! state, and a request swaps its own state in: its WASI context (output, `/mnt/data`), memory
//! limiter, budget claim, tool broker and fuel. Nothing in the guest runs at instantiation,
//! so the guest cannot tell the difference.
//!
//! Warm instances are not executions: they hold no execution slot, are not counted as live,
//! and charge nothing to the memory budget. Their memory is the shared snapshot, but for the
//! pages the last hibernated program had written, which each copies ahead (about 1.4 MiB;
//! `Image::prepare`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::Store;

use crate::guest::Guest;
use crate::host::HostState;

/// One instance of the component, instantiated with a placeholder host state.
pub(crate) struct Warm {
    pub(crate) store: Store<HostState>,
    pub(crate) guest: Guest,
}

pub(crate) struct WarmPool {
    target: usize,
    ready: Mutex<Vec<Warm>>,
    /// A refill task is running.
    filling: AtomicBool,
}

impl WarmPool {
    pub(crate) fn new(target: usize) -> Self {
        WarmPool { target, ready: Mutex::new(Vec::with_capacity(target)), filling: AtomicBool::new(false) }
    }

    pub(crate) fn take(&self) -> Option<Warm> {
        let mut ready = self.ready.lock().unwrap();
        let warm = ready.pop();
        metrics::gauge!("ptc_warm_instances").set(ready.len() as f64);
        warm
    }

    /// Instances ready now.
    pub(crate) fn len(&self) -> usize {
        self.ready.lock().unwrap().len()
    }

    /// Whether the pool holds fewer than its target.
    pub(crate) fn wants_more(&self) -> bool {
        self.len() < self.target
    }

    /// Adds an instance unless the pool is full (then it is dropped).
    pub(crate) fn put(&self, warm: Warm) {
        let mut ready = self.ready.lock().unwrap();
        if ready.len() < self.target {
            ready.push(warm);
        }
        metrics::gauge!("ptc_warm_instances").set(ready.len() as f64);
    }

    /// The right to fill the pool, held by one task at a time; `None` if another holds it or
    /// the pool is off. Given back when dropped, so a task dropped mid-way (its runtime shut
    /// down) does not keep the pool empty for good.
    pub(crate) fn start_filling(&self) -> Option<Filling<'_>> {
        (self.target > 0 && !self.filling.swap(true, Ordering::AcqRel)).then_some(Filling(&self.filling))
    }

    /// Frees every warm instance (the engine stops accepting work).
    pub(crate) fn clear(&self) {
        let dropped = std::mem::take(&mut *self.ready.lock().unwrap());
        metrics::gauge!("ptc_warm_instances").set(0.0);
        drop(dropped);
    }
}

/// The pool's top-up as an execution holds it, to run once the execution has ended: the
/// engine's `fill_warm`, not yet started, so that the execution need not know the engine.
pub(crate) struct Refill(Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>);

impl Refill {
    pub(crate) fn new<F>(fill: impl FnOnce() -> F + Send + Sync + 'static) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Refill(Box::new(move || Box::pin(fill())))
    }

    pub(crate) async fn run(self) {
        (self.0)().await
    }
}

pub(crate) struct Filling<'a>(&'a AtomicBool);

impl Drop for Filling<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
