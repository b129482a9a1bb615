//! The code-mode MCP server: `execute_code` runs a program whose tool calls go to the
//! downstream servers; `describe_tools` gives a tool's full stub. Served on stdio
//! (`ptc-engine mcp`) and over Streamable HTTP (`/mcp` on the HTTP port).
//!
//! `llm_query(prompt)` in a program is answered by the client's model through MCP sampling:
//! a server-to-client request before protocol 2026-07-28, an `InputRequiredResult` (the
//! execution parked until the client retries with the answer) from it on.

// Sampling is deprecated by SEP-2577 for a future protocol; it is still how an MCP server asks
// its client's model today, and what `llm_query` is for.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ptc_engine::{
    Engine, Event, Execution, ExecutionRequest, FailureKind, Limits, OutputStream, Session, SessionRequest,
    ToolCallRecord, ToolDef, ToolResult,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CreateMessageRequest,
    CreateMessageRequestParams, Implementation, InputRequest, InputRequests, InputRequiredResult, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, SamplingMessage,
    ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use super::downstream::{Downstream, Listing};
use crate::http::api::model_error;
use crate::tenants::{Admission, Tenants};
use crate::token::random_hex;

/// How many calls the `tool_calls` of a result lists (a program may make thousands; the
/// model needs a sample and the count, not all of them), and how much of each one's input.
const LISTED_CALLS: usize = 20;
const LISTED_INPUT_CHARS: usize = 200;

/// Printed output is sent as progress at most this often while a program runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The tenant an authenticated HTTP request runs for (put there by the `/mcp` route's auth).
#[derive(Debug, Clone)]
pub struct McpTenant(pub String);

/// What every connection of the front end shares.
pub struct Shared {
    pub engine: Engine,
    pub downstream: Arc<Downstream>,
    /// Per-tenant caps (the HTTP endpoint); `None` on stdio, where one client owns the server.
    pub tenants: Option<Arc<Tenants>>,
    /// Defaults of every execution; `execute_code(timeout_ms=...)` may change the deadline
    /// within the engine's ceilings.
    pub limits: Limits,
    /// Executions waiting for their client to sample (protocol 2026-07-28), by handle.
    parked: Mutex<HashMap<String, Run>>,
    /// `Some(idle timeout)`: the `execute_code` calls of one MCP session share a live session
    /// (variables, imports and functions persist); `None`: each runs in a fresh sandbox.
    pub sessions: Option<Duration>,
}

impl Shared {
    pub fn new(
        engine: Engine,
        downstream: Arc<Downstream>,
        tenants: Option<Arc<Tenants>>,
        limits: Limits,
        sessions: Option<Duration>,
    ) -> Arc<Self> {
        Arc::new(Shared { engine, downstream, tenants, limits, parked: Mutex::new(HashMap::new()), sessions })
    }
}

/// One MCP connection's handler (cheap to clone: everything is shared).
#[derive(Clone)]
pub struct CodeMode {
    shared: Arc<Shared>,
    /// This MCP session's live session, opened by its first `execute_code`; the lock also
    /// runs its programs one after another. Dropped (and so ended) with the MCP session.
    live: Arc<tokio::sync::Mutex<Option<Session>>>,
}

/// The callable tools as a program sees them, and what the model is told about them.
struct Catalog {
    defs: Vec<ToolDef>,
    /// `execute_code`'s description.
    description: String,
}

impl CodeMode {
    pub fn new(shared: Arc<Shared>) -> Self {
        CodeMode { shared, live: Arc::default() }
    }

    /// The callable tools, and with `describe` also execute_code's description (which costs
    /// an instance to render the signatures, so an execution does without it).
    async fn catalog(&self, describe: bool, persistent: bool) -> Result<Catalog, String> {
        let listings = self.shared.downstream.listings().await;
        let mut defs = Vec::new();
        let mut not_callable = Vec::new();
        let mut unavailable = Vec::new();
        for Listing { server, tools } in &listings {
            match tools {
                Ok(tools) => {
                    for t in tools {
                        match t.not_callable {
                            None => defs.push(tool_def(server, &t.tool)),
                            Some(why) => not_callable.push(format!("{server}.{} ({why})", t.tool.name)),
                        }
                    }
                }
                Err(e) => unavailable.push(format!("{server}: {e}")),
            }
        }
        if !describe {
            return Ok(Catalog { defs, description: String::new() });
        }
        let described = self
            .shared
            .engine
            .describe_tools(&defs)
            .await
            .map_err(|e| format!("the downstream tools cannot be offered to programs: {}", e.message()))?;
        let mut text = String::from(EXECUTE_CODE_INTRO);
        if persistent {
            text.push_str(PERSIST);
        }
        text.push_str("\n\nTools (call as `await server.tool(...)`):\n");
        for (d, def) in described.tools.iter().zip(&defs) {
            text.push_str(&d.signature);
            let summary = summary(&def.description);
            if !summary.is_empty() {
                text.push_str("  # ");
                text.push_str(&summary);
            }
            text.push('\n');
        }
        if defs.is_empty() {
            text.push_str("(none)\n");
        }
        if !not_callable.is_empty() {
            text.push_str(&format!("\nNot callable from code: {}\n", not_callable.join(", ")));
        }
        if !unavailable.is_empty() {
            text.push_str(&format!("\nUnavailable now: {}\n", unavailable.join("; ")));
        }
        Ok(Catalog { defs, description: text })
    }

    async fn describe(&self, args: &JsonObject) -> Result<CallToolResult, McpError> {
        let names: Option<Vec<String>> = match args.get("names") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|_| {
                McpError::invalid_params(
                    "describe_tools: \"names\" must be a list of tool names like \"server.tool\"",
                    None,
                )
            })?),
        };
        let catalog = self.catalog(false, false).await.map_err(|e| McpError::internal_error(e, None))?;
        let qualified = |d: &ToolDef| format!("{}.{}", d.namespace.as_deref().unwrap_or_default(), d.name);
        let chosen: Vec<ToolDef> = match &names {
            None => catalog.defs.clone(),
            Some(names) => {
                let unknown: Vec<&String> =
                    names.iter().filter(|n| !catalog.defs.iter().any(|d| &qualified(d) == *n)).collect();
                if !unknown.is_empty() {
                    let known: Vec<String> = catalog.defs.iter().map(qualified).collect();
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "no callable tool named {}; the callable tools are: {}",
                        unknown.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", "),
                        known.join(", ")
                    ))]));
                }
                catalog.defs.iter().filter(|d| names.contains(&qualified(d))).cloned().collect()
            }
        };
        let described = self
            .shared
            .engine
            .describe_tools(&chosen)
            .await
            .map_err(|e| McpError::internal_error(e.message().to_string(), None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(described.stub)]))
    }

    async fn execute(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tenant = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<McpTenant>())
            .map(|t| t.0.clone());
        // A retried call (protocol 2026-07-28) carries the sampled answers to the program's
        // llm_query calls and the handle of its parked execution.
        if let Some(handle) = &request.request_state {
            let parked = self.shared.parked.lock().unwrap().remove(handle);
            let Some(mut run) = parked.filter(|r| r.tenant == tenant) else {
                return Err(McpError::invalid_params(
                    "this execution is no longer waiting (it ended, timed out, or was already resumed); run the program again",
                    None,
                ));
            };
            let responses = request.input_responses.unwrap_or_default();
            let answers = run
                .awaiting
                .drain(..)
                .map(|id| {
                    let answer = responses.get(&id).cloned();
                    sampled_answer(id, answer)
                })
                .collect();
            let _ = run.exec.submit(answers);
            return Ok(self.proceed(run, &ctx).await);
        }
        let args = request.arguments.unwrap_or_default();
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            return Err(McpError::invalid_params("execute_code needs \"code\": the Python program to run", None));
        };
        let mut limits = self.shared.limits.clone();
        match args.get("timeout_ms") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(ms) if ms > 0 => limits = limits.with_timeout(Duration::from_millis(ms)),
                _ => return Err(McpError::invalid_params("\"timeout_ms\" must be a positive integer", None)),
            },
        }
        let timeout_limit = limits.timeout;
        let mut catalog = match self.catalog(false, false).await {
            Ok(c) => c,
            Err(e) => return Ok(failed_before_start(e).into()),
        };
        catalog.defs.push(llm_query_def());
        let admission = match (&self.shared.tenants, &tenant) {
            (Some(tenants), Some(tenant)) => match tenants.admit(tenant, None) {
                Ok(a) => Some(a),
                Err(refusal) => return Ok(failed_before_start(refusal.message().to_string()).into()),
            },
            _ => None,
        };
        let mut exec_request = ExecutionRequest::new(code).with_tools(catalog.defs).with_limits(limits);
        if let Some(tenant) = &tenant {
            exec_request = exec_request.with_tenant(tenant.clone());
        }
        let started = Instant::now();
        // With sessions, programs of this MCP session run one after another in its live
        // session: the lock is held until the program ends (or is parked for sampling).
        let mut live = match self.persistent(&ctx) {
            true => Some(self.live.clone().lock_owned().await),
            false => None,
        };
        let mut notice = None;
        let exec = match live.as_deref_mut() {
            None => self.shared.engine.start(exec_request).await,
            Some(slot) => match self.live_session(slot, tenant.as_deref(), &mut notice).await {
                Ok(session) => self.shared.engine.execute_in(&session, exec_request).await,
                Err(e) => Err(e),
            },
        };
        let exec = match exec {
            Ok(exec) => exec,
            Err(e) => return Ok(failed_before_start(e.message().to_string()).into()),
        };
        if let Some(a) = &admission {
            a.attach(exec.control());
        }
        let run = Run {
            exec,
            calls: JoinSet::new(),
            started,
            timeout_limit,
            _admission: admission,
            tenant,
            awaiting: vec![],
            notice,
        };
        let response = self.proceed(run, &ctx).await;
        drop(live);
        Ok(response)
    }

    /// Whether programs of this connection share a live session: sessions are on, and there
    /// is an MCP session to hold it (stdio; over HTTP, protocols before 2026-07-28, which
    /// removed sessions, so each request there gets a handler of its own).
    fn persistent(&self, ctx: &RequestContext<RoleServer>) -> bool {
        let http = ctx.extensions.get::<axum::http::request::Parts>().is_some();
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        self.shared.sessions.is_some() && !(http && modern)
    }

    /// This MCP session's live session, opened if it has none or it ended (`notice` then tells
    /// the model its earlier variables are gone).
    async fn live_session(
        &self,
        slot: &mut Option<Session>,
        tenant: Option<&str>,
        notice: &mut Option<String>,
    ) -> Result<Session, ptc_engine::Error> {
        if let Some(session) = slot.as_ref().filter(|s| !s.is_ended()) {
            return Ok(session.clone());
        }
        if let Some(ended) = slot.take() {
            *notice = Some(format!(
                "[session] the previous session ended ({}); this program ran in a new one, so variables, imports and \
                 functions from earlier programs are gone: define again what you need.",
                ended.ended_reason().unwrap_or_default()
            ));
        }
        let mut request = SessionRequest::new()
            .with_limits(self.shared.limits.clone())
            .with_idle_timeout(self.shared.sessions.unwrap_or(ptc_engine::DEFAULT_IDLE_TIMEOUT));
        request.tenant = tenant.map(str::to_string);
        let (session, _) = self.shared.engine.open_session(request).await?;
        *slot = Some(session.clone());
        Ok(session)
    }

    /// Runs the execution on: answers its calls, until it ends or (protocol 2026-07-28) needs
    /// the client to sample for llm_query, when it is parked and the client asked for input.
    async fn proceed(&self, mut run: Run, ctx: &RequestContext<RoleServer>) -> CallToolResponse {
        let progress = ctx.meta.get_progress_token();
        let sampling = ctx.client_capabilities().is_some_and(|c| c.sampling.is_some());
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let mut printed = String::new();
        let mut progress_count = 0u32;
        let mut last_progress = Instant::now();
        let mut cancelled = false;
        let end = loop {
            tokio::select! {
                _ = ctx.ct.cancelled(), if !cancelled => {
                    // notifications/cancelled: the instance is freed; its final event follows.
                    cancelled = true;
                    run.exec.cancel();
                }
                Some(done) = run.calls.join_next(), if !run.calls.is_empty() => {
                    if let Ok(result) = done {
                        // The execution may have ended meanwhile; its end event follows.
                        let _ = run.exec.submit(vec![result]);
                    }
                }
                event = run.exec.next_event() => match event {
                    Some(Event::ToolCalls { calls: batch, .. }) => {
                        let mut asks = InputRequests::new();
                        for call in batch {
                            if call.namespace.is_none() && call.name == LLM_QUERY {
                                let params = match sampling_params(&call.input_value()) {
                                    Ok(p) => p,
                                    Err(e) => { let _ = run.exec.submit(vec![ToolResult::error(call.id, e)]); continue; }
                                };
                                if !sampling {
                                    let _ = run.exec.submit(vec![ToolResult::error(call.id, NO_SAMPLING)]);
                                } else if modern {
                                    asks.insert(call.id.clone(), InputRequest::CreateMessage(CreateMessageRequest::new(params)));
                                    run.awaiting.push(call.id);
                                } else {
                                    let peer = ctx.peer.clone();
                                    run.calls.spawn(async move {
                                        match peer.create_message(params).await {
                                            Ok(r) => sampled_answer(call.id, serde_json::to_value(&r).ok()),
                                            Err(e) => ToolResult::error(call.id, format!("the client could not answer llm_query: {e}")),
                                        }
                                    });
                                }
                                continue;
                            }
                            let downstream = self.shared.downstream.clone();
                            run.calls.spawn(async move {
                                let server = call.namespace.as_deref().and_then(|ns| downstream.server(ns)).cloned();
                                let outcome = match server {
                                    Some(server) => server.call(&call.name, call.input_value()).await,
                                    None => Err(format!("no downstream server for tool {:?}", call.name)),
                                };
                                match outcome {
                                    Ok(value) => ToolResult::ok(call.id, &value),
                                    Err(message) => ToolResult::error(call.id, message),
                                }
                            });
                        }
                        if !asks.is_empty() {
                            return self.park(run, asks);
                        }
                    }
                    Some(Event::Output { stream: OutputStream::Stdout, data }) => {
                        if let Some(token) = &progress {
                            printed.push_str(&String::from_utf8_lossy(&data));
                            if last_progress.elapsed() >= PROGRESS_EVERY {
                                progress_count += 1;
                                last_progress = Instant::now();
                                let message = tail(&std::mem::take(&mut printed), 1000);
                                let param = ProgressNotificationParam::new(token.clone(), progress_count.into()).with_message(message);
                                let _ = ctx.peer.notify_progress(param).await;
                            }
                        }
                    }
                    Some(Event::Output { .. }) => {}
                    Some(Event::Completed(done)) => break Ok(done),
                    Some(Event::Failed(failure)) => break Err(failure),
                    None => break Err(ptc_engine::Failure {
                        kind: FailureKind::Internal, message: "the execution ended without a result".into(),
                        traceback: String::new(), exit_code: None, stdout: String::new(), stderr: String::new(),
                        tool_calls: vec![], stats: Default::default(),
                    }),
                },
            }
        };
        // Calls still running downstream are abandoned (their futures dropped).
        run.calls.abort_all();
        finished(end, run.started.elapsed(), run.timeout_limit, run.notice.as_deref()).into()
    }

    /// Keeps the paused execution for the client's retry and asks the client for `asks`.
    fn park(&self, run: Run, asks: InputRequests) -> CallToolResponse {
        let mut parked = self.shared.parked.lock().unwrap();
        // Executions that ended early (cancelled, shut down) do not count against the cap.
        parked.retain(|_, r| !r.exec.control().is_finished());
        if parked.len() >= MAX_PARKED {
            drop(parked);
            run.exec.cancel();
            return failed_before_start(format!(
                "{MAX_PARKED} executions already wait for their clients to answer llm_query; try again later"
            ))
            .into();
        }
        let handle = random_hex::<16>();
        // A client that never comes back: at the deadline the engine has failed the
        // execution; drop it then, with its tenant slot and its calls in flight.
        let deadline = tokio::time::Instant::from_std(run.started + run.timeout_limit);
        let (shared, key) = (self.shared.clone(), handle.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            shared.parked.lock().unwrap().remove(&key);
        });
        parked.insert(handle.clone(), run);
        InputRequiredResult::new(Some(asks), Some(handle)).into()
    }
}

/// The program's end as the tool's result.
fn finished(
    end: Result<ptc_engine::Completion, ptc_engine::Failure>,
    elapsed: Duration,
    timeout_limit: Duration,
    notice: Option<&str>,
) -> CallToolResult {
    let mut result = finished_result(end, elapsed, timeout_limit);
    if let Some(notice) = notice
        && let Some(first) = result.content.first_mut()
        && let Some(text) = first.as_text()
    {
        *first = ContentBlock::text(format!("{notice}\n{}", text.text));
    }
    result
}

fn finished_result(
    end: Result<ptc_engine::Completion, ptc_engine::Failure>,
    elapsed: Duration,
    timeout_limit: Duration,
) -> CallToolResult {
    match end {
        Ok(done) => {
            let return_value: Value = serde_json::from_str(&done.return_value).unwrap_or(Value::Null);
            let structured = report(
                true,
                elapsed,
                timeout_limit,
                &done.stdout,
                &done.stderr,
                &return_value,
                Value::Null,
                &done.tool_calls,
            );
            let mut text = printed(&done.stdout, &done.stderr);
            if !return_value.is_null() {
                text.push_str(&format!("{}[return value] {}", newline_if_needed(&text), return_value));
            }
            if text.is_empty() {
                text.push_str("(the program printed nothing)");
            }
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content = Some(structured);
            result
        }
        Err(f) => {
            let (_, error, hint) = model_error(&f);
            let error_value = json!({"kind": f.kind.as_str(), "message": f.message});
            let structured =
                report(false, elapsed, timeout_limit, &f.stdout, &f.stderr, &Value::Null, error_value, &f.tool_calls);
            let mut text = printed(&f.stdout, &f.stderr);
            text.push_str(&format!("{}[error] {error}", newline_if_needed(&text)));
            if !hint.is_empty() && hint != error {
                text.push_str(&format!("\n{hint}"));
            }
            let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
            result.structured_content = Some(structured);
            result
        }
    }
}

/// An execution between two calls of its client (protocol 2026-07-28 sampling), or within one.
struct Run {
    exec: Execution,
    /// Downstream calls (and pre-2026 sampling requests) in flight; they keep running while
    /// the execution is parked.
    calls: JoinSet<ToolResult>,
    started: Instant,
    timeout_limit: Duration,
    _admission: Option<Admission>,
    tenant: Option<String>,
    /// llm_query calls the client was asked to sample for.
    awaiting: Vec<String>,
    /// Said before the program's output (a new live session replaced one that ended).
    notice: Option<String>,
}

/// Executions parked at once for clients' sampling (each is also a paused execution the
/// engine's and the tenant's caps count).
const MAX_PARKED: usize = 1000;

const LLM_QUERY: &str = "llm_query";

const NO_SAMPLING: &str = "llm_query needs an MCP client that supports sampling, and this client does not: \
do that reasoning yourself (print what you need, then answer in your reply)";

fn llm_query_def() -> ToolDef {
    ToolDef::new(LLM_QUERY)
        .with_description("Asks the connected client's model: returns its answer to `prompt` as text.")
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string"},
                "system": {"type": "string", "description": "A system prompt."},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": 16384, "description": "Default 1024."}
            },
            "required": ["prompt"],
            "additionalProperties": false
        }))
}

fn sampling_params(input: &Value) -> Result<CreateMessageRequestParams, String> {
    let prompt = input["prompt"].as_str().ok_or("llm_query needs a prompt")?;
    let max_tokens = input["max_tokens"].as_u64().unwrap_or(1024).min(16384) as u32;
    let mut params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], max_tokens);
    if let Some(system) = input["system"].as_str() {
        params = params.with_system_prompt(system);
    }
    Ok(params)
}

/// The program's answer to llm_query call `id` from a `sampling/createMessage` result (whose
/// `content` is one block or a list): its text.
fn sampled_answer(id: String, result: Option<Value>) -> ToolResult {
    let content = result.as_ref().map_or(&Value::Null, |r| &r["content"]);
    let blocks = match content {
        Value::Array(items) => items.iter().collect::<Vec<_>>(),
        other => vec![other],
    };
    let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    if text.is_empty() {
        ToolResult::error(id, "the client answered llm_query without text")
    } else {
        ToolResult::ok(id, &Value::String(text.join("")))
    }
}

const PERSIST: &str = " Globals (variables, imports, functions, classes) persist from one execute_code call to the \
next in this conversation, so load data once and reuse it; a timeout or cancellation starts over (the result says so).";

const EXECUTE_CODE_INTRO: &str = "Run a Python 3.14 program in a sandbox (standard library only, no network; files only in /mnt/data). \
The tools below are async functions grouped by server: `await server.tool(arg=...)`; run independent calls at once with \
`await asyncio.gather(...)`. Results arrive as Python values (dicts, lists, strings); a failing tool raises ToolError, \
which you can catch. Top-level await and `return value` work. Only what the program prints and returns comes back to you, \
so filter and summarise in code. `await llm_query(prompt, system=None, max_tokens=1024)` asks your client's model \
and returns its answer as a string. `describe_tools(names)` gives a tool's full documentation.";

fn tool_def(server: &str, tool: &Tool) -> ToolDef {
    let description = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default();
    ToolDef::new(tool.name.to_string())
        .with_namespace(server)
        .with_description(description)
        .with_parameters(Value::Object((*tool.input_schema).clone()))
}

/// The first sentence of a description, at most 100 characters.
fn summary(description: &str) -> String {
    let first = description.trim().lines().next().unwrap_or_default();
    let sentence = match first.find(". ") {
        Some(i) => &first[..=i],
        None => first,
    };
    if sentence.chars().count() > 100 {
        format!("{}…", sentence.chars().take(99).collect::<String>())
    } else {
        sentence.to_string()
    }
}

fn tail(text: &str, max_chars: usize) -> String {
    let n = text.chars().count();
    if n <= max_chars {
        text.to_string()
    } else {
        format!("…{}", text.chars().skip(n - max_chars).collect::<String>())
    }
}

/// What the program printed, as the result's text: stdout, then `[stderr]` and stderr.
fn printed(stdout: &str, stderr: &str) -> String {
    let mut text = stdout.to_string();
    if !stderr.is_empty() {
        text.push_str(&format!("{}[stderr]\n{stderr}", newline_if_needed(&text)));
    }
    text
}

fn newline_if_needed(text: &str) -> &'static str {
    if text.is_empty() || text.ends_with('\n') { "" } else { "\n" }
}

fn failed_before_start(message: String) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!("[error] {message}"))]);
    result.structured_content = Some(json!({
        "success": false, "stdout": "", "stderr": "", "return_value": null,
        "error": {"kind": "not_started", "message": message}, "tool_calls": [], "tool_calls_total": 0,
        "execution_time_seconds": 0.0,
    }));
    result
}

/// The structured result (reference 001's shape).
fn report(
    success: bool,
    elapsed: Duration,
    timeout: Duration,
    stdout: &str,
    stderr: &str,
    return_value: &Value,
    error: Value,
    calls: &[ToolCallRecord],
) -> Value {
    let listed: Vec<Value> = calls
        .iter()
        .take(LISTED_CALLS)
        .map(|c| {
            let name = match &c.namespace {
                Some(ns) => format!("{ns}.{}", c.name),
                None => c.name.clone(),
            };
            let args: Value = serde_json::from_str(&c.input)
                .ok()
                .filter(|_| c.input.chars().count() <= LISTED_INPUT_CHARS)
                .unwrap_or_else(|| Value::String(tail(&c.input, LISTED_INPUT_CHARS)));
            json!({
                "tool_name": name,
                "args": args,
                "tool_call_id": c.id,
                "has_error": !matches!(c.outcome, Some(Ok(_))),
                "duration_ms": c.duration.as_secs_f64() * 1000.0,
            })
        })
        .collect();
    json!({
        "success": success,
        "execution_time_seconds": elapsed.as_secs_f64(),
        "timeout_limit_seconds": timeout.as_secs_f64(),
        "stdout": stdout,
        "stderr": stderr,
        "return_value": return_value,
        "error": error,
        "tool_calls": listed,
        "tool_calls_total": calls.len(),
    })
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn output_schema() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "properties": {
            "success": {"type": "boolean"},
            "execution_time_seconds": {"type": "number"},
            "timeout_limit_seconds": {"type": "number"},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "return_value": {"description": "The program's top-level `return` value (JSON)."},
            "error": {
                "description": "null on success",
                "anyOf": [{"type": "null"}, {"type": "object", "properties": {"kind": {"type": "string"}, "message": {"type": "string"}}}]
            },
            "tool_calls": {
                "type": "array",
                "description": "The first 20 calls the program made.",
                "items": {"type": "object", "properties": {
                    "tool_name": {"type": "string"}, "args": {}, "tool_call_id": {"type": "string"},
                    "has_error": {"type": "boolean"}, "duration_ms": {"type": "number"}
                }}
            },
            "tool_calls_total": {"type": "integer"}
        },
        "required": ["success", "stdout", "stderr", "error", "tool_calls"]
    }))
}

impl ServerHandler for CodeMode {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("ptc-engine", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Call execute_code with one Python program that calls the downstream tools as async functions; \
                 only what it prints or returns comes back.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let description = match self.catalog(true, self.persistent(&ctx)).await {
            Ok(catalog) => catalog.description,
            Err(e) => format!("{EXECUTE_CODE_INTRO}\n\nNo tools can be offered now: {e}"),
        };
        let mut execute = Tool::new(
            "execute_code",
            description,
            object(json!({
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Python program."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "Deadline for the whole run, tool calls included."}
                },
                "required": ["code"]
            })),
        );
        execute.output_schema = Some(output_schema());
        let describe = Tool::new(
            "describe_tools",
            "The full Python stub (docstrings, every parameter) of the named tools, e.g. [\"github.create_issue\"]; all tools if no names are given.",
            object(json!({
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string"}}}
            })),
        );
        Ok(ListToolsResult::with_all_items(vec![execute, describe]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let result = match request.name.as_ref() {
            "execute_code" => return self.execute(request, ctx).await,
            "describe_tools" => self.describe(&request.arguments.unwrap_or_default()).await?,
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown tool {other:?}; this server has execute_code and describe_tools"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        // A downstream tool list changed: so did execute_code's description.
        let mut changes = self.shared.downstream.subscribe();
        tokio::spawn(async move {
            while changes.recv().await.is_ok() {
                if ctx.peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.shared.downstream.subscribe();
        loop {
            tokio::select! {
                _ = ctx.cancelled() => return Ok(()),
                changed = changes.recv() => {
                    if changed.is_err() || ctx.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
