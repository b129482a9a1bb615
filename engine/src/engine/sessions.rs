//! The engine's live sessions: opening one (restoring a snapshot into it), the task that
//! serves it, and an execution in it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, mpsc};
use wasmtime::Store;

use super::{Engine, new_id};
use crate::api::config::Limits;
use crate::api::error::{Error, ErrorKind, Result};
use crate::api::request::{ExecutionRequest, Runtime, check_tools_size};
use crate::calls::approval::NeedApproval;
use crate::instance::broker::Next;
use crate::instance::guest::Guest;
use crate::instance::host::HostState;
use crate::instance::tool_lists::{self, GuestTools, wit_tools};
use crate::net::NetSide;
use crate::pages;
use crate::run::execution::{Control, Execution};
use crate::run::javascript;
use crate::run::job::{Clock, Job, Sides, Start};
use crate::run::session::{self, Restored, Session, SessionCore, SessionRequest};
use crate::run::sleep::Hibernation;
use crate::run::stores::StoreSpec;
use crate::run::trace::{self, Trace};

impl Engine {
    /// Opens a live session (see [`Session`]): instantiates the sandbox and, with
    /// [`SessionRequest::restore`], rebuilds a snapshot's state in it. The session holds an
    /// execution slot (see [`crate::api::config::WhenBusy`]) and its memory until it ends.
    pub async fn open_session(&self, request: SessionRequest) -> Result<(Session, Restored)> {
        let inner = &self.inner;
        let limits = self.session_limits(&request)?;
        self.check_images(request.tenant.as_deref())?;
        let pre = inner.stores.pre(request.runtime).await?;
        let permit = self.acquire().await?;
        let (mut store, warm, host) = inner.stores.new_instance(session_spec(&request, &limits))?;
        let shared = SessionCore::new(new_id().into(), request.tenant.clone(), host.output);
        let budget = session::Budget { timeout: limits.timeout, fuel: inner.stores.fuel(&limits) };
        let sandbox = match warm {
            Some(sandbox) => {
                self.warm_up();
                sandbox
            }
            None => {
                session::guest_call(&mut store, budget, &inner.shutdown, "instantiating", |store| {
                    Box::pin(async move { pre.instantiate(store).await })
                })
                .await?
            }
        };
        let mut restored = Restored::default();
        if let Some(data) = &request.restore {
            let sandbox = &sandbox;
            // A JavaScript session's snapshot is its memory: put back first, then the guest
            // names what it holds.
            let data: &[u8] = match request.runtime.instances() {
                Runtime::Javascript => {
                    self.restore_memory(&mut store, sandbox, data).await?;
                    &[]
                }
                _ => data,
            };
            let r = session::guest_call(&mut store, budget, &inner.shutdown, "restoring the snapshot", |store| {
                Box::pin(async move { sandbox.restore(store, data).await })
            })
            .await?
            .map_err(|e| Error::invalid(format!("the snapshot could not be restored: {e}")))?;
            restored.kept = r.kept;
            restored.dropped =
                r.dropped.into_iter().map(|d| session::Dropped { name: d.name, reason: d.reason }).collect();
        }
        let sealing =
            self.sealing(request.keeper.as_ref(), request.tenant.as_ref(), &shared.id, Instant::now(), budget.fuel);
        let slot = match inner.config.hibernate_after {
            Some(after) => (None, Some((self.hibernation(Some(permit), sealing), after))),
            None => (Some(permit), None),
        };
        let session = self.serve_session(&request, limits, shared, budget, store, Start::Fresh(Some(sandbox)), slot);
        Ok((session, restored))
    }

    /// Writes a JavaScript session's snapshot (its memory) into `sandbox`, a fresh instance,
    /// charging the memory it grows to as a thaw does.
    async fn restore_memory(&self, store: &mut Store<HostState>, sandbox: &Guest, data: &[u8]) -> Result<()> {
        let refused = |why: String| Error::invalid(format!("the snapshot could not be restored: {why}"));
        let frozen = pages::snapshot::decode(data, ptc_runtime_js_wasm::COMPONENT_SHA256).map_err(refused)?;
        let image = self.inner.stores.image(Runtime::Javascript).await?;
        let grown = frozen.memory_len().saturating_sub(image.memory_len()) as u64;
        store.data_mut().limiter.claim.grow(grown).map_err(|why| Error::new(ErrorKind::Busy, why))?;
        pages::thaw(store, sandbox, &image, frozen).await.map_err(|e| refused(format!("{e:#}")))
    }

    /// The limits of a session `request` opens, once the engine takes sessions and they and
    /// its idle timeout are within bounds.
    pub(super) fn session_limits(&self, request: &SessionRequest) -> Result<Limits> {
        let inner = &self.inner;
        self.check_accepting()?;
        let limits = request.limits.clone().unwrap_or_else(|| inner.config.default_limits.clone());
        inner.config.ceilings.check(&limits, inner.config.fuel)?;
        if request.idle_timeout.is_zero() {
            return Err(Error::invalid("idle_timeout must be at least 1 ms"));
        }
        Ok(limits)
    }

    /// Starts a session's task: `first` is its instance or its hibernated memory; `slot`, its
    /// execution slot, or the hibernation that holds it (with how long it idles first).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn serve_session(
        &self,
        request: &SessionRequest,
        limits: Limits,
        shared: Arc<SessionCore>,
        budget: session::Budget,
        store: Store<HostState>,
        first: Start,
        (permit, hibernation): (Option<OwnedSemaphorePermit>, Option<(Hibernation, Duration)>),
    ) -> Session {
        let inner = &self.inner;
        let (tx, commands) = mpsc::unbounded_channel();
        let serve = session::Serve {
            shared: shared.clone(),
            commands,
            idle_timeout: request.idle_timeout,
            budget,
            closing: inner.closing.clone(),
            shutdown: inner.shutdown.clone(),
            _permit: permit,
            hibernation,
            stores: inner.stores.clone(),
        };
        let span = tracing::info_span!("session", id = %shared.id);
        inner.drivers.spawn(tracing::Instrument::instrument(session::serve(serve, store, first), span));
        session::handle(shared, tx, limits, request.runtime)
    }

    /// Runs a program in a live session, with the globals the session's earlier programs left.
    /// `request.tenant` and `data_dir` are the session's (the request's are ignored), and so
    /// is the memory limit; the other limits are the request's, or the session's defaults.
    pub async fn execute_in(&self, session: &Session, request: ExecutionRequest) -> Result<Execution> {
        let inner = &self.inner;
        self.check_accepting()?;
        let mut limits = request.limits.clone().unwrap_or_else(|| session.limits().clone());
        limits.max_memory_bytes = session.limits().max_memory_bytes;
        inner.config.ceilings.check(&limits, inner.config.fuel)?;
        request.check_program_size(&inner.config.ceilings)?;
        let runtime = program_runtime(session, request.runtime)?;
        if request.journal.is_some() {
            return Err(Error::invalid(
                "an execution in a live session cannot be journaled: it depends on what the session's earlier programs left",
            ));
        }
        // The same tools as the session's last program: checked then, and held by its instance.
        let fingerprint = tool_lists::fingerprint(&request.tools, self.result_shapes_version(session.tenant()));
        let last = &session.core().last_tools;
        let (schemas, list) = match last.same(fingerprint) {
            Some(same) => same,
            None => {
                check_tools_size(&request.tools, &inner.config.ceilings)?;
                let schemas = inner.schemas.compiled(session.tenant(), &request.tools).await?;
                (schemas.clone(), last.keep(fingerprint, &schemas))
            }
        };
        session.claim()?;
        let started = Instant::now();
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let exchange = inner.stores.exchange(&limits, session.tenant());
        let cancel = session.cancel_token();
        let fuel = inner.stores.fuel(&limits);
        let output = session.output();
        let need_approval = NeedApproval::of(&request.tools);
        let id: Arc<str> = request.id.clone().unwrap_or_else(new_id).into();
        let run = trace::Run { id: &id, runtime: request.runtime, tenant: session.tenant(), how: "session" };
        let trace = Trace::start(inner.config.tracer.as_ref(), request.trace_parent.as_ref(), run);
        let code = javascript::program(runtime, request.code, &request.tools, true);
        let (given, observed, tenant) =
            (request.tools, inner.stores.observed.clone(), session.tenant().map(str::to_string));
        let make = move || wit_tools(&given, observed.as_deref(), tenant.as_deref());
        let tools = GuestTools::Numbered { list, make: Box::new(make) };
        let sides = Sides { fuel, output: output.clone(), events: events_tx.clone() };
        // Unused (the session's instance runs the program), but the session's own runtime's.
        let pre = inner.stores.pre(session.runtime()).await?;
        let job =
            Job::new(pre, code, tools, Clock::from(started, limits.timeout), sides, &inner.shutdown, &inner.running)
                .cancelled_by(cancel.clone());
        let ceilings = inner.config.ceilings.clone();
        let install_exchange = exchange.clone();
        let (install_id, control_schemas) = (id.clone(), schemas.clone());
        let net = NetSide::new(request.network.clone(), Some(tokio::time::Instant::from_std(started + limits.timeout)));
        let parent = trace.as_ref().map(|t| t.parent());
        let install = move |store: &mut Store<HostState>| {
            output.reset(limits.max_output_bytes, events_tx.clone());
            store.data_mut().net = net;
            store.data_mut().trace = parent;
            let next = Next { id: &install_id, schemas, need_approval, limits: &limits, ceilings: &ceilings };
            store.data_mut().broker.reset(install_exchange, events_tx, next);
            store.set_epoch_deadline(1);
            if let Some(fuel) = fuel {
                let _ = store.set_fuel(fuel);
            }
        };
        session.send(session::Command::Execute(Box::new(job), Box::new(install)))?;
        let control = Control { id, exchange, cancel, journal: None, schemas: control_schemas, trace };
        Ok(Execution::new(control, events_rx))
    }
}

/// What the store of a session `request` opens is made for.
pub(super) fn session_spec<'a>(request: &'a SessionRequest, limits: &'a Limits) -> StoreSpec<'a> {
    StoreSpec {
        limits,
        schemas: None,
        data_dir: request.data_dir.as_deref(),
        tenant: request.tenant.as_deref(),
        runtime: request.runtime,
        journal: None,
        monotonic_from: 0,
        running: None,
    }
}

/// The language a session's program is in: its request's when the session's instance runs it
/// (TypeScript in a JavaScript session, or JavaScript in a TypeScript one), else the
/// session's own (a request that names none says Python). A JavaScript or TypeScript program
/// for a Python session is refused.
fn program_runtime(session: &Session, asked: Runtime) -> Result<Runtime> {
    let own = session.runtime();
    if asked.instances() == own.instances() {
        return Ok(asked);
    }
    if asked.instances() == Runtime::Javascript {
        return Err(Error::invalid(format!(
            "this session runs {} programs, not {}: open a session with runtime {:?} for them",
            own.as_str(),
            asked.as_str(),
            asked.as_str()
        )));
    }
    Ok(own)
}
