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
    /// How far [`Hot::prepare`] got in it.
    pub(crate) ahead: Ahead,
}

/// How many of the pages programs touch an instance has mapped ahead ([`Hot::prepare`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum Ahead {
    /// None: they are copied before its program runs ([`Refill::write_ahead`]).
    #[default]
    None,
    /// Some of those programs write: the engine stopped being idle midway. The rest are
    /// copied before its program runs. Before, such an instance ran as if it had them all:
    /// fresh one-call programs 3 ms apart (`phases --gap-ms 3`, where the engine's 2 ms wait
    /// before refilling leaves about 1 ms) faulted twice as often (120,724 against 60,971
    /// faults in 400 runs) and took 3.2 ms instead of 2.6.
    Partly,
    /// Every page programs write (and maybe those they only read).
    Written,
}

/// The pages of the component's memory programs touch, which a warm instance maps ahead
/// ([`Hot::prepare`]): one `madvise` per run of them in idle time instead of one fault each
/// while the program runs. Learned from the memory of one program in [`LEARN_EVERY`] once it
/// has ended, and from each hibernation (the pages a thaw will write), and added up
/// ([`Hot::learn`]).
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
    /// Adds `written` (ascending) to the pages the next program will write, unless there are
    /// more than a program usually writes; past [`WRITTEN_MOST`] together, they start again
    /// from `written`. Added, not put in their place, because one program in [`LEARN_EVERY`]
    /// is read and its instance had the pages known copied ahead: they are among those it is
    /// seen to write. Before, only a program whose instance had none copied was read, which
    /// never comes once warm instances keep up: a process whose first fresh program was a
    /// `pass` ran every later one with `pass`'s 153 pages, and each page missing cost a fault,
    /// with a TLB shootdown to the other CPU where the Python caller's thread spun. A fresh
    /// 10-call program after such a `pass` (`benches/python/handoffs.py phases`, three processes
    /// each, alternating, 2026-12-08): 2.6-2.9 ms from its start to its first call, 560-590 µs
    /// for its second round, 55-60 shootdowns a run; now 1.4-1.6 ms, 107-154 µs, 0-1.
    pub(crate) fn learn(&self, written: &[u32]) {
        if written.is_empty() || written.len() > WRITTEN_MOST {
            return;
        }
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        let mut both = [&pages.written[..], written].concat();
        both.sort_unstable();
        both.dedup();
        pages.written = if both.len() <= WRITTEN_MOST { both.into() } else { written.into() };
        metrics::gauge!("ptc_warm_pages_ahead").set(pages.written.len() as f64);
    }

    /// Whether to learn from the next program offered: the first, then one in
    /// [`LEARN_EVERY`]. Its instance has the pages known copied ahead like any other, so the
    /// pages it is seen to write are those and its own: what [`Hot::learn`] keeps anyway.
    pub(crate) fn sample(&self) -> bool {
        !self.known() || self.offered.fetch_add(1, Ordering::Relaxed).is_multiple_of(LEARN_EVERY)
    }

    /// Learns from the memory of a program of the component that has ended in `guest`'s
    /// instance.
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
    /// they write first, then maps those they read; how far it got. It stops when `idle`
    /// turns false: mapping ahead while an execution runs made a fresh `pass` back to back over
    /// gRPC 2.95 ms instead of 2.25 (the two fault in one address space on two cores). Call it
    /// off the async workers.
    pub(crate) fn prepare(&self, store: &mut Store<HostState>, guest: &Guest, idle: impl Fn() -> bool) -> Ahead {
        let Guest::Component(_, instance, _) = guest else { return Ahead::None };
        let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut ahead = Ahead::None;
        component_memory(store, *instance, |m| {
            for chunk in pages.written.chunks(PREPARE_CHUNK) {
                if !idle() {
                    return;
                }
                pagemap::populate(m, chunk, true);
                ahead = Ahead::Partly;
            }
            ahead = Ahead::Written;
            for chunk in pages.read.chunks(PREPARE_CHUNK) {
                if !idle() {
                    return;
                }
                pagemap::populate(m, chunk, false);
            }
        });
        ahead
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
/// and whether to learn from its instance the pages its program wrote.
pub(crate) struct Refill {
    fill: Fill,
    /// The pages programs touch.
    hot: Arc<Hot>,
    /// The execution's instance had them all mapped ahead.
    written: bool,
    /// Learn from this one ([`Hot::sample`]).
    learn: bool,
}

impl Refill {
    /// `hot`, with how far the execution's instance had the pages programs write mapped
    /// ahead: unless it has them all, it is given the rest ([`Refill::write_ahead`]); and
    /// maybe learnt from when its program ends ([`Refill::learn`]).
    pub(crate) fn new<F>(hot: Arc<Hot>, ahead: Ahead, fill: impl FnOnce() -> F + Send + Sync + 'static) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let learn = hot.sample();
        Refill { fill: Box::new(move || Box::pin(fill())), hot, written: ahead == Ahead::Written, learn }
    }

    /// Copies on write, in the execution's instance (`guest`), the pages programs write,
    /// before the program reads any of them ([`Hot::write_ahead`]; those already copied cost
    /// a walk of their page tables), unless it has them all already.
    pub(crate) fn write_ahead(&self, store: &mut Store<HostState>, guest: &Guest) {
        if !self.written {
            self.hot.write_ahead(store, guest);
        }
    }

    /// Learns which pages the program that ended in `guest` wrote, if it is the one to.
    pub(crate) fn learn(&self, store: &mut Store<HostState>, guest: &Guest) {
        if self.learn {
            self.hot.learn_from(store, guest);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refill(hot: &Arc<Hot>, ahead: Ahead) -> Refill {
        Refill::new(hot.clone(), ahead, || async {})
    }

    #[test]
    fn an_instance_is_given_the_pages_it_lacks_and_one_in_learn_every_is_learnt_from() {
        let hot = Arc::new(Hot::default());
        // Nothing known yet: the first program is learnt from.
        assert!(refill(&hot, Ahead::None).learn);
        hot.learn(&[1, 2, 3]);
        // Known: one in LEARN_EVERY is learnt from, however far its instance got.
        for ahead in [Ahead::None, Ahead::Partly, Ahead::Written] {
            let learnt = (0..LEARN_EVERY * 2).filter(|_| refill(&hot, ahead).learn).count();
            assert_eq!(learnt, 2, "{ahead:?}");
        }
        // Only an instance without all of them is given the rest before its program runs.
        assert!(!refill(&hot, Ahead::None).written && !refill(&hot, Ahead::Partly).written);
        assert!(refill(&hot, Ahead::Written).written);
    }

    #[test]
    fn the_pages_learnt_add_up_until_there_are_more_than_a_program_writes() {
        let hot = Hot::default();
        let written = |hot: &Hot| hot.pages.lock().unwrap().written.to_vec();
        hot.learn(&[1, 2, 3]);
        hot.learn(&[3, 5]);
        hot.learn(&[]);
        assert_eq!(written(&hot), [1, 2, 3, 5]);
        // A program that wrote more than any should is not learnt from.
        let many: Vec<u32> = (100..100 + WRITTEN_MOST as u32 + 1).collect();
        hot.learn(&many);
        assert_eq!(written(&hot), [1, 2, 3, 5]);
        // Past the bound together, the pages learnt start again from the new ones.
        let most: Vec<u32> = (100..100 + WRITTEN_MOST as u32).collect();
        hot.learn(&most);
        assert_eq!(written(&hot), most);
    }
}
