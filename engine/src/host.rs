//! The store's data: WASI, the memory limiter, and the tool broker behind `wait-for-tools`.
//!
//! `wait-for-tools` is where the guest suspends: the host validates the new calls, sends the
//! valid ones to the client as one `ToolCalls` event, and awaits results on a channel. While
//! it waits, the wasm fiber is parked and the instance is just memory.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::config::Limits;
use crate::events::{Event, FailureKind, ToolCall, ToolCallRecord, ToolResult};
use crate::output::Output;
use crate::schema::Schemas;
use crate::shares::{MemoryClaim, RunSlot};

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../runtime-python-wasm/wit",
        world: "sandbox",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

use bindings::ptc::sandbox::host::{self as wit, ToolOutcome};

/// What the execution handle and the broker share: which calls await an answer.
#[derive(Default)]
pub(crate) struct CallBook {
    pub(crate) pending: HashMap<String, String>,
    pub(crate) answered: HashSet<String>,
    pub(crate) finished: bool,
}

pub(crate) struct Broker {
    pub(crate) book: Arc<Mutex<CallBook>>,
    results: UnboundedReceiver<ToolResult>,
    events: UnboundedSender<Event>,
    schemas: Schemas,
    limits: Limits,
    seen: HashSet<String>,
    pub(crate) log: Vec<ToolCallRecord>,
    index: HashMap<String, (usize, Instant)>,
    pub(crate) rounds: u32,
    pub(crate) calls: u32,
    /// Set just before the broker traps the guest, to say why.
    pub(crate) failure: Option<(FailureKind, String)>,
    paused: Arc<AtomicUsize>,
    /// This execution's own "parked right now" flag (`Control::is_paused`).
    paused_flag: Arc<std::sync::atomic::AtomicBool>,
    output: Output,
    /// Handed back while the guest is parked, taken again before it resumes.
    pub(crate) run_slot: RunSlot,
    max_input_bytes: usize,
    /// Bytes the call log may still keep (`Ceilings::max_call_log_bytes`).
    log_room: usize,
}

/// How a tool input or result too large for the call log is kept there: a JSON string.
fn log_marker(len: usize) -> String {
    format!("\"[not logged: {len} bytes, past the call log's limit]\"")
}

impl Broker {
    pub(crate) fn new(
        book: Arc<Mutex<CallBook>>,
        results: UnboundedReceiver<ToolResult>,
        events: UnboundedSender<Event>,
        schemas: Schemas,
        limits: Limits,
        paused: Arc<AtomicUsize>,
        paused_flag: Arc<std::sync::atomic::AtomicBool>,
        output: Output,
        run_slot: RunSlot,
        ceilings: &crate::config::Ceilings,
    ) -> Self {
        Broker {
            book,
            results,
            events,
            schemas,
            limits,
            seen: HashSet::new(),
            log: Vec::new(),
            index: HashMap::new(),
            rounds: 0,
            calls: 0,
            failure: None,
            paused,
            paused_flag,
            output,
            run_slot,
            max_input_bytes: ceilings.max_tool_input_bytes,
            log_room: ceilings.max_call_log_bytes,
        }
    }

    /// `text` as the call log keeps it: itself while the log has room, else a marker.
    fn loggable(&mut self, text: &str) -> String {
        if text.len() <= self.log_room {
            self.log_room -= text.len();
            text.to_string()
        } else {
            self.log_room = 0;
            log_marker(text.len())
        }
    }

    fn fail(&mut self, kind: FailureKind, message: String) -> wasmtime::Error {
        let err = wasmtime::Error::msg(message.clone());
        self.failure = Some((kind, message));
        err
    }

    fn record(&mut self, call: &wit::ToolCall, round: u32) {
        self.index.insert(call.id.clone(), (self.log.len(), Instant::now()));
        let input = self.loggable(&call.input);
        self.log.push(ToolCallRecord {
            id: call.id.clone(),
            name: call.name.clone(),
            input,
            outcome: None,
            round,
            duration: Duration::ZERO,
        });
    }

    fn settle(&mut self, id: &str, outcome: &Result<String, String>) {
        if let Some((i, started)) = self.index.remove(id) {
            let kept = match outcome {
                Ok(json) => Ok(self.loggable(json)),
                Err(message) => Err(self.loggable(message)),
            };
            self.log[i].outcome = Some(kept);
            self.log[i].duration = started.elapsed();
        }
    }

    async fn wait_for_tools(
        &mut self,
        calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<Vec<wit::ToolResult>> {
        // The guest is about to block: what it printed so far goes out first.
        self.output.flush();
        let mut immediate = Vec::new();
        let mut valid = Vec::new();
        for call in calls {
            if !self.seen.insert(call.id.clone()) {
                return Err(self.fail(FailureKind::Internal, format!("guest reused call id {:?}", call.id)));
            }
            self.calls += 1;
            if self.calls > self.limits.max_tool_calls {
                let max = self.limits.max_tool_calls;
                return Err(self.fail(FailureKind::ToolCalls, format!("exceeded maximum tool calls ({max})")));
            }
            let checked = if call.input.len() > self.max_input_bytes {
                Err(format!(
                    "the input of tool {:?} is {} bytes; the limit is {}: pass less data per call (filter it first, or split it over several calls)",
                    call.name,
                    call.input.len(),
                    self.max_input_bytes
                ))
            } else {
                self.schemas.check(&call.name, &call.input)
            };
            match checked {
                Ok(()) => valid.push(call),
                Err(message) => {
                    self.record(&call, 0);
                    let outcome = Err(message);
                    self.settle(&call.id, &outcome);
                    immediate.push(to_wit(call.id, outcome));
                }
            }
        }
        if !valid.is_empty() {
            self.rounds += 1;
            if self.rounds > self.limits.max_round_trips {
                let max = self.limits.max_round_trips;
                return Err(self.fail(FailureKind::RoundTrips, format!("Exceeded maximum round trips ({max})")));
            }
            let round = self.rounds;
            {
                let mut book = self.book.lock().unwrap();
                for call in &valid {
                    book.pending.insert(call.id.clone(), call.name.clone());
                }
            }
            for call in &valid {
                self.record(call, round);
            }
            let batch = valid
                .into_iter()
                .map(|c| ToolCall { id: c.id, name: c.name, input: c.input })
                .collect();
            let _ = self.events.send(Event::ToolCalls(batch));
        }
        if !immediate.is_empty() {
            return Ok(immediate);
        }

        // Results may have arrived while the guest was running (after an earlier wait timed
        // out): those are taken first. `submit` moves a call from `pending` into the channel
        // under the book's lock, so draining under that lock too makes "nothing outstanding"
        // a consistent observation rather than a race with a client answering right now.
        let mut ready = Vec::new();
        let nothing_outstanding = {
            let book = self.book.clone();
            let book = book.lock().unwrap();
            while let Ok(r) = self.results.try_recv() {
                ready.push(r);
            }
            ready.is_empty() && book.pending.is_empty()
        };
        if nothing_outstanding {
            return Err(self.fail(
                FailureKind::Internal,
                format!("guest waits for tool results but no call is outstanding (round {})", self.rounds),
            ));
        }
        if ready.is_empty() {
            // A parked guest holds no run slot; it queues for one again before resuming.
            self.run_slot.release();
            let paused = PausedGuard::new(self.paused.clone(), self.paused_flag.clone());
            // `None`: the wait timed out (the guest has timers to run).
            let received = match timeout_ms {
                None => Some(self.results.recv().await),
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), self.results.recv()).await.ok(),
            };
            drop(paused);
            self.run_slot.acquire().await;
            let Some(first) = received else { return Ok(Vec::new()) };
            let Some(first) = first else {
                // The execution handle is gone; the driver is about to cancel us anyway.
                return Err(self.fail(FailureKind::Cancelled, "the client went away".into()));
            };
            ready.push(first);
            while let Ok(more) = self.results.try_recv() {
                ready.push(more);
            }
        }
        let mut out = Vec::with_capacity(ready.len());
        for r in ready {
            self.settle(&r.id, &r.outcome);
            out.push(to_wit(r.id, r.outcome));
        }
        Ok(out)
    }
}

fn to_wit(id: String, outcome: Result<String, String>) -> wit::ToolResult {
    let outcome = match outcome {
        Ok(json) => ToolOutcome::Ok(json),
        Err(message) => ToolOutcome::Error(message),
    };
    wit::ToolResult { id, outcome }
}

/// Counts executions currently parked waiting for tool results (also when the wait is
/// abandoned because the execution is cancelled or times out).
struct PausedGuard(Arc<AtomicUsize>, Arc<std::sync::atomic::AtomicBool>);

impl PausedGuard {
    fn new(counter: Arc<AtomicUsize>, flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        flag.store(true, Ordering::Relaxed);
        metrics::gauge!("ptc_paused_executions").increment(1.0);
        PausedGuard(counter, flag)
    }
}

impl Drop for PausedGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        self.1.store(false, Ordering::Relaxed);
        metrics::gauge!("ptc_paused_executions").decrement(1.0);
    }
}

/// Refuses memory growth past the limit. Growth fails with a trap rather than a `MemoryError`
/// the program could catch, so a memory bomb always ends with kind `memory`.
///
/// Growth is also charged to the engine's memory budget (and the tenant's share); the initial
/// memory of an instance (`current == 0`: the snapshot, mapped copy-on-write) is not.
pub(crate) struct Limiter {
    pub(crate) max_memory: u64,
    pub(crate) peak: u64,
    pub(crate) exceeded: bool,
    pub(crate) claim: MemoryClaim,
    /// Which budget refused a growth, when one did.
    pub(crate) budget_refused: Option<String>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.max_memory {
            self.exceeded = true;
            return Err(wasmtime::Error::msg(format!(
                "memory limit of {} MiB exceeded",
                self.max_memory / (1024 * 1024)
            )));
        }
        if current > 0
            && let Err(message) = self.claim.grow(desired.saturating_sub(current) as u64)
        {
            self.budget_refused = Some(message.clone());
            return Err(wasmtime::Error::msg(message));
        }
        self.peak = self.peak.max(desired as u64);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

pub(crate) struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) broker: Broker,
    live: Arc<AtomicUsize>,
}

impl HostState {
    pub(crate) fn output(&self) -> &Output {
        &self.broker.output
    }

    pub(crate) fn new(wasi: WasiCtx, limiter: Limiter, broker: Broker, live: Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("ptc_live_instances").increment(1.0);
        HostState { wasi, table: ResourceTable::new(), limiter, broker, live }
    }
}

impl Drop for HostState {
    /// The store (and with it the instance) is gone: this is what "freed" means in tests.
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("ptc_live_instances").decrement(1.0);
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl wit::Host for HostState {
    async fn wait_for_tools(
        &mut self,
        calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<Vec<wit::ToolResult>> {
        self.broker.wait_for_tools(calls, timeout_ms).await
    }
}
