//! The LibreChat-compatible HTTP Code API (axum): `POST /exec/programmatic` with signed
//! continuation tokens, `POST /exec`, and `POST /exec/programmatic/cancel`.
//!
//! Unlike servers that re-run the whole script every round, a paused execution here is the
//! live instance: a continuation request hands it the results and it resumes where it was.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::auth::{ApiKeys, presented_key};
use super::files::{FileStore, Snapshot};
use super::tenants::{Admission, Refusal, Tenants};
use super::token::{Claims, Signer, TokenError, now_ms};
use crate::{Engine, ErrorKind, Event, Execution, ExecutionRequest, FailureKind, ToolCall, ToolDef, ToolResult};

/// Request bodies larger than this get 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";

pub struct HttpState {
    pub engine: Engine,
    pub keys: Arc<ApiKeys>,
    pub tenants: Arc<Tenants>,
    pub signer: Signer,
    pub files: FileStore,
    /// By execution id. The slot is emptied while a continuation request runs it.
    paused: Mutex<HashMap<String, Slot>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Paused>>>;

/// An execution waiting for the client's tool results between two requests.
struct Paused {
    execution: Execution,
    run: RunFiles,
    tenant: String,
    session_id: String,
    /// The round whose token may resume it; any other token is a replay or a forgery.
    round: u32,
    pending: Vec<String>,
    expires_at_ms: u64,
    _admission: Admission,
}

impl HttpState {
    pub fn new(engine: Engine, keys: Arc<ApiKeys>, tenants: Arc<Tenants>, signer: Signer, files: FileStore) -> Arc<Self> {
        Arc::new(HttpState { engine, keys, tenants, signer, files, paused: Mutex::new(HashMap::new()) })
    }

    pub fn paused_count(&self) -> usize {
        self.paused.lock().unwrap().len()
    }

    /// Drops paused executions whose deadline has passed (the engine has already failed them;
    /// this frees the handles and the tenants' slots).
    pub fn sweep(&self) {
        let now = now_ms();
        self.paused.lock().unwrap().retain(|_, slot| match slot.try_lock() {
            Ok(p) => p.as_ref().is_some_and(|p| p.expires_at_ms > now),
            Err(_) => true, // a request is using it right now
        });
    }
}

pub fn router(state: Arc<HttpState>) -> axum::Router {
    let sweeper = Arc::downgrade(&state);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        for n in 0u64.. {
            tick.tick().await;
            let Some(state) = sweeper.upgrade() else { break };
            state.sweep();
            if n % 60 == 0 {
                let _ = tokio::task::spawn_blocking(move || state.files.sweep()).await;
            }
        }
    });
    axum::Router::new()
        .route("/exec/programmatic", post(programmatic))
        .route("/exec/programmatic/cancel", post(cancel))
        .route("/exec", post(exec))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// An error response: `{status: "error", error, ...extra}`.
struct ApiError(StatusCode, Value);

impl ApiError {
    fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError(status, json!({"status": "error", "error": error.into()}))
    }

    fn bad_request(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

impl From<crate::Error> for ApiError {
    fn from(e: crate::Error) -> Self {
        let status = match e.kind() {
            ErrorKind::InvalidRequest | ErrorKind::InvalidToolResult => StatusCode::BAD_REQUEST,
            ErrorKind::Busy => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Finished => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.message())
    }
}

fn refusal(r: Refusal) -> ApiError {
    match r {
        Refusal::DuplicateRequest(m) => ApiError::new(StatusCode::CONFLICT, m),
        other => ApiError::new(StatusCode::TOO_MANY_REQUESTS, other.message()),
    }
}

fn authenticate(state: &HttpState, headers: &HeaderMap) -> Result<String, ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let key = presented_key(header("x-api-key"), header("authorization"));
    state.keys.tenant(key).map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e.message()))
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    Ok(value)
}

fn parse_tools(body: &Value) -> Result<Vec<ToolDef>, ApiError> {
    let Some(tools) = body.get("tools").filter(|t| !t.is_null()) else { return Ok(vec![]) };
    let tools = tools.as_array().ok_or_else(|| ApiError::bad_request("tools must be an array"))?;
    tools
        .iter()
        .map(|t| {
            let name = t.get("name").and_then(Value::as_str).ok_or_else(|| ApiError::bad_request("every tool needs a string name"))?;
            Ok(ToolDef {
                name: name.to_string(),
                description: t.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
                parameters: t.get("parameters").filter(|p| !p.is_null()).cloned(),
            })
        })
        .collect()
}

fn parse_timeout(body: &Value, engine: &Engine) -> Result<crate::Limits, ApiError> {
    let mut limits = engine.config().default_limits.clone();
    if let Some(t) = body.get("timeout").filter(|t| !t.is_null()) {
        let ms = t
            .as_u64()
            .filter(|ms| (1000..=300_000).contains(ms))
            .ok_or_else(|| ApiError::bad_request("timeout must be an integer between 1000 and 300000 (ms)"))?;
        limits.timeout = Duration::from_millis(ms);
    }
    Ok(limits)
}

fn new_session_id() -> String {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).expect("the OS random source");
    hex::encode(bytes)
}

/// Where an execution stopped: paused for tools, or ended.
enum Stop {
    Calls(Vec<ToolCall>),
    Completed(crate::Completion),
    Failed(crate::Failure),
}

async fn advance(execution: &mut Execution) -> Stop {
    loop {
        match execution.next_event().await {
            Some(Event::ToolCalls(calls)) => return Stop::Calls(calls),
            Some(Event::Completed(c)) => return Stop::Completed(c),
            Some(Event::Failed(f)) => return Stop::Failed(f),
            Some(Event::Output { .. }) => {} // the final event carries all of it
            None => unreachable!("an execution always ends with Completed or Failed"),
        }
    }
}

/// The session directory of one run and what it held before the program started.
struct RunFiles {
    tenant: String,
    session_id: String,
    dir: std::path::PathBuf,
    before: Snapshot,
}

fn ended_response(state: &HttpState, run: &RunFiles, stop: Stop) -> Response {
    let session_id = run.session_id.as_str();
    match stop {
        Stop::Completed(c) => {
            let files = FileStore::changed(&run.dir, session_id, &run.before);
            if let Err(error) = state.files.enforce_quota(&run.tenant, &run.dir, &files) {
                let body = json!({"status": "error", "session_id": session_id, "error": error, "stdout": c.stdout, "stderr": c.stderr});
                return (StatusCode::INSUFFICIENT_STORAGE, Json(body)).into_response();
            }
            Json(json!({
                "status": "completed", "session_id": session_id, "stdout": c.stdout, "stderr": c.stderr, "files": files,
            }))
            .into_response()
        }
        Stop::Failed(f) => {
            let (status, error) = match f.kind {
                FailureKind::Timeout => (StatusCode::REQUEST_TIMEOUT, "Execution timeout".to_string()),
                FailureKind::RoundTrips | FailureKind::InvalidTools => (StatusCode::BAD_REQUEST, f.message),
                FailureKind::Shutdown => (StatusCode::SERVICE_UNAVAILABLE, f.message),
                FailureKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, f.message),
                _ => (StatusCode::OK, f.message),
            };
            let body = json!({
                "status": "error", "session_id": session_id, "error": error, "kind": f.kind.as_str(),
                "stdout": f.stdout, "stderr": f.stderr,
            });
            (status, Json(body)).into_response()
        }
        Stop::Calls(_) => unreachable!("paused executions are answered by `pause`"),
    }
}

impl HttpState {
    /// Keeps the paused execution and answers `tool_call_required` with a token for `round`.
    fn pause(&self, mut paused: Paused, calls: Vec<ToolCall>) -> Response {
        paused.pending = calls.iter().map(|c| c.id.clone()).collect();
        let claims = Claims {
            execution_id: paused.execution.id().to_string(),
            tenant: paused.tenant.clone(),
            session_id: paused.session_id.clone(),
            round: paused.round,
            expires_at_ms: paused.expires_at_ms,
        };
        let token = self.signer.sign(&claims);
        let session_id = paused.session_id.clone();
        self.paused.lock().unwrap().insert(claims.execution_id, Arc::new(tokio::sync::Mutex::new(Some(paused))));
        let tool_calls: Vec<Value> =
            calls.iter().map(|c| json!({"id": c.id, "name": c.name, "input": c.input_value()})).collect();
        Json(json!({
            "status": "tool_call_required", "session_id": session_id,
            "continuation_token": token, "tool_calls": tool_calls,
        }))
        .into_response()
    }
}

async fn programmatic(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Bytes) -> Response {
    let result = async {
        let tenant = authenticate(&state, &headers)?;
        let body = parse_body(&body)?;
        if body.get("continuation_token").is_some() {
            continuation(&state, tenant, body).await
        } else {
            initial(&state, tenant, &headers, body, true).await
        }
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

async fn exec(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Bytes) -> Response {
    let result = async {
        let tenant = authenticate(&state, &headers)?;
        let body = parse_body(&body)?;
        if let Some(lang) = body.get("lang").and_then(Value::as_str)
            && !matches!(lang, "py" | "python" | "python3")
        {
            return Err(ApiError::bad_request(format!("unsupported language {lang:?}: only Python (\"py\") runs here")));
        }
        initial(&state, tenant, &headers, body, false).await
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

async fn initial(state: &HttpState, tenant: String, headers: &HeaderMap, body: Value, with_tools: bool) -> Result<Response, ApiError> {
    let code = body.get("code").and_then(Value::as_str).ok_or_else(|| ApiError::bad_request("code (a string) is required"))?;
    let tools = if with_tools { parse_tools(&body)? } else { vec![] };
    let limits = parse_timeout(&body, &state.engine)?;
    let session_id = body.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty()).map_or_else(new_session_id, str::to_owned);
    let run = prepare_files(state, &tenant, &session_id, &body)?;
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let admission = state.tenants.admit(&tenant, request_id).map_err(refusal)?;
    let expires_at_ms = now_ms() + limits.timeout.as_millis() as u64;
    let request = ExecutionRequest {
        code: code.to_string(),
        tools,
        limits: Some(limits),
        session_id: Some(session_id.clone()),
        data_dir: Some(run.dir.clone()),
    };
    let mut execution = state.engine.start(request).await?;
    admission.attach(execution.control());
    tracing::info!(execution = %execution.id(), %tenant, session = %session_id, "http execution started");
    match advance(&mut execution).await {
        Stop::Calls(calls) => {
            let paused = Paused { execution, run, tenant, session_id, round: 1, pending: vec![], expires_at_ms, _admission: admission };
            Ok(state.pause(paused, calls))
        }
        ended => Ok(ended_response(state, &run, ended)),
    }
}

/// The session directory, with the request's `files` from earlier sessions copied in.
fn prepare_files(state: &HttpState, tenant: &str, session_id: &str, body: &Value) -> Result<RunFiles, ApiError> {
    let dir = state.files.session_dir(tenant, session_id).map_err(ApiError::bad_request)?;
    if let Some(files) = body.get("files").filter(|f| !f.is_null()) {
        let files = files.as_array().ok_or_else(|| ApiError::bad_request("files must be an array"))?;
        let refs = files
            .iter()
            .map(|f| {
                let name = f.get("name").and_then(Value::as_str);
                let session = f.get("session_id").and_then(Value::as_str);
                match (name, session) {
                    (Some(n), Some(s)) => Ok((n.to_string(), s.to_string())),
                    _ => Err(ApiError::bad_request("every file needs a name and a session_id")),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        state.files.import(tenant, &dir, &refs).map_err(ApiError::bad_request)?;
    }
    let before = FileStore::snapshot(&dir);
    Ok(RunFiles { tenant: tenant.to_string(), session_id: session_id.to_string(), dir, before })
}

/// A tool result as the program should see it: LibreChat's tools mostly return JSON *text*,
/// so a string holding a JSON object or array is decoded; any other value is passed as is.
fn to_tool_result(call_id: String, r: &Value) -> ToolResult {
    if r.get("is_error").and_then(Value::as_bool).unwrap_or(false) {
        let message = r.get("error_message").and_then(Value::as_str).filter(|m| !m.is_empty()).unwrap_or("Tool execution failed");
        return ToolResult::error(call_id, message);
    }
    let value = r.get("result").cloned().unwrap_or(Value::Null);
    if let Value::String(s) = &value {
        let t = s.trim_start();
        if (t.starts_with('{') || t.starts_with('['))
            && let Ok(decoded) = serde_json::from_str::<Value>(s)
        {
            return ToolResult::ok(call_id, &decoded);
        }
    }
    ToolResult::ok(call_id, &value)
}

async fn continuation(state: &HttpState, tenant: String, body: Value) -> Result<Response, ApiError> {
    let token = body.get("continuation_token").and_then(Value::as_str).ok_or_else(|| ApiError::bad_request("Invalid continuation token"))?;
    let claims = match state.signer.verify(token, now_ms()) {
        Ok(c) if c.tenant == tenant => c,
        Ok(_) | Err(TokenError::Invalid) => return Err(ApiError::bad_request("Invalid continuation token")),
        Err(TokenError::Expired) => return Err(ApiError::bad_request("Execution expired")),
    };
    let results = body
        .get("tool_results")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad_request("tool_results (an array) is required"))?;
    let slot = state.paused.lock().unwrap().get(&claims.execution_id).cloned();
    let Some(slot) = slot else { return Err(ApiError::bad_request("Execution expired")) };
    // A second request racing on the same execution is a replay of the same token.
    let Ok(mut guard) = slot.try_lock() else { return Err(ApiError::bad_request("Invalid continuation token")) };
    let Some(paused) = guard.as_mut() else { return Err(ApiError::bad_request("Invalid continuation token")) };
    if paused.round != claims.round || paused.tenant != tenant {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }

    // Everything is checked before anything is applied: a refused request leaves the paused
    // execution exactly as it was.
    let mut answers = HashMap::new();
    for r in results {
        let id = r.get("call_id").and_then(Value::as_str).ok_or_else(|| ApiError::bad_request("every tool result needs a call_id"))?;
        if !paused.pending.iter().any(|p| p == id) {
            return Err(ApiError::bad_request(format!("Unknown call_id {id:?}: it is not a pending tool call of this execution")));
        }
        if answers.insert(id.to_string(), to_tool_result(id.to_string(), r)).is_some() {
            return Err(ApiError::bad_request(format!("call_id {id:?} is answered twice")));
        }
    }
    let missing: Vec<&str> = paused.pending.iter().filter(|p| !answers.contains_key(*p)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!("Missing tool results for: {}", missing.join(", "))));
    }
    let ordered: Vec<ToolResult> = paused.pending.iter().filter_map(|p| answers.remove(p)).collect();
    if let Err(e) = paused.execution.submit(ordered) {
        return Err(match e.kind() {
            ErrorKind::Finished => ApiError::bad_request("Execution expired"),
            _ => e.into(),
        });
    }

    let mut paused = guard.take().expect("checked above");
    paused.round += 1;
    let stop = advance(&mut paused.execution).await;
    state.paused.lock().unwrap().remove(&claims.execution_id);
    drop(guard);
    match stop {
        Stop::Calls(calls) => Ok(state.pause(paused, calls)),
        ended => Ok(ended_response(state, &paused.run, ended)),
    }
}

async fn cancel(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Bytes) -> Response {
    let result = async {
        let tenant = authenticate(&state, &headers)?;
        let body = parse_body(&body)?;
        let request_id = body
            .get("request_id")
            .and_then(Value::as_str)
            .or_else(|| headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()))
            .ok_or_else(|| ApiError::bad_request("request_id is required"))?;
        let control = state
            .tenants
            .by_request_id(&tenant, request_id)
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no running execution with request id {request_id:?}")))?;
        control.cancel();
        Ok::<_, ApiError>(Json(json!({"status": "cancelled", "request_id": request_id})).into_response())
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}
