//! Thawing from sealed images: an execution ([`Engine::thaw`]) or a live session
//! ([`Engine::thaw_session`]) that hibernated here or on another engine sharing the seal key.
//! Both open the image into a store without an instance, charged as the hibernation left it
//! (`asleep_store`), and then run as a thawed execution or serve as a session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::Engine;
use super::sessions::session_spec;
use crate::api::error::{Error, ErrorKind, Result};
use crate::api::request::{ExecutionRequest, Runtime};
use crate::calls::approval::NeedApproval;
use crate::instance::broker::Progress;
use crate::instance::host::HostState;
use crate::instance::tool_lists::{GuestTools, wit_tools};
use crate::net::NetSide;
use crate::pages::{Binding, Image, sealed};
use crate::run::execution::{Control, Execution};
use crate::run::job::{Clock, Job, Sides, Start, drive};
use crate::run::session::{self, Session, SessionCore, SessionRequest};
use crate::run::sleep::Asleep;
use crate::run::stores::{HostSide, Running, StoreSpec};
use crate::run::trace::{self, Trace};
use crate::run::warm::Ahead;

/// What a sealed image is of, as a refusal names it.
#[derive(Clone, Copy)]
enum Sealed {
    Execution,
    Session,
}

/// A sealed image opened into a store without an instance.
struct Opened {
    /// What the image holds besides its pages (which are in `asleep`).
    host: sealed::Host,
    round: u32,
    store: Store<HostState>,
    side: HostSide,
    asleep: Asleep,
}

impl Engine {
    /// Thaws execution `id` from its sealed image: what its [`crate::api::keeper::Keeper`] was given when
    /// it hibernated, here or on another engine with the same component and
    /// [`crate::api::config::EngineConfig::seal_key`]. It goes on exactly where it stopped, waiting for the
    /// same tool calls, and the returned [`Execution`] (with the same id) takes their results;
    /// nothing is run again. `request` gives what the image does not hold: the tools, the
    /// limits (its timeout should be what remains of the first deadline), the tenant (the
    /// image's own), `/mnt/data`, and a keeper for its next hibernation; its code is not used.
    /// An image that is refused (altered or sealed under another key, another tenant's,
    /// another build's, too large) is an [`ErrorKind::InvalidRequest`] saying why.
    pub async fn thaw(&self, id: &str, image: &[u8], request: ExecutionRequest) -> Result<Execution> {
        let inner = &self.inner;
        self.check_accepting()?;
        let limits = request.limits.clone().unwrap_or_else(|| inner.config.default_limits.clone());
        inner.config.ceilings.check(&limits, inner.config.fuel)?;
        request.check_size(&inner.config.ceilings)?;
        if request.journal.is_some() {
            return Err(Error::invalid("a thawed execution is not journaled: its image holds all it had done"));
        }
        let pre = inner.stores.pre(request.runtime).await?;
        let schemas = inner.schemas.compiled(request.tenant.as_deref(), &request.tools).await?;
        let spec = StoreSpec {
            limits: &limits,
            schemas: Some(schemas.clone()),
            data_dir: request.data_dir.as_deref(),
            tenant: request.tenant.as_deref(),
            runtime: request.runtime,
            journal: None,
            monotonic_from: 0,
            running: None,
        };
        let now = Instant::now();
        let deadline = tokio::time::Instant::from_std(now + limits.timeout);
        // What the image says of the run: the requests it made and how its calls are named.
        let run = trace::Run { id, runtime: request.runtime, tenant: request.tenant.as_deref(), how: "thaw" };
        let trace = Trace::start(inner.config.tracer.as_ref(), request.trace_parent.as_ref(), run);
        let running = |h: &sealed::Host| Running {
            net: NetSide::new(request.network.clone(), Some(deadline)).made_before(h.requests),
            hibernate_after: request.hibernate_after.or(inner.config.hibernate_after),
            identity: (h.suffix.clone(), NeedApproval::of(&request.tools)),
            trace: trace.as_ref().map(|t| t.parent()),
        };
        let opened = self.asleep_store(Sealed::Execution, id, image, spec, Some(running)).await;
        let Opened { host: h, round, mut store, side, asleep } = opened.inspect_err(|e| {
            if let Some(trace) = &trace {
                trace.refused(e.kind().as_str());
            }
        })?;
        let answered: Vec<String> = h.log.iter().filter(|r| r.outcome.is_some()).map(|r| r.id.clone()).collect();
        side.exchange.restore(h.exchange, answered);
        side.output.restore(h.stdout, h.stderr, h.truncated);
        store.data_mut().broker.restore(Progress {
            rounds: h.rounds,
            calls: h.calls,
            log: h.log,
            log_room: h.log_room as usize,
            timer: h.timer_ms.map(Duration::from_millis),
        });
        let started = now.checked_sub(Duration::from_millis(h.elapsed_ms)).unwrap_or(now);
        let id: Arc<str> = id.into();
        let sealing = self.sealing(request.keeper.as_ref(), request.tenant.as_ref(), &id, started, h.fuel_initial);
        let tools =
            GuestTools::Sent(wit_tools(&request.tools, inner.stores.observed.as_deref(), request.tenant.as_deref()));
        let sides = Sides { fuel: h.fuel_initial, output: side.output, events: side.events };
        let clock = Clock { started, deadline, timeout: limits.timeout };
        let job = Job::new(pre, String::new(), tools, clock, sides, &inner.shutdown, &inner.running)
            .holding(None, Some(self.hibernation(None, sealing).traced(trace.clone())))
            // Its pages are the image's, which the thaw writes: none to copy ahead or learn from.
            .refilling((request.runtime == Runtime::Python).then(|| self.refill(Ahead::Written)));
        let cancel = job.cancel.clone();
        let span = tracing::info_span!("execution", id = %id, session = request.session_id.as_deref().unwrap_or(""));
        tracing::debug!(parent: &span, round, bytes = image.len(), "thawing a sealed image");
        inner.drivers.spawn(tracing::Instrument::instrument(drive(job, store, Start::Asleep(asleep)), span));
        let control = Control { id, exchange: side.exchange, cancel, journal: None, schemas, trace };
        Ok(Execution::new(control, side.events_rx))
    }

    /// Thaws live session `id` from its sealed image: what its [`crate::api::keeper::Keeper`]
    /// ([`SessionRequest::keeper`]) was given when it last hibernated, here or on another
    /// engine with the same runtime and [`crate::api::config::EngineConfig::seal_key`]. Its next program
    /// finds the globals, imports and random state its earlier ones left. `request` gives what
    /// the image does not hold: the limits, idle timeout, tenant (the image's own),
    /// `/mnt/data` and runtime (the image's own), and a keeper for its next hibernation;
    /// `restore` is not used. It hibernates again once idle for
    /// [`crate::api::config::EngineConfig::hibernate_after`] (1 s when unset: it came from an image, and
    /// goes back to one). A refused image is an [`ErrorKind::InvalidRequest`] saying why, as
    /// [`Engine::thaw`]'s.
    pub async fn thaw_session(&self, id: &str, image: &[u8], request: SessionRequest) -> Result<Session> {
        let inner = &self.inner;
        let limits = self.session_limits(&request)?;
        inner.stores.pre(request.runtime).await?;
        let spec = session_spec(&request, &limits);
        let Opened { store, side, asleep, .. } =
            self.asleep_store(Sealed::Session, id, image, spec, None::<fn(&sealed::Host) -> Running>).await?;
        let shared = SessionCore::new(id.into(), request.tenant.clone(), side.output);
        let budget = session::Budget { timeout: limits.timeout, fuel: inner.stores.fuel(&limits) };
        let sealing =
            self.sealing(request.keeper.as_ref(), request.tenant.as_ref(), &shared.id, Instant::now(), budget.fuel);
        let after = inner.config.hibernate_after.unwrap_or(Duration::from_secs(1));
        let slot = (None, Some((self.hibernation(None, sealing), after)));
        tracing::debug!(session = id, bytes = image.len(), "thawing a sealed session");
        Ok(self.serve_session(&request, limits, shared, budget, store, Start::Asleep(asleep), slot))
    }

    /// Opens the sealed image of `what` `id` into a store made from `spec` (its monotonic
    /// clock goes on from the image's reading), without an instance, and charges it as its
    /// hibernation left it charged: its pages, and the memory it had grown. `fuel`: the store
    /// gets the fuel the image had left (an execution's; a session's commands each get their
    /// own).
    async fn asleep_store(
        &self,
        what: Sealed,
        id: &str,
        image: &[u8],
        spec: StoreSpec<'_>,
        running: Option<impl FnOnce(&sealed::Host) -> Running>,
    ) -> Result<Opened> {
        let inner = &self.inner;
        let (body, memory) = self.open_sealed(what, id, image, spec.tenant, spec.runtime).await?;
        // An execution's image carries its fuel left on; a session's next program gets its own.
        let fuel = running.is_some();
        let running = running.map(|running| running(&body.host));
        let (mut store, side) =
            inner.stores.new_store(StoreSpec { monotonic_from: body.host.monotonic, running, ..spec })?;
        let left = body.host.fuel.filter(|_| fuel);
        if let Some(left) = left.filter(|_| inner.config.fuel) {
            store.set_fuel(left).map_err(|e| Error::engine("setting fuel", e))?;
        }
        let data = store.data_mut();
        data.limiter.peak = body.host.peak_memory;
        let asleep = Asleep::opened(&inner.stores, body.frozen, memory, left, &mut data.limiter.claim)
            .await
            .map_err(|why| Error::new(ErrorKind::Busy, why))?;
        data.limiter.claim.grow(asleep.grown()).map_err(|why| Error::new(ErrorKind::Busy, why))?;
        data.asleep(&inner.stores.hibernated, asleep.size());
        Ok(Opened { host: body.host, round: body.round, store, side, asleep })
    }

    /// Opens the sealed image of `what` `id`, as `tenant`'s, of `runtime`: its body, and the
    /// memory it is kept against. Refused, in words, when it is too large, altered or sealed
    /// under another key, or bound to another tenant, build or id.
    async fn open_sealed(
        &self,
        what: Sealed,
        id: &str,
        image: &[u8],
        tenant: Option<&str>,
        runtime: Runtime,
    ) -> Result<(sealed::Body, Arc<Image>)> {
        let inner = &self.inner;
        let memory = inner.stores.image(runtime).await?;
        let binding = Binding { tenant, runtime: memory.build, execution: id };
        let max = inner.config.ceilings.max_hibernated_bytes;
        let what = match what {
            Sealed::Execution => "execution",
            Sealed::Session => "session",
        };
        let body = sealed::open(&inner.seal_key, image, max, &binding)
            .map_err(|why| Error::invalid(format!("the hibernated {what} cannot be thawed: {why}")))?;
        Ok((body, memory))
    }
}
