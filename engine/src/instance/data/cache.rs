//! The python-data runtime on disk: the compiled snapshot in the engine's cache directory,
//! and the pre-initialised module's bytes beside it, made once and shared by every engine
//! (and process) that finds them.

use std::path::Path;
use std::time::Instant;

use wasmtime::{Engine, Module};

use super::init::pre_initialise;
use crate::api::error::{Error, Result};
use crate::instance::wasm;

/// The cached snapshot, made first if it is not there. One maker at a time, in this process
/// (tests start engines in parallel) and across processes (a lock file beside it): the others
/// wait for it and load what it cached, rather than each spending a minute and gigabytes.
pub(super) fn load_or_make(engine: &Engine, fuel: bool, artifacts: &Path, path: &Path, name: &str) -> Result<Module> {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let load = || {
        // SAFETY: written by `Module::serialize` of an engine with this compatibility hash (in
        // the name) into our private cache directory. Loading the file maps it, so instances
        // share its memory image.
        let module = unsafe { Module::deserialize_file(engine, path) }
            .map_err(|e| Error::engine("loading the python-data runtime", e))?;
        wasm::touch(path);
        Ok(module)
    };
    let cached = || path.exists() && wasm::private(path);
    if cached() {
        return load();
    }
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let lock_path = path.with_extension("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::engine(&format!("opening {}", lock_path.display()), e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::engine(&format!("locking {}", lock_path.display()), e))?;
    if cached() {
        return load();
    }
    let snapshot_path = path.with_file_name(format!("{name}.wasm"));
    let module = compile(engine, &cached_snapshot(engine, fuel, artifacts, &snapshot_path)?)?;
    let bytes = module.serialize().map_err(|e| Error::engine("serialising python-data", e))?;
    match wasm::write_atomically(path, &bytes) {
        Ok(()) => {
            wasm::sweep_stale(path, "python-data-");
            load()
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot cache the python-data runtime: {e}");
            Ok(module)
        }
    }
}

/// The pre-initialised module's bytes, kept at `path` beside the compiled one
/// (`python-data-<digest>.wasm`, ~187 MB): they do not depend on the engine's settings, so another
/// configuration (fuel on or off, another memory reservation) compiles them (~37 s) instead of
/// pre-initialising again.
fn cached_snapshot(engine: &Engine, fuel: bool, artifacts: &Path, path: &Path) -> Result<Vec<u8>> {
    if path.exists() && wasm::private(path) {
        match std::fs::read(path) {
            Ok(bytes) => {
                wasm::touch(path);
                return Ok(bytes);
            }
            Err(e) => tracing::warn!(path = %path.display(), "cannot read the cached snapshot: {e}"),
        }
    }
    let bytes = pre_initialise(engine, fuel, artifacts)?;
    if let Err(e) = wasm::write_atomically(path, &bytes) {
        tracing::warn!(path = %path.display(), "cannot cache the python-data snapshot: {e}");
    }
    Ok(bytes)
}

pub(super) fn compile(engine: &Engine, snapshot: &[u8]) -> Result<Module> {
    let started = Instant::now();
    let module = Module::new(engine, snapshot).map_err(|e| Error::engine("compiling python-data", e))?;
    tracing::info!(elapsed = ?started.elapsed(), "compiled the python-data runtime");
    Ok(module)
}
