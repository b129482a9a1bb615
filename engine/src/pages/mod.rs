//! Hibernation: a program parked on its tools is taken off the native stack (`wait-for-tools`
//! answers `hibernate`, the guest unwinds its event loop out of the export), kept as the pages
//! of its memory that differ from the runtime's snapshot, XORed with the snapshot's and
//! compressed, and its instance and execution slot are freed. When an answer arrives, or the
//! program's next timer is due, the pages are thawed into another instance of the same
//! runtime and `resume` carries the program on where it stopped. An idle live session is
//! kept the same way (no export runs then), and thawed at its next command.
//!
//! Why the pages are all of it (`docs/hibernation.md`): after the export has returned, no
//! wasm frame is on any stack and the core globals are back at their snapshot values; the
//! host state (tool exchange, call log, clocks, random, output) stays this process's own
//! `HostState`, moved from store to store; and the only handles the guest holds are the
//! ones every instance takes first (`prime`): stdout, stderr, the preopened directory. A
//! program holding any other (an open file) is not hibernated and stays live.
//!
//! The component's memory is reached through wasmtime's `#[doc(hidden)]` `LowerContext`
//! (probe 2 in the doc), pinned with wasmtime `=48.0.8`: recheck it on every upgrade. The data
//! runtime exports its memory, and its WASI descriptors are the host's own.
//!
//! A floor of its own (hibernation's mechanism: image, freeze/thaw, delta, pagemap, sealed,
//! kept images), above [`crate::instance`]; the policy of when to hibernate is [`crate::run::sleep`].

use std::sync::Mutex;
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::component::__internal::{LowerContext, wasmtime_environ};
use wasmtime::component::Instance;
use wasmtime::{AsContextMut, Memory, Store};
use wasmtime_environ::component::{CanonicalOptionsDataModel, OptionsIndex};

use crate::api::request::Runtime;
use crate::instance::guest::Guest;
use crate::instance::host::HostState;

mod delta;
mod kept;
pub(crate) mod pagemap;
pub(crate) mod sealed;
pub(crate) mod snapshot;

use delta::{Delta, Unpacked};
pub(crate) use kept::{Images, Kept};
pub(crate) use sealed::{Binding, Body};

const PAGE: usize = 4096;

/// A wasm page, what memory grows by.
const WASM_PAGE: u64 = 64 * 1024;

/// How far past a hibernated memory's size a thaw may grow it (`freeze` keeps that far
/// within the limit): the allocator's rounding, a few 64 KiB pages.
const GROWTH_SLACK: u64 = 1 << 20;

/// Pages compared or written between two yields to the scheduler (16 MiB, a few ms): a
/// memory of hundreds of MiB must not hold an async worker for long.
const PAGES_PER_TURN: usize = 4096;

/// The memory every instance of a runtime starts with, which a hibernated instance is kept
/// against; read once per engine and runtime.
pub(crate) struct Image {
    base: Base,
    /// Bytes of a fresh instance's memory.
    len: usize,
    /// Which runtime's instances it is the memory of.
    pub(crate) runtime: Runtime,
    /// What a sealed image of this memory is bound to: the component's own bytes (SHA-256);
    /// for the data runtime, its version and this snapshot's memory, since each server
    /// pre-initialises its own (`data/init.rs`) and two snapshots may differ.
    pub(crate) build: [u8; 32],
    /// The WASI handles a fresh instance of the component holds once primed, with no
    /// directory preopened: measured ([`Image::primed`]), since each guest's libc takes its
    /// own (CPython's 2, stdout and stderr; QuickJS's through Debian's wasi-libc, 4). `None`:
    /// the data runtime, whose descriptors are the host's.
    primed: Option<usize>,
}

enum Base {
    /// The component's memory, copied (24 MB), and the canonical options that name it.
    Copy(Vec<u8>, OptionsIndex),
    /// An instance of the data runtime that never runs. Its memory (130 MiB) maps the
    /// snapshot's pages from the compiled artifact: read, it costs page cache shared with
    /// every other instance, where a copy would cost 130 MiB of the server's own.
    Instance(Mutex<Store<HostState>>, Memory),
}

/// What a page past the image starts as.
static ZERO: [u8; PAGE] = [0; PAGE];

/// A fresh instance's memory, page by page.
struct Pages<'a>(&'a [u8]);

impl Pages<'_> {
    /// Page `i` as a fresh instance has it: the image's, or zeros past it.
    fn page(&self, i: usize) -> &[u8] {
        self.0.get(i * PAGE..(i + 1) * PAGE).unwrap_or(&ZERO)
    }
}

impl Image {
    /// Bytes of a fresh instance's memory.
    pub(crate) fn memory_len(&self) -> usize {
        self.len
    }

    /// Counts the WASI handles `prime` takes in `guest`, a fresh instance of the component
    /// in `store` with no directory preopened, as what every instance of it holds.
    pub(crate) async fn primed(mut self, store: &mut Store<HostState>, guest: &Guest) -> wasmtime::Result<Self> {
        if let Guest::Component(sandbox, ..) = guest {
            sandbox.call_prime(&mut *store, 0).await?;
            self.primed = Some(store.data_mut().wasi_handles());
        }
        Ok(self)
    }

    /// Reads a fresh instance's memory of `runtime`'s component, built from bytes whose
    /// SHA-256 is `build`.
    pub(crate) fn of(store: &mut Store<HostState>, instance: Instance, build: [u8; 32], runtime: Runtime) -> Image {
        let options = memory_options(store, instance);
        let memory = Linear::Component(instance, options).with(store, |m| m.to_vec());
        let len = memory.len();
        Image { len, base: Base::Copy(memory, options), runtime, build, primed: None }
    }

    /// What sealed images of the data runtime are bound to: its `version`, and the memory of
    /// a fresh instance (`memory`, in `store`). Hashes 130 MiB: call it off the async workers.
    pub(crate) fn digest(store: &Store<HostState>, memory: Memory, version: &[u8; 32]) -> [u8; 32] {
        let mut sha = Sha256::new();
        sha.update(version);
        sha.update(memory.data(store));
        sha.finalize().into()
    }

    /// Keeps a fresh instance of the data runtime (in `store`, whose memory is `memory`) to
    /// read its memory from; `build`: its [`Image::digest`].
    pub(crate) fn data(store: Store<HostState>, memory: Memory, build: [u8; 32]) -> Image {
        let len = memory.data_size(&store);
        let base = Base::Instance(Mutex::new(store), memory);
        Image { len, base, runtime: Runtime::PythonData, build, primed: None }
    }

    /// Runs `f` on a fresh instance's memory.
    fn with_pages<R>(&self, f: impl FnOnce(Pages<'_>) -> R) -> R {
        match &self.base {
            Base::Copy(memory, _) => f(Pages(memory)),
            Base::Instance(store, memory) => {
                let store = store.lock().unwrap_or_else(|e| e.into_inner());
                f(Pages(memory.data(&*store)))
            }
        }
    }
}

/// An instance's linear memory, however its runtime lets the host reach it.
#[derive(Clone, Copy)]
enum Linear {
    /// The component's: through the canonical options that name it.
    Component(Instance, OptionsIndex),
    /// The data runtime's: exported.
    Core(Memory),
}

impl Linear {
    /// The memory of `guest`, an instance of `image`'s runtime.
    fn of(guest: &Guest, image: &Image) -> Linear {
        match (guest, &image.base) {
            (Guest::Component(_, instance, _), Base::Copy(_, options)) => Linear::Component(*instance, *options),
            (Guest::Data(instance), Base::Instance(..)) => Linear::Core(instance.memory()),
            _ => unreachable!("an image is only used with instances of its own runtime"),
        }
    }

    /// Runs `f` on the whole memory. No wasm runs meanwhile (it cannot: `f` is synchronous
    /// and borrows the store).
    fn with<R>(self, store: &mut Store<HostState>, f: impl FnOnce(&mut [u8]) -> R) -> R {
        match self {
            Linear::Component(instance, options) => {
                let mut cx = LowerContext::new(store.as_context_mut(), options, instance);
                f(cx.as_slice_mut())
            }
            Linear::Core(memory) => f(memory.data_mut(store)),
        }
    }
}

/// Runs `f` on the linear memory of `instance`, an instance of the component. No wasm runs
/// meanwhile.
pub(crate) fn component_memory<R>(
    store: &mut Store<HostState>,
    instance: Instance,
    f: impl FnOnce(&mut [u8]) -> R,
) -> R {
    let options = memory_options(store, instance);
    Linear::Component(instance, options).with(store, f)
}

/// The first canonical options of the component that name a linear memory: every export that
/// takes a string does, and all of them name the component's one memory.
fn memory_options(store: &mut Store<HostState>, instance: Instance) -> OptionsIndex {
    (0u32..)
        .map(OptionsIndex::from_u32)
        .find(|&options| {
            let cx = LowerContext::new(store.as_context_mut(), options, instance);
            matches!(cx.options().data_model, CanonicalOptionsDataModel::LinearMemory(o) if o.memory.is_some())
        })
        .expect("a component with string parameters has canonical options with a memory")
}

/// A hibernated instance: the pages of its memory that differ from the image, XORed with the
/// image's and compressed.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Frozen {
    /// Bytes of linear memory.
    len: usize,
    /// Indices of the 4 KiB pages that differ from the image, ascending.
    pages: Vec<u32>,
    /// How those pages differ from the image's, compressed (`delta.rs`).
    packed: Vec<u8>,
    /// WASI handles the guest held (all of them taken by priming).
    handles: usize,
}

impl Frozen {
    /// Bytes of the linear memory it was frozen from.
    pub(crate) fn memory_len(&self) -> usize {
        self.len
    }

    /// Indices of the 4 KiB pages that differ from the image, ascending.
    pub(crate) fn pages(&self) -> &[u32] {
        &self.pages
    }

    /// What it takes at rest, about.
    pub(crate) fn size(&self) -> u64 {
        (self.packed.len() + self.pages.len() * 4) as u64
    }
}

/// Takes a hibernated instance's pages, or says why it cannot be hibernated (it then stays
/// live, and goes on where it is). `portable`: its image may be thawed by another process,
/// which gives the guest only the handles every instance starts with.
pub(crate) async fn freeze(
    store: &mut Store<HostState>,
    guest: &Guest,
    image: &Image,
    portable: bool,
) -> Result<Frozen, String> {
    let linear = Linear::of(guest, image);
    let handles = store.data_mut().wasi_handles();
    let primed = match image.primed {
        Some(fresh) => fresh + usize::from(store.data().preopened),
        None => store.data().primed_handles,
    };
    // The component's handles live in its instance and are taken again by priming. The data
    // runtime's descriptors are the host's own (WASI preview 1): they move with the host
    // state to the next instance in this process, so only an image for elsewhere is gated.
    // 0: no handle taken yet (a live session that has run no program).
    let gated = matches!(linear, Linear::Component(..)) || portable;
    if gated && handles != primed && handles != 0 {
        return Err(format!(
            "the program holds {handles} WASI handles where a fresh instance takes {primed} (an open file)"
        ));
    }
    let len = linear.with(store, |m| m.len());
    // A thaw grows a fresh instance's memory to this size, overshooting by the allocator's
    // rounding (a few 64 KiB pages): it must stay within the limit.
    if len > image.len && (len as u64).saturating_add(GROWTH_SLACK) > store.data().limiter.max_memory() {
        return Err(format!("its memory ({len} bytes) is too close to its limit to be grown again at a thaw"));
    }
    let t0 = Instant::now();
    let written = linear.with(store, |m| pagemap::written(m));
    let mut pages = Vec::new();
    let mut delta = Delta::default();
    let total = len / PAGE;
    let mut first = 0;
    while first < total {
        let end = (first + PAGES_PER_TURN).min(total);
        linear.with(store, |memory| {
            image.with_pages(|image| {
                for i in first..end {
                    if written.as_ref().is_some_and(|w| !w[i]) {
                        continue;
                    }
                    let (now, base) = (&memory[i * PAGE..(i + 1) * PAGE], image.page(i));
                    if now != base {
                        pages.push(i as u32);
                        delta.push(now, base);
                    }
                }
            })
        });
        first = end;
        tokio::task::yield_now().await;
    }
    // Kept while it sleeps: no room past its length.
    pages.shrink_to_fit();
    let diffed = t0.elapsed();
    let packed = tokio::task::spawn_blocking(move || delta.pack())
        .await
        .map_err(|e| format!("compressing failed: {e}"))?
        .map_err(|e| format!("compressing failed: {e}"))?;
    tracing::debug!(?diffed, packed = ?t0.elapsed(), "freeze phases");
    let handles = if gated { handles } else { 0 };
    Ok(Frozen { len, pages, packed, handles })
}

/// Primes a fresh instance (the same WASI handles, at the same indices) and grows its memory
/// to the hibernated size.
async fn prime(store: &mut Store<HostState>, guest: &Guest, linear: &Linear, frozen: &Frozen) -> wasmtime::Result<()> {
    let len = |store: &mut Store<HostState>| linear.with(store, |m| m.len());
    match guest {
        Guest::Component(sandbox, ..) => {
            // Priming also grows memory to the hibernated size: twice at most, since the first
            // allocation takes the free space at the heap's end and the second then grows by
            // what it asks (`app.py`).
            for _ in 0..2 {
                let short = frozen.len.saturating_sub(len(store)) as u64;
                if frozen.handles > 0 || short > 0 {
                    sandbox.call_prime(&mut *store, short).await?;
                }
                if short == 0 {
                    break;
                }
            }
            let handles = store.data_mut().wasi_handles();
            if handles != frozen.handles {
                return Err(wasmtime::Error::msg(format!(
                    "priming took {handles} WASI handles where the hibernated instance held {}",
                    frozen.handles
                )));
            }
        }
        Guest::Data(instance) => {
            // The guest's allocator asks the memory's size each time it grows, so growing it
            // from here is what its own growth would have done.
            let short = frozen.len.saturating_sub(len(store)) as u64;
            if short > 0 {
                instance.memory().grow(&mut *store, short.div_ceil(WASM_PAGE))?;
            }
        }
    }
    Ok(())
}

/// Makes a fresh instance's memory the hibernated one's: primes the component (the same
/// handles, at the same indices), grows the memory to the hibernated size, then writes every
/// page that differs from the target, the image XOR the kept pages (priming's own writes
/// included).
pub(crate) async fn thaw(
    store: &mut Store<HostState>,
    guest: &Guest,
    image: &Image,
    frozen: Frozen,
) -> wasmtime::Result<()> {
    let linear = Linear::of(guest, image);
    let t0 = Instant::now();
    // Its growth was kept charged while it slept: it is charged anew as the memory grows now.
    let grown = frozen.len.saturating_sub(image.len) as u64;
    store.data_mut().limiter.claim.shrink(grown);
    prime(store, guest, &linear, &frozen).await?;
    let primed = t0.elapsed();
    let len = linear.with(store, |m| m.len());
    let total = frozen.len / PAGE;
    let ordered = frozen.pages.windows(2).all(|w| w[0] < w[1]);
    if len < frozen.len || !ordered || frozen.pages.last().is_some_and(|&p| p as usize >= total) {
        return Err(wasmtime::Error::msg(format!(
            "the hibernated memory ({} bytes) does not fit this instance's ({len} bytes)",
            frozen.len
        )));
    }
    let (packed, pages) = (frozen.packed, frozen.pages.len());
    let mut unpacked =
        tokio::task::spawn_blocking(move || Unpacked::new(&packed, pages)).await?.map_err(wasmtime::Error::msg)?;
    let inflated = t0.elapsed();
    // Pages priming (or instantiation) wrote, which may differ from the image.
    let written = linear.with(store, |m| pagemap::written(m));
    // Those a warm instance copied on write ahead (`Hot::prepare`) need not be again.
    let unwritten: Vec<u32> = match &written {
        Some(w) => frozen.pages.iter().copied().filter(|&p| !w[p as usize]).collect(),
        None => frozen.pages.clone(),
    };
    linear.with(store, |m| pagemap::populate(m, &unwritten, true));
    let mut kept = frozen.pages.iter().peekable();
    let mut first = 0;
    while first < total {
        let end = (first + PAGES_PER_TURN).min(total);
        linear.with(store, |memory| {
            image.with_pages(|image| {
                for i in first..end {
                    let (page, base) = (&mut memory[i * PAGE..(i + 1) * PAGE], image.page(i));
                    match kept.next_if(|p| **p as usize == i) {
                        Some(_) => unpacked.apply_next(page, base),
                        None if written.as_ref().is_some_and(|w| !w[i]) => {}
                        None if page != base => page.copy_from_slice(base),
                        None => {}
                    }
                }
            })
        });
        first = end;
        tokio::task::yield_now().await;
    }
    tracing::debug!(?primed, ?inflated, written = ?t0.elapsed(), "thaw phases");
    Ok(())
}
