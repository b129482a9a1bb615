//! The tool-call exchange: the one place where the guest's side and the client's side of an
//! execution meet.
//!
//! The broker (guest side, in `wait-for-tools`) [`register`](Exchange::register)s each batch
//! it hands out, takes what has arrived with [`drain`](Exchange::drain) and parks in
//! [`wait`](Exchange::wait); the client [`submit`](Exchange::submit)s answers through
//! [`crate::run::execution::Control`]. One lock covers the pending calls, the answered ids and the arrived
//! results, so "nothing arrived and nothing is pending" is one consistent observation, never
//! a race with a client answering at that moment.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::api::error::{Error, ErrorKind, Result};
use crate::api::events::{ApprovalRequest, ToolCall, ToolResult};
use crate::calls::observed::ObservedShapes;
use crate::calls::shares::MemoryClaim;

/// The least time a hibernated program should sleep: `Exchange::wait` does not hibernate one
/// whose timer is due sooner.
const MIN_SLEEP: Duration = Duration::from_millis(50);

pub(crate) struct Exchange {
    state: Mutex<State>,
    /// Signalled by `submit`; `notify_one` keeps a permit when nobody waits, so an answer that
    /// lands between `drain` and `wait` is not missed.
    arrived: Notify,
    /// Whether the guest is parked in `wait` right now.
    paused: AtomicBool,
    /// Whether the host asks the parked program off the native stack (`Waited::Unwind`).
    unwind: AtomicBool,
    /// The engine's count of parked executions.
    engine_paused: Arc<AtomicUsize>,
    /// Its tenant's count of parked executions, if it has a tenant.
    tenant_paused: Option<Arc<AtomicUsize>>,
    /// `Ceilings::max_tool_result_bytes`.
    max_result_bytes: usize,
    /// The most bytes of results that may wait for the program: a quarter of its memory limit.
    max_held_bytes: u64,
    /// Where the shapes of its results are kept, and for which tenant ("" for none).
    observer: Option<(Arc<ObservedShapes>, String)>,
}

struct State {
    /// Calls handed to the client and not answered yet, held ones among them.
    pending: HashMap<String, Pending>,
    answered: HashSet<String>,
    /// Answers the guest has not taken yet, in the order they were submitted.
    arrived: Vec<ToolResult>,
    finished: bool,
    /// Calls to tell the client about at the program's next blocking point: approved ones,
    /// and (after a replay) ones its first run had handed out.
    announce: Vec<Announce>,
    /// Bytes of `arrived`'s results, charged to `claim` (`held.rs`).
    held: u64,
    claim: MemoryClaim,
}

/// A call handed out and not answered yet.
struct Pending {
    /// The tool's label (`namespace.name`).
    name: String,
    round: u32,
    /// Held for a person's decision ([`crate::api::request::ToolDef::requires_approval`]): no result is
    /// taken for it until [`Exchange::decide`] approves it.
    held: Option<ApprovalRequest>,
}

/// A call to tell the client about (in `ToolCalls` of the program's next blocking point, so
/// that every `ToolCalls` event finds the program blocked), with the round it was made in.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Announce {
    /// To run: approved, with the input it runs with.
    Call(u32, ToolCall),
    /// To decide on.
    Ask(u32, ApprovalRequest),
}

/// What a sealed image keeps of the exchange ([`Exchange::pending_calls`]).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Kept {
    /// Calls handed out and not answered: (id, tool, round).
    pub(crate) pending: Vec<(String, String, u32)>,
    /// Calls held for a person's decision: (round, the request).
    pub(crate) held: Vec<(u32, ApprovalRequest)>,
    /// Calls not told about yet.
    pub(crate) announce: Vec<Announce>,
}

/// How [`Exchange::wait`] ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Waited {
    /// Answers that arrived (none if the wait timed out).
    Ready(Vec<ToolResult>),
    /// No answer yet, but calls to tell the client about ([`Exchange::take_announced`]).
    Announce,
    /// The host asked the program off the native stack ([`Exchange::request_unwind`]); what
    /// arrived stays here for the next wait.
    Unwind,
}

/// What [`Exchange::drain`] found.
#[derive(Debug, PartialEq)]
pub(crate) enum Drained {
    /// Answers that had arrived (at least one).
    Ready(Vec<ToolResult>),
    /// Nothing arrived yet; calls are pending.
    Waiting,
    /// Nothing arrived and nothing is pending: waiting would never end.
    Idle,
}

impl Exchange {
    /// `claim` is charged for the results that wait (at most `max_held_bytes` together: pass
    /// a quarter of the execution's memory limit).
    pub(crate) fn new(
        engine_paused: Arc<AtomicUsize>,
        max_result_bytes: usize,
        max_held_bytes: u64,
        claim: MemoryClaim,
    ) -> Self {
        let tenant_paused = claim.tenant_paused();
        let state = State {
            pending: HashMap::new(),
            answered: HashSet::new(),
            arrived: Vec::new(),
            finished: false,
            announce: Vec::new(),
            held: 0,
            claim,
        };
        Exchange {
            state: Mutex::new(state),
            arrived: Notify::new(),
            paused: AtomicBool::new(false),
            unwind: AtomicBool::new(false),
            engine_paused,
            tenant_paused,
            max_result_bytes,
            max_held_bytes,
            observer: None,
        }
    }

    /// Records the shapes of the results that arrive in `shapes`, as seen by `tenant`.
    pub(crate) fn observed_by(mut self, shapes: Arc<ObservedShapes>, tenant: Option<&str>) -> Self {
        self.observer = Some((shapes, tenant.unwrap_or_default().to_string()));
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain collections behind; keep using them.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Guest side: these calls (id, tool name), handed out in `round`, now await answers.
    pub(crate) fn register<'a>(&self, round: u32, calls: impl IntoIterator<Item = (&'a str, impl Into<String>)>) {
        let mut state = self.state();
        for (id, name) in calls {
            state.pending.insert(id.to_string(), Pending { name: name.into(), round, held: None });
        }
    }

    /// The calls awaiting answers, (id, tool, round), those of them held for a decision,
    /// (round, request), and what is still to be announced, for a sealed image.
    pub(crate) fn pending_calls(&self) -> Kept {
        let state = self.state();
        let mut calls = Vec::new();
        let mut held = Vec::new();
        for (id, p) in &state.pending {
            match &p.held {
                Some(request) => held.push((p.round, request.clone())),
                None => calls.push((id.clone(), p.name.clone(), p.round)),
            }
        }
        calls.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        held.sort_by(|a, b| (a.0, &a.1.call.id).cmp(&(b.0, &b.1.call.id)));
        Kept { pending: calls, held, announce: state.announce.clone() }
    }

    /// A thawed execution's exchange: as [`Exchange::pending_calls`] kept it, and these ids
    /// were answered.
    pub(crate) fn restore(&self, kept: Kept, answered: impl IntoIterator<Item = String>) {
        let Kept { pending, held, announce } = kept;
        let mut state = self.state();
        state.answered.extend(answered);
        state.announce = announce;
        for (id, name, round) in pending {
            state.pending.insert(id, Pending { name, round, held: None });
        }
        for (round, request) in held {
            let name = crate::api::request::label(request.call.namespace.as_deref().unwrap_or(""), &request.call.name);
            state.pending.insert(request.call.id.clone(), Pending { name, round, held: Some(request) });
        }
    }

    /// Ids of the unanswered calls handed out in rounds up to `round`, oldest round first;
    /// with `held`, those waiting for a decision, else those that may be answered.
    pub(crate) fn pending_through(&self, round: u32, held: bool) -> Vec<String> {
        let state = self.state();
        let mut ids: Vec<(u32, &String)> = state
            .pending
            .iter()
            .filter(|(_, p)| p.round <= round && p.held.is_some() == held)
            .map(|(id, p)| (p.round, id))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id.clone()).collect()
    }

    /// Guest side: what to tell the client about at this blocking point.
    pub(crate) fn take_announced(&self) -> Vec<Announce> {
        std::mem::take(&mut self.state().announce)
    }

    /// Answers pending call `r.id` (checked by the caller) with `r`.
    fn answer(&self, state: &mut State, mut r: ToolResult) {
        let Pending { name, .. } = state.pending.remove(&r.id).expect("a pending call");
        state.answered.insert(r.id.clone());
        self.check_result(&name, &mut r);
        self.hold_result(state, &name, &mut r);
        state.arrived.push(r);
    }

    /// Client side: answers for any subset of the pending calls.
    ///
    /// All or nothing: if one id is unknown, repeated in `results`, or already answered, the
    /// whole batch is refused with [`ErrorKind::InvalidToolResult`] and nothing changes. A
    /// result that claims success but is not valid JSON, or is larger than the ceiling,
    /// reaches the program as an error saying so.
    pub(crate) fn submit(&self, results: Vec<ToolResult>) -> Result<()> {
        let mut state = self.state();
        if state.finished {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        let mut batch = HashSet::new();
        for r in &results {
            let problem = if state.answered.contains(&r.id) {
                "was already answered"
            } else if !state.pending.contains_key(&r.id) {
                "is not a pending tool call of this execution"
            } else if state.pending.get(&r.id).is_some_and(|p| p.held.is_some()) {
                "waits for the user's approval: send a decision for it first, and run it only once it is approved"
            } else if !batch.insert(r.id.as_str()) {
                "is answered twice in this batch"
            } else {
                continue;
            };
            return Err(Error::new(ErrorKind::InvalidToolResult, format!("tool call id {:?} {problem}", r.id)));
        }
        for r in results {
            self.answer(&mut state, r);
        }
        drop(state);
        self.arrived.notify_one();
        Ok(())
    }

    /// Guest side: the answers that have arrived, without waiting.
    pub(crate) fn drain(&self) -> Drained {
        let mut state = self.state();
        if !state.arrived.is_empty() {
            let held = std::mem::take(&mut state.held);
            state.claim.shrink(held);
            Drained::Ready(std::mem::take(&mut state.arrived))
        } else if state.pending.is_empty() {
            Drained::Idle
        } else {
            Drained::Waiting
        }
    }

    /// Guest side: parks until answers arrive (at least one) or `timeout` passes (then none).
    /// Counts as paused meanwhile, also when the wait is abandoned (cancelled, timed out).
    /// Ends with [`Waited::Unwind`] when the host asks ([`Exchange::request_unwind`]), or
    /// once nothing has arrived for `hibernate_after`.
    pub(crate) async fn wait(&self, timeout: Option<Duration>, hibernate_after: Option<Duration>) -> Waited {
        let _paused = Paused::new(self);
        // A wait whose timer ends it before it could sleep a while is not worth a freeze and
        // a thaw (a few ms together); with `hibernate_after` 0, one due at once would loop.
        let hibernate_after = hibernate_after.filter(|after| timeout.is_none_or(|t| t > *after + MIN_SLEEP));
        let arrival = async {
            loop {
                let notified = self.arrived.notified();
                if let Drained::Ready(results) = self.drain() {
                    return Waited::Ready(results);
                }
                if !self.state().announce.is_empty() {
                    return Waited::Announce;
                }
                if self.unwind.swap(false, Ordering::AcqRel) {
                    return Waited::Unwind;
                }
                notified.await;
            }
        };
        let idle = async {
            match hibernate_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        let arrival = async {
            tokio::select! {
                waited = arrival => waited,
                () = idle => Waited::Unwind,
            }
        };
        match timeout {
            None => arrival.await,
            Some(t) => tokio::time::timeout(t, arrival).await.unwrap_or(Waited::Ready(Vec::new())),
        }
    }

    /// Host side, for a hibernated program: parks, without taking them, until answers have
    /// arrived or `timeout` passes (the program's next timer is due). Counts as paused.
    pub(crate) async fn arrival(&self, timeout: Option<Duration>) {
        let _paused = Paused::new(self);
        let arrived = async {
            loop {
                let notified = self.arrived.notified();
                // The guest's wait, after the thaw, drains before it parks: no permit is owed.
                // An approval wakes it too: the program's wait tells the client.
                if self.has_arrivals() {
                    return;
                }
                notified.await;
            }
        };
        match timeout {
            None => arrived.await,
            Some(t) => {
                let _ = tokio::time::timeout(t, arrived).await;
            }
        }
    }

    /// Answers, or calls to tell the client about, are waiting for the program.
    fn has_arrivals(&self) -> bool {
        let state = self.state();
        !state.arrived.is_empty() || !state.announce.is_empty()
    }

    /// Asks the program off the native stack at its next wait (now, if it is parked): the
    /// wait ends with [`Waited::Unwind`] instead of results. Once asked, once answered.
    pub(crate) fn request_unwind(&self) {
        self.unwind.store(true, Ordering::Release);
        self.arrived.notify_one();
    }

    /// Whether a request to unwind waits for the program's next wait (false once a wait took
    /// it: that wait answers the program `hibernate`, whatever arrives meanwhile).
    pub(crate) fn unwind_requested(&self) -> bool {
        self.unwind.load(Ordering::Acquire)
    }

    /// The execution has ended: later submissions are refused with [`ErrorKind::Finished`].
    pub(crate) fn finish(&self) {
        self.state().finished = true;
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.state().finished
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }
}

/// Marks the execution (and the engine's count, and the metric) paused while it lives.
struct Paused<'a>(&'a Exchange);

impl<'a> Paused<'a> {
    fn new(exchange: &'a Exchange) -> Self {
        exchange.engine_paused.fetch_add(1, Ordering::Relaxed);
        if let Some(count) = &exchange.tenant_paused {
            count.fetch_add(1, Ordering::Relaxed);
        }
        exchange.paused.store(true, Ordering::Relaxed);
        metrics::gauge!("ptc_paused_executions").increment(1.0);
        Paused(exchange)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.engine_paused.fetch_sub(1, Ordering::Relaxed);
        if let Some(count) = &self.0.tenant_paused {
            count.fetch_sub(1, Ordering::Relaxed);
        }
        self.0.paused.store(false, Ordering::Relaxed);
        metrics::gauge!("ptc_paused_executions").decrement(1.0);
    }
}

mod approvals;
mod held;
#[cfg(test)]
mod tests;
