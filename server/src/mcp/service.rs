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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ptc_engine::{
    Engine, Event, Execution, ExecutionRequest, FailureKind, Limits, OutputStream, Runtime, ToolCallRecord, ToolDef,
    ToolDescription, ToolResult,
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
use tokio_util::task::TaskTracker;

use super::downstream::{Downstream, Listing};
use crate::auth::LOCAL_TENANT;
use crate::files::FileStore;
use crate::http::api::model_error;
use crate::run_files::RunFiles;
use crate::sessions::{LiveSession, OpenOptions, SessionError, Sessions};
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
    /// Whether each downstream tool's input schema can be checked (`check_tool_schema`), by
    /// (server, tool), with the schema it was decided for (a listing shares it until the
    /// server's tools change).
    schema_checks: Mutex<HashMap<(String, String), SchemaCheck>>,
    /// The last rendering of the callable tools' signatures, for `execute_code`'s description:
    /// every client lists the tools, and rendering them takes an instance.
    described: Mutex<Option<(Vec<ToolDef>, Arc<ToolDescription>)>>,
    /// `Some`: programs keep their globals (variables, imports, functions) and `/mnt/data`
    /// (if the registry keeps files) in live sessions of this registry: one per MCP session,
    /// or (protocol 2026-07-28 over HTTP, which has no MCP sessions) those a program names
    /// with `session`. `None`: each program runs in a fresh sandbox.
    pub sessions: Option<Arc<Sessions>>,
    /// Where the file-quota watchers of programs in sessions with files run (the server's
    /// request tasks, which shutdown waits for).
    tasks: TaskTracker,
    /// The Python every program runs in.
    pub runtime: Runtime,
    /// Handlers alive (one per MCP session over HTTP, per request at protocol 2026-07-28) and
    /// their listeners for tool changes: what an ended session must not leave behind.
    handlers: Arc<AtomicUsize>,
    listeners: Arc<AtomicUsize>,
}

impl Shared {
    pub fn new(
        engine: Engine,
        downstream: Arc<Downstream>,
        tenants: Option<Arc<Tenants>>,
        limits: Limits,
        sessions: Option<Arc<Sessions>>,
        tasks: TaskTracker,
        runtime: Runtime,
    ) -> Arc<Self> {
        let parked = Mutex::new(HashMap::new());
        Arc::new(Shared {
            engine,
            downstream,
            tenants,
            limits,
            parked,
            schema_checks: Mutex::default(),
            described: Mutex::default(),
            sessions,
            tasks,
            runtime,
            handlers: Arc::default(),
            listeners: Arc::default(),
        })
    }
}

impl Shared {
    /// MCP handlers alive now.
    pub fn handlers(&self) -> usize {
        self.handlers.load(Ordering::Acquire)
    }

    /// Listeners for tool changes alive now (one per MCP session that initialized).
    pub fn listeners(&self) -> usize {
        self.listeners.load(Ordering::Acquire)
    }

    /// Why `tool`'s input schema cannot be used (too costly to check, invalid), if it cannot.
    fn schema_problem(&self, server: &str, tool: &Tool) -> Option<String> {
        let key = (server.to_string(), tool.name.to_string());
        if let Some((schema, problem)) = self.schema_checks.lock().unwrap().get(&key)
            && Arc::ptr_eq(schema, &tool.input_schema)
        {
            return problem.clone();
        }
        let problem = ptc_engine::check_tool_schema(&tool_def(server, tool)).err().map(|e| e.message().to_string());
        self.schema_checks.lock().unwrap().insert(key, (tool.input_schema.clone(), problem.clone()));
        problem
    }

    /// The signatures of `defs`, rendered once for as long as the tools stay the same; a
    /// rendering is admitted like an execution of `tenant`.
    async fn described(&self, defs: &[ToolDef], tenant: Option<&str>) -> Result<Arc<ToolDescription>, String> {
        if let Some((last, described)) = self.described.lock().unwrap().as_ref()
            && last.as_slice() == defs
        {
            return Ok(described.clone());
        }
        let described = self.describe_admitted(defs, tenant).await?;
        let described = Arc::new(described);
        *self.described.lock().unwrap() = Some((defs.to_vec(), described.clone()));
        Ok(described)
    }

    /// Renders `defs` in an instance, admitted like one of `tenant`'s executions.
    async fn describe_admitted(&self, defs: &[ToolDef], tenant: Option<&str>) -> Result<ToolDescription, String> {
        let _admission = match (&self.tenants, tenant) {
            (Some(tenants), Some(tenant)) => Some(tenants.admit(tenant, None).map_err(|r| r.message().to_string())?),
            _ => None,
        };
        self.engine
            .describe_tools(defs, tenant)
            .await
            .map_err(|e| format!("the downstream tools cannot be offered to programs: {}", e.message()))
    }
}

/// The tenant an MCP request runs for (HTTP; `None` on stdio).
fn tenant_of(extensions: &rmcp::model::Extensions) -> Option<String> {
    extensions.get::<axum::http::request::Parts>().and_then(|p| p.extensions.get::<McpTenant>()).map(|t| t.0.clone())
}

/// A downstream tool's input schema, and why it cannot be used (`None`: it can).
type SchemaCheck = (Arc<JsonObject>, Option<String>);

/// How the programs of one connection keep state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Each program in a fresh sandbox.
    Fresh,
    /// All programs of the MCP session in one live session.
    Persistent,
    /// Fresh unless the program names a session (`session="new"` or an earlier result's id).
    Handles,
}

/// A connection's live session in the registry; closed when the MCP session ends.
struct Held {
    sessions: Arc<Sessions>,
    tenant: String,
    id: String,
    live: LiveSession,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.sessions.close(&self.tenant, &self.id);
    }
}

/// One MCP connection's handler (cheap to clone: everything is shared).
#[derive(Clone)]
pub struct CodeMode {
    shared: Arc<Shared>,
    /// This MCP session's live session, opened by its first `execute_code`; the lock also
    /// runs its programs one after another. Dropped (and so closed) with the MCP session.
    live: Arc<tokio::sync::Mutex<Option<Held>>>,
    /// Cancelled when the last clone of the handler goes, which rmcp drops when the MCP session
    /// ends: what the session's own tasks (the tool-change listener) stop on. A listener that
    /// waited on the broadcast alone outlived its session, ~6.5 KiB each for good.
    ended: Arc<Ended>,
}

struct Ended {
    token: tokio_util::sync::CancellationToken,
    handlers: Arc<AtomicUsize>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.token.cancel();
        self.handlers.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!("ptc_mcp_handlers").decrement(1.0);
    }
}

/// The callable tools as a program sees them, and what the model is told about them.
struct Catalog {
    defs: Vec<ToolDef>,
    /// `execute_code`'s description.
    description: String,
}

impl CodeMode {
    pub fn new(shared: Arc<Shared>) -> Self {
        metrics::gauge!("ptc_mcp_handlers").increment(1.0);
        shared.handlers.fetch_add(1, Ordering::AcqRel);
        let handlers = shared.handlers.clone();
        let ended = Arc::new(Ended { token: tokio_util::sync::CancellationToken::new(), handlers });
        CodeMode { shared, live: Arc::default(), ended }
    }

    /// The callable tools, and with `describe` also execute_code's description (which costs
    /// an instance to render the signatures, so an execution does without it). A tool whose
    /// input schema this server cannot check (`check_tool_schema`) is set aside as not callable,
    /// with the reason, rather than failing every program.
    async fn catalog(&self, describe: bool, mode: Mode, tenant: Option<&str>) -> Result<Catalog, String> {
        let listings = self.shared.downstream.listings(tenant).await;
        let mut defs = Vec::new();
        let mut not_callable = Vec::new();
        let mut unavailable = Vec::new();
        for Listing { server, tools } in &listings {
            match tools {
                Ok(tools) => {
                    for t in tools {
                        match t.not_callable {
                            None => match self.shared.schema_problem(server, &t.tool) {
                                None => defs.push(tool_def(server, &t.tool)),
                                Some(why) => not_callable.push(format!("{server}.{} ({why})", t.tool.name)),
                            },
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
        let described = self.shared.described(&defs, tenant).await?;
        let mut text = intro(self.shared.runtime);
        text.push_str(&self.state_text(mode));
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

    /// What execute_code's description says about state kept between calls.
    fn state_text(&self, mode: Mode) -> String {
        let Some(sessions) = &self.shared.sessions else { return String::new() };
        let files = sessions.file_store().is_some();
        match mode {
            Mode::Fresh => String::new(),
            Mode::Persistent => {
                let files = if files {
                    " Files it writes in /mnt/data stay for later calls too (within a storage quota)."
                } else {
                    ""
                };
                format!("{PERSIST}{files}")
            }
            Mode::Handles => format!(
                " Each call starts afresh unless it names a session: pass session=\"new\" to keep the globals (variables, \
                 imports, functions){} for later calls; the result's last line names the session, and passing that id as \
                 `session` continues from there. A session ends after {} minutes without a call.",
                if files { " and the files in /mnt/data" } else { "" },
                idle_minutes(sessions)
            ),
        }
    }

    async fn describe(&self, args: &JsonObject, tenant: Option<&str>) -> Result<CallToolResult, McpError> {
        let names: Option<Vec<String>> = match args.get("names") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|_| {
                McpError::invalid_params(
                    "describe_tools: \"names\" must be a list of tool names like \"server.tool\"",
                    None,
                )
            })?),
        };
        let catalog = self.catalog(false, Mode::Fresh, tenant).await.map_err(|e| McpError::internal_error(e, None))?;
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
        let described = match self.shared.describe_admitted(&chosen, tenant).await {
            Ok(described) => described,
            Err(why) => return Ok(CallToolResult::error(vec![ContentBlock::text(why)])),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(described.stub)]))
    }

    async fn execute(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tenant = tenant_of(&ctx.extensions);
        // A retried call (protocol 2026-07-28) carries the sampled answers to the program's
        // llm_query calls and the handle of its parked execution. Another tenant's handle is
        // as unknown as one that never existed, and leaves the execution parked.
        if let Some(handle) = &request.request_state {
            let parked = {
                let mut parked = self.shared.parked.lock().unwrap();
                match parked.get(handle) {
                    Some(run) if run.tenant == tenant => parked.remove(handle),
                    _ => None,
                }
            };
            let Some(mut run) = parked else {
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
        // Bad arguments are tool errors, not protocol errors, so that the model sees them and
        // can correct its call (as the MCP specification asks of input validation).
        let args = request.arguments.unwrap_or_default();
        let Some(code) = args.get("code").and_then(Value::as_str) else {
            let message = "execute_code needs \"code\": the Python program to run, as a string";
            return Ok(failed_before_start(message.into()).into());
        };
        let mut limits = self.shared.limits.clone();
        match args.get("timeout_ms") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64() {
                Some(ms) if ms > 0 => limits = limits.with_timeout(Duration::from_millis(ms)),
                _ => {
                    let message = "\"timeout_ms\" must be a positive integer (milliseconds for the whole run)";
                    return Ok(failed_before_start(message.into()).into());
                }
            },
        }
        let timeout_limit = limits.timeout;
        let mut catalog = match self.catalog(false, Mode::Fresh, tenant.as_deref()).await {
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
        let mut exec_request =
            ExecutionRequest::new(code).with_tools(catalog.defs).with_limits(limits).with_runtime(self.shared.runtime);
        if let Some(tenant) = &tenant {
            exec_request = exec_request.with_tenant(tenant.clone());
        }
        let started = Instant::now();
        let mode = self.mode(&ctx);
        let requested = match (mode, args.get("session")) {
            (Mode::Handles, Some(Value::String(id))) => Some(id.clone()),
            (_, None | Some(Value::Null)) => None,
            (Mode::Handles, Some(_)) => {
                let message = "\"session\" must be \"new\" or the id (a string) of the session an earlier result named";
                return Ok(failed_before_start(message.into()).into());
            }
            // Not offered on this connection (its programs share one session, or none).
            (_, Some(_)) => None,
        };
        // Persistent: programs of this MCP session run one after another in its live session:
        // the lock is held until the program ends (or is parked for sampling).
        let mut held = match mode {
            Mode::Persistent => Some(self.live.clone().lock_owned().await),
            _ => None,
        };
        let mut notice = None;
        let live = match (held.as_deref_mut(), &requested, &self.shared.sessions) {
            (Some(slot), _, Some(sessions)) => self.held_session(sessions, slot, &tenant, &mut notice).await.map(Some),
            (None, Some(id), Some(sessions)) => self.named_session(sessions, id, &tenant, &mut notice).await.map(Some),
            _ => Ok(None),
        };
        let live = match live {
            Ok(live) => live,
            Err(e) => return Ok(failed_before_start(e.message().to_string()).into()),
        };
        let files = match (&live, &self.shared.sessions) {
            (Some((_, live)), Some(sessions)) => match sessions.resume_files(live).await {
                Ok(files) => files,
                Err(e) => return Ok(failed_before_start(SessionError::from(e).message().to_string()).into()),
            },
            _ => None,
        };
        let exec = match &live {
            None => self.shared.engine.start(exec_request).await,
            Some((_, l)) => self.shared.engine.execute_in(&l.session, exec_request).await,
        };
        let exec = match exec {
            Ok(exec) => exec,
            Err(e) => return Ok(failed_before_start(e.message().to_string()).into()),
        };
        if let Some(a) = &admission {
            a.attach(exec.control());
        }
        if let Some((store, run)) = &files {
            run.watch(store, exec.control(), &self.shared.tasks);
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
            files,
            named: live.filter(|_| mode == Mode::Handles).map(|(id, _)| id),
        };
        let response = self.proceed(run, &ctx).await;
        drop(held);
        Ok(response)
    }

    /// How this connection's programs keep state: in one live session per MCP session (stdio;
    /// over HTTP, protocols before 2026-07-28), in sessions they name (2026-07-28 over HTTP,
    /// which removed MCP sessions, so each request there gets a handler of its own), or not.
    fn mode(&self, ctx: &RequestContext<RoleServer>) -> Mode {
        let http = ctx.extensions.get::<axum::http::request::Parts>().is_some();
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        match (&self.shared.sessions, http && modern) {
            (None, _) => Mode::Fresh,
            (Some(_), false) => Mode::Persistent,
            (Some(_), true) => Mode::Handles,
        }
    }

    /// This MCP session's live session, opened if it has none or it ended (`notice` then tells
    /// the model its earlier variables are gone).
    async fn held_session(
        &self,
        sessions: &Arc<Sessions>,
        slot: &mut Option<Held>,
        tenant: &Option<String>,
        notice: &mut Option<String>,
    ) -> Result<(String, LiveSession), SessionError> {
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
        let (id, live) = self.open_session(sessions, &tenant).await?;
        let held = slot.insert(Held { sessions: sessions.clone(), tenant, id, live });
        Ok((held.id.clone(), held.live.clone()))
    }

    /// The session a program named: `"new"` opens one; an id that is unknown or ended opens
    /// one too, and `notice` says so (the program may rely on what is gone).
    async fn named_session(
        &self,
        sessions: &Arc<Sessions>,
        id: &str,
        tenant: &Option<String>,
        notice: &mut Option<String>,
    ) -> Result<(String, LiveSession), SessionError> {
        let tenant = tenant.as_deref().unwrap_or(LOCAL_TENANT);
        if id != "new" {
            match sessions.get(tenant, id) {
                Ok(live) => return Ok((id.to_string(), live)),
                Err(SessionError::NotFound(_)) => {
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
        self.open_session(sessions, tenant).await
    }

    /// A new live session of `tenant` with this front end's limits.
    async fn open_session(&self, sessions: &Sessions, tenant: &str) -> Result<(String, LiveSession), SessionError> {
        let options = OpenOptions {
            limits: Some(self.shared.limits.clone()),
            runtime: self.shared.runtime,
            ..Default::default()
        };
        let opened = sessions.open(tenant, options).await?;
        Ok((opened.id, opened.live))
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
                            let server = call.namespace.as_deref().and_then(|ns| self.shared.downstream.server(ns, run.tenant.as_deref()));
                            run.calls.spawn(async move {
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
        let elapsed = run.started.elapsed();
        let mut result = match &run.files {
            Some((store, files)) => settled(end, files, store, elapsed, run.timeout_limit).await,
            None => finished_result(end, elapsed, run.timeout_limit),
        };
        if let Some(notice) = &run.notice {
            prefix_text(&mut result, notice);
        }
        if let Some(id) = &run.named {
            add_session(&mut result, id);
        }
        result.into()
    }

    /// Keeps the paused execution for the client's retry and asks the client for `asks`.
    fn park(&self, run: Run, asks: InputRequests) -> CallToolResponse {
        let mut parked = self.shared.parked.lock().unwrap();
        // Executions that ended early (cancelled, shut down) do not count against the cap.
        parked.retain(|_, r| !r.exec.control().is_finished());
        let mine = parked.values().filter(|r| r.tenant == run.tenant).count();
        let full = if mine >= MAX_PARKED_PER_TENANT {
            Some(format!(
                "{mine} executions of this key already wait for their clients to answer llm_query (the limit)"
            ))
        } else if parked.len() >= MAX_PARKED {
            Some(format!("{MAX_PARKED} executions already wait for their clients to answer llm_query"))
        } else {
            None
        };
        if let Some(full) = full {
            drop(parked);
            run.exec.cancel();
            return failed_before_start(format!(
                "{full}; answer or cancel those first, or try again later (this program was not run to its end)"
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

/// The program's end as the tool's result, once its session's files are settled: if they
/// left the tenant over its file quota, an error of kind `file_quota` (what the program wrote
/// is gone; if it was stopped mid-way for it, so is the session).
async fn settled(
    end: Result<ptc_engine::Completion, ptc_engine::Failure>,
    files: &Arc<RunFiles>,
    store: &Arc<FileStore>,
    elapsed: Duration,
    timeout_limit: Duration,
) -> CallToolResult {
    let settled = files.settle(store).await;
    let Some(quota) = files.quota_breach(&settled) else {
        let mut result = finished_result(end, elapsed, timeout_limit);
        if let Ok(changed) = settled {
            let images = changed.iter().filter(|f| looks_like_image(&f.name)).cloned().collect();
            let images = files.read(store, images, MAX_IMAGE_BYTES).await;
            add_files(&mut result, &changed, images);
        }
        return result;
    };
    let stopped = if files.over_quota().is_some() {
        " The program was stopped mid-way for it, so its session has ended."
    } else {
        ""
    };
    let message = format!("{quota}{stopped}");
    let (stdout, stderr, calls) = match &end {
        Ok(c) => (&c.stdout, &c.stderr, &c.tool_calls),
        Err(f) => (&f.stdout, &f.stderr, &f.tool_calls),
    };
    let error = json!({"kind": "file_quota", "message": message});
    let structured = report(false, elapsed, timeout_limit, stdout, stderr, &Value::Null, error, calls);
    let mut text = printed(stdout, stderr);
    text.push_str(&format!("{}[error] {message}", newline_if_needed(&text)));
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// The most image bytes one result carries (base64 makes them a third larger on the wire).
const MAX_IMAGE_BYTES: u64 = 2 * 1024 * 1024;

/// Whether a file's name says image: only those are read to be shown.
fn looks_like_image(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".gif", ".webp"].iter().any(|ext| lower.ends_with(ext))
}

/// The image type of a file the program wrote, by its first bytes (never by its name alone).
fn image_type(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

/// Names the files a program created or changed in /mnt/data after its output, and adds the
/// images among them (`images`, read within [`MAX_IMAGE_BYTES`]) as images the client can
/// show its model.
fn add_files(
    result: &mut CallToolResult,
    changed: &[crate::files::FileRef],
    images: Vec<(crate::files::FileRef, Option<Vec<u8>>)>,
) {
    if changed.is_empty() {
        return;
    }
    let mut shown = Vec::new();
    let mut too_large = Vec::new();
    for (file, bytes) in images {
        match bytes.as_deref().map(|b| (b, image_type(b))) {
            Some((bytes, Some(mime))) => {
                use base64::Engine as _;
                shown.push(ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(bytes), mime));
            }
            Some((_, None)) => {} // named like an image, but is not one
            None => too_large.push(file.name),
        }
    }
    let listed: Vec<String> = changed.iter().map(|f| format!("/mnt/data/{} ({} bytes)", f.name, f.size)).collect();
    let mut line = format!("[files written] {}", listed.join(", "));
    if !too_large.is_empty() {
        line.push_str(&format!(
            "\n[not shown] {}: the images of one result are limited to {MAX_IMAGE_BYTES} bytes; save smaller ones \
             (a lower dpi or figsize)",
            too_large.join(", ")
        ));
    }
    append_line(result, &line);
    result.content.extend(shown);
}

/// `line` after the result's text, on a line of its own.
fn append_line(result: &mut CallToolResult, line: &str) {
    if let Some(first) = result.content.first_mut()
        && let Some(text) = first.as_text()
    {
        *first = ContentBlock::text(format!("{}{}{line}", text.text, newline_if_needed(&text.text)));
    }
}

/// How long a session may sit idle, in whole minutes (as the model is told).
fn idle_minutes(sessions: &Sessions) -> u64 {
    sessions.limits().idle_timeout.as_secs().div_ceil(60)
}

/// `notice` before the result's text.
fn prefix_text(result: &mut CallToolResult, notice: &str) {
    if let Some(first) = result.content.first_mut()
        && let Some(text) = first.as_text()
    {
        *first = ContentBlock::text(format!("{notice}\n{}", text.text));
    }
}

/// The session a program ran in, as the result's last line and its `session` field.
fn add_session(result: &mut CallToolResult, id: &str) {
    append_line(result, &format!("[session] {id} (pass session={id:?} to continue in it)"));
    if let Some(Value::Object(map)) = &mut result.structured_content {
        map.insert("session".into(), Value::String(id.to_string()));
    }
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
    /// The session's `/mnt/data`, settled against the tenant's quota when the program ends.
    files: Option<(Arc<FileStore>, Arc<RunFiles>)>,
    /// The id of the session the program named (`session`), said after its output.
    named: Option<String>,
}

/// Executions parked at once for clients' sampling (each is also a paused execution the
/// engine's and the tenant's caps count), and of them one tenant's: one tenant once took all
/// 1,000 places for 300 s each, and every other tenant's `llm_query` failed meanwhile.
const MAX_PARKED: usize = 1000;
const MAX_PARKED_PER_TENANT: usize = 100;

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

/// The start of `execute_code`'s description: what the program runs in, then [`EXECUTE_CODE_TOOLS`].
fn intro(runtime: Runtime) -> String {
    let python = match runtime {
        Runtime::PythonData => {
            "Run a Python 3.15 program in a sandbox with numpy, pandas, matplotlib (save figures with \
             plt.savefig('/mnt/data/NAME.png') where /mnt/data exists: they come back as images), scipy and scikit-learn \
             (no network)."
        }
        _ => "Run a Python 3.14 program in a sandbox (standard library only, no network).",
    };
    format!("{python} {EXECUTE_CODE_TOOLS}")
}

const EXECUTE_CODE_TOOLS: &str = "The tools below are async functions grouped by server: `await server.tool(arg=...)`; run independent calls at once with \
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
            "tool_calls_total": {"type": "integer"},
            "session": {"type": "string", "description": "The session the program ran in, when it named one."}
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
        let mode = self.mode(&ctx);
        let description = match self.catalog(true, mode, tenant_of(&ctx.extensions).as_deref()).await {
            Ok(catalog) => catalog.description,
            Err(e) => format!("{}\n\nNo tools can be offered now: {e}", intro(self.shared.runtime)),
        };
        let mut input = json!({
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python program."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Deadline for the whole run, tool calls included."}
            },
            "required": ["code"]
        });
        if mode == Mode::Handles {
            input["properties"]["session"] = json!({
                "type": "string",
                "description": "\"new\" to run in a new session that keeps its state for later calls, or the id of the session an earlier result named to continue in it; omit for a one-off program."
            });
        }
        let mut execute = Tool::new("execute_code", description, object(input));
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
            "describe_tools" => {
                let tenant = tenant_of(&ctx.extensions);
                self.describe(&request.arguments.unwrap_or_default(), tenant.as_deref()).await?
            }
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
        // A downstream tool list changed: so did execute_code's description. Until the MCP
        // session ends (its handler is dropped), whatever the downstream servers do.
        let mut changes = self.shared.downstream.subscribe();
        let ended = self.ended.token.clone();
        let peer = ctx.peer;
        let listeners = self.shared.listeners.clone();
        listeners.fetch_add(1, Ordering::AcqRel);
        metrics::gauge!("ptc_mcp_listeners").increment(1.0);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = ended.cancelled() => break,
                    changed = changes.recv() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                }
            }
            listeners.fetch_sub(1, Ordering::AcqRel);
            metrics::gauge!("ptc_mcp_listeners").decrement(1.0);
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
