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
//! pages programs write, which each copies on write ahead ([`Hot`]), in idle time, so that a
//! program taking it does not fault on each (about 1.3 MiB, 340 pages, for `pass`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use wasmtime::Store;

use crate::instance::guest::Guest;
use crate::instance::host::HostState;
use crate::pages::component_memory;
use crate::pages::pagemap::{self, Entry};

/// One instance of the component, instantiated with a placeholder host state.
pub(crate) struct Warm {
    pub(crate) store: Store<HostState>,
    pub(crate) guest: Guest,
    /// Pages were copied on write ahead in it ([`Hot::prepare`]).
    pub(crate) ahead: bool,
}

/// The pages of the component's memory programs touch, which a warm instance maps ahead
/// ([`Hot::prepare`]): one `madvise` per run of them in idle time instead of one fault each
/// while the program runs. Learned from the memory of a program that ended in an instance
/// without pages mapped ahead (what it touched is its own doing), and from each hibernation
/// (the pages a thaw will write).
#[derive(Default)]
pub(crate) struct Hot {
    pages: Mutex<Pages>,
    /// Programs offered to learn from, of which one in [`LEARN_EVERY`] is read.
    offered: AtomicU32,
}

/// Page indices, ascending.
#[derive(Default, Clone)]
struct Pages {
    /// Written: copied on write ahead, each a page of the warm instance's own.
    written: Arc<[u32]>,
    /// Only read: the snapshot's pages mapped ahead, shared with every instance (a page-table
    /// entry each).
    read: Arc<[u32]>,
}

/// The most pages a warm instance copies on write ahead (4 MiB): `pass` writes about 340, a
/// paused program about 350; one that wrote many more is not what the next will look like.
const WRITTEN_MOST: usize = 1024;

/// The most pages a warm instance maps for reading ahead (32 MiB, more than the snapshot).
const READ_MOST: usize = 8192;

/// Pages mapped ahead between two looks at whether the engine is still idle (at most about
/// 45 µs: copying a page on write took 1.3 µs in a thaw).
const PREPARE_CHUNK: usize = 32;

/// One program's pages in this many are read (the page map of 24 MB of memory, 47 KB, in
/// about 50 µs), once some are known.
const LEARN_EVERY: u32 = 32;

/// The most memory whose page map is read to learn from (64 MiB: 128 KB of page map); a
/// program that grew further is not what the next will look like either.
const LEARN_MOST: usize = 64 << 20;

impl Hot {
    /// Takes `written` (ascending) as the pages the next program will write, unless there are
    /// more than a program usually writes.
    pub(crate) fn learn(&self, written: &[u32]) {
        if !written.is_empty() && written.len() <= WRITTEN_MOST {
            self.pages.lock().unwrap_or_else(|e| e.into_inner()).written = written.into();
            metrics::gauge!("ptc_warm_pages_ahead").set(written.len() as f64);
        }
    }

    /// Whether to learn from the next program offered, which runs in an instance with no
    /// pages mapped ahead: the first, then one in [`LEARN_EVERY`]. That one is then not given
    /// any ([`Hot::write_ahead`]), or the pages it wrote could not be told from them, and the
    /// lists would only ever grow.
    pub(crate) fn sample(&self) -> bool {
        !self.known() || self.offered.fetch_add(1, Ordering::Relaxed).is_multiple_of(LEARN_EVERY)
    }

    /// Learns from the memory of a program of the component that has ended in `guest`'s
    /// instance, which had no pages mapped ahead.
    pub(crate) fn learn_from(&self, store: &mut Store<HostState>, guest: &Guest) {
        let Guest::Component(_, instance, _) = guest else { return };
        let entries = component_memory(store, *instance, |m| (m.len() <= LEARN_MOST).then(|| pagemap::entries(m)));
        let Some(Some(entries)) = entries else { return };
        let (mut written, mut read) = (Vec::new(), Vec::new());
        for (i, entry) in (0u32..).zip(entries) {
            match entry {
                Entry::Written => written.push(i),
                Entry::Read => read.push(i),
                Entry::Absent => {}
            }
        }
        if read.len() <= READ_MOST {
            self.pages.lock().unwrap_or_else(|e| e.into_inner()).read = read.into();
        }
        self.learn(&written);
    }

    /// Maps ahead, in `guest`'s fresh instance, the pages programs touch: copies on write those
    /// they write first, then maps those they read; whether it mapped any. It stops when `idle`
    /// turns false: mapping ahead while an execution runs made a fresh `pass` back to back over
    /// gRPC 2.95 ms instead of 2.25 (the two fault in one address space on two cores). Call it
    /// off the async workers.
    pub(crate) fn prepare(&self, store: &mut Store<HostState>, guest: &Guest, idle: impl Fn() -> bool) -> bool {
        let Guest::Component(_, instance, _) = guest else { return false };
        let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut any = false;
        component_memory(store, *instance, |m| {
            for (pages, write) in [(&pages.written, true), (&pages.read, false)] {
                for chunk in pages.chunks(PREPARE_CHUNK) {
                    if !idle() {
                        return;
                    }
                    pagemap::populate(m, chunk, write);
                    any = true;
                }
            }
        });
        any
    }

    /// Copies on write, in `guest`'s fresh instance, before its program runs, the pages
    /// programs write. A page the program reads first is mapped read-only (with its
    /// neighbours), and writing it then must flush that mapping from the other core's TLB: an
    /// interrupt, which on this VM is a trip through the hypervisor. Under 8 gRPC clients
    /// back to back those flushes were 46% of the server's CPU; copied before anything reads
    /// them, the pages need none, and throughput went from 343–348 to 875–884 executions/s.
    /// Mapping the read pages too, here, made it slower (760–821/s).
    pub(crate) fn write_ahead(&self, store: &mut Store<HostState>, guest: &Guest) {
        let Guest::Component(_, instance, _) = guest else { return };
        let written = self.pages.lock().unwrap_or_else(|e| e.into_inner()).written.clone();
        component_memory(store, *instance, |m| pagemap::populate(m, &written, true));
    }

    /// How many pages a warm instance copies on write ahead: its own memory, in pages.
    pub(crate) fn written(&self) -> usize {
        self.pages.lock().unwrap_or_else(|e| e.into_inner()).written.len()
    }

    /// Whether any are known.
    pub(crate) fn known(&self) -> bool {
        let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        !pages.written.is_empty() || !pages.read.is_empty()
    }
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

type Fill = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The pool's top-up as an execution holds it, to run once the execution has ended: the
/// engine's `fill_warm`, not yet started, so that the execution need not know the engine;
/// and the pages to learn from its instance, if they are its program's own.
pub(crate) struct Refill {
    fill: Fill,
    /// The pages programs touch, when the execution's instance had none mapped ahead.
    hot: Option<Arc<Hot>>,
    /// Learn from this one ([`Hot::sample`]) rather than copy pages ahead in it.
    learn: bool,
}

impl Refill {
    /// `hot`: the execution's instance had no pages mapped ahead; it is either given them
    /// ([`Refill::write_ahead`]) or learnt from when its program ends ([`Refill::learn`]).
    pub(crate) fn new<F>(hot: Option<Arc<Hot>>, fill: impl FnOnce() -> F + Send + Sync + 'static) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let learn = hot.as_ref().is_some_and(|hot| hot.sample());
        Refill { fill: Box::new(move || Box::pin(fill())), hot, learn }
    }

    /// Copies on write, in the instance the execution has just made for itself (`guest`), the
    /// pages programs write, before the program reads any of them ([`Hot::write_ahead`]);
    /// unless the execution is the one to learn from.
    pub(crate) fn write_ahead(&self, store: &mut Store<HostState>, guest: &Guest) {
        if let Some(hot) = self.hot.as_ref().filter(|_| !self.learn) {
            hot.write_ahead(store, guest);
        }
    }

    /// Learns which pages the program that ended in `guest` wrote, if it is the one to.
    pub(crate) fn learn(&self, store: &mut Store<HostState>, guest: &Guest) {
        if let Some(hot) = self.hot.as_ref().filter(|_| self.learn) {
            hot.learn_from(store, guest);
        }
    }

    pub(crate) async fn run(self) {
        (self.fill)().await
    }
}

pub(crate) struct Filling<'a>(&'a AtomicBool);

impl Drop for Filling<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
