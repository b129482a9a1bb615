//! Everything wasmtime: the `Config`, the compiled-component cache, and the epoch ticker.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

use crate::config::EngineConfig;
use crate::error::{Error, Result};

/// Core instances, memories and tables one sandbox needs, with headroom. componentize-py
/// links CPython, libc and the WASI adapter as separate core modules in one component.
const CORE_INSTANCES_PER_SANDBOX: u32 = 32;
const MEMORIES_PER_SANDBOX: u32 = 4;
const TABLES_PER_SANDBOX: u32 = 8;
const TABLE_ELEMENTS: usize = 64 * 1024;

/// Builds the wasmtime configuration every sandbox runs under.
pub(crate) fn wasmtime_config(cfg: &EngineConfig, pooling: bool) -> Config {
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
    // The fiber stack must leave room for host frames below the wasm stack limit.
    c.max_wasm_stack(1024 * 1024);
    c.async_stack_size(2 * 1024 * 1024);
    if let Some(reservation) = cfg.memory_reservation {
        c.memory_reservation(reservation);
        c.memory_guard_size(64 * 1024);
        c.memory_reservation_for_growth(0);
    }
    if pooling {
        let n = u32::try_from(cfg.max_concurrent.max(1)).unwrap_or(u32::MAX).saturating_add(8);
        let mut p = PoolingAllocationConfig::default();
        p.total_component_instances(n)
            .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_SANDBOX))
            .total_memories(n.saturating_mul(MEMORIES_PER_SANDBOX))
            .total_tables(n.saturating_mul(TABLES_PER_SANDBOX))
            .total_stacks(n)
            .max_core_instances_per_component(CORE_INSTANCES_PER_SANDBOX)
            .max_memories_per_component(MEMORIES_PER_SANDBOX)
            .max_tables_per_component(TABLES_PER_SANDBOX)
            .table_elements(TABLE_ELEMENTS)
            .max_memory_size(cfg.ceilings.max_memory_bytes as usize);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
    }
    c
}

/// The engine, pooled when the machine allows it (a pool reserves a lot of address space up
/// front, which some sandboxes and `ulimit -v` settings refuse).
pub(crate) fn build_engine(cfg: &EngineConfig) -> Result<(Engine, bool)> {
    if cfg.pooling {
        match Engine::new(&wasmtime_config(cfg, true)) {
            Ok(engine) => return Ok((engine, true)),
            Err(e) => tracing::warn!("pooling allocator unavailable, using on-demand: {e:#}"),
        }
    }
    let engine = Engine::new(&wasmtime_config(cfg, false)).map_err(|e| Error::engine("wasmtime engine", e))?;
    Ok((engine, false))
}

/// Loads the component from the on-disk cache, compiling and storing it on a miss.
///
/// The key combines the component's SHA-256 with `Engine::precompile_compatibility_hash`, so a
/// new wasmtime or different settings never load a stale artifact. Loading through
/// `deserialize_file` maps the file, which is what lets instances share its memory image.
pub(crate) fn load_component(engine: &Engine, bytes: &[u8], cache_dir: &Path) -> Result<Component> {
    let path = cache_path(engine, bytes, cache_dir);
    if path.exists() {
        // SAFETY: the file was written by `Component::serialize` of this very engine
        // configuration (the name carries its compatibility hash) into our own cache directory.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => return Ok(component),
            Err(e) => tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}"),
        }
    }
    let started = std::time::Instant::now();
    let compiled = engine.precompile_component(bytes).map_err(|e| Error::engine("compiling the component", e))?;
    tracing::info!(elapsed = ?started.elapsed(), "compiled the sandbox component");
    if let Err(e) = write_atomically(&path, &compiled) {
        tracing::warn!(path = %path.display(), "cannot cache the compiled component: {e}");
        // SAFETY: `compiled` was just produced by this engine.
        return unsafe { Component::deserialize(engine, &compiled) }.map_err(|e| Error::engine("loading the component", e));
    }
    // SAFETY: as above; the file holds exactly `compiled`.
    unsafe { Component::deserialize_file(engine, &path) }.map_err(|e| Error::engine("loading the component", e))
}

fn cache_path(engine: &Engine, bytes: &[u8], dir: &Path) -> PathBuf {
    let digest = hex::encode(&Sha256::digest(bytes)[..12]);
    // DefaultHasher::new() uses fixed keys, so the value is stable for one build of the binary,
    // which is all the compatibility hash promises anyway.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    dir.join(format!("sandbox-{digest}-{:016x}.cwasm", h.finish()))
}

fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("cache path has a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.{}.tmp", std::process::id(), rand_suffix()));
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn rand_suffix() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now())
}

/// Advances the engine's epoch every `tick` until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine, tick: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("ptc-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    engine.increment_epoch();
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
