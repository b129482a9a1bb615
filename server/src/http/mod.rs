//! The LibreChat-compatible HTTP Code API (axum): `POST /exec/programmatic` with signed
//! continuation tokens, `POST /exec`, and `POST /exec/programmatic/cancel`.
//!
//! Unlike servers that re-run the whole script every round, a paused execution here is the
//! live instance: a continuation request hands it the results and it resumes where it was.
//!
//! LibreChat's client shows a model only `stderr` and a fixed set of `error` strings, and turns
//! every 4xx into "the request was rejected, check the tool input". So a failure the *program*
//! caused answers 200 with `status: "error"`, one of those strings, and a line in `stderr` that
//! says what happened and what to do; 4xx is kept for malformed requests, auth and tokens.

pub(crate) mod api;
mod files;
mod paused;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ptc_engine::Runtime;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::ApiKeys;
use crate::cluster::{Cluster, ForwardError, JournalHeader, Saving};
use crate::conn::HttpLimits;
use crate::files::FileStore;
use crate::run_files::RunFiles;
use crate::tenants::Tenants;
use crate::token::{Claims, Signer, TokenError, now_ms};
use api::{
    ApiError, ApiJson, CancelRequest, ExecRequest, ProgrammaticRequest, RunOptions, Tenant, ToolCallOut, ToolResultSpec,
};
use paused::{Paused, Registry};
use ptc_engine::{
    Engine, Entry, ErrorKind, Event, Execution, ExecutionRequest, Journal, ToolCall, ToolDef, ToolResult,
};

const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";

pub struct HttpState {
    pub engine: Engine,
    pub keys: Arc<ApiKeys>,
    pub tenants: Arc<Tenants>,
    pub signer: Signer,
    pub files: Arc<FileStore>,
    pub limits: HttpLimits,
    paused: Registry,
    /// The file watchers of running executions (waited for at shutdown).
    tasks: TaskTracker,
    /// The runtime of a run that names none.
    runtime: Runtime,
    /// This node, its peers and what they share.
    pub cluster: Arc<Cluster>,
}

impl HttpState {
    pub fn new(
        engine: Engine,
        keys: Arc<ApiKeys>,
        tenants: Arc<Tenants>,
        signer: Signer,
        files: Arc<FileStore>,
        limits: HttpLimits,
        tasks: TaskTracker,
        runtime: Runtime,
        cluster: Arc<Cluster>,
    ) -> Arc<Self> {
        Arc::new(HttpState {
            engine,
            keys,
            tenants,
            signer,
            files,
            limits,
            paused: Registry::default(),
            tasks,
            runtime,
            cluster,
        })
    }

    /// Executions paused between two requests.
    pub fn paused_count(&self) -> usize {
        self.paused.len()
    }

    /// Drops paused executions that have ended (deadline passed, cancelled, quota).
    pub fn sweep(&self) {
        self.paused.sweep();
    }

    /// Drops every paused execution (at shutdown, once the engine has failed them).
    pub fn clear(&self) {
        self.paused.clear();
    }
}

/// The background work of the HTTP API, until `stop`: expired paused executions every second,
/// session retention every minute.
pub async fn sweep(state: Arc<HttpState>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for n in 0u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        state.sweep();
        if n % 60 == 0 {
            let files = state.files.clone();
            let _ = tokio::task::spawn_blocking(move || files.sweep()).await;
        }
    }
}

pub fn router(state: Arc<HttpState>) -> axum::Router {
    // The whole multipart body, with room for its parts' headers.
    let upload_limit = DefaultBodyLimit::max(
        usize::try_from(state.limits.max_upload_bytes).unwrap_or(usize::MAX).saturating_add(64 << 10),
    );
    axum::Router::new()
        .route("/exec/programmatic", post(programmatic))
        .route("/exec/programmatic/cancel", post(cancel))
        .route("/exec", post(exec))
        .route("/upload", post(files::upload).layer(upload_limit))
        .route("/upload/batch", post(files::upload_batch).layer(upload_limit))
        .route("/files/{session_id}", get(files::list))
        .route("/download/{session_id}/{file_id}", get(files::download))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "Not found: this server answers POST /exec, /exec/programmatic, /exec/programmatic/cancel, /upload and \
                 /upload/batch, and GET /files/{session_id} and /download/{session_id}/{file_id}",
            )
        })
        .with_state(state)
}

async fn programmatic(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ProgrammaticRequest>,
) -> Result<Response, ApiError> {
    if let Some(token) = request.continuation_token {
        let results =
            request.tool_results.ok_or_else(|| ApiError::bad_request("tool_results (an array) is required"))?;
        return continuation(&state, tenant, &headers, &token, results).await;
    }
    let tools = request.tools.unwrap_or_default().into_iter().map(ToolDef::from).collect();
    initial(&state, tenant, &headers, request.code, tools, request.run).await
}

async fn exec(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ExecRequest>,
) -> Result<Response, ApiError> {
    if let Some(lang) = request.lang.as_deref()
        && !matches!(lang, "py" | "python" | "python3")
    {
        return Err(ApiError::bad_request(format!("unsupported language {lang:?}: only Python (\"py\") runs here")));
    }
    initial(&state, tenant, &headers, request.code, vec![], request.run).await
}

async fn cancel(
    State(state): State<Arc<HttpState>>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    ApiJson(request): ApiJson<CancelRequest>,
) -> Result<Response, ApiError> {
    let request_id = request
        .request_id
        .or_else(|| headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned))
        .ok_or_else(|| ApiError::bad_request("request_id is required"))?;
    let cancelled = || Json(json!({"status": "cancelled", "request_id": request_id})).into_response();
    if let Some(control) = state.tenants.by_request_id(&tenant, &request_id) {
        control.cancel();
        // A paused execution is forgotten now, not at its deadline: its instance, tenant slot and
        // request id are free for the next request.
        state.paused.forget(control.id());
        let _ = state.cluster.store.forget(control.id()).await;
        return Ok(cancelled());
    }
    // Another node's, or a lost node's (whose journal nobody may resume now).
    let cluster = &state.cluster;
    if let Ok(Some((id, node))) = cluster.store.request(&tenant, &request_id).await {
        if node != cluster.node && !cluster.forwarded(&headers) {
            let body = json!({"request_id": request_id}).to_string().into_bytes();
            match cluster.forward(&node, "/exec/programmatic/cancel", &headers, body).await {
                Ok(response) => return Ok(response),
                Err(e) => tracing::warn!(%node, "cancel: the owner is unreachable ({e:?}); its journal is dropped"),
            }
        }
        state.paused.forget(&id);
        if cluster.store.forget(&id).await.is_ok() {
            return Ok(cancelled());
        }
    }
    Err(ApiError::new(StatusCode::NOT_FOUND, format!("no running execution with request id {request_id:?}")))
}

/// The limits of a run: the engine's defaults with the request's timeout, which must lie
/// within the engine's ceilings.
fn limits(engine: &Engine, timeout_ms: Option<u64>) -> Result<ptc_engine::Limits, ApiError> {
    let config = engine.config();
    let limits = config.default_limits.clone();
    let Some(ms) = timeout_ms else { return Ok(limits) };
    let (min, max) = (config.ceilings.min_timeout.as_millis() as u64, config.ceilings.max_timeout.as_millis() as u64);
    if !(min..=max).contains(&ms) {
        return Err(ApiError::bad_request(format!("timeout must be an integer between {min} and {max} (ms)")));
    }
    Ok(limits.with_timeout(Duration::from_millis(ms)))
}

/// Where an execution stopped: paused for tools (in a round), or ended.
enum Stop {
    Calls(u32, Vec<ToolCall>),
    Completed(ptc_engine::Completion),
    Failed(ptc_engine::Failure),
}

async fn advance(execution: &mut Execution) -> Stop {
    loop {
        match execution.next_event().await {
            Some(Event::ToolCalls { round, calls }) => return Stop::Calls(round, calls),
            Some(Event::Completed(c)) => return Stop::Completed(c),
            Some(Event::Failed(f)) => return Stop::Failed(f),
            Some(Event::Output { .. }) => {} // the final event carries all of it
            None => unreachable!("an execution always ends with Completed or Failed"),
        }
    }
}

async fn initial(
    state: &HttpState,
    tenant: String,
    headers: &HeaderMap,
    code: Option<String>,
    tools: Vec<ToolDef>,
    options: RunOptions,
) -> Result<Response, ApiError> {
    let code = code.ok_or_else(|| ApiError::bad_request("code (a string) is required"))?;
    let runtime = match options.runtime.as_deref() {
        None => state.runtime,
        Some(name) => name.parse().map_err(|e: ptc_engine::Error| ApiError::bad_request(e.message()))?,
    };
    let limits = limits(&state.engine, options.timeout)?;
    let session_id = options.session_id.filter(|s| !s.is_empty()).unwrap_or_else(crate::files::new_session_id);
    let imports = options.files.unwrap_or_default().into_iter().map(Into::into).collect();
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let admission = state.tenants.admit(&tenant, request_id)?;
    let run = RunFiles::prepare(&state.files, &tenant, &session_id, imports).await?;
    let expires_at_ms = now_ms() + limits.timeout.as_millis() as u64;
    let ttl = limits.timeout;
    // With a shared store, the run is journaled so that another node can finish it.
    let journal = (state.cluster.journaling() && runtime == Runtime::Python).then(Journal::new);
    let header = journal.as_ref().map(|j| {
        let header = JournalHeader {
            code: code.clone(),
            tools: tools.clone(),
            tenant: tenant.clone(),
            session_id: session_id.clone(),
            runtime: runtime.as_str().to_string(),
            seed: hex::encode(j.seed),
            expires_at_ms,
            files: run.before().export(),
        };
        serde_json::to_vec(&header).expect("a header serialises")
    });
    let mut request = ExecutionRequest::new(code)
        .with_tools(tools)
        .with_limits(limits)
        .with_session_id(session_id.clone())
        .with_data_dir(run.session.path.clone())
        .with_tenant(tenant.clone())
        .with_runtime(runtime);
    request.journal = journal;
    let mut execution = state.engine.start(request).await?;
    admission.attach(execution.control());
    run.watch(&state.files, execution.control(), &state.tasks);
    tracing::info!(execution = %execution.id(), %tenant, session = %session_id, "http execution started");
    let cluster = &state.cluster;
    if let Some(request_id) = request_id
        && !cluster.is_single()
        && let Err(e) = cluster.store.set_request(&tenant, request_id, execution.id(), &cluster.node, ttl).await
    {
        tracing::warn!("recording request id {request_id:?}: {e}");
    }
    if cluster.journaling() {
        let _ = cluster.store.add_usage(&tenant, "executions", 1).await;
    }
    match advance(&mut execution).await {
        Stop::Calls(round, calls) => {
            let paused = Paused {
                id: execution.id().to_string(),
                journaled: header.is_some(),
                header,
                execution,
                run,
                tenant,
                session_id,
                round,
                expires_at_ms,
                _admission: admission,
            };
            Ok(pause(state, paused, calls).await)
        }
        ended => Ok(ended_response(state, &run, ended).await),
    }
}

async fn continuation(
    state: &HttpState,
    tenant: String,
    headers: &HeaderMap,
    token: &str,
    results: Vec<ToolResultSpec>,
) -> Result<Response, ApiError> {
    let claims = match state.signer.verify(token, now_ms()) {
        Ok(c) if c.tenant == tenant => c,
        Ok(_) | Err(TokenError::Invalid) => return Err(ApiError::bad_request("Invalid continuation token")),
        Err(TokenError::Expired) => return Err(ApiError::bad_request("Execution expired")),
    };
    if let Some(slot) = state.paused.get(&claims.execution_id) {
        return resume(state, &tenant, &claims, slot, results).await;
    }
    let cluster = &state.cluster;
    // Another node's: forwarded once, with the client's credentials; its answer is ours.
    if !claims.node.is_empty() && claims.node != cluster.node && !cluster.forwarded(headers) {
        let body = json!({"continuation_token": token, "tool_results": results}).to_string().into_bytes();
        match cluster.forward(&claims.node, "/exec/programmatic", headers, body).await {
            Ok(response) => return Ok(response),
            Err(e) if !cluster.durable() => {
                let why = match e {
                    ForwardError::Unknown => "this server has no address for it (--peers)".to_string(),
                    ForwardError::Unreachable(e) => format!("it cannot be reached: {e}"),
                };
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "this execution is held by server {:?}, and {why}; without a shared store (--redis-url) no \
                         other server can resume it: run the program again",
                        claims.node
                    ),
                ));
            }
            Err(e) => tracing::warn!(node = %claims.node, "continuation: the owner is unreachable ({e:?}); replaying"),
        }
    }
    if cluster.durable() {
        return replay(state, tenant, claims, results).await;
    }
    Err(ApiError::bad_request("Execution expired"))
}

/// Resumes a paused execution held here with the client's results.
async fn resume(
    state: &HttpState,
    tenant: &str,
    claims: &Claims,
    slot: paused::Slot,
    results: Vec<ToolResultSpec>,
) -> Result<Response, ApiError> {
    // A second request racing on the same execution is a replay of the same token.
    let Ok(mut guard) = slot.try_lock() else { return Err(ApiError::bad_request("Invalid continuation token")) };
    let Some(paused) = guard.as_mut() else { return Err(ApiError::bad_request("Invalid continuation token")) };
    if paused.round != claims.round || paused.tenant != tenant {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }

    // Everything is checked before anything is applied: a refused request leaves the paused
    // execution exactly as it was.
    let pending = paused.pending();
    let mut answers: HashMap<String, ToolResult> = HashMap::new();
    for r in results {
        let id = r.call_id.clone();
        if !pending.contains(&id) {
            return Err(ApiError::bad_request(format!(
                "Unknown call_id {id:?}: it is not a pending tool call of this execution"
            )));
        }
        if answers.insert(id.clone(), r.into_tool_result()).is_some() {
            return Err(ApiError::bad_request(format!("call_id {id:?} is answered twice")));
        }
    }
    let missing: Vec<&str> = pending.iter().filter(|p| !answers.contains_key(*p)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!("Missing tool results for: {}", missing.join(", "))));
    }
    // A token resumes once across the cluster: another node may have replayed this round.
    if paused.journaled {
        let ttl = Duration::from_millis(paused.expires_at_ms.saturating_sub(now_ms()).max(1));
        let claimant = format!("{} {}", state.cluster.node, crate::token::random_hex::<8>());
        match state.cluster.store.claim(&paused.id, paused.round, &claimant, ttl).await {
            Ok(true) => {}
            Ok(false) => return Err(ApiError::bad_request("Invalid continuation token")),
            // The store cannot be reached from here: this node's lock on the paused execution
            // makes the round single-use here. A node that does reach the store could still
            // replay the same round from the journal saved before (README: "Tokens resume once").
            Err(e) => tracing::warn!("claiming a round: {e}; resuming it under this node's lock alone"),
        }
    }
    let ordered: Vec<ToolResult> = pending.iter().filter_map(|p| answers.remove(p)).collect();
    if let Err(e) = paused.execution.submit(ordered) {
        return Err(match e.kind() {
            ErrorKind::Finished => ApiError::bad_request("Execution expired"),
            _ => e.into(),
        });
    }

    let mut paused = guard.take().expect("checked above");
    let stop = advance(&mut paused.execution).await;
    state.paused.remove(&claims.execution_id);
    drop(guard);
    match stop {
        Stop::Calls(round, calls) => {
            paused.round = round;
            Ok(pause(state, paused, calls).await)
        }
        ended => {
            if paused.journaled {
                let _ = state.cluster.store.forget(&paused.id).await;
            }
            Ok(ended_response(state, &paused.run, ended).await)
        }
    }
}

/// Resumes an execution whose node is gone: runs its program again from the journal in the
/// shared store (the recorded tool results answered at once, the calls checked against the
/// record) up to the round the token resumes, then hands it the client's results.
async fn replay(
    state: &HttpState,
    tenant: String,
    claims: Claims,
    results: Vec<ToolResultSpec>,
) -> Result<Response, ApiError> {
    let cluster = &state.cluster;
    let unavailable = |e: crate::cluster::StoreError| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("{e}; try the continuation again shortly"))
    };
    let Some(saved) = cluster.store.load(&claims.execution_id).await.map_err(unavailable)? else {
        return Err(ApiError::bad_request("Execution expired"));
    };
    // An older round's token was used already (here or on the node that resumed it).
    if saved.round != claims.round {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }
    let header: JournalHeader = serde_json::from_slice(&saved.header)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("a malformed journal: {e}")))?;
    if header.tenant != tenant {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }
    let remaining = header.expires_at_ms.saturating_sub(now_ms());
    if remaining == 0 {
        return Err(ApiError::bad_request("Execution expired"));
    }
    let mut entries: Vec<Entry> = Vec::new();
    for segment in &saved.segments {
        let part: Vec<Entry> = serde_json::from_slice(segment)
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("a malformed journal: {e}")))?;
        entries.extend(part);
    }
    let mut seed = [0u8; 32];
    hex::decode_to_slice(&header.seed, &mut seed)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("a malformed journal: {e}")))?;
    let started = std::time::Instant::now();
    let run = match RunFiles::rewind(&state.files, &tenant, &header.session_id, header.files.clone()).await {
        Ok(run) => run,
        Err(why) => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            return Ok(lost_response(&header.session_id, &why));
        }
    };
    let admission = state.tenants.admit(&tenant, None)?;
    // The first run's deadline holds; the engine's shortest timeout is its floor.
    let min = state.engine.config().ceilings.min_timeout;
    let timeout = Duration::from_millis(remaining).max(min);
    let limits = state.engine.config().default_limits.clone().with_timeout(timeout);
    let runtime: Runtime = header.runtime.parse().map_err(|e: ptc_engine::Error| ApiError::bad_request(e.message()))?;
    let request = ExecutionRequest::new(header.code)
        .with_tools(header.tools)
        .with_limits(limits)
        .with_session_id(header.session_id.clone())
        .with_data_dir(run.session.path.clone())
        .with_tenant(tenant.clone())
        .with_runtime(runtime)
        .with_journal(Journal::replay(seed, entries));
    let mut execution = state.engine.start(request).await?;
    admission.attach(execution.control());
    run.watch(&state.files, execution.control(), &state.tasks);
    let _ = cluster.store.add_usage(&tenant, "replays", 1).await;
    match advance(&mut execution).await {
        Stop::Calls(round, _) if round == claims.round => {
            tracing::info!(execution = %claims.execution_id, round, elapsed = ?started.elapsed(), "resumed by replay");
            metrics::histogram!("ptc_replay_seconds").record(started.elapsed().as_secs_f64());
            let ttl = Duration::from_millis(remaining);
            if let Err(e) = cluster.store.set_owner(&claims.execution_id, &cluster.node, round, ttl).await {
                tracing::warn!("naming the new owner: {e}");
            }
            let paused = Paused {
                id: claims.execution_id.clone(),
                execution,
                run,
                tenant: tenant.clone(),
                session_id: header.session_id,
                round,
                expires_at_ms: header.expires_at_ms,
                _admission: admission,
                header: None,
                journaled: true,
            };
            state.paused.insert(paused);
            let slot = state.paused.get(&claims.execution_id).expect("just inserted");
            resume(state, &tenant, &claims, slot, results).await
        }
        Stop::Calls(round, _) => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            let why = format!(
                "running it again stopped for tools at round {round}, not at round {} where it was paused",
                claims.round
            );
            Ok(lost_response(&header.session_id, &Journal::diverged(&why)))
        }
        ended => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            Ok(ended_response(state, &run, ended).await)
        }
    }
}

/// An execution that cannot be resumed: the model is told why and what to do.
fn lost_response(session_id: &str, why: &str) -> Response {
    let stderr = format!("{why}\n");
    Json(json!({
        "status": "error", "session_id": session_id, "error": "Execution failed or timed out", "kind": "diverged",
        "stdout": "", "stderr": stderr,
    }))
    .into_response()
}

/// Keeps the paused execution and answers `tool_call_required` with a token for its round.
/// The file quota is checked first: a program that wrote past it while running is stopped
/// here rather than kept paused. With a shared store, what its journal recorded since the last
/// pause is saved first, so that any node can resume it with the token.
async fn pause(state: &HttpState, mut paused: Paused, calls: Vec<ToolCall>) -> Response {
    if !paused.run.check(&state.files, &paused.execution.control()).await {
        let stop = advance(&mut paused.execution).await;
        return ended_response(state, &paused.run, stop).await;
    }
    let cluster = &state.cluster;
    if paused.journaled
        && let Some(take) = paused.execution.control().take_journal()
    {
        let ttl = Duration::from_millis(paused.expires_at_ms.saturating_sub(now_ms()).max(1));
        let saved = match take.lost {
            Some(why) => Err(why),
            None => {
                let segment = serde_json::to_vec(&take.entries).expect("entries serialise");
                let header = paused.header.as_deref();
                let (id, tenant, node, round) = (&paused.id, &paused.tenant, &cluster.node, paused.round);
                match cluster.store.save(id, tenant, header, &segment, node, round, ttl).await {
                    Ok(Saving::Saved) => Ok(()),
                    Ok(Saving::Refused(why)) => {
                        metrics::counter!("ptc_journal_refused_total").increment(1);
                        Err(why)
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        match saved {
            Ok(()) => paused.header = None,
            Err(why) => {
                // A journal with a gap could replay wrongly: it is dropped whole. The execution
                // still runs here; only a loss of this node would now lose it too.
                tracing::warn!(execution = %paused.id, "no longer journaled: {why}");
                metrics::counter!("ptc_journal_save_failures_total").increment(1);
                paused.journaled = false;
                let _ = cluster.store.forget(&paused.id).await;
            }
        }
    }
    let claims = Claims {
        execution_id: paused.id.clone(),
        tenant: paused.tenant.clone(),
        session_id: paused.session_id.clone(),
        round: paused.round,
        expires_at_ms: paused.expires_at_ms,
        node: if cluster.is_single() { String::new() } else { cluster.node.clone() },
    };
    let token = state.signer.sign(&claims);
    let session_id = paused.session_id.clone();
    state.paused.insert(paused);
    let tool_calls: Vec<ToolCallOut> =
        calls.into_iter().map(|c| ToolCallOut { input: c.input_value(), id: c.id, name: c.name }).collect();
    Json(json!({
        "status": "tool_call_required", "session_id": session_id,
        "continuation_token": token, "tool_calls": tool_calls,
    }))
    .into_response()
}

/// The response for an execution that has ended: its output and files, or what the model is
/// told about its failure (a file quota it broke comes first).
async fn ended_response(state: &HttpState, run: &Arc<RunFiles>, stop: Stop) -> Response {
    let session_id = run.session.id.as_str();
    let settled = run.settle(&state.files).await;
    let quota = run.quota_breach(&settled);
    let (stdout, stderr) = match &stop {
        Stop::Completed(c) => (&c.stdout, &c.stderr),
        Stop::Failed(f) => (&f.stdout, &f.stderr),
        Stop::Calls(..) => unreachable!("paused executions are answered by `pause`"),
    };
    if let Some(hint) = quota {
        let body = json!({
            "status": "error", "session_id": session_id, "error": "Execution failed or timed out", "kind": "file_quota",
            "stdout": stdout, "stderr": api::with_hint(stderr, &hint),
        });
        return Json(body).into_response();
    }
    match stop {
        Stop::Completed(c) => match settled {
            Ok(files) => Json(json!({
                "status": "completed", "session_id": session_id, "stdout": c.stdout, "stderr": c.stderr, "files": files,
            }))
            .into_response(),
            Err(e) => ApiError::from(e).into_response(),
        },
        Stop::Failed(f) => {
            let (status, error, hint) = api::model_error(&f);
            let body = json!({
                "status": "error", "session_id": session_id, "error": error, "kind": f.kind.as_str(),
                "stdout": f.stdout, "stderr": api::with_hint(&f.stderr, &hint),
            });
            (status, Json(body)).into_response()
        }
        Stop::Calls(..) => unreachable!(),
    }
}
