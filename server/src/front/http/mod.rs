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
pub mod conn;
mod files;
mod paused;
mod replay;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ptc_engine::{JournalTake, Runtime};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cluster::{Cluster, ForwardError, JournalHeader, Saving, Segment, StoreKeeper};
use crate::core::advice::{self, Advice};
use crate::core::files::FileStore;
use crate::core::images::{DiskImages, DiskKeeper};
use crate::core::runs::{self, DataDir, Ending, Launch, Outcome, Run};
use crate::core::token::{Claims, Signer, TokenError, now_ms, pause_of};
use crate::core::{Core, Error};
use api::{
    Answers, ApiError, ApiJson, ApprovalOut, CancelRequest, ExecRequest, ProgrammaticRequest, RunOptions, Tenant,
    ToolCallOut,
};
use conn::HttpLimits;
use paused::{Paused, Registry};
use ptc_engine::{
    ApprovalRequest, ErrorKind as EngineKind, Event, Execution, ExecutionRequest, FailureKind, Journal, ToolCall,
    ToolDef, ToolResult,
};
use replay::replay;

const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";

pub struct HttpState {
    pub core: Core,
    /// The core's file store (this front end always has one).
    pub files: Arc<FileStore>,
    pub signer: Signer,
    pub limits: HttpLimits,
    paused: Registry,
    /// The runtime of a run that names none.
    runtime: Runtime,
    /// This node, its peers and what they share.
    pub cluster: Arc<Cluster>,
    /// A single server's hibernated executions, on disk, so that a restart keeps them.
    images: Option<Arc<DiskImages>>,
}

impl HttpState {
    /// The API over `core`, which must keep files (`/mnt/data` is every run's here).
    /// `images`: a single server's hibernated executions on disk, if it keeps them.
    pub fn new(
        core: Core,
        signer: Signer,
        cluster: Arc<Cluster>,
        limits: HttpLimits,
        runtime: Runtime,
        images: Option<Arc<DiskImages>>,
    ) -> Arc<Self> {
        let files = core.files().cloned().expect("the HTTP API's core keeps files");
        Arc::new(HttpState { core, files, signer, limits, paused: Registry::default(), runtime, cluster, images })
    }

    /// Executions paused between two requests.
    pub fn paused_count(&self) -> usize {
        self.paused.len()
    }

    /// Drops paused executions that have ended (deadline passed, cancelled, quota), and
    /// their images on disk.
    pub fn sweep(&self) {
        for id in self.paused.sweep() {
            self.forget_image(&id);
        }
    }

    /// Execution `id` has ended: its image on disk goes, if it has one.
    fn forget_image(&self, id: &str) {
        if let Some(images) = &self.images {
            images.forget(id);
        }
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
        if request.tool_results.is_none() && request.decisions.is_none() {
            return Err(ApiError::bad_request("tool_results (an array) is required"));
        }
        let answers = Answers {
            results: request.tool_results.unwrap_or_default(),
            decisions: request.decisions.unwrap_or_default(),
        };
        return continuation(&state, tenant, &headers, &token, answers).await;
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
    if let Some(control) = state.core.tenants.by_request_id(&tenant, &request_id) {
        control.cancel();
        // A paused execution is forgotten now, not at its deadline: its instance, tenant slot and
        // request id are free for the next request.
        state.paused.forget(control.id());
        state.forget_image(control.id());
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

/// Where an execution stopped: paused for tools (at a pause, see [`pause_of`]: calls to run,
/// and calls to decide on), or ended.
enum Stop {
    Calls(u32, Vec<ToolCall>, Vec<ApprovalRequest>),
    Ended(Result<ptc_engine::Completion, ptc_engine::Failure>),
}

async fn advance(execution: &mut Execution) -> Stop {
    loop {
        match execution.next_event().await {
            Some(Event::ToolCalls { round, calls, approvals }) => {
                let asking = !execution.control().held_through(round).is_empty();
                return Stop::Calls(pause_of(round, asking), calls, approvals);
            }
            Some(Event::Completed(c)) => return Stop::Ended(Ok(c)),
            Some(Event::Failed(f)) => return Stop::Ended(Err(f)),
            Some(Event::Output { .. }) => {} // the final event carries all of it
            None => unreachable!("an execution always ends with Completed or Failed"),
        }
    }
}

/// Where an execution of `tenant` keeps its sealed image when it hibernates, if anywhere:
/// beside its journal in the cluster's store (`journaled`: it has one there), or on a single
/// server's disk with its request's `header` (set once the run has started).
fn keeper(
    state: &HttpState,
    tenant: &str,
    expires_at_ms: u64,
    journaled: bool,
    header: &Arc<OnceLock<Vec<u8>>>,
) -> Option<Arc<dyn ptc_engine::Keeper>> {
    if state.cluster.durable() {
        return journaled.then(|| {
            Arc::new(StoreKeeper {
                store: state.cluster.store.clone(),
                node: state.cluster.node.clone(),
                tenant: tenant.to_string(),
                expires_at_ms,
            }) as Arc<dyn ptc_engine::Keeper>
        });
    }
    let images = state.images.clone()?;
    Some(Arc::new(DiskKeeper { images, tenant: tenant.to_string(), header: header.clone() }))
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
    let engine = &state.core.engine;
    let limits = runs::limits(engine, engine.config().default_limits.clone(), options.timeout)?;
    let session_id = options.session_id.filter(|s| !s.is_empty()).unwrap_or_else(crate::core::files::new_session_id);
    let imports = options.files.unwrap_or_default().into_iter().map(Into::into).collect();
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let admitted = state.core.admit(Some(&tenant), request_id)?;
    let expires_at_ms = now_ms() + limits.timeout.as_millis() as u64;
    let ttl = limits.timeout;
    // With a shared store, the run is journaled so that another node can finish it. A
    // python-data run cannot be run again (each server pre-initialises its own runtime): its
    // image, kept in the store at each pause, is what another node carries it on from.
    let journaling = state.cluster.journaling().await;
    let journal = (journaling && runtime == Runtime::Python).then(Journal::new);
    let imaged = journaling && runtime != Runtime::Python;
    let seed = journal.as_ref().map(|j| hex::encode(j.seed));
    let network_allow = options.network_allow.unwrap_or_default();
    let network = state.core.networks.for_run(Some(&tenant), &network_allow)?;
    let mut request = ExecutionRequest::new(code.clone())
        .with_tools(tools.clone())
        .with_limits(limits)
        .with_session_id(session_id.clone())
        .with_tenant(tenant.clone())
        .with_runtime(runtime);
    if imaged {
        request = request.with_hibernate_after(Duration::ZERO);
    }
    let disk_header = Arc::new(OnceLock::new());
    let stored = journal.is_some() || imaged;
    let keeper = keeper(state, &tenant, expires_at_ms, stored, &disk_header);
    let on_disk = keeper.is_some() && !stored;
    request.keeper = keeper;
    request.journal = journal;
    request.network = network;
    let dir = DataDir::Session { id: session_id.clone(), imports };
    let run = state.core.start(admitted, Launch { request, dir, thaw: None }).await?;
    let header = (stored || on_disk).then(|| {
        let header = JournalHeader {
            code,
            tools,
            tenant: tenant.clone(),
            session_id: session_id.clone(),
            runtime: runtime.as_str().to_string(),
            seed: seed.clone().unwrap_or_default(),
            expires_at_ms,
            files: run.files_before(),
            network_allow,
        };
        serde_json::to_vec(&header).expect("a header serialises")
    });
    if on_disk && let Some(header) = &header {
        let _ = disk_header.set(header.clone());
    }
    let header = header.filter(|_| stored);
    let id = run.execution.id().to_string();
    tracing::info!(execution = %id, %tenant, session = %session_id, "http execution started");
    let cluster = &state.cluster;
    if let Some(request_id) = request_id
        && !cluster.is_single()
        && let Err(e) = cluster.store.set_request(&tenant, request_id, &id, &cluster.node, ttl).await
    {
        tracing::warn!("recording request id {request_id:?}: {e}");
    }
    if journaling {
        let _ = cluster.store.add_usage(&tenant, "executions", 1).await;
    }
    let journaled = header.is_some();
    let mut paused = Paused { id, journaled, header, run, tenant, session_id, round: 0, expires_at_ms, adopted: None };
    let stop = advance(&mut paused.run.execution).await;
    Ok(answer(state, paused, stop).await)
}

/// The answer to a request that ran `paused` on to `stop`: paused for tools (kept, and
/// answered with a token), or ended.
async fn answer(state: &HttpState, mut paused: Paused, stop: Stop) -> Response {
    match stop {
        Stop::Calls(round, calls, approvals) => {
            paused.round = round;
            pause(state, paused, calls, approvals).await
        }
        Stop::Ended(end) => {
            // Its journal is in the store once a pause saved it (the header went with it).
            if paused.journaled && paused.header.is_none() {
                let _ = state.cluster.store.forget(&paused.id).await;
            }
            state.forget_image(&paused.id);
            ended_response(&paused.run, end).await
        }
    }
}

async fn continuation(
    state: &HttpState,
    tenant: String,
    headers: &HeaderMap,
    token: &str,
    answers: Answers,
) -> Result<Response, ApiError> {
    let claims = match state.signer.verify(token, now_ms()) {
        Ok(c) if c.tenant == tenant => c,
        Ok(_) | Err(TokenError::Invalid) => return Err(ApiError::bad_request("Invalid continuation token")),
        Err(TokenError::Expired) => return Err(ApiError::bad_request("Execution expired")),
    };
    let cluster = &state.cluster;
    if let Some(slot) = state.paused.get(&claims.execution_id) {
        // A copy of an earlier round than the token's, which another node's token names: the
        // execution went on there. This copy is stale, and the token goes to its owner.
        let stale = slot.try_lock().is_ok_and(|p| p.as_ref().is_some_and(|p| p.round < claims.round));
        if !(stale && !claims.node.is_empty() && claims.node != cluster.node) {
            return resume(state, &tenant, &claims, slot, answers).await;
        }
        tracing::info!(execution = %claims.execution_id, node = %claims.node, "a stale copy: forwarding to the owner");
        state.paused.forget(&claims.execution_id);
    }
    // Another node's: forwarded once, with the client's credentials; its answer is ours.
    if !claims.node.is_empty() && claims.node != cluster.node && !cluster.forwarded(headers) {
        let body =
            json!({"continuation_token": token, "tool_results": answers.results, "decisions": answers.decisions})
                .to_string()
                .into_bytes();
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
        return replay(state, tenant, claims, answers).await;
    }
    if state.images.is_some() {
        return replay::thaw_from_disk(state, tenant, claims, answers).await;
    }
    Err(ApiError::bad_request("Execution expired"))
}

/// Resumes a paused execution held here with the client's results and decisions.
async fn resume(
    state: &HttpState,
    tenant: &str,
    claims: &Claims,
    slot: paused::Slot,
    answers: Answers,
) -> Result<Response, ApiError> {
    // A second request racing on the same execution is a replay of the same token.
    let Ok(mut guard) = slot.try_lock() else { return Err(ApiError::bad_request("Invalid continuation token")) };
    let Some(paused) = guard.as_mut() else { return Err(ApiError::bad_request("Invalid continuation token")) };
    if paused.round != claims.round || paused.tenant != tenant {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }

    // Everything is checked before anything is applied: a refused request leaves the paused
    // execution exactly as it was.
    let Answers { results, decisions } = answers;
    let pending = paused.pending();
    let held = paused.held();
    let mut decided = Vec::with_capacity(decisions.len());
    for d in decisions {
        if !held.contains(&d.call_id) {
            return Err(ApiError::bad_request(format!(
                "call_id {:?} in decisions does not wait for a decision: decide only the calls listed in approvals",
                d.call_id
            )));
        }
        if decided.iter().any(|x: &ptc_engine::Decision| x.id == d.call_id) {
            return Err(ApiError::bad_request(format!("call_id {:?} is decided twice", d.call_id)));
        }
        decided.push(d.into_decision());
    }
    let undecided: Vec<&str> =
        held.iter().filter(|h| !decided.iter().any(|d| &d.id == *h)).map(String::as_str).collect();
    if !undecided.is_empty() {
        return Err(ApiError::bad_request(format!("Missing decisions for: {}", undecided.join(", "))));
    }
    let control = paused.run.execution.control();
    // Checked (changed arguments against the tool's schema) before anything is applied.
    let decided = control.check_decisions(decided).await.map_err(|e| ApiError::bad_request(e.message()))?;
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
        let claimant = format!("{} {}", state.cluster.node, crate::core::token::random_hex::<8>());
        match state.cluster.store.claim(&paused.id, paused.round, &claimant, ttl).await {
            Ok(true) => {}
            Ok(false) => return Err(ApiError::bad_request("Invalid continuation token")),
            // The store cannot be reached from here: this node's lock on the paused execution
            // makes the round single-use here. A node that does reach the store could still
            // replay the same round from the journal saved before (docs/cluster.md: "Tokens resume once across nodes").
            Err(e) => tracing::warn!("claiming a round: {e}; resuming it under this node's lock alone"),
        }
    }
    if let Some(counter) = paused.adopted.take() {
        adopt(state, paused, counter).await;
    }
    let ordered: Vec<ToolResult> = pending.iter().filter_map(|p| answers.remove(p)).collect();
    // Results first, then decisions: the program takes what arrived before it is told about
    // approved calls, so that the next pause finds it blocked again.
    let applied = match ordered.is_empty() {
        true => Ok(()),
        false => paused.run.execution.submit(ordered),
    }
    .and_then(|()| if decided.is_empty() { Ok(()) } else { control.apply_decisions(&decided) });
    if let Err(e) = applied {
        return Err(match e.kind() {
            EngineKind::Finished => ApiError::bad_request("Execution expired"),
            _ => Error::from(e).into(),
        });
    }

    let mut paused = guard.take().expect("checked above");
    let stop = advance(&mut paused.run.execution).await;
    state.paused.remove(&claims.execution_id);
    drop(guard);
    Ok(answer(state, paused, stop).await)
}

/// A continuation's round of an execution taken over here is claimed: it is this node's now
/// (its owner in the store, and counted as a thaw or a replay of its tenant).
async fn adopt(state: &HttpState, paused: &Paused, counter: &'static str) {
    let cluster = &state.cluster;
    let ttl = Duration::from_millis(paused.expires_at_ms.saturating_sub(now_ms()).max(1));
    if let Err(e) = cluster.store.set_owner(&paused.id, &cluster.node, paused.round, ttl).await {
        tracing::warn!("naming the new owner: {e}");
    }
    let _ = cluster.store.add_usage(&paused.tenant, counter, 1).await;
}

/// Keeps the paused execution and answers `tool_call_required` with a token for its round.
/// The file quota is checked first: a program that wrote past it while running is stopped
/// here rather than kept paused. With a shared store, what its journal recorded since the last
/// pause is saved first, so that any node can resume it with the token.
async fn pause(
    state: &HttpState,
    mut paused: Paused,
    calls: Vec<ToolCall>,
    approvals: Vec<ApprovalRequest>,
) -> Response {
    if !paused.run.within_quota().await {
        // Cancelled for it: its end follows.
        loop {
            if let Stop::Ended(end) = advance(&mut paused.run.execution).await {
                return ended_response(&paused.run, end).await;
            }
        }
    }
    let cluster = &state.cluster;
    // A python-data run has no journal: its first pause saves its header alone, and its image,
    // kept at each hibernation, carries it on. So does a run thawed here, whose header the
    // store has.
    let take =
        || paused.run.execution.control().take_journal().or_else(|| paused.header.is_some().then(JournalTake::default));
    if paused.journaled
        && let Some(take) = take()
    {
        let ttl = Duration::from_millis(paused.expires_at_ms.saturating_sub(now_ms()).max(1));
        let saved = match take.lost {
            Some(why) => Err(why),
            None => {
                let segment = serde_json::to_vec(&take.entries).expect("entries serialise");
                let header = paused.header.as_deref();
                let (id, tenant, round) = (&paused.id, &paused.tenant, paused.round);
                let segment = Segment { id, tenant, header, entries: &segment, round };
                match cluster.store.save(segment, &cluster.node, ttl).await {
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
    let mut body = json!({
        "status": "tool_call_required", "session_id": session_id,
        "continuation_token": token, "tool_calls": tool_calls,
    });
    if !approvals.is_empty() {
        let approvals: Vec<ApprovalOut> = approvals
            .into_iter()
            .map(|a| ApprovalOut { input: a.call.input_value(), id: a.call.id, name: a.call.name, reason: a.reason })
            .collect();
        body["approvals"] = json!(approvals);
    }
    Json(body).into_response()
}

/// The response for an execution that has ended: its output and files, or what the model is
/// told about its failure (a file quota it broke comes first).
async fn ended_response(run: &Run, end: Result<ptc_engine::Completion, ptc_engine::Failure>) -> Response {
    let session_id = run.session_id().unwrap_or_default();
    let Ending { outcome, files, .. } = run.end(end, None).await;
    let failed = |status: StatusCode, kind: &str, error: &str, stdout: &str, stderr: String| {
        let body = json!({
            "status": "error", "session_id": session_id, "error": error, "kind": kind, "stdout": stdout, "stderr": stderr,
        });
        (status, Json(body)).into_response()
    };
    match outcome {
        Outcome::Completed(c) => match files {
            Ok(files) => Json(json!({
                "status": "completed", "session_id": session_id, "stdout": c.stdout, "stderr": c.stderr, "files": files,
            }))
            .into_response(),
            Err(e) => ApiError::from(e).into_response(),
        },
        Outcome::Failed(f) => {
            let Advice { headline, hint } = advice::advice(&f);
            failed(failure_status(f.kind), f.kind.as_str(), &headline, &f.stdout, advice::with_hint(&f.stderr, &hint))
        }
        Outcome::OverQuota { message, end } => {
            let (stdout, stderr) = match &end {
                Ok(c) => (&c.stdout, &c.stderr),
                Err(f) => (&f.stdout, &f.stderr),
            };
            failed(StatusCode::OK, "file_quota", advice::FAILED, stdout, advice::with_hint(stderr, &message))
        }
    }
}

/// The HTTP status of a failed program: 200 for what the program did (LibreChat's client
/// shows a model nothing of a 4xx but "request rejected"), else whose fault it was.
fn failure_status(kind: FailureKind) -> StatusCode {
    match kind {
        FailureKind::InvalidTools => StatusCode::BAD_REQUEST,
        FailureKind::Shutdown => StatusCode::SERVICE_UNAVAILABLE,
        FailureKind::Timeout
        | FailureKind::Fuel
        | FailureKind::Memory
        | FailureKind::Exit
        | FailureKind::RoundTrips
        | FailureKind::ToolCalls
        | FailureKind::Cancelled
        | FailureKind::PythonError => StatusCode::OK,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
