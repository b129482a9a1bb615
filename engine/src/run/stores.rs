//! How the engine makes an instance's store: its host state (WASI with captured output and
//! `/mnt/data`, the memory limiter with its budget claim, the tool broker and its channels),
//! its fuel and its epoch deadline; and the instance itself when a warm one is ready
//! (`warm.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::sync::mpsc;
use wasmtime::Store;
use wasmtime::component::Linker;

use crate::api::config::{Ceilings, EngineConfig, Limits};
use crate::api::error::{Error, Result};
use crate::api::events::Event;
use crate::api::journal::Recorder;
use crate::api::request::Runtime;
use crate::api::trace::Parent;
use crate::calls::approval::NeedApproval;
use crate::calls::exchange::Exchange;
use crate::calls::observed::ObservedShapes;
use crate::calls::parked::Parked;
use crate::calls::schema::Schemas;
use crate::calls::shares::Shares;
use crate::instance::bindings::SandboxPre;
use crate::instance::broker::Broker;
use crate::instance::data::{Data, DataRuntime};
use crate::instance::guest::{Guest, Pre};
use crate::instance::host::{HostState, Parts};
use crate::instance::limiter::Limiter;
use crate::instance::output::Output;
use crate::instance::wasm::load_javascript;
use crate::instance::wiring::Wiring;
use crate::net::NetSide;
use crate::pages::{Image, Images};
use crate::run::warm::{Ahead, Hot, Warm, WarmPool};

/// What instances are made from (each runtime's engine and pre-linked code), and what their
/// stores draw on and count in.
pub(crate) struct Stores {
    pub(crate) wasmtime: wasmtime::Engine,
    pub(crate) pre: SandboxPre<HostState>,
    /// The JavaScript runtime's component, pre-linked like the Python one at its first use.
    javascript: Javascript,
    /// The data-science runtime, when configured (`EngineConfig::python_data`).
    pub(crate) data: Option<Data>,
    /// Whether stores are metered (`EngineConfig::fuel`).
    fuel: bool,
    ceilings: Ceilings,
    pub(crate) shares: Arc<Shares>,
    /// The shapes of tools' results, per tenant (`EngineConfig::observe_result_shapes`).
    pub(crate) observed: Option<Arc<ObservedShapes>>,
    /// Instances alive (running or paused).
    pub(crate) live: Arc<AtomicUsize>,
    /// Executions parked waiting for tool results.
    pub(crate) paused: Arc<AtomicUsize>,
    /// Instances made ahead of demand (`warm.rs`).
    pub(crate) warm: WarmPool,
    /// The pages programs write, which warm instances copy ahead.
    pub(crate) hot: Arc<Hot>,
    /// Executions hibernated (`hibernation/`).
    pub(crate) hibernated: Arc<AtomicUsize>,
    /// Where their images are kept, within the bounds on them (`hibernation/kept.rs`).
    pub(crate) images: Arc<Images>,
    /// Executions and sessions that may be hibernated now, for a start that finds no slot.
    pub(crate) parked: Arc<Parked>,
    /// The component's own bytes, as SHA-256: its sealed images are bound to them, since a
    /// hibernated image is of one build's memory (the sources' digest is the same for builds
    /// whose snapshots differ).
    build: [u8; 32],
    /// Each runtime's memory as every instance starts with it, read at its first
    /// hibernation.
    image: tokio::sync::OnceCell<Arc<Image>>,
    data_image: tokio::sync::OnceCell<Arc<Image>>,
    javascript_image: tokio::sync::OnceCell<Arc<Image>>,
}

/// The JavaScript component, compiled (or loaded from the cache) and linked when a program
/// first needs it: 0.6 s of an engine's start that Python-only users would otherwise pay.
pub(crate) struct Javascript {
    linker: Linker<HostState>,
    cache_dir: Option<PathBuf>,
    ahead_dir: Option<PathBuf>,
    pre: tokio::sync::OnceCell<SandboxPre<HostState>>,
}

impl Javascript {
    /// `linker`: the host's imports, as the Python component is linked with them.
    pub(crate) fn new(config: &EngineConfig, linker: Linker<HostState>) -> Self {
        let (cache_dir, ahead_dir) = (config.cache_dir.clone(), config.ahead_dir.clone());
        Javascript { linker, cache_dir, ahead_dir, pre: tokio::sync::OnceCell::new() }
    }

    async fn pre(&self, engine: &wasmtime::Engine) -> Result<SandboxPre<HostState>> {
        let pre = self.pre.get_or_try_init(|| {
            let (engine, linker) = (engine.clone(), self.linker.clone());
            let (cache_dir, ahead_dir) = (self.cache_dir.clone(), self.ahead_dir.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let component = load_javascript(&engine, cache_dir.as_deref(), ahead_dir.as_deref())?;
                    let pre = linker.instantiate_pre(&component).map_err(|e| Error::engine("pre-instantiating", e))?;
                    SandboxPre::new(pre)
                        .map_err(|e| Error::engine("javascript component does not match the WIT world", e))
                })
                .await
                .map_err(|e| Error::engine("loading the javascript component", e))?
            }
        });
        Ok(pre.await?.clone())
    }
}

/// What one instance's store is made for.
pub(crate) struct StoreSpec<'a> {
    pub(crate) limits: &'a Limits,
    /// The input schemas of its tools; `None`: no tools.
    pub(crate) schemas: Option<Arc<Schemas>>,
    pub(crate) data_dir: Option<&'a Path>,
    pub(crate) tenant: Option<&'a str>,
    pub(crate) runtime: Runtime,
    /// A journaled execution's recorder: its random sources and clocks go through it.
    pub(crate) journal: Option<&'a Arc<Recorder>>,
    /// What the monotonic clock reads at first (nanoseconds): 0, or where a thawed
    /// execution's clock had got to.
    pub(crate) monotonic_from: u64,
    /// An execution's own (none: a session's, whose programs install theirs, or a warm
    /// instance's, or a rendering's).
    pub(crate) running: Option<Running>,
}

/// What an execution's store holds beyond any instance's.
pub(crate) struct Running {
    /// Its network policy, its deadline, and the requests it made before (a thawed one's).
    pub(crate) net: NetSide,
    /// How long it waits for tools before it hibernates (`None`: never).
    pub(crate) hibernate_after: Option<Duration>,
    /// The suffix its call ids end with, and which of its tools wait for approval.
    pub(crate) identity: (String, NeedApproval),
    /// Its span, when the engine traces.
    pub(crate) trace: Option<Parent>,
}

/// The host's side of one instance: its event channel, tool exchange, output and fuel.
pub(crate) struct HostSide {
    pub(crate) events: mpsc::UnboundedSender<Event>,
    pub(crate) events_rx: mpsc::UnboundedReceiver<Event>,
    pub(crate) exchange: Arc<Exchange>,
    pub(crate) output: Output,
    pub(crate) fuel: Option<u64>,
    /// How far the instance had pages copied on write ahead (a warm one; `Hot::prepare`): with
    /// any, the pages its program writes cannot be told from them.
    pub(crate) ahead: Ahead,
}

impl Stores {
    /// `build`: the SHA-256 of the component's bytes.
    pub(crate) fn new(
        config: &EngineConfig,
        (wasmtime, pre, build): (wasmtime::Engine, SandboxPre<HostState>, [u8; 32]),
        javascript: Javascript,
        data: Option<Data>,
        shares: Arc<Shares>,
    ) -> Self {
        Stores {
            wasmtime,
            pre,
            javascript,
            data,
            fuel: config.fuel,
            ceilings: config.ceilings.clone(),
            shares,
            observed: config.observe_result_shapes.then(Arc::default),
            live: Arc::new(AtomicUsize::new(0)),
            paused: Arc::new(AtomicUsize::new(0)),
            warm: WarmPool::new(config.warm_instances),
            hot: Arc::default(),
            hibernated: Arc::new(AtomicUsize::new(0)),
            images: Images::new(
                config.hibernated_memory,
                config.hibernated_dir.as_deref().map(|dir| (dir, config.hibernated_disk)),
                config.tenant_hibernated,
            ),
            parked: Arc::default(),
            build,
            image: tokio::sync::OnceCell::new(),
            data_image: tokio::sync::OnceCell::new(),
            javascript_image: tokio::sync::OnceCell::new(),
        }
    }

    /// What instances of `runtime` are made from, prepared first if it is the data runtime
    /// and that waited for its first use; refused when it is not configured.
    pub(crate) async fn pre(&self, runtime: Runtime) -> Result<Pre> {
        match runtime {
            Runtime::Python => Ok(Pre::Component(self.pre.clone(), Runtime::Python)),
            Runtime::Javascript | Runtime::Typescript => {
                Ok(Pre::Component(self.javascript.pre(&self.wasmtime).await?, Runtime::Javascript))
            }
            Runtime::PythonData => match &self.data {
                Some(data) => Ok(Pre::Data(data.ready().await?.clone())),
                None => Err(Error::invalid(
                    "this engine has no python-data runtime (numpy, pandas, matplotlib): run the program with \
                     runtime \"python\". To enable it: start the server with --python-data, or for the Python \
                     package's own engine, pip install 'ptc-engine[data]'",
                )),
            },
        }
    }

    /// The fuel an execution starts with: its limit, or unlimited; `None` without metering.
    pub(crate) fn fuel(&self, limits: &Limits) -> Option<u64> {
        self.fuel.then(|| limits.fuel.unwrap_or(u64::MAX))
    }

    /// The tool exchange of one execution, its results held within a quarter of its memory
    /// limit and charged to `tenant`.
    pub(crate) fn exchange(&self, limits: &Limits, tenant: Option<&str>) -> Arc<Exchange> {
        let exchange = Exchange::new(
            self.paused.clone(),
            self.ceilings.max_tool_result_bytes,
            limits.max_memory_bytes / 4,
            self.shares.memory_claim(tenant),
        );
        Arc::new(match &self.observed {
            Some(shapes) => exchange.observed_by(shapes.clone(), tenant),
            None => exchange,
        })
    }

    /// A store for one instance: WASI with captured output (and `/mnt/data` if given), the
    /// memory limiter, fuel, and the tool broker with its channels.
    pub(crate) fn new_store(&self, spec: StoreSpec<'_>) -> Result<(Store<HostState>, HostSide)> {
        let runtime = spec.runtime;
        let (state, host) = self.host_state(spec, true)?;
        Ok((self.store_with(state, runtime, host.fuel)?, host))
    }

    fn store_with(&self, state: HostState, runtime: Runtime, fuel: Option<u64>) -> Result<Store<HostState>> {
        let mut store = Store::new(self.wasmtime_for(runtime), state);
        arm(&mut store, fuel)?;
        Ok(store)
    }

    /// [`Stores::new_store`] with the instance already made when a warm one is ready
    /// (`warm.rs`); `None`: the caller instantiates.
    pub(crate) fn new_instance(&self, spec: StoreSpec<'_>) -> Result<(Store<HostState>, Option<Guest>, HostSide)> {
        let (runtime, max_memory) = (spec.runtime, spec.limits.max_memory_bytes);
        let (mut state, mut host) = self.host_state(spec, true)?;
        let warm = if runtime == Runtime::Python { self.warm.take() } else { None };
        let Some(mut warm) = warm else {
            return Ok((self.store_with(state, runtime, host.fuel)?, None, host));
        };
        // The snapshot's memory was sized at instantiation, under the ceiling; a lower limit
        // is refused the way instantiating under it would refuse it.
        let initial = warm.store.data().limiter.peak;
        if initial > max_memory {
            self.warm.put(warm);
            return Ok((self.store_with(state, runtime, host.fuel)?, None, host));
        }
        state.limiter.peak = initial;
        host.ahead = warm.ahead;
        *warm.store.data_mut() = state;
        arm(&mut warm.store, host.fuel)?;
        Ok((warm.store, Some(warm.guest), host))
    }

    /// One warm instance: the component instantiated in a store with a placeholder state, and
    /// the pages programs touch mapped ahead while `idle` says so (`Hot::prepare`).
    pub(crate) async fn make_warm(&self, idle: impl Fn() -> bool + Send + 'static) -> Result<Warm> {
        let (state, host) = self.placeholder_state(Runtime::Python)?;
        let mut store = self.store_with(state, Runtime::Python, host.fuel)?;
        let guest = Pre::Component(self.pre.clone(), Runtime::Python)
            .instantiate(&mut store)
            .await
            .map_err(|e| Error::engine("instantiating", e))?;
        if !self.hot.known() || !idle() {
            return Ok(Warm { store, guest, ahead: Ahead::None });
        }
        let hot = self.hot.clone();
        tokio::task::spawn_blocking(move || {
            let ahead = hot.prepare(&mut store, &guest, idle);
            Warm { store, guest, ahead }
        })
        .await
        .map_err(|e| Error::engine("preparing a warm instance", e))
    }

    /// `runtime`'s memory as a fresh instance has it (`hibernation/`), read once.
    pub(crate) async fn image(&self, runtime: Runtime) -> Result<Arc<Image>> {
        let image = match runtime.instances() {
            Runtime::Python => self.image.get_or_try_init(|| self.component_image(runtime, self.build)).await?,
            Runtime::Javascript | Runtime::Typescript => {
                self.javascript_image
                    .get_or_try_init(|| {
                        self.component_image(Runtime::Javascript, *ptc_runtime_js_wasm::COMPONENT_SHA256)
                    })
                    .await?
            }
            Runtime::PythonData => {
                self.data_image
                    .get_or_try_init(|| async {
                        // Hashed in an instance of its own, whose 130 MiB of mapped pages go with it;
                        // the one kept then maps only what freezes and thaws read.
                        let (store, memory) = self.fresh_data().await?;
                        let version = *ptc_runtime_python_data::RUNTIME_DIGEST;
                        let build = tokio::task::spawn_blocking(move || Image::digest(&store, memory, &version))
                            .await
                            .map_err(|e| Error::engine("hashing the python-data snapshot", e))?;
                        let (store, memory) = self.fresh_data().await?;
                        Ok::<_, Error>(Arc::new(Image::data(store, memory, build)))
                    })
                    .await?
            }
        };
        Ok(image.clone())
    }

    /// The memory of a fresh instance of `runtime`'s component (built from bytes whose SHA-256
    /// is `build`), and the WASI handles priming another takes.
    async fn component_image(&self, runtime: Runtime, build: [u8; 32]) -> Result<Arc<Image>> {
        let (mut store, guest) = self.fresh_component(runtime).await?;
        let Guest::Component(_, instance, _) = guest else { unreachable!("a component's pre makes its instances") };
        let image = Image::of(&mut store, instance, build, runtime);
        // What a primed instance holds, counted in another (priming writes).
        let (mut store, guest) = self.fresh_component(runtime).await?;
        let image = image
            .primed(&mut store, &guest)
            .await
            .map_err(|e| Error::engine("priming an instance of the component", e))?;
        Ok(Arc::new(image))
    }

    /// A fresh instance of `runtime`'s component, in a store with a placeholder state.
    async fn fresh_component(&self, runtime: Runtime) -> Result<(Store<HostState>, Guest)> {
        let pre = self.pre(runtime).await?;
        let (state, host) = self.placeholder_state(runtime)?;
        let mut store = self.store_with(state, runtime, host.fuel)?;
        let guest = pre.instantiate(&mut store).await.map_err(|e| Error::engine("instantiating", e))?;
        Ok((store, guest))
    }

    /// A fresh instance of the data runtime, in a store with a placeholder state, and its
    /// memory.
    async fn fresh_data(&self) -> Result<(Store<HostState>, wasmtime::Memory)> {
        let data = self.pre(Runtime::PythonData).await?;
        let (state, host) = self.placeholder_state(Runtime::PythonData)?;
        let mut store = self.store_with(state, Runtime::PythonData, host.fuel)?;
        let Guest::Data(instance) =
            data.instantiate(&mut store).await.map_err(|e| Error::engine("instantiating python-data", e))?
        else {
            unreachable!("the data runtime's pre makes its instances")
        };
        Ok((store, instance.memory()))
    }

    /// A host state that stands in for an execution's while its own is elsewhere: in a store
    /// about to be dropped, say. It is not an execution (not live, charged nothing).
    pub(crate) fn placeholder(&self) -> Result<HostState> {
        Ok(self.placeholder_state(Runtime::Python)?.0)
    }

    /// A placeholder state of `runtime`, with the widest limits, and its host side.
    fn placeholder_state(&self, runtime: Runtime) -> Result<(HostState, HostSide)> {
        let limits = Limits::default().with_max_memory_bytes(self.ceilings.max_memory_bytes);
        let spec = StoreSpec {
            limits: &limits,
            schemas: None,
            data_dir: None,
            tenant: None,
            runtime,
            journal: None,
            monotonic_from: 0,
            running: None,
        };
        self.host_state(spec, false)
    }

    /// A store of `runtime`, with no instance yet, for `state`.
    pub(crate) fn bare_store(&self, state: HostState, runtime: Runtime, fuel: Option<u64>) -> Result<Store<HostState>> {
        self.store_with(state, runtime, fuel)
    }

    /// Moves `store`'s state into a warm instance's store, which takes its place; `None`:
    /// none is ready, and nothing changed.
    pub(crate) fn move_to_warm(&self, store: &mut Store<HostState>, fuel: Option<u64>) -> Result<Option<Guest>> {
        let Some(mut warm) = self.warm.take() else { return Ok(None) };
        std::mem::swap(store.data_mut(), warm.store.data_mut());
        // The warm store now holds the execution's state; the one it replaces, the placeholder.
        drop(std::mem::replace(store, warm.store));
        arm(store, fuel)?;
        Ok(Some(warm.guest))
    }

    fn wasmtime_for(&self, runtime: Runtime) -> &wasmtime::Engine {
        self.data_runtime(runtime).map_or(&self.wasmtime, |data| &data.engine)
    }

    /// The data runtime, when `runtime` is it and it is prepared (`pre` prepared it before any
    /// store of it is made); `None`: the component.
    fn data_runtime(&self, runtime: Runtime) -> Option<&Arc<DataRuntime>> {
        self.data.as_ref().and_then(Data::get).filter(|_| runtime == Runtime::PythonData)
    }

    /// The host state of one instance and the host side of its channels. `live`: it counts
    /// as a live instance (a warm instance's placeholder does not).
    fn host_state(&self, spec: StoreSpec<'_>, live: bool) -> Result<(HostState, HostSide)> {
        let StoreSpec { limits, schemas, data_dir, tenant, runtime, journal, monotonic_from, running } = spec;
        let schemas = schemas.unwrap_or_else(|| Arc::new(Schemas::none()));
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let exchange = self.exchange(limits, tenant);
        let output = Output::new(limits.max_output_bytes, events_tx.clone());

        let (wiring, wasi, monotonic) = match self.data_runtime(runtime) {
            // Never journaled (python-data's snapshots differ from server to server).
            Some(data) => {
                let (wiring, wasi, clock) = Wiring::data(data.artifacts(), &output, data_dir, monotonic_from)?;
                (wiring, wasi, Some(clock))
            }
            None => Wiring::component(&output, data_dir, journal, monotonic_from)?,
        };
        let (claim, run_slot) = self.shares.claim(tenant);
        let limiter = Limiter::new(limits.max_memory_bytes, claim);
        let mut broker =
            Broker::new(exchange.clone(), events_tx.clone(), output.clone(), run_slot, schemas, limits, &self.ceilings);
        broker.journal = journal.cloned();
        let (net, trace) = match running {
            Some(Running { net, hibernate_after, identity: (suffix, need_approval), trace }) => {
                broker.hibernate_after = hibernate_after;
                broker.parked = Some(self.parked.clone());
                broker.identify(suffix, need_approval);
                (net, trace)
            }
            None => (NetSide::new(None, None), None),
        };
        let state = HostState::new(Parts {
            wasi,
            limiter,
            broker,
            live: live.then(|| self.live.clone()),
            preopened: data_dir.is_some(),
            monotonic,
            net,
            trace,
            wiring,
        });
        let fuel = self.fuel(limits);
        Ok((state, HostSide { events: events_tx, events_rx, exchange, output, fuel, ahead: Ahead::None }))
    }
}

/// Sets what a store needs before the guest runs in it: its epoch deadline and callback,
/// its memory limiter, and its fuel.
fn arm(store: &mut Store<HostState>, fuel: Option<u64>) -> Result<()> {
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(epoch_callback);
    if let Some(fuel) = fuel {
        store.set_fuel(fuel).map_err(|e| Error::engine("setting fuel", e))?;
        store.fuel_async_yield_interval(Some(1_000_000)).map_err(|e| Error::engine("setting fuel", e))?;
    }
    Ok(())
}

/// At every epoch tick: stream what was printed, and yield so other executions (and this one's
/// deadline and cancellation) get the thread; if other executions of the tenant wait for a run
/// slot, hand this one's to the next and queue again.
fn epoch_callback(ctx: wasmtime::StoreContextMut<'_, HostState>) -> wasmtime::Result<wasmtime::UpdateDeadline> {
    let data = ctx.data();
    data.output().flush();
    Ok(match data.broker.run_slot.requeue() {
        Some(requeue) => wasmtime::UpdateDeadline::YieldCustom(1, requeue),
        None => wasmtime::UpdateDeadline::Yield(1),
    })
}
