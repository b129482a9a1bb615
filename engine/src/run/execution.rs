//! A running (or paused) execution: its handle, and the task that drives the instance.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;
use wasmtime::Store;

use crate::api::error::{Error, ErrorKind, HostTrap, Result};
use crate::api::events::{Completion, Decision, Event, Failure, FailureKind, OutputStream, Stats, ToolResult, Verdict};
use crate::api::journal::{Journal, JournalTake, Recorder};
use crate::calls::exchange::Exchange;
use crate::calls::schema::Schemas;
use crate::instance::bindings::{self, Outcome};
use crate::instance::guest::{Guest, Pre};
use crate::instance::host::HostState;
use crate::instance::output::Output;
use crate::instance::tool_lists::GuestTools;
use crate::run::sleep::{Asleep, Hibernation};
use crate::run::warm::Refill;

/// The client's side of one execution. Dropping it cancels the execution and frees the instance.
pub struct Execution {
    control: Control,
    events: UnboundedReceiver<Event>,
}

impl Execution {
    pub(crate) fn new(control: Control, events: UnboundedReceiver<Event>) -> Self {
        Execution { control, events }
    }

    pub fn id(&self) -> &str {
        &self.control.id
    }

    /// The next event; `None` after the final `Completed`/`Failed` has been taken.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// See [`Control::submit`].
    pub fn submit(&self, results: Vec<ToolResult>) -> Result<()> {
        self.control.submit(results)
    }

    /// See [`Control::decide`].
    pub async fn decide(&self, decisions: Vec<Decision>) -> Result<()> {
        self.control.decide(decisions).await
    }

    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// A cloneable handle for submitting results or cancelling from elsewhere.
    pub fn control(&self) -> Control {
        self.control.clone()
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        self.control.cancel();
    }
}

/// Submits results to, or cancels, an execution; does not keep it alive.
#[derive(Clone)]
pub struct Control {
    pub(crate) id: Arc<str>,
    pub(crate) exchange: Arc<Exchange>,
    pub(crate) cancel: CancellationToken,
    /// A journaled execution's recorder ([`crate::api::request::ExecutionRequest::journal`]).
    pub(crate) journal: Option<Arc<Recorder>>,
    /// The tools' compiled input schemas, which approved inputs that were changed must fit.
    pub(crate) schemas: Arc<Schemas>,
}

impl Control {
    /// Whether the program is parked waiting for tool results right now.
    pub fn is_paused(&self) -> bool {
        self.exchange.is_paused()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Hands results for any subset of the pending calls to the program.
    ///
    /// All or nothing: if one id is unknown, repeated in `results`, or already answered, the
    /// whole batch is refused with [`ErrorKind::InvalidToolResult`] and the execution carries
    /// on untouched. A result that claims success but is not valid JSON, or that is larger than
    /// `Ceilings::max_tool_result_bytes`, reaches the program as a `ToolError` saying so.
    /// After the end (or a cancel) it is refused with [`ErrorKind::Finished`].
    pub fn submit(&self, results: Vec<ToolResult>) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        self.exchange.submit(results)
    }

    /// A person's decisions on calls held for approval ([`crate::api::events::Event::ToolCalls`]'s
    /// `approvals`): approved ones go out again as calls (a `ToolCalls` event of their round),
    /// with the arguments they were approved with, which must fit the tool's schema; a denied
    /// one raises `ToolError("denied by the user: <reason>")` in the program.
    ///
    /// All or nothing, like [`Control::submit`]: a call that is not held (unknown, answered,
    /// decided already) or decided twice, or changed arguments that do not fit, refuse the whole
    /// batch with [`ErrorKind::InvalidToolResult`], saying why, and nothing changes. A journaled
    /// execution records the decisions, so a replay of it asks nobody again.
    pub async fn decide(&self, decisions: Vec<Decision>) -> Result<()> {
        let decisions = self.check_decisions(decisions).await?;
        self.apply_decisions(&decisions)
    }

    /// [`Control::decide`]'s first half: checks changed arguments against their tools' schemas
    /// (off the async workers when that is costly), and returns the decisions as they are to
    /// be applied; nothing changes yet.
    pub async fn check_decisions(&self, mut decisions: Vec<Decision>) -> Result<Vec<Decision>> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        for d in &mut decisions {
            let Verdict::Approve { input: Some(input) } = &mut d.verdict else { continue };
            // A person's edit is checked like the program's call was; a tool that takes no
            // schema still takes an object only.
            let Some((namespace, name)) = self.exchange.held_tool(&d.id) else { continue };
            let (text, _) = crate::calls::approval::take_reason(input);
            if !matches!(serde_json::from_str(&text), Ok(serde_json::Value::Object(_))) {
                return Err(Error::new(
                    ErrorKind::InvalidToolResult,
                    format!("the changed arguments of call {:?} are not a JSON object", d.id),
                ));
            }
            let checked = match self.schemas.check_inline(&namespace, &name, &text) {
                Some(checked) => checked,
                None => {
                    let (schemas, t) = (self.schemas.clone(), text.clone());
                    tokio::task::spawn_blocking(move || schemas.check(&namespace, &name, &t))
                        .await
                        .unwrap_or_else(|e| Err(format!("checking the input failed: {e}")))
                }
            };
            if let Err(problem) = checked {
                return Err(Error::new(
                    ErrorKind::InvalidToolResult,
                    format!("the changed arguments of call {:?} do not fit the tool: {problem}", d.id),
                ));
            }
            *input = text;
        }
        Ok(decisions)
    }

    /// [`Control::decide`]'s second half, for decisions [`Control::check_decisions`] returned.
    pub fn apply_decisions(&self, decisions: &[Decision]) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        self.exchange.decide(decisions)?;
        if let Some(journal) = &self.journal {
            for d in decisions {
                journal.decision(d);
            }
        }
        Ok(())
    }

    /// Ids of the calls handed out in rounds up to `round` (of [`crate::api::events::Event::ToolCalls`])
    /// that may be answered now and are not, oldest round first.
    pub fn pending_through(&self, round: u32) -> Vec<String> {
        self.exchange.pending_through(round, false)
    }

    /// Ids of the calls handed out in rounds up to `round` that wait for a person's decision
    /// ([`Control::decide`]), oldest round first.
    pub fn held_through(&self, round: u32) -> Vec<String> {
        self.exchange.pending_through(round, true)
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Asks the program off the native stack at its next wait for tools (now, if it is
    /// parked): the guest unwinds its event loop out of the instance's export, leaving its
    /// tasks in memory, and the engine re-enters it in the same instance at once. This is
    /// hibernation's first step, without the saving (`docs/hibernation.md`); nothing calls it
    /// but tests yet. A program running an event loop of its own (`asyncio.run` in its
    /// code) declines and stays parked.
    #[doc(hidden)]
    pub fn request_unwind(&self) {
        self.exchange.request_unwind();
    }

    /// Whether [`Control::request_unwind`]'s request still waits for the program's next wait
    /// for tools; once taken, that wait unwinds whatever answers arrive meanwhile.
    #[doc(hidden)]
    pub fn unwind_requested(&self) -> bool {
        self.exchange.unwind_requested()
    }

    pub fn is_finished(&self) -> bool {
        self.exchange.is_finished()
    }

    /// What a journaled execution recorded since the last take (all of it, the first time):
    /// call it at each pause and keep the entries, in order, after those of the request's
    /// [`crate::api::journal::Journal`]. `None` for an execution that is not journaled.
    pub fn take_journal(&self) -> Option<JournalTake> {
        self.journal.as_ref().map(|j| j.take())
    }
}

/// Everything the driver task needs besides the store.
pub(crate) struct Job {
    pub(crate) pre: Pre,
    pub(crate) code: String,
    pub(crate) tools: GuestTools,
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) timeout: Duration,
    pub(crate) fuel: Option<u64>,
    pub(crate) output: Output,
    pub(crate) events: UnboundedSender<Event>,
    pub(crate) cancel: CancellationToken,
    pub(crate) shutdown: CancellationToken,
    pub(crate) started: Instant,
    /// The execution slot of a fresh instance (unless `hibernation` holds it); a session
    /// holds its own.
    pub(crate) _permit: Option<OwnedSemaphorePermit>,
    /// What the program needs to hibernate, if it may.
    pub(crate) hibernation: Option<Hibernation>,
    /// Tops the engine's warm instances up once this execution has ended.
    pub(crate) refill: Option<Refill>,
    /// The engine's count of executions under way (see `Engine::fill_warm`).
    pub(crate) running: Arc<AtomicUsize>,
}

/// When a job started, when its deadline passes, and its whole timeout.
pub(crate) struct Clock {
    pub(crate) started: Instant,
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) timeout: Duration,
}

impl Clock {
    /// A job that starts now (`started`) with `timeout` ahead of it.
    pub(crate) fn from(started: Instant, timeout: Duration) -> Self {
        Clock { started, deadline: tokio::time::Instant::from_std(started + timeout), timeout }
    }
}

/// What a job's program reports through: its fuel, its output and its events.
pub(crate) struct Sides {
    pub(crate) fuel: Option<u64>,
    pub(crate) output: Output,
    pub(crate) events: UnboundedSender<Event>,
}

impl Job {
    /// The job of running `code` (none: a thawed program goes on) with `tools`, in an
    /// instance of `pre`, under the engine's `shutdown` and counted in its `running`. It
    /// holds no slot, may not hibernate, and refills no warm pool until told
    /// ([`Job::holding`], [`Job::refilling`]); its cancel token is its own.
    pub(crate) fn new(
        pre: Pre,
        code: String,
        tools: GuestTools,
        clock: Clock,
        sides: Sides,
        shutdown: &CancellationToken,
        running: &Arc<AtomicUsize>,
    ) -> Self {
        let Clock { started, deadline, timeout } = clock;
        let Sides { fuel, output, events } = sides;
        Job {
            pre,
            code,
            tools,
            deadline,
            timeout,
            fuel,
            output,
            events,
            cancel: CancellationToken::new(),
            shutdown: shutdown.clone(),
            started,
            _permit: None,
            hibernation: None,
            refill: None,
            running: running.clone(),
        }
    }

    /// Holds the execution slot `permit` (a fresh instance's) and, if it may hibernate, what
    /// it needs to.
    pub(crate) fn holding(mut self, permit: Option<OwnedSemaphorePermit>, hibernation: Option<Hibernation>) -> Self {
        self._permit = permit;
        self.hibernation = hibernation;
        self
    }

    /// Tops the engine's warm instances up with `refill` once it has ended.
    pub(crate) fn refilling(mut self, refill: Option<Refill>) -> Self {
        self.refill = refill;
        self
    }

    /// Cancelled with `cancel` (a live session's) rather than its own token.
    pub(crate) fn cancelled_by(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }
}

/// Counts one execution as under way while it lives.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Running(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

// One per execution, on the driver's stack and moved once: boxing the instance would cost an
// allocation for nothing.
#[allow(clippy::large_enum_variant)]
enum Ending {
    Returned(Outcome, Guest),
    /// A trap, classified: the kind and the message.
    Trapped(FailureKind, String),
    Timeout,
    Cancelled,
    Shutdown,
}

/// Where a run starts.
// One per execution, moved once (as `Ending`).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Start {
    /// The program's first line, in this instance (a live session's, or a warm one) or a new one.
    Fresh(Option<Guest>),
    /// Where a hibernated program stopped: it sleeps until an answer or its timer wakes it.
    Asleep(Asleep),
}

/// Runs the program to its end and sends the final event. The store is dropped on return,
/// whatever happened, which frees the instance.
pub(crate) async fn drive(mut job: Job, mut store: Store<HostState>, start: Start) {
    let (event, kept) = run(&job, &mut store, start, false).await;
    let _ = job.events.send(event);
    let refill = job.refill.take();
    if let (Some(refill), Some(guest)) = (&refill, &kept) {
        refill.learn(&mut store, guest);
    }
    // Everything the execution held goes first: its slot, and the event channel, whose end
    // tells the client there is nothing more.
    drop(kept);
    drop(store);
    drop(job);
    if let Some(refill) = refill {
        refill.run().await;
    }
}

/// Runs the program in `instance` (a live session's, with its globals kept, or a warm one) or
/// in a new instance, and returns the final event, with the instance if it can run another
/// program: it cannot after a trap, a timeout or a cancellation, which stop it mid-program.
/// `session`: the program's globals stay for the next one.
pub(crate) async fn run(
    job: &Job,
    store: &mut Store<HostState>,
    start: Start,
    session: bool,
) -> (Event, Option<Guest>) {
    let mut instantiate_time = None;
    let _running = Running::new(&job.running);
    let ending = race(job, store, start, session, &mut instantiate_time).await;
    store.data().broker.exchange.finish();
    // A replay that ended without repeating all of its first run did not repeat it.
    let ending = match (ending, store.data().broker.journal.as_ref().and_then(|j| j.divergence())) {
        (Ending::Returned(..), Some(why)) => Ending::Trapped(FailureKind::Diverged, Journal::diverged(&why)),
        (ending, _) => ending,
    };
    // A trap that is the program's doing (a C-stack overflow) printed nothing: say it on stderr,
    // where the program's own traceback would be, so every client shows it as it shows those.
    if let Ending::Trapped(FailureKind::PythonError, message) = &ending {
        job.output.write(OutputStream::Stderr, format!("{message}\n").as_bytes());
    }
    job.output.flush();
    let (event, kept) = final_event(job, store, ending, instantiate_time.unwrap_or_default());
    record_metrics(&event);
    (event, kept)
}

/// Runs the program (instantiating first without an `instance`) against the execution's
/// cancellation, the engine's shutdown and the deadline; whichever comes first ends it.
async fn race(
    job: &Job,
    store: &mut Store<HostState>,
    start: Start,
    session: bool,
    instantiate_time: &mut Option<Duration>,
) -> Ending {
    let run = async {
        let (mut sandbox, mut outcome) = match start {
            Start::Fresh(instance) => {
                store.data().broker.run_slot.acquire().await;
                let sandbox = match instance {
                    Some(sandbox) => sandbox,
                    None => {
                        let t0 = Instant::now();
                        let sandbox = job.pre.instantiate(&mut *store).await?;
                        store.data_mut().tools_held = 0;
                        if let Some(refill) = &job.refill {
                            refill.write_ahead(&mut *store, &sandbox);
                        }
                        *instantiate_time = Some(t0.elapsed());
                        sandbox
                    }
                };
                let (tools, list) = job.tools.for_instance(store.data().tools_held);
                let outcome = sandbox.execute(&mut *store, &job.code, tools.as_deref(), session).await?;
                // The guest takes the tools first: unless the runtime itself failed, it holds
                // them now (a list it refused included, which it refuses again).
                let internal =
                    matches!(&outcome, bindings::Outcome::Failed(f) if f.kind == bindings::FailureKind::Internal);
                store.data_mut().tools_held = if session && !internal { list } else { 0 };
                (sandbox, outcome)
            }
            Start::Asleep(asleep) => {
                let hibernation = job.hibernation.as_ref().expect("a thawed execution may hibernate");
                let sandbox = hibernation.wake(&mut *store, asleep).await?;
                let outcome = sandbox.resume(&mut *store).await?;
                (sandbox, outcome)
            }
        };
        // Off the stack: hibernated and thawed into another instance, or (when it may not
        // hibernate, or was asked only to unwind) re-entered in this one.
        while let Outcome::Hibernated = outcome {
            if let Some(hibernation) = &job.hibernation {
                sandbox = hibernation.sleep(&mut *store, sandbox).await?;
            }
            outcome = sandbox.resume(&mut *store).await?;
        }
        Ok((outcome, sandbox))
    };
    tokio::select! {
        biased;
        _ = job.cancel.cancelled() => Ending::Cancelled,
        _ = job.shutdown.cancelled() => Ending::Shutdown,
        _ = tokio::time::sleep_until(job.deadline) => Ending::Timeout,
        r = run => match r {
            Ok((outcome, sandbox)) => Ending::Returned(outcome, sandbox),
            Err(trap) => {
                let (kind, message) = classify(&trap);
                Ending::Trapped(kind, message)
            }
        },
    }
}

/// The execution's final event from how it ended, with what it printed, its call log and its
/// stats; and the instance, when it can run another program.
fn final_event(
    job: &Job,
    store: &mut Store<HostState>,
    ending: Ending,
    instantiate_time: Duration,
) -> (Event, Option<Guest>) {
    let mut stats = stats(job, store, instantiate_time);
    let (stdout, stderr, truncated) = job.output.snapshot();
    stats.output_truncated = truncated;
    let tool_calls = std::mem::take(&mut store.data_mut().broker.log);

    let failure = |kind: FailureKind, message: String| Failure {
        kind,
        message,
        traceback: String::new(),
        exit_code: None,
        stdout: stdout.clone(),
        stderr: stderr.clone(),
        tool_calls: tool_calls.clone(),
        stats: stats.clone(),
    };
    match ending {
        Ending::Cancelled => (Event::Failed(failure(FailureKind::Cancelled, "execution cancelled".into())), None),
        Ending::Shutdown => (Event::Failed(failure(FailureKind::Shutdown, "the server is shutting down".into())), None),
        Ending::Timeout => {
            let mut message = format!("Execution timeout after {} ms", job.timeout.as_millis());
            let held = store.data().broker.exchange.held_tools();
            if !held.is_empty() {
                message.push_str(&format!(
                    " while {} waited for the user's approval, which never came ({}); ask the user first, or run \
                     without the calls that need approval",
                    if held.len() == 1 { "a call" } else { "calls" },
                    held.join(", ")
                ));
            }
            (Event::Failed(failure(FailureKind::Timeout, message)), None)
        }
        Ending::Returned(Outcome::Completed(return_value), sandbox) => {
            (Event::Completed(Completion { stdout, stderr, return_value, tool_calls, stats }), Some(sandbox))
        }
        Ending::Returned(Outcome::Hibernated, _) => {
            // `race` re-enters a program that got off the stack until it ends.
            let message = "the program left the stack and was not re-entered".to_string();
            (Event::Failed(failure(FailureKind::Internal, message)), None)
        }
        Ending::Returned(Outcome::Failed(f), sandbox) => {
            let kind = match f.kind {
                bindings::FailureKind::PythonError => FailureKind::PythonError,
                bindings::FailureKind::Exit => FailureKind::Exit,
                bindings::FailureKind::InvalidTools => FailureKind::InvalidTools,
                bindings::FailureKind::Internal => FailureKind::Internal,
            };
            let mut failed = failure(kind, f.message);
            failed.traceback = f.traceback;
            failed.exit_code = f.exit_code;
            (Event::Failed(failed), Some(sandbox))
        }
        Ending::Trapped(kind, message) => {
            let mut failed = failure(kind, message);
            if kind == FailureKind::PythonError {
                failed.traceback = failed.message.clone();
            }
            (Event::Failed(failed), None)
        }
    }
}

/// What the execution used, but for `output_truncated`, known once its output is taken.
fn stats(job: &Job, store: &Store<HostState>, instantiate_time: Duration) -> Stats {
    let data = store.data();
    let (stdout_bytes, stderr_bytes) = job.output.sizes();
    let mut stats = Stats {
        wall_time: job.started.elapsed(),
        instantiate_time,
        round_trips: data.broker.rounds,
        tool_calls: data.broker.calls,
        fuel_consumed: None,
        peak_memory_bytes: data.limiter.peak,
        stdout_bytes,
        stderr_bytes,
        output_truncated: false,
    };
    if let Some(initial) = job.fuel {
        stats.fuel_consumed = Some(initial.saturating_sub(store.get_fuel().unwrap_or(0)));
    }
    stats
}

fn record_metrics(event: &Event) {
    let (outcome, stats) = match event {
        Event::Completed(c) => ("completed", &c.stats),
        Event::Failed(f) => {
            tracing::debug!(kind = f.kind.as_str(), message = %f.message, "execution failed");
            (f.kind.as_str(), &f.stats)
        }
        _ => return,
    };
    metrics::counter!("ptc_executions_total", "outcome" => outcome).increment(1);
    metrics::counter!("ptc_round_trips_total").increment(stats.round_trips.into());
    metrics::counter!("ptc_tool_calls_total").increment(stats.tool_calls.into());
    metrics::histogram!("ptc_execution_seconds").record(stats.wall_time.as_secs_f64());
    if !stats.instantiate_time.is_zero() {
        metrics::histogram!("ptc_instantiate_seconds").record(stats.instantiate_time.as_secs_f64());
    }
}

/// Why a trap ended the instance: the host's own reason when it trapped on purpose.
fn classify(trap: &wasmtime::Error) -> (FailureKind, String) {
    if let Some(HostTrap { kind, message }) = trap.downcast_ref::<HostTrap>() {
        return (*kind, message.clone());
    }
    if let Some(wasmtime_wasi::I32Exit(code)) = trap.downcast_ref::<wasmtime_wasi::I32Exit>() {
        // `os._exit()` in the data runtime leaves through WASI's `proc_exit`.
        return (FailureKind::Exit, format!("the program called os._exit({code}); use sys.exit() or return instead"));
    }
    if let Some(wasmtime::Trap::OutOfFuel) = trap.downcast_ref::<wasmtime::Trap>() {
        return (FailureKind::Fuel, "fuel exhausted".into());
    }
    // CPython on WASI cannot see its native stack (it guards only the shadow stack in linear
    // memory), so data nested deeper than the 1 MiB wasm stack holds (1,000-3,000 levels of
    // `json.loads` or `repr`) overflows it instead of raising RecursionError. It is still the
    // program's doing, reported as the RecursionError it would be natively. The instance is
    // gone by then, so there is no Python traceback to give.
    if let Some(wasmtime::Trap::StackOverflow) = trap.downcast_ref::<wasmtime::Trap>() {
        return (
            FailureKind::PythonError,
            "RecursionError: maximum recursion depth exceeded in native code (data nested too deeply, \
             e.g. in json.loads or repr); flatten the data or process it iteratively"
                .into(),
        );
    }
    (FailureKind::Internal, format!("sandbox trapped: {trap:#}"))
}
