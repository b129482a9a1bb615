//! An execution's spans, when the engine has a [`Tracer`]: `ptc.execution` from its start to
//! its end (with its outcome, rounds, calls, peak memory and fuel), a `ptc.round` for each
//! batch of calls handed out, and under it an `execute_tool` span per nested tool call in the
//! OpenTelemetry GenAI conventions' terms (`gen_ai.operation.name`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.id`, the stable call id), from the moment the call is handed out (or held
//! for approval) to its answer, with the approval's request and decision as events.
//!
//! Spans carry names, ids and counts, never a tool's input, result or error text, nor the
//! program's output: what a program handles may be secret, and an exporter sends it elsewhere.
//! [`Trace`] is fed where the events pass ([`super::execution`]): what the client takes out,
//! answers and decides.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span, SpanContext, SpanKind, Status};

use crate::api::events::{ApprovalRequest, Decision, Event, Stats, ToolCall, ToolResult, Verdict};
use crate::api::request::Runtime;
use crate::api::trace::{Parent, Tracer};

/// One execution's open spans.
pub(crate) struct Trace {
    tracer: Tracer,
    execution: Mutex<Option<BoxedSpan>>,
    /// The execution span's: the parent of its rounds.
    context: SpanContext,
    open: Mutex<Open>,
}

/// What an execution's span names: its id, runtime, tenant, and how it started.
pub(crate) struct Run<'a> {
    pub id: &'a str,
    pub runtime: Runtime,
    pub tenant: Option<&'a str>,
    pub how: &'static str,
}

#[derive(Default)]
struct Open {
    /// Rounds with calls not yet answered: the span and how many.
    rounds: HashMap<u32, (BoxedSpan, usize)>,
    /// Calls not yet answered: the span and its round.
    calls: HashMap<String, (BoxedSpan, u32)>,
}

impl Trace {
    /// The execution's span, under the client's (`parent`, from
    /// [`crate::api::request::ExecutionRequest::trace_parent`]) if it sent one; `how` says how
    /// it started (`start`, `session`, `thaw`).
    pub(crate) fn start(tracer: Option<&Tracer>, parent: Option<&SpanContext>, run: Run<'_>) -> Option<Arc<Self>> {
        let tracer = tracer?.clone();
        let Run { id, runtime, tenant, how } = run;
        let mut attributes = vec![
            KeyValue::new("ptc.execution.id", id.to_string()),
            KeyValue::new("ptc.runtime", runtime.as_str()),
            KeyValue::new("ptc.start", how),
        ];
        if let Some(tenant) = tenant {
            attributes.push(KeyValue::new("ptc.tenant", tenant.to_string()));
        }
        let span = tracer.span("ptc.execution", SpanKind::Internal, parent, attributes);
        let context = span.span_context().clone();
        Some(Arc::new(Trace { tracer, execution: Mutex::new(Some(span)), context, open: Mutex::new(Open::default()) }))
    }

    /// The execution's span for what is done for it below this floor: its outbound requests.
    pub(crate) fn parent(&self) -> Parent {
        Parent { tracer: self.tracer.clone(), context: self.context.clone() }
    }

    /// An event on its way to the client: a round's calls get their spans (and carry them),
    /// the final event ends every span.
    pub(crate) fn event(&self, event: &mut Event) {
        match event {
            Event::ToolCalls { round, calls, approvals } => self.round(*round, calls, approvals),
            Event::Completed(c) => self.end(None, &c.stats),
            Event::Failed(f) => self.end(Some(f.kind.as_str()), &f.stats),
            Event::Output { .. } => {}
        }
    }

    fn round(&self, round: u32, calls: &mut [ToolCall], approvals: &mut [ApprovalRequest]) {
        let mut open = self.open.lock().unwrap();
        let new = approvals.iter().filter(|a| !open.calls.contains_key(&a.call.id)).count()
            + calls.iter().filter(|c| !open.calls.contains_key(&c.id)).count();
        if new > 0 {
            let attributes =
                vec![KeyValue::new("ptc.round", i64::from(round)), KeyValue::new("ptc.round.calls", new as i64)];
            let span = self.tracer.span("ptc.round", SpanKind::Internal, Some(&self.context), attributes);
            open.rounds.insert(round, (span, 0));
        }
        for approval in approvals {
            let span = self.call(&mut open, round, &approval.call);
            span.add_event("gen_ai.tool.approval.requested", vec![]);
            approval.call.trace = Some(span.span_context().clone());
        }
        for call in calls {
            // An approved call comes out again, in a round of its own: its span goes on.
            let span = self.call(&mut open, round, call);
            call.trace = Some(span.span_context().clone());
        }
    }

    /// The open span of `call`, started under `round`'s if it has none yet.
    fn call<'a>(&self, open: &'a mut Open, round: u32, call: &ToolCall) -> &'a mut BoxedSpan {
        let Open { rounds, calls } = open;
        &mut calls
            .entry(call.id.clone())
            .or_insert_with(|| {
                let parent = match rounds.get_mut(&round) {
                    Some((span, count)) => {
                        *count += 1;
                        span.span_context().clone()
                    }
                    None => self.context.clone(),
                };
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", call.name.clone()),
                    KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
                    KeyValue::new("gen_ai.tool.type", "function"),
                ];
                if let Some(namespace) = &call.namespace {
                    attributes.push(KeyValue::new("ptc.tool.namespace", namespace.clone()));
                }
                let name = format!("execute_tool {}", call.name);
                let span = self.tracer.span(name, SpanKind::Internal, Some(&parent), attributes);
                (span, round)
            })
            .0
    }

    /// A span under the execution's from `started` to now (hibernation, thaw).
    pub(crate) fn phase(&self, name: &'static str, started: Instant, attributes: Vec<KeyValue>) {
        let start = SystemTime::now() - started.elapsed();
        self.tracer.span_since(name, &self.context, start, attributes).end();
    }

    /// Results the execution took: their calls' spans end (a tool's error as the span's
    /// status, without its text).
    pub(crate) fn answered(&self, results: &[(String, bool)]) {
        let mut open = self.open.lock().unwrap();
        for (id, failed) in results {
            if *failed && let Some((span, _)) = open.calls.get_mut(id) {
                span.set_status(Status::error("the tool failed"));
            }
            Self::close(&mut open, id);
        }
    }

    /// A person's decisions: an event on each call's span; a denied or unasked call's span
    /// ends there, with an error status.
    pub(crate) fn decided(&self, decisions: &[Decision]) {
        let mut open = self.open.lock().unwrap();
        for d in decisions {
            let Some((span, _)) = open.calls.get_mut(&d.id) else { continue };
            let (event, status) = match &d.verdict {
                Verdict::Approve { input } => {
                    let changed = KeyValue::new("ptc.approval.input_changed", input.is_some());
                    span.add_event("gen_ai.tool.approval.approved", vec![changed]);
                    continue;
                }
                Verdict::Deny { .. } => ("gen_ai.tool.approval.denied", "denied by the user"),
                Verdict::Unasked { .. } => ("gen_ai.tool.approval.unasked", "nobody could be asked for approval"),
            };
            span.add_event(event, vec![]);
            span.set_status(Status::error(status));
            Self::close(&mut open, &d.id);
        }
    }

    /// Ends `id`'s span, and its round's once that round has no call open.
    fn close(open: &mut Open, id: &str) {
        let Some((mut span, round)) = open.calls.remove(id) else { return };
        span.end();
        if let Some((_, count)) = open.rounds.get_mut(&round) {
            *count = count.saturating_sub(1);
            if *count == 0
                && let Some((mut span, _)) = open.rounds.remove(&round)
            {
                span.end();
            }
        }
    }

    /// The execution could not start (a refused image): its span ends with the error's kind.
    pub(crate) fn refused(&self, kind: &'static str) {
        self.end(Some(kind), &Stats::default());
    }

    /// The final event: calls never answered end as such, then the rounds, then the
    /// execution with its outcome (`failed`: the failure's kind) and counts.
    fn end(&self, failed: Option<&'static str>, stats: &Stats) {
        let mut open = self.open.lock().unwrap();
        for (_, (mut span, _)) in open.calls.drain() {
            span.add_event("ptc.call.unanswered", vec![]);
            span.end();
        }
        for (_, (mut span, _)) in open.rounds.drain() {
            span.end();
        }
        let Some(mut span) = self.execution.lock().unwrap().take() else { return };
        span.set_attribute(KeyValue::new("ptc.outcome", failed.unwrap_or("completed")));
        span.set_attribute(KeyValue::new("ptc.rounds", i64::from(stats.round_trips)));
        span.set_attribute(KeyValue::new("ptc.tool_calls", i64::from(stats.tool_calls)));
        span.set_attribute(KeyValue::new("ptc.peak_memory_bytes", stats.peak_memory_bytes as i64));
        if let Some(fuel) = stats.fuel_consumed {
            span.set_attribute(KeyValue::new("ptc.fuel_consumed", fuel as i64));
        }
        if let Some(kind) = failed {
            span.set_status(Status::error(kind));
        }
        span.end();
    }
}

/// The ids of `results` and whether each is a tool's error, for [`Trace::answered`] once the
/// exchange took them.
pub(crate) fn outcomes(results: &[ToolResult]) -> Vec<(String, bool)> {
    results.iter().map(|r| (r.id.clone(), r.outcome.is_err())).collect()
}
