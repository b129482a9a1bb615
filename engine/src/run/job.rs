//! The task that drives an execution's instance ([`Job`], [`drive`]): from its first line
//! (or where a thawed one stopped) to its final event, racing the program against its
//! deadline, its cancellation and the engine's shutdown, and classifying how it ended.

use crate::api::error::HostTrap;
use crate::api::events::{Completion, Event, Failure, FailureKind, OutputStream, Stats};
use crate::api::journal::Journal;
use crate::api::request::Runtime;
use crate::instance::bindings::{self, Outcome};
use crate::instance::guest::{Guest, Pre};
use crate::instance::host::HostState;
use crate::instance::output::Output;
use crate::instance::tool_lists::GuestTools;
use crate::run::sleep::{Asleep, Hibernation};
use crate::run::warm::Refill;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use wasmtime::Store;

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
struct UnderWay(Arc<AtomicUsize>);

impl UnderWay {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        UnderWay(count.clone())
    }
}

impl Drop for UnderWay {
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
    let refill = job.refill.take();
    // The final event goes out before the instance's memory is given back: the task relaying
    // it was woken on this thread, where it would otherwise wait for wasmtime to reset the
    // component's 26 MB as the store drops (an in-process fresh `pass` took 2.0-2.9 ms with the
    // reset first, 0.9-1.1 ms after). What the event promises holds already: the execution no
    // longer counts as live or hibernated. Its slot goes with the store, so a new execution
    // never finds the pool's instances all taken.
    store.data_mut().ended();
    let _ = job.events.send(event);
    tokio::task::yield_now().await;
    // And the thread's CPU too: a client in this process that waits for the event by spinning
    // on this CPU (the Python package's reader yields at each turn) takes it now, not after the
    // reset. An in-process fresh `pass` 5 ms apart took 853-946 µs without, 602-689 µs with
    // (`benches/python/handoffs.py`, 2026-12-08).
    std::thread::yield_now();
    // The pages its program wrote are read after that too, when it is the one in
    // `LEARN_EVERY` to learn from (`warm.rs`): the page map of 24 MB takes about 50 µs.
    if let (Some(refill), Some(guest)) = (&refill, &kept) {
        refill.learn(&mut store, guest);
    }
    drop(kept);
    // Then the rest of what the execution held: the store, its slot, and the event channel,
    // whose end tells the client there is nothing more.
    drop(store);
    drop(job);
    if let Some(refill) = refill {
        // And before the refill, so that the client does not wait for the next instance.
        tokio::task::yield_now().await;
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
    let _running = UnderWay::new(&job.running);
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
                        *instantiate_time = Some(t0.elapsed());
                        sandbox
                    }
                };
                // An instance without every page programs write copied ahead (a new one, or a
                // warm one the engine had no idle time to finish) gets the rest here (`warm.rs`,
                // `Ahead`).
                if let Some(refill) = &job.refill {
                    refill.write_ahead(&mut *store, &sandbox);
                }
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
                let (kind, message) = classify(&trap, job.pre.runtime());
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
                bindings::FailureKind::ProgramError => FailureKind::PythonError,
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
fn classify(trap: &wasmtime::Error, runtime: Runtime) -> (FailureKind, String) {
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
    // QuickJS checks its own stack (256 KiB, `runtime-js-wasm/guest`), but not in the C code
    // that recurses on data (JSON.parse and JSON.stringify of data nested ~1,400 deep, `eval` of
    // nested literals): the same overflow, in JavaScript's words.
    if let Some(wasmtime::Trap::StackOverflow) = trap.downcast_ref::<wasmtime::Trap>() {
        let message = match runtime {
            Runtime::Javascript | Runtime::Typescript => {
                "RangeError: Maximum call stack size exceeded in native code (data nested too deeply, e.g. in \
                 JSON.parse, JSON.stringify or eval); flatten the data or process it iteratively"
            }
            _ => {
                "RecursionError: maximum recursion depth exceeded in native code (data nested too deeply, e.g. in \
                 json.loads or repr); flatten the data or process it iteratively"
            }
        };
        return (FailureKind::PythonError, message.into());
    }
    (FailureKind::Internal, format!("sandbox trapped: {trap:#}"))
}
