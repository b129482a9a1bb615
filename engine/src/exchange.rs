//! The tool-call exchange: the one place where the guest's side and the client's side of an
//! execution meet.
//!
//! The broker (guest side, in `wait-for-tools`) [`register`](Exchange::register)s each batch
//! it hands out, takes what has arrived with [`drain`](Exchange::drain) and parks in
//! [`wait`](Exchange::wait); the client [`submit`](Exchange::submit)s answers through
//! [`crate::Control`]. One lock covers the pending calls, the answered ids and the arrived
//! results, so "nothing arrived and nothing is pending" is one consistent observation, never
//! a race with a client answering at that moment.
//!
//! **Held results.** Answers that arrive while the program runs wait here until it blocks
//! again: 120 results of 8 MB for one execution with a 64 MiB memory limit once took a server
//! +821 MiB. Results waiting may hold at most a quarter of the execution's memory limit (the
//! program receives them all at once when it next waits, into that memory, and decodes each:
//! half the limit in results once left a 64 MiB program short of memory) and are charged to the
//! memory budget (and the tenant's share) until it takes them; one that does not fit reaches
//! the program as a `ToolError` saying so, and its bytes are dropped at once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::MIB;
use crate::error::{Error, ErrorKind, Result};
use crate::events::{ApprovalRequest, Decision, ToolCall, ToolResult, Verdict};
use crate::observed::ObservedShapes;
use crate::shares::MemoryClaim;

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
    /// Bytes of `arrived`'s results, charged to `claim`.
    held: u64,
    claim: MemoryClaim,
}

/// A call handed out and not answered yet.
struct Pending {
    /// The tool's label (`namespace.name`).
    name: String,
    round: u32,
    /// Held for a person's decision ([`crate::ToolDef::requires_approval`]): no result is
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

    /// Guest side: these calls, handed out in `round` (their tool's label with each), wait
    /// for a person's decision before they may be answered.
    pub(crate) fn hold(&self, round: u32, requests: impl IntoIterator<Item = (String, ApprovalRequest)>) {
        let mut state = self.state();
        for (name, request) in requests {
            state.pending.insert(request.call.id.clone(), Pending { name, round, held: Some(request) });
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
            let name = crate::request::label(request.call.namespace.as_deref().unwrap_or(""), &request.call.name);
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

    /// The tools (labels, sorted) of the calls held for a decision now, for the words of a
    /// deadline.
    pub(crate) fn held_tools(&self) -> Vec<String> {
        let state = self.state();
        let mut names: Vec<String> =
            state.pending.values().filter(|p| p.held.is_some()).map(|p| p.name.clone()).collect();
        names.sort();
        names
    }

    /// Guest side: these requests (just held) are to be told about at this blocking point.
    pub(crate) fn announce_asks(&self, round: u32, requests: Vec<ApprovalRequest>) {
        self.state().announce.extend(requests.into_iter().map(|r| Announce::Ask(round, r)));
    }

    /// The requests held for a decision now.
    pub(crate) fn held_requests(&self) -> Vec<ApprovalRequest> {
        self.state().pending.values().filter_map(|p| p.held.clone()).collect()
    }

    /// Guest side: what to tell the client about at this blocking point.
    pub(crate) fn take_announced(&self) -> Vec<Announce> {
        std::mem::take(&mut self.state().announce)
    }

    /// Guest side, after a replay went live: these calls its first run had handed out are
    /// still pending; they are told about at the next blocking point, those of tools that need
    /// approval held for a decision (`needs(namespace, name)`), unless `decided` (recorded in
    /// the journal) decides them at once.
    pub(crate) fn reannounce(&self, calls: Vec<(u32, ToolCall)>, needs: impl Fn(&ToolCall) -> bool) {
        let mut state = self.state();
        for (round, call) in calls {
            let Some(pending) = state.pending.get_mut(&call.id) else { continue };
            if pending.held.is_some() {
                continue;
            }
            let item = if needs(&call) {
                let request = ApprovalRequest { call, reason: None };
                pending.held = Some(request.clone());
                Announce::Ask(round, request)
            } else {
                Announce::Call(round, call)
            };
            state.announce.push(item);
        }
    }

    /// The held call `id`'s tool (namespace or "", name), if it is held.
    pub(crate) fn held_tool(&self, id: &str) -> Option<(String, String)> {
        let state = self.state();
        let call = &state.pending.get(id)?.held.as_ref()?.call;
        Some((call.namespace.clone().unwrap_or_default(), call.name.clone()))
    }

    /// Client side: a person's decisions on held calls. All or nothing, as [`Exchange::submit`]:
    /// an id that is not held (unknown, answered, already decided) or decided twice refuses
    /// the whole batch. An approved call becomes a pending call (with the approved input),
    /// announced at the program's next blocking point (now, if it is parked); a denied one is
    /// answered with the program's `ToolError`. Edited inputs must have been checked against
    /// the schema before.
    pub(crate) fn decide(&self, decisions: &[Decision]) -> Result<()> {
        let mut state = self.state();
        if state.finished {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        let mut batch = HashSet::new();
        for d in decisions {
            let problem = match state.pending.get(&d.id) {
                _ if !batch.insert(d.id.as_str()) => "is decided twice in this batch",
                Some(Pending { held: Some(_), .. }) => continue,
                Some(_) => "does not wait for a decision (it was approved already, or needs none)",
                None if state.answered.contains(&d.id) => "was already answered",
                None => "is not a call of this execution",
            };
            return Err(Error::new(ErrorKind::InvalidToolResult, format!("tool call id {:?} {problem}", d.id)));
        }
        for d in decisions {
            let pending = state.pending.get_mut(&d.id).expect("checked above");
            let request = pending.held.take().expect("checked above");
            let round = pending.round;
            // Any announcement of it still to come is for the request it no longer is.
            state.announce.retain(|a| !matches!(a, Announce::Ask(_, r) if r.call.id == d.id));
            match &d.verdict {
                Verdict::Approve { input } => {
                    let mut call = request.call;
                    if let Some(input) = input {
                        call.input = input.clone();
                    }
                    state.announce.push(Announce::Call(round, call));
                }
                Verdict::Deny { reason } => {
                    self.answer(&mut state, ToolResult::error(d.id.clone(), crate::approval::denied(reason)));
                }
                Verdict::Unasked { message } => {
                    self.answer(&mut state, ToolResult::error(d.id.clone(), message.clone()));
                }
            }
        }
        drop(state);
        self.arrived.notify_one();
        Ok(())
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

    /// Turns an oversized or malformed success into the error the program sees.
    fn check_result(&self, name: &str, r: &mut ToolResult) {
        let size = match &r.outcome {
            Ok(text) | Err(text) => text.len(),
        };
        if size > self.max_result_bytes {
            r.outcome = Err(format!(
                "tool {name:?} returned {size} bytes; the limit is {}: ask the tool for less (a filter, a page, fewer fields)",
                self.max_result_bytes
            ));
        } else if let Ok(json) = &r.outcome {
            let problem = match &self.observer {
                // Parsed once, for the check and the shape: at most MAX_OBSERVED_BYTES, and
                // only until the tool's shape has its samples.
                Some((shapes, tenant)) if shapes.wants(tenant, name, json.len()) => {
                    serde_json::from_str::<serde_json::Value>(json).map(|v| shapes.record(tenant, name, &v)).err()
                }
                _ => serde_json::from_str::<serde::de::IgnoredAny>(json).err(),
            };
            if let Some(e) = problem {
                r.outcome = Err(format!("tool {name:?} returned malformed JSON: {e}"));
            }
        }
    }

    /// Counts a result as waiting for the program, or turns it into the error the program sees
    /// when the results waiting would pass its memory limit or the budget refuses them.
    fn hold_result(&self, state: &mut State, name: &str, r: &mut ToolResult) {
        let size = match &r.outcome {
            Ok(text) | Err(text) => text.len() as u64,
        };
        let refused = if state.held + size > self.max_held_bytes {
            format!(
                "{} bytes of results the program has not taken yet are waiting, and waiting results may hold a quarter \
                 of its memory limit ({} MiB)",
                state.held,
                self.max_held_bytes * 4 / MIB
            )
        } else {
            match state.claim.grow(size) {
                Ok(()) => {
                    state.held += size;
                    return;
                }
                Err(why) => why,
            }
        };
        r.outcome = Err(format!(
            "the result of tool {name:?} ({size} bytes) was dropped: {refused}; await results as they arrive, or ask \
             for less per call"
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange() -> Exchange {
        let shares = crate::shares::Shares::new(u64::MAX, None, None);
        Exchange::new(Arc::default(), 100, 1000, shares.memory_claim(None))
    }

    #[test]
    fn submit_is_all_or_nothing() {
        let x = exchange();
        x.register(1, [("a", "t"), ("b", "t")]);
        x.register(2, [("c", "t")]);
        assert_eq!(x.pending_through(1, false), ["a", "b"]);
        assert_eq!(x.pending_through(2, false), ["a", "b", "c"]);
        x.submit(vec![ToolResult::ok_json("c", "3")]).unwrap();
        assert_eq!(x.drain(), Drained::Ready(vec![ToolResult::ok_json("c", "3")]));
        let err = x.submit(vec![ToolResult::ok_json("a", "1"), ToolResult::ok_json("zz", "2")]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidToolResult);
        assert!(err.message().contains("\"zz\" is not a pending"), "{err}");
        assert_eq!(x.drain(), Drained::Waiting, "nothing of a refused batch arrives");
        let err = x.submit(vec![ToolResult::ok_json("a", "1"), ToolResult::ok_json("a", "2")]).unwrap_err();
        assert!(err.message().contains("twice"), "{err}");
        x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap();
        let err = x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap_err();
        assert!(err.message().contains("already answered"), "{err}");
        assert_eq!(x.drain(), Drained::Ready(vec![ToolResult::ok_json("a", "1")]));
        assert_eq!(x.drain(), Drained::Waiting, "b is still pending");
        assert_eq!(x.pending_through(2, false), ["b"]);
        x.submit(vec![ToolResult::error("b", "no")]).unwrap();
        assert_eq!(x.drain(), Drained::Ready(vec![ToolResult::error("b", "no")]));
        assert_eq!(x.drain(), Drained::Idle);
    }

    fn held(id: &str) -> (String, ApprovalRequest) {
        let call = ToolCall { id: id.into(), name: "delete".into(), namespace: None, input: "{}".into() };
        ("delete".into(), ApprovalRequest { call, reason: Some("stale".into()) })
    }

    #[test]
    fn a_held_call_takes_a_decision_before_a_result() {
        let x = exchange();
        x.register(1, [("a", "get")]);
        x.hold(1, [held("b"), held("c"), held("d")]);
        assert_eq!(x.pending_through(1, false), ["a"]);
        assert_eq!(x.pending_through(1, true), ["b", "c", "d"]);
        let err = x.submit(vec![ToolResult::ok_json("b", "1")]).unwrap_err();
        assert!(err.message().contains("waits for the user's approval"), "{err}");
        // All or nothing: a decision for a call that is not held refuses the batch.
        let err = x.decide(&[Decision::approve("b"), Decision::approve("a")]).unwrap_err();
        assert!(err.message().contains("does not wait for a decision"), "{err}");
        let err = x.decide(&[Decision::approve("b"), Decision::deny("b", "no")]).unwrap_err();
        assert!(err.message().contains("twice"), "{err}");
        assert_eq!(x.drain(), Drained::Waiting);
        x.decide(&[
            Decision::approve_with("b", r#"{"id":2}"#),
            Decision::deny("c", "not that one"),
            Decision::unasked("d", "nobody"),
        ])
        .unwrap();
        let announced = x.take_announced();
        assert!(
            matches!(&announced[..], [Announce::Call(1, call)] if call.id == "b" && call.input == r#"{"id":2}"#),
            "{announced:?}"
        );
        assert_eq!(
            x.drain(),
            Drained::Ready(vec![
                ToolResult::error("c", "denied by the user: not that one"),
                ToolResult::error("d", "nobody")
            ])
        );
        assert!(x.decide(&[Decision::approve("b")]).unwrap_err().message().contains("approved already"));
        assert_eq!(x.pending_through(1, false), ["a", "b"]);
        x.submit(vec![ToolResult::ok_json("b", "1"), ToolResult::ok_json("a", "2")]).unwrap();
        assert!(x.decide(&[Decision::approve("c")]).unwrap_err().message().contains("already answered"));
    }

    #[test]
    fn malformed_and_oversized_results_become_errors_the_program_sees() {
        let x = exchange();
        x.register(1, [("a", "t"), ("b", "t"), ("c", "t")]);
        let big = format!("\"{}\"", "x".repeat(200));
        x.submit(vec![
            ToolResult::ok_json("a", "{nope"),
            ToolResult::ok_json("b", big),
            ToolResult::ok_json("c", "[1]"),
        ])
        .unwrap();
        let Drained::Ready(got) = x.drain() else { panic!("answers arrived") };
        assert!(got[0].outcome.as_ref().unwrap_err().contains("malformed JSON"), "{got:?}");
        assert!(got[1].outcome.as_ref().unwrap_err().contains("202 bytes; the limit is 100"), "{got:?}");
        assert_eq!(got[2].outcome, Ok("[1]".into()));
    }

    #[test]
    fn results_waiting_for_the_program_count_against_its_memory_and_the_budget() {
        let shares = crate::shares::Shares::new(250, None, None);
        let x = Exchange::new(Arc::default(), 100, 200, shares.memory_claim(None));
        x.register(1, (0..5).map(|i| (["a", "b", "c", "d", "e"][i], "t")));
        let ninety = |id: &str| ToolResult::ok_json(id, format!("\"{}\"", "x".repeat(88)));
        x.submit(vec![ninety("a"), ninety("b"), ninety("c")]).unwrap();
        assert_eq!(shares.used(), 180, "two results wait, charged to the budget");
        let Drained::Ready(got) = x.drain() else { panic!("answers arrived") };
        assert!(got[..2].iter().all(|r| r.outcome.is_ok()), "{got:?}");
        let dropped = got[2].outcome.as_ref().unwrap_err();
        assert!(dropped.contains("(90 bytes) was dropped") && dropped.contains("180 bytes of results"), "{dropped}");
        assert_eq!(shares.used(), 0, "taken results are no longer held");
        // The budget (250) refuses what the limit (200) would allow once other work holds it.
        let mut other = shares.memory_claim(None);
        other.grow(200).unwrap();
        x.submit(vec![ninety("d")]).unwrap();
        let Drained::Ready(got) = x.drain() else { panic!("answers arrived") };
        assert!(got[0].outcome.as_ref().unwrap_err().contains("memory budget"), "{got:?}");
    }

    #[test]
    fn a_finished_exchange_refuses_answers() {
        let x = exchange();
        x.register(1, [("a", "t")]);
        x.finish();
        assert_eq!(x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap_err().kind(), ErrorKind::Finished);
        assert!(x.is_finished());
    }

    #[tokio::test]
    async fn wait_wakes_on_an_answer_given_before_or_during_it_and_counts_as_paused() {
        let x = Arc::new(exchange());
        x.register(1, [("a", "t"), ("b", "t")]);
        x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap();
        assert_eq!(
            x.wait(None, None).await,
            Waited::Ready(vec![ToolResult::ok_json("a", "1")]),
            "an answer given before the wait is taken at once"
        );
        let waiter = tokio::spawn({
            let x = x.clone();
            async move { x.wait(None, None).await }
        });
        while !x.is_paused() {
            tokio::task::yield_now().await;
        }
        assert_eq!(x.engine_paused.load(Ordering::Relaxed), 1);
        x.submit(vec![ToolResult::ok_json("b", "2")]).unwrap();
        assert_eq!(waiter.await.unwrap(), Waited::Ready(vec![ToolResult::ok_json("b", "2")]));
        assert!(!x.is_paused());
        assert_eq!(x.engine_paused.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn wait_with_a_timeout_returns_nothing_when_nothing_arrives() {
        let x = exchange();
        x.register(1, [("a", "t")]);
        assert_eq!(x.wait(Some(Duration::from_millis(5)), None).await, Waited::Ready(Vec::new()));
        assert!(!x.is_paused());
    }

    #[tokio::test]
    async fn an_unwind_request_ends_the_wait_once_and_keeps_what_arrived() {
        let x = Arc::new(exchange());
        x.register(1, [("a", "t"), ("b", "t")]);
        let waiter = tokio::spawn({
            let x = x.clone();
            async move { x.wait(None, None).await }
        });
        while !x.is_paused() {
            tokio::task::yield_now().await;
        }
        x.request_unwind();
        assert_eq!(waiter.await.unwrap(), Waited::Unwind);
        x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap();
        // Asked once, answered once: the next wait takes the answer.
        assert_eq!(x.wait(None, None).await, Waited::Ready(vec![ToolResult::ok_json("a", "1")]));
        // A request made while the program runs ends its next wait.
        x.request_unwind();
        assert_eq!(x.wait(None, None).await, Waited::Unwind);
    }
}
