//! The tool broker: the host's side of `wait-for-tools`, behind which the guest suspends.
//!
//! `wait-for-tools` validates the new calls, sends the valid ones to the client as one
//! `ToolCalls` event, and parks on the execution's [`Exchange`] until answers arrive. While it
//! waits, the wasm fiber is parked and the instance is just memory.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use crate::api::config::{Ceilings, Limits};
use crate::api::error::HostTrap;
use crate::api::events::{ApprovalRequest, Event, FailureKind, ToolCall, ToolCallRecord, ToolResult};
use crate::api::journal::{Journal, RecordedCall, RecordedResult, Recorder, Replayed};
use crate::api::request::label;
use crate::calls::approval::{NeedApproval, take_reason};
use crate::calls::exchange::{Announce, Drained, Exchange, Waited};
use crate::calls::parked::{Parked, Sleeper};
use crate::calls::schema::Schemas;
use crate::calls::shares::RunSlot;
use crate::instance::bindings::ptc::sandbox::host::{self as wit, ToolOutcome, WaitAnswer};
use crate::instance::output::Output;

/// The host's side of `wait-for-tools`: checks calls, hands batches out, keeps the call log.
pub(crate) struct Broker {
    pub(crate) exchange: Arc<Exchange>,
    events: UnboundedSender<Event>,
    schemas: Arc<Schemas>,
    max_round_trips: u32,
    max_tool_calls: u32,
    max_input_bytes: usize,
    seen: HashSet<String>,
    pub(crate) log: Vec<ToolCallRecord>,
    index: HashMap<String, (usize, Instant)>,
    pub(crate) rounds: u32,
    pub(crate) calls: u32,
    pub(crate) output: Output,
    /// Handed back while the guest is parked, taken again before it resumes.
    pub(crate) run_slot: RunSlot,
    /// Bytes the call log may still keep (`Ceilings::max_call_log_bytes`).
    log_room: usize,
    /// A journaled execution's recorder (`journal.rs`).
    pub(crate) journal: Option<Arc<Recorder>>,
    /// How long a wait may find nothing before the program is asked off the stack to
    /// hibernate (`hibernation/`); `None`: never.
    pub(crate) hibernate_after: Option<Duration>,
    /// Where a wait that may hibernate is listed, so that a start finding no slot can ask it
    /// to hibernate now (with `hibernate_after`).
    pub(crate) parked: Option<Arc<Parked>>,
    /// When the program's next timer is due, as its last wait before it unwound said (`None`:
    /// it has none).
    timer_due: Option<Instant>,
    /// The last wait answered `hibernate`: the next one, with no new calls, is the same wait
    /// re-entered after the thaw, which a journal does not record again.
    resuming: bool,
    /// What the execution's calls' ids end with (`approval::id_suffix`): the guest's own ids
    /// (`call_3`) are unique only within the execution.
    pub(crate) suffix: String,
    /// The tools whose calls wait for a person's decision.
    pub(crate) need_approval: NeedApproval,
    /// Reasons the program gave for the calls of this wait that need approval, by id.
    reasons: HashMap<String, String>,
    /// Calls a replay handed out without telling the client (their results were in the
    /// journal), with their rounds, until it goes live.
    unsent: Vec<(u32, ToolCall)>,
}

/// How a tool input or result too large for the call log is kept there: a JSON string.
fn log_marker(len: usize) -> String {
    format!("\"[not logged: {len} bytes, past the call log's limit]\"")
}

/// How far an execution's tool exchange had got, as a sealed image keeps it.
pub(crate) struct Progress {
    /// Rounds and calls so far.
    pub(crate) rounds: u32,
    pub(crate) calls: u32,
    /// The call log; an unanswered call's duration is how long it has waited.
    pub(crate) log: Vec<ToolCallRecord>,
    /// What the log may still take.
    pub(crate) log_room: usize,
    /// How long until the program's next timer.
    pub(crate) timer: Option<Duration>,
}

impl Broker {
    pub(crate) fn new(
        exchange: Arc<Exchange>,
        events: UnboundedSender<Event>,
        output: Output,
        run_slot: RunSlot,
        schemas: Arc<Schemas>,
        limits: &Limits,
        ceilings: &Ceilings,
    ) -> Self {
        Broker {
            exchange,
            events,
            schemas,
            max_round_trips: limits.max_round_trips,
            max_tool_calls: limits.max_tool_calls,
            max_input_bytes: ceilings.max_tool_input_bytes,
            seen: HashSet::new(),
            log: Vec::new(),
            index: HashMap::new(),
            rounds: 0,
            calls: 0,
            output,
            run_slot,
            log_room: ceilings.max_call_log_bytes,
            journal: None,
            hibernate_after: None,
            parked: None,
            timer_due: None,
            resuming: false,
            suffix: String::new(),
            need_approval: NeedApproval::default(),
            reasons: HashMap::new(),
            unsent: Vec::new(),
        }
    }

    /// What a sealed image keeps of the broker.
    pub(crate) fn kept(&self) -> Progress {
        let mut log = self.log.clone();
        for (i, started) in self.index.values() {
            log[*i].duration = started.elapsed();
        }
        Progress { rounds: self.rounds, calls: self.calls, log, log_room: self.log_room, timer: self.next_timer() }
    }

    /// Puts back what [`Broker::kept`] kept, in a thawed execution's new broker; the program
    /// goes on in the wait it hibernated in.
    pub(crate) fn restore(&mut self, Progress { rounds, calls, log, log_room, timer }: Progress) {
        let now = Instant::now();
        self.seen = log.iter().map(|r| r.id.clone()).collect();
        self.index = log
            .iter()
            .enumerate()
            .filter(|(_, r)| r.outcome.is_none() && r.round > 0)
            .map(|(i, r)| (r.id.clone(), (i, now.checked_sub(r.duration).unwrap_or(now))))
            .collect();
        (self.rounds, self.calls, self.log, self.log_room) = (rounds, calls, log, log_room);
        self.timer_due = timer.map(|t| now + t);
        self.resuming = true;
    }

    /// Starts the next execution of a live session: its own exchange, events, tools and
    /// limits, an empty call log and counters. The run slot and output stay the instance's.
    pub(crate) fn reset(&mut self, exchange: Arc<Exchange>, events: UnboundedSender<Event>, next: Next<'_>) {
        let run_slot = self.run_slot.clone();
        *self = Broker::new(exchange, events, self.output.clone(), run_slot, next.schemas, next.limits, next.ceilings);
        self.identify(crate::calls::approval::id_suffix(next.id), next.need_approval);
    }

    /// Names the execution (its calls' ids end with `suffix`: `approval.rs`) and the tools
    /// whose calls need approval.
    pub(crate) fn identify(&mut self, suffix: String, need_approval: NeedApproval) {
        self.suffix = suffix;
        self.need_approval = need_approval;
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

    fn record(&mut self, call: &wit::ToolCall, round: u32) {
        self.index.insert(call.id.clone(), (self.log.len(), Instant::now()));
        let input = self.loggable(&call.input);
        self.log.push(ToolCallRecord {
            id: call.id.clone(),
            name: call.name.clone(),
            namespace: namespace(&call.namespace),
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

    pub(crate) async fn wait_for_tools(
        &mut self,
        mut calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<WaitAnswer> {
        // Outside the guest, a call's id carries the execution's (`approval.rs`).
        for call in &mut calls {
            call.id.push_str(&self.suffix);
        }
        let mut answer = self.wait_for_tools_here(calls, timeout_ms).await?;
        if let WaitAnswer::Results(results) = &mut answer {
            for r in results {
                if let Some(own) = r.id.strip_suffix(self.suffix.as_str()) {
                    r.id.truncate(own.len());
                }
            }
        }
        Ok(answer)
    }

    async fn wait_for_tools_here(
        &mut self,
        calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<WaitAnswer> {
        // The guest is about to block: what it printed so far goes out first.
        self.output.flush();
        let resumed = std::mem::take(&mut self.resuming);
        if let (true, Some(journal)) = (resumed, &self.journal) {
            journal.set_quiet(false);
        }
        // A replay answers from the journal while it lasts, and checks the calls against it.
        let replayed = match &self.journal {
            None => None,
            Some(_) if resumed && calls.is_empty() => None,
            Some(journal) => {
                let recorded: Vec<RecordedCall> = calls
                    .iter()
                    .map(|c| RecordedCall {
                        id: c.id.clone(),
                        namespace: c.namespace.clone(),
                        name: c.name.clone(),
                        input: c.input.clone(),
                    })
                    .collect();
                match journal.calls(&recorded, self.rounds + 1) {
                    Replayed::Diverged(why) => {
                        return Err(HostTrap::raise(FailureKind::Diverged, Journal::diverged(&why)));
                    }
                    Replayed::Live | Replayed::Matched(None) => None,
                    Replayed::Matched(Some(results)) => Some(results),
                }
            }
        };
        let from_journal = replayed.is_some();
        let answer = self.exchange_calls(calls, timeout_ms, replayed).await?;
        if let WaitAnswer::Hibernate = answer {
            self.resuming = true;
            if let Some(journal) = &self.journal {
                journal.set_quiet(true);
            }
        }
        if let (Some(journal), WaitAnswer::Results(results)) = (&self.journal, &answer)
            && !from_journal
        {
            journal.results(results.iter().map(recorded).collect());
        }
        Ok(answer)
    }

    /// `wait-for-tools` itself: `replayed`, the results a replay gives back (the calls go to
    /// nobody and nothing waits).
    async fn exchange_calls(
        &mut self,
        calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
        replayed: Option<Vec<ToolResult>>,
    ) -> wasmtime::Result<WaitAnswer> {
        let (valid, refused) = self.admit(calls).await?;
        if replayed.is_none() {
            self.go_live()?;
        }
        if !valid.is_empty() {
            self.hand_out(valid, replayed.is_none())?;
        }
        if !refused.is_empty() {
            return Ok(WaitAnswer::Results(refused));
        }
        match replayed {
            Some(results) => self.replay(results).map(WaitAnswer::Results),
            None => self.wait_for_answers(timeout_ms).await,
        }
    }

    /// Sorts a batch: the calls to hand out, and the answers of those refused at once (input
    /// too large or not matching its schema), logged as such. A reused id, or a call past
    /// the limit, ends the instance.
    async fn admit(
        &mut self,
        calls: Vec<wit::ToolCall>,
    ) -> wasmtime::Result<(Vec<wit::ToolCall>, Vec<wit::ToolResult>)> {
        let mut valid = Vec::new();
        let mut refused = Vec::new();
        for call in calls {
            if !self.seen.insert(call.id.clone()) {
                return Err(HostTrap::raise(FailureKind::Internal, format!("guest reused call id {:?}", call.id)));
            }
            self.calls += 1;
            if self.calls > self.max_tool_calls {
                let max = self.max_tool_calls;
                return Err(HostTrap::raise(FailureKind::ToolCalls, format!("Exceeded maximum tool calls ({max})")));
            }
            // The reason a call that needs approval may carry is for the person, not the tool.
            let mut call = call;
            if self.need_approval.contains(&call.namespace, &call.name) {
                let (input, reason) = take_reason(&call.input);
                call.input = input;
                if let Some(reason) = reason {
                    self.reasons.insert(call.id.clone(), reason);
                }
            }
            let (checked, call) = self.check_input(call).await;
            match checked {
                Ok(()) => valid.push(call),
                Err(message) => {
                    self.record(&call, 0);
                    let outcome = Err(message);
                    self.settle(&call.id, &outcome);
                    refused.push(to_wit(call.id, outcome));
                }
            }
        }
        Ok((valid, refused))
    }

    /// Opens the next round with the `valid` calls: registered with the exchange, logged, and
    /// (unless a replay answers them) sent to the client as one `ToolCalls` event.
    fn hand_out(&mut self, valid: Vec<wit::ToolCall>, send: bool) -> wasmtime::Result<()> {
        self.rounds += 1;
        if self.rounds > self.max_round_trips {
            let max = self.max_round_trips;
            return Err(HostTrap::raise(FailureKind::RoundTrips, format!("Exceeded maximum round trips ({max})")));
        }
        let round = self.rounds;
        for call in &valid {
            self.record(call, round);
        }
        if !send {
            // A replay that answers the round from its journal: what it leaves unanswered is
            // told about once the replay goes live (`Broker::go_live`).
            self.exchange.register(round, valid.iter().map(|c| (c.id.as_str(), label(&c.namespace, &c.name))));
            self.unsent.extend(valid.into_iter().map(|c| (round, api_call(c))));
            return Ok(());
        }
        let (held, free): (Vec<_>, Vec<_>) =
            valid.into_iter().partition(|c| self.need_approval.contains(&c.namespace, &c.name));
        self.exchange.register(round, free.iter().map(|c| (c.id.as_str(), label(&c.namespace, &c.name))));
        let mut calls: Vec<ToolCall> = free.into_iter().map(api_call).collect();
        let approvals: Vec<ApprovalRequest> = held
            .into_iter()
            .map(|c| {
                let reason = self.reasons.remove(&c.id);
                ApprovalRequest { call: api_call(c), reason }
            })
            .collect();
        self.reasons.clear();
        if !approvals.is_empty() {
            let label_of = |a: &ApprovalRequest| label(a.call.namespace.as_deref().unwrap_or(""), &a.call.name);
            self.exchange.hold(round, approvals.iter().map(|a| (label_of(a), a.clone())));
            self.exchange.announce_asks(round, approvals);
            self.apply_recorded_decisions()?;
        }
        let (announced, approvals) = self.announced();
        calls.extend(announced);
        let _ = self.events.send(Event::ToolCalls { round, calls, approvals });
        Ok(())
    }

    /// What is to be told now: calls to run (whose log entries take the input they were
    /// approved with) and requests to decide on.
    fn announced(&mut self) -> (Vec<ToolCall>, Vec<ApprovalRequest>) {
        let (mut calls, mut approvals) = (Vec::new(), Vec::new());
        for item in self.exchange.take_announced() {
            match item {
                Announce::Call(_, call) => {
                    if let Some(&(i, _)) = self.index.get(&call.id)
                        && self.log[i].input != call.input
                    {
                        self.log[i].input = self.loggable(&call.input);
                    }
                    calls.push(call);
                }
                Announce::Ask(_, request) => approvals.push(request),
            }
        }
        (calls, approvals)
    }

    /// A replay elsewhere: what a person decided in the first run stands, and nobody is asked
    /// again (the journal keeps decisions, `journal.rs`).
    fn apply_recorded_decisions(&mut self) -> wasmtime::Result<()> {
        let Some(journal) = &self.journal else { return Ok(()) };
        let decided = journal.decisions_for(&self.exchange.held_requests());
        if decided.is_empty() {
            return Ok(());
        }
        self.exchange.decide(&decided).map_err(|e| {
            HostTrap::raise(
                FailureKind::Diverged,
                Journal::diverged(&format!("its journal's decisions do not fit: {e}")),
            )
        })
    }

    /// The first live wait after a replay: calls of replayed rounds that the journal left
    /// unanswered are told about at this blocking point, held for a decision if their tool
    /// needs one (unless the journal has it).
    fn go_live(&mut self) -> wasmtime::Result<()> {
        if self.unsent.is_empty() {
            return Ok(());
        }
        let need = self.need_approval.clone();
        let needs = move |c: &ToolCall| need.contains(c.namespace.as_deref().unwrap_or(""), &c.name);
        self.exchange.reannounce(std::mem::take(&mut self.unsent), needs);
        self.apply_recorded_decisions()
    }

    /// Tells the client, at a blocking point with no new calls, about calls announced since
    /// (approved, or left by a replay), as a `ToolCalls` of the current round.
    fn announce(&mut self) {
        let (calls, approvals) = self.announced();
        if !calls.is_empty() || !approvals.is_empty() {
            let _ = self.events.send(Event::ToolCalls { round: self.rounds, calls, approvals });
        }
    }

    /// A replay's answers to the round: as the first run got them, at once, or none (its wait
    /// timed out).
    fn replay(&mut self, results: Vec<ToolResult>) -> wasmtime::Result<Vec<wit::ToolResult>> {
        if !results.is_empty() {
            self.exchange.submit(results).map_err(|e| {
                HostTrap::raise(
                    FailureKind::Diverged,
                    Journal::diverged(&format!("its journal's results do not fit: {e}")),
                )
            })?;
        }
        let ready = match self.exchange.drain() {
            Drained::Ready(ready) => ready,
            _ => Vec::new(),
        };
        Ok(self.settle_all(ready))
    }

    /// The client's answers: those that arrived while the guest was running (after an earlier
    /// wait timed out) first, else the next ones, parked until they come or `timeout_ms` passes.
    /// The answers that arrived, waiting for them (parked, without a run slot) if none has;
    /// or, if the host asked, `hibernate`: the program gets off the native stack.
    async fn wait_for_answers(&mut self, timeout_ms: Option<u64>) -> wasmtime::Result<WaitAnswer> {
        let timeout = timeout_ms.map(Duration::from_millis);
        let started = Instant::now();
        let ready = loop {
            match self.exchange.drain() {
                Drained::Ready(ready) => break ready,
                Drained::Idle => {
                    let message =
                        format!("guest waits for tool results but no call is outstanding (round {})", self.rounds);
                    return Err(HostTrap::raise(FailureKind::Internal, message));
                }
                Drained::Waiting => {}
            }
            // Blocked: what is to be told goes out now.
            self.announce();
            // A parked guest holds no run slot; it queues for one again before resuming.
            self.run_slot.release();
            // Empty if the wait timed out (the guest has timers to run).
            let left = timeout.map(|t| t.saturating_sub(started.elapsed()));
            let listed = match (&self.parked, self.hibernate_after) {
                (Some(parked), Some(_)) => Some(parked.list(started, Sleeper::Execution(self.exchange.clone()))),
                _ => None,
            };
            let waited = self.exchange.wait(left, self.hibernate_after).await;
            drop(listed);
            self.run_slot.acquire().await;
            match waited {
                Waited::Ready(ready) => break ready,
                // An approval came: it is told about at the top of the loop, and the wait goes on.
                Waited::Announce => continue,
                Waited::Unwind => {
                    self.timer_due = timeout.map(|t| started + t);
                    return Ok(WaitAnswer::Hibernate);
                }
            }
        };
        Ok(WaitAnswer::Results(self.settle_all(ready)))
    }

    /// How long until the timer the program's last wait was bounded by is due; `None`: it
    /// had none.
    pub(crate) fn next_timer(&self) -> Option<Duration> {
        self.timer_due.map(|due| due.saturating_duration_since(Instant::now()))
    }

    /// Logs each answer against its call and hands it to the guest.
    fn settle_all(&mut self, ready: Vec<ToolResult>) -> Vec<wit::ToolResult> {
        let mut out = Vec::with_capacity(ready.len());
        for r in ready {
            self.settle(&r.id, &r.outcome);
            out.push(to_wit(r.id, r.outcome));
        }
        out
    }
}

impl Broker {
    /// Checks a call's input: its size, then against its tool's schema, here when that is
    /// cheap, else on the blocking pool (`schema.rs` says why), holding the run slot meanwhile
    /// so that it counts among its tenant's running work; the execution's deadline still ends it.
    async fn check_input(&self, call: wit::ToolCall) -> (Result<(), String>, wit::ToolCall) {
        if call.input.len() > self.max_input_bytes {
            let refused = Err(format!(
                "the input of tool {:?} is {} bytes; the limit is {}: pass less data per call (filter it first, or split it over several calls)",
                label(&call.namespace, &call.name),
                call.input.len(),
                self.max_input_bytes
            ));
            return (refused, call);
        }
        if let Some(checked) = self.schemas.check_inline(&call.namespace, &call.name, &call.input) {
            return (checked, call);
        }
        let schemas = self.schemas.clone();
        let (id, namespace, name) = (call.id.clone(), call.namespace.clone(), call.name.clone());
        let checking = tokio::task::spawn_blocking(move || {
            let checked = schemas.check(&call.namespace, &call.name, &call.input);
            (checked, call)
        });
        match checking.await {
            Ok(done) => done,
            Err(e) => {
                let call = wit::ToolCall { id, namespace, name, input: String::new() };
                (Err(format!("checking the input failed: {e}")), call)
            }
        }
    }
}

/// A journal's record of one result the guest received.
fn recorded(r: &wit::ToolResult) -> RecordedResult {
    match &r.outcome {
        ToolOutcome::Ok(json) => RecordedResult { id: r.id.clone(), value: json.clone(), error: false },
        ToolOutcome::Error(message) => RecordedResult { id: r.id.clone(), value: message.clone(), error: true },
    }
}

/// A call as the client sees it.
fn api_call(c: wit::ToolCall) -> ToolCall {
    ToolCall { id: c.id, namespace: namespace(&c.namespace), name: c.name, input: c.input, trace: None }
}

/// What a live session's next execution brings its broker ([`Broker::reset`]).
pub(crate) struct Next<'a> {
    pub(crate) id: &'a str,
    pub(crate) schemas: Arc<Schemas>,
    pub(crate) need_approval: NeedApproval,
    pub(crate) limits: &'a Limits,
    pub(crate) ceilings: &'a Ceilings,
}

/// The guest's "" for no namespace as the API's `None`.
fn namespace(ns: &str) -> Option<String> {
    (!ns.is_empty()).then(|| ns.to_string())
}

fn to_wit(id: String, outcome: Result<String, String>) -> wit::ToolResult {
    let outcome = match outcome {
        Ok(json) => ToolOutcome::Ok(json),
        Err(message) => ToolOutcome::Error(message),
    };
    wit::ToolResult { id, outcome }
}
