//! One `execute_code`: the program starts through the core's run path (in a fresh sandbox, the
//! MCP session's live session, or one the program names), its calls go to the downstream
//! servers (all of one round at once), what it prints and each nested call go out as progress
//! (`progress.rs`), and its end becomes the tool's result.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::trace::Span as _;
use ptc_engine::{
    ApprovalRequest, Decision, Event, ExecutionRequest, FailureKind, OutputStream, Runtime, ToolCall, ToolResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CreateMessageRequest, ElicitRequest, InputRequest, InputRequests,
    JsonObject, ProtocolVersion,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;
use tokio::task::JoinSet;

use super::approvals;
use super::catalog::catalog;
use super::catalog::idle_minutes;
use super::program::{HeldSession, HeldSessions, Mode, Program, elicits, tenant_of};
use super::progress::Progress;
use super::results::{IMAGES, add_session, ended_result, failed_before_start, prefix_text};
use super::sampling::{self, LLM_QUERY, NO_SAMPLING, llm_query_def, sampled_answer, sampling_params};
use super::state::McpState;
use crate::core::auth::LOCAL_TENANT;
use crate::core::runs::{DataDir, Start};
use crate::core::sessions::{LiveSession, OpenOptions, Sessions};
use crate::core::{Error, ErrorKind};
use crate::traces;

/// How a program ended, or what its client's model must be asked before it can go on.
enum Stop {
    Ended(Result<ptc_engine::Completion, ptc_engine::Failure>),
    Park(InputRequests),
}

/// What one connection's programs run with: the front end's state and the connection's live
/// session. Its handler (`CodeMode`) holds one and hands it each `execute_code`.
#[derive(Clone)]
pub(super) struct Runs {
    pub state: Arc<McpState>,
    /// This MCP session's live sessions (one per language family), each opened by its first
    /// `execute_code`; the lock also runs its programs one after another. Dropped (and so
    /// closed) with the MCP session.
    pub live: Arc<tokio::sync::Mutex<HeldSessions>>,
}

impl Runs {
    /// `execute_code`: a new program, or (protocol 2026-07-28) the retry that carries the
    /// sampled answers to a parked one.
    pub(super) async fn execute(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tenant = tenant_of(&ctx.extensions);
        // This call's span, under the client's (`_meta.traceparent`), when the server traces;
        // a program it starts has its span under it.
        let parent = ctx.meta.0.0.get("traceparent").and_then(Value::as_str).and_then(traces::from_traceparent);
        let attributes = vec![
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("gen_ai.tool.name", "execute_code"),
            KeyValue::new("ptc.tenant", tenant.clone().unwrap_or_default()),
        ];
        let tracer = self.state.core.engine.config().tracer.as_ref();
        let span = traces::request_span(tracer, "tools/call execute_code", parent.as_ref(), attributes);
        let trace_parent = span.as_ref().map(|s| s.span_context().clone());
        if let Some(handle) = &request.request_state {
            let program =
                sampling::retried(&self.state, handle, &tenant, request.input_responses.unwrap_or_default()).await?;
            return Ok(self.proceed(program, &ctx).await);
        }
        // Bad arguments are tool errors, not protocol errors, so that the model sees them and
        // can correct its call (as the MCP specification asks of input validation).
        let args = request.arguments.unwrap_or_default();
        let mode = Mode::of(&ctx, self.state.sessions.is_some());
        // Persistent: programs of this MCP session run one after another in its live session:
        // the lock is held until the program ends (or is parked for sampling).
        let mut held = match mode {
            Mode::Persistent => Some(self.live.clone().lock_owned().await),
            _ => None,
        };
        let shapes = self.state.core.engine.result_shapes_version(tenant.as_deref());
        let started = self.start(&args, mode, held.as_deref_mut(), tenant.clone(), elicits(&ctx), trace_parent).await;
        let program = match started {
            Ok(program) => program,
            Err(message) => return Ok(failed_before_start(message).into()),
        };
        let response = self.proceed(program, &ctx).await;
        drop(held);
        // Its tool calls showed results of a shape not seen before: execute_code's description
        // now says what they return, so the client is told to list it again (sessions before
        // protocol 2026-07-28; later ones list again on their own subscription's terms).
        if mode != Mode::Handles && self.state.core.engine.result_shapes_version(tenant.as_deref()) != shapes {
            let _ = ctx.peer.notify_tool_list_changed().await;
        }
        Ok(response)
    }

    /// Starts the program `args` give, in the session `mode` and `held` (this MCP session's,
    /// when persistent) say; the error is what the model is told.
    async fn start(
        &self,
        args: &JsonObject,
        mode: Mode,
        held: Option<&mut HeldSessions>,
        tenant: Option<String>,
        elicits: bool,
        trace_parent: Option<opentelemetry::trace::SpanContext>,
    ) -> Result<Program, String> {
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            return Err("execute_code needs \"code\": the program to run, as a string".into());
        };
        let state = &self.state;
        let runtime = match args.get("language") {
            None | Some(Value::Null) => state.runtime,
            Some(Value::String(l)) if l == "python" => state.runtime,
            Some(Value::String(l)) if l == "javascript" => Runtime::Javascript,
            Some(Value::String(l)) if l == "typescript" => Runtime::Typescript,
            Some(_) => return Err("\"language\" must be \"python\", \"javascript\" or \"typescript\"".into()),
        };
        let python = matches!(runtime, Runtime::Python | Runtime::PythonData);
        let timeout_ms = match args.get("timeout_ms") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(ms) if ms > 0 => Some(ms),
                _ => return Err("\"timeout_ms\" must be a positive integer (milliseconds for the whole run)".into()),
            },
        };
        let requested = match (mode, args.get("session")) {
            (Mode::Handles, Some(Value::String(id))) => Some(id.clone()),
            (_, None | Some(Value::Null)) => None,
            (Mode::Handles, Some(_)) => {
                return Err(
                    "\"session\" must be \"new\" or the id (a string) of the session an earlier result named".into()
                );
            }
            // Not offered on this connection (its programs share one session, or none).
            (_, Some(_)) => None,
        };
        let mut catalog = catalog(&self.state, false, Mode::Fresh, tenant.as_deref(), elicits).await?;
        catalog.defs.push(llm_query_def());
        let mut request = ExecutionRequest::new(code).with_tools(catalog.defs).with_runtime(runtime);
        request.trace_parent = trace_parent;
        let start = Start {
            tenant: tenant.as_deref(),
            request_id: None,
            limits: state.limits.clone(),
            timeout_ms,
            network_allow: &[],
            request,
        };
        let prepared = state.core.prepare(start).map_err(|e| e.message().to_string())?;
        let timeout_limit = prepared.request.limits.as_ref().expect("prepared with limits").timeout;
        let started = Instant::now();
        let mut notice = None;
        // JavaScript's and TypeScript's programs share sessions of the JavaScript runtime, whose
        // instances run both.
        let family = if python { state.runtime } else { Runtime::Javascript };
        let held = held.map(|held| if python { &mut held.python } else { &mut held.javascript });
        let live = match (held, &requested, &state.sessions) {
            (Some(slot), _, Some(sessions)) => {
                Some(self.held_session(sessions, slot, &tenant, family, &mut notice).await)
            }
            (None, Some(id), Some(sessions)) => {
                Some(self.named_session(sessions, id, &tenant, family, &mut notice).await)
            }
            _ => None,
        }
        .transpose()
        .map_err(|e| e.message().to_string())?;
        let (dir, named) = match live {
            Some((id, live)) => (DataDir::Live(live, Vec::new()), (mode == Mode::Handles).then_some(id)),
            None => (DataDir::None, None),
        };
        let run = state.core.start(prepared, dir, None).await.map_err(|e| e.message().to_string())?;
        Ok(Program {
            run,
            calls: JoinSet::new(),
            started,
            timeout_limit,
            tenant,
            awaiting: vec![],
            asked: vec![],
            decisions: JoinSet::new(),
            notice,
            named,
            progress: Progress::default(),
        })
    }

    /// This MCP session's live session, opened if it has none or it ended (`notice` then tells
    /// the model its earlier variables are gone).
    async fn held_session(
        &self,
        sessions: &Arc<Sessions>,
        slot: &mut Option<HeldSession>,
        tenant: &Option<String>,
        runtime: Runtime,
        notice: &mut Option<String>,
    ) -> Result<(String, LiveSession), Error> {
        if let Some(held) = slot.as_ref().filter(|h| !h.live.session.is_ended()) {
            return Ok((held.id.clone(), held.live.clone()));
        }
        if let Some(ended) = slot.take() {
            *notice = Some(format!(
                "[session] the previous session ended ({}); this program ran in a new one, so variables, imports and \
                 functions from earlier programs are gone: define again what you need.",
                ended.live.session.ended_reason().unwrap_or_default()
            ));
        }
        let tenant = tenant.clone().unwrap_or_else(|| LOCAL_TENANT.to_string());
        let (id, live) = self.open_session(sessions, &tenant, runtime).await?;
        let held = slot.insert(HeldSession { sessions: sessions.clone(), tenant, id, live });
        Ok((held.id.clone(), held.live.clone()))
    }

    /// The session a program named: `"new"` opens one; an id that is unknown or ended opens
    /// one too, and `notice` says so (the program may rely on what is gone).
    async fn named_session(
        &self,
        sessions: &Arc<Sessions>,
        id: &str,
        tenant: &Option<String>,
        runtime: Runtime,
        notice: &mut Option<String>,
    ) -> Result<(String, LiveSession), Error> {
        let tenant = tenant.as_deref().unwrap_or(LOCAL_TENANT);
        if id != "new" {
            match sessions.get(tenant, id) {
                Ok(live) if live.session.runtime().instances() != runtime.instances() => {
                    let (theirs, ours) = (live.session.runtime().instances(), runtime.instances());
                    return Err(Error::invalid(format!(
                        "session {id:?} runs {} programs and this one is {}: pass the language of its programs, \
                         or session=\"new\" for a new session of this language",
                        theirs.as_str(),
                        ours.as_str()
                    )));
                }
                Ok(live) => return Ok((id.to_string(), live)),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    *notice = Some(format!(
                        "[session] session {id:?} is not open (a session ends after {} minutes without a call, or when \
                         a program in it times out or is cancelled); this program ran in a new one, so variables, \
                         imports and functions from earlier programs are gone: define again what you need.",
                        idle_minutes(sessions)
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        self.open_session(sessions, tenant, runtime).await
    }

    /// A new live session of `tenant` running `runtime`'s programs, with this front end's
    /// limits.
    async fn open_session(
        &self,
        sessions: &Sessions,
        tenant: &str,
        runtime: Runtime,
    ) -> Result<(String, LiveSession), Error> {
        let options = OpenOptions { limits: Some(self.state.limits.clone()), runtime, ..Default::default() };
        let opened = sessions.open(tenant, options).await?;
        Ok((opened.id, opened.live))
    }

    /// Runs the program on: answers its calls, until it ends or (protocol 2026-07-28) needs
    /// the client to sample for llm_query, when it is parked and the client asked for input.
    pub(super) async fn proceed(&self, mut program: Program, ctx: &RequestContext<RoleServer>) -> CallToolResponse {
        let end = match self.drive(&mut program, ctx).await {
            Stop::Ended(end) => end,
            Stop::Park(asks) => return sampling::park(&self.state, program, asks),
        };
        // Calls still running downstream are abandoned (their futures dropped), and so are
        // questions to the user.
        let unanswered = !program.decisions.is_empty();
        program.calls.abort_all();
        program.decisions.abort_all();
        let elapsed = program.started.elapsed();
        let ending = program.run.end(end, Some(IMAGES)).await;
        let mut result = ended_result(ending, elapsed, program.timeout_limit, unanswered);
        if let Some(notice) = &program.notice {
            prefix_text(&mut result, notice);
        }
        if let Some(id) = &program.named {
            add_session(&mut result, id);
        }
        result.into()
    }

    /// The program's events until it ends or is parked.
    async fn drive(&self, program: &mut Program, ctx: &RequestContext<RoleServer>) -> Stop {
        let mut progress = std::mem::take(&mut program.progress);
        progress.attach(ctx);
        let stop = self.events(program, ctx, &mut progress).await;
        // What is left to say goes before the result (or the question that parks the program).
        progress.flush().await;
        program.progress = progress;
        stop
    }

    async fn events(&self, program: &mut Program, ctx: &RequestContext<RoleServer>, progress: &mut Progress) -> Stop {
        let mut cancelled = false;
        loop {
            progress.send_due().await;
            let due = progress.due();
            tokio::select! {
                _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {}
                _ = ctx.ct.cancelled(), if !cancelled => {
                    // notifications/cancelled: the instance is freed; its final event follows.
                    cancelled = true;
                    program.run.execution.cancel();
                }
                Some(done) = program.calls.join_next(), if !program.calls.is_empty() => {
                    if let Ok(result) = done {
                        progress.ended(&result);
                        // The execution may have ended meanwhile; its end event follows.
                        let _ = program.run.execution.submit(vec![result]);
                    }
                }
                Some(done) = program.decisions.join_next(), if !program.decisions.is_empty() => {
                    if let Ok(decision) = done {
                        progress.decided(&decision);
                        approvals::decide(&program.run.execution, decision).await;
                    }
                }
                event = program.run.execution.next_event() => match event {
                    Some(Event::ToolCalls { calls, approvals, .. }) => {
                        progress.calls(&calls, &approvals);
                        let mut asks = self.call(program, calls, ctx);
                        self.ask(program, approvals, ctx, &mut asks, progress).await;
                        if !asks.is_empty() {
                            return Stop::Park(asks);
                        }
                    }
                    Some(Event::Output { stream: OutputStream::Stdout, data }) => progress.printed(&data),
                    Some(Event::Output { .. }) => {}
                    Some(Event::Completed(done)) => return Stop::Ended(Ok(done)),
                    Some(Event::Failed(failure)) => return Stop::Ended(Err(failure)),
                    None => return Stop::Ended(Err(ptc_engine::Failure {
                        kind: FailureKind::Internal, message: "the execution ended without a result".into(),
                        traceback: String::new(), exit_code: None, stdout: String::new(), stderr: String::new(),
                        tool_calls: vec![], stats: Default::default(),
                    })),
                },
            }
        }
    }

    /// Asks the user about calls that need approval: through an `elicitation/create` request
    /// while the program waits (before protocol 2026-07-28), or (from it on) in `asks`, which
    /// park the program until the client retries with the answers. A client that cannot ask
    /// its user gets each call refused, saying why.
    async fn ask(
        &self,
        program: &mut Program,
        requests: Vec<ApprovalRequest>,
        ctx: &RequestContext<RoleServer>,
        asks: &mut InputRequests,
        progress: &mut Progress,
    ) {
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        for request in requests {
            let id = request.call.id.clone();
            if !elicits(ctx) {
                let refused = Decision::unasked(id, approvals::cannot_ask(&approvals::label(&request)));
                progress.decided(&refused);
                approvals::decide(&program.run.execution, refused).await;
            } else if modern {
                asks.insert(id.clone(), InputRequest::Elicitation(ElicitRequest::new(approvals::form(&request))));
                program.asked.push(id);
            } else {
                let peer = ctx.peer.clone();
                program.decisions.spawn(async move {
                    let answer = peer.create_elicitation(approvals::form(&request)).await;
                    approvals::decision(id, answer.ok().and_then(|r| serde_json::to_value(r).ok()))
                });
            }
        }
    }

    /// Sends one round's calls on their way: downstream tools and (before protocol 2026-07-28)
    /// sampling requests run as tasks; the llm_query calls the client must be asked for at
    /// protocol 2026-07-28 are returned.
    fn call(&self, program: &mut Program, calls: Vec<ToolCall>, ctx: &RequestContext<RoleServer>) -> InputRequests {
        let sampling = ctx.client_capabilities().is_some_and(|c| c.sampling.is_some());
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let mut asks = InputRequests::new();
        for call in calls {
            if call.namespace.is_none() && call.name == LLM_QUERY {
                let params = match sampling_params(&call.input_value()) {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = program.run.execution.submit(vec![ToolResult::error(call.id, e)]);
                        continue;
                    }
                };
                if !sampling {
                    let _ = program.run.execution.submit(vec![ToolResult::error(call.id, NO_SAMPLING)]);
                } else if modern {
                    asks.insert(call.id.clone(), InputRequest::CreateMessage(CreateMessageRequest::new(params)));
                    program.awaiting.push(call.id);
                } else {
                    let peer = ctx.peer.clone();
                    program.calls.spawn(async move {
                        match peer.create_message(params).await {
                            Ok(r) => sampled_answer(call.id, serde_json::to_value(&r).ok()),
                            Err(e) => ToolResult::error(call.id, format!("the client could not answer llm_query: {e}")),
                        }
                    });
                }
                continue;
            }
            let server =
                call.namespace.as_deref().and_then(|ns| self.state.downstream.server(ns, program.tenant.as_deref()));
            // The downstream call's own span (kind client) under the program's call's, in the
            // conventions' MCP terms; the server's spans nest under it.
            let attributes = vec![
                KeyValue::new("mcp.method.name", "tools/call"),
                KeyValue::new("gen_ai.tool.name", call.name.clone()),
                KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
                KeyValue::new("ptc.mcp.server", call.namespace.clone().unwrap_or_default()),
            ];
            let tracer = self.state.core.engine.config().tracer.as_ref();
            let name = format!("tools/call {}", call.name);
            let mut span = traces::client_span(tracer, name, call.trace.as_ref(), attributes);
            // (The call carries a span only when the engine traces, and then so does this.)
            let traceparent = traces::traceparent(span.as_ref().map(|s| s.span_context()));
            program.calls.spawn(async move {
                let outcome = match server {
                    Some(server) => server.call(&call.name, call.input_value(), &call.id, &traceparent).await,
                    None => Err(format!("no downstream server for tool {:?}", call.name)),
                };
                if let Some(span) = &mut span {
                    if outcome.is_err() {
                        span.set_attribute(KeyValue::new("error.type", "tool_error"));
                        span.set_status(opentelemetry::trace::Status::error("the downstream call failed"));
                    }
                    span.end();
                }
                match outcome {
                    Ok(value) => ToolResult::ok(call.id, &value),
                    Err(message) => ToolResult::error(call.id, message),
                }
            });
        }
        asks
    }
}
