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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::auth::{ApiKeys, presented_key};
use super::conn::{HttpLimits, read_body};
use super::files::{FileRef, FileStore, FilesError, Scan, Session};
use super::tenants::{Admission, Refusal, Tenants};
use super::token::{Claims, Signer, TokenError, now_ms};
use ptc_engine::{Control, Engine, ErrorKind, Event, Execution, ExecutionRequest, Failure, FailureKind, ToolCall, ToolDef, ToolResult};

const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";

/// How often a running execution's session directory is checked against the file quota
/// (also once at every pause and at the end). Between two checks a program can write past
/// the quota by what it writes in this time; then it is stopped and what it wrote is removed.
const QUOTA_CHECK_INTERVAL: Duration = Duration::from_millis(100);

pub struct HttpState {
    pub engine: Engine,
    pub keys: Arc<ApiKeys>,
    pub tenants: Arc<Tenants>,
    pub signer: Signer,
    pub files: Arc<FileStore>,
    pub limits: HttpLimits,
    /// By execution id. The slot is emptied while a continuation request runs it.
    paused: Mutex<HashMap<String, Slot>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Paused>>>;

/// An execution waiting for the client's tool results between two requests.
struct Paused {
    execution: Execution,
    run: Arc<RunFiles>,
    tenant: String,
    session_id: String,
    /// The round whose token may resume it; any other token is a replay or a forgery.
    round: u32,
    pending: Vec<String>,
    expires_at_ms: u64,
    _admission: Admission,
}

impl HttpState {
    pub fn new(
        engine: Engine,
        keys: Arc<ApiKeys>,
        tenants: Arc<Tenants>,
        signer: Signer,
        files: FileStore,
        limits: HttpLimits,
    ) -> Arc<Self> {
        Arc::new(HttpState { engine, keys, tenants, signer, files: Arc::new(files), limits, paused: Mutex::new(HashMap::new()) })
    }

    pub fn paused_count(&self) -> usize {
        self.paused.lock().unwrap().len()
    }

    /// Drops paused executions that have ended (deadline passed, cancelled, quota): this frees
    /// their handles and their tenants' slots.
    pub fn sweep(&self) {
        let now = now_ms();
        self.paused.lock().unwrap().retain(|_, slot| match slot.try_lock() {
            Ok(p) => p.as_ref().is_some_and(|p| p.expires_at_ms > now && !p.execution.control().is_finished()),
            Err(_) => true, // a request is using it right now
        });
    }

    /// Forgets the paused execution `id` at once, unless a request is resuming it right now
    /// (that request then sees it end and forgets it itself).
    fn forget(&self, id: &str) {
        let mut paused = self.paused.lock().unwrap();
        if paused.get(id).is_some_and(|slot| slot.try_lock().is_ok()) {
            paused.remove(id);
        }
    }
}

/// The background work of the HTTP API, until `stop`: expired paused executions every second,
/// session retention every minute.
pub async fn sweep(state: Arc<HttpState>, stop: tokio_util::sync::CancellationToken) {
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
    axum::Router::new()
        .route("/exec/programmatic", post(programmatic))
        .route("/exec/programmatic/cancel", post(cancel))
        .route("/exec", post(exec))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "Not found: this server answers POST /exec, /exec/programmatic and /exec/programmatic/cancel") })
        .with_state(state)
}

/// An error response: `{status: "error", error, ...extra}`.
pub(crate) struct ApiError(StatusCode, Value);

impl ApiError {
    pub(crate) fn new(status: StatusCode, error: impl Into<String>) -> Self {
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

impl From<ptc_engine::Error> for ApiError {
    fn from(e: ptc_engine::Error) -> Self {
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

impl From<FilesError> for ApiError {
    fn from(e: FilesError) -> Self {
        match e {
            FilesError::Invalid(m) => ApiError::bad_request(m),
            FilesError::Quota(m) => ApiError::new(StatusCode::INSUFFICIENT_STORAGE, m),
            FilesError::Io(m) => {
                tracing::error!("session files: {m}");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the server could not prepare the session's files; try again")
            }
        }
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

/// The caller's tenant and the request's JSON object, or the error response.
async fn authenticated_body(state: &HttpState, headers: &HeaderMap, body: Body) -> Result<(String, Value), Response> {
    let tenant = authenticate(state, headers).map_err(IntoResponse::into_response)?;
    let bytes = read_body(&state.limits, headers, body).await?;
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("Invalid JSON: {e}")).into_response())?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object").into_response());
    }
    Ok((tenant, value))
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

fn parse_timeout(body: &Value, engine: &Engine) -> Result<ptc_engine::Limits, ApiError> {
    let config = engine.config();
    let mut limits = config.default_limits.clone();
    if let Some(t) = body.get("timeout").filter(|t| !t.is_null()) {
        let (min, max) = (config.ceilings.min_timeout.as_millis() as u64, config.ceilings.max_timeout.as_millis() as u64);
        let ms = t
            .as_u64()
            .filter(|ms| (min..=max).contains(ms))
            .ok_or_else(|| ApiError::bad_request(format!("timeout must be an integer between {min} and {max} (ms)")))?;
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

/// The session directory of one run, what it held before the program started, and how the
/// run's files were settled once it ended (by whichever of the request or the watcher saw
/// the end first).
struct RunFiles {
    session: Session,
    before: Scan,
    /// Set when a check found the tenant over quota (the execution was cancelled for it).
    over_quota: Mutex<Option<String>>,
    settled: Mutex<Option<Result<Vec<FileRef>, FilesError>>>,
}

impl RunFiles {
    /// The run's files once it has ended: checked against the quota exactly once.
    async fn settle(self: &Arc<Self>, files: &Arc<FileStore>) -> Result<Vec<FileRef>, FilesError> {
        let (run, files) = (self.clone(), files.clone());
        tokio::task::spawn_blocking(move || {
            let mut settled = run.settled.lock().unwrap();
            settled.get_or_insert_with(|| files.settle(&run.session, &run.before)).clone()
        })
        .await
        .unwrap_or_else(|e| Err(FilesError::Io(format!("settling files: {e}"))))
    }

    /// Checks the quota now; over it, the execution is cancelled and the reason kept.
    async fn check(self: &Arc<Self>, files: &Arc<FileStore>, control: &Control) -> bool {
        let (run, files) = (self.clone(), files.clone());
        let result = tokio::task::spawn_blocking(move || files.check(&run.session)).await;
        if let Ok(Err(FilesError::Quota(message))) = result {
            *self.over_quota.lock().unwrap() = Some(message);
            control.cancel();
            return false;
        }
        true
    }
}

/// Watches one execution's files until it ends, then settles them, so that the quota holds
/// on every ending, also one no request sees (expired or cancelled while paused).
fn watch(files: Arc<FileStore>, run: Arc<RunFiles>, control: Control) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(QUOTA_CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checked_while_paused = false;
        loop {
            tick.tick().await;
            if control.is_finished() {
                break;
            }
            // A paused program writes nothing: one check per pause is enough.
            let paused = control.is_paused();
            if paused && checked_while_paused {
                continue;
            }
            checked_while_paused = paused;
            if !run.check(&files, &control).await {
                break;
            }
        }
        while !control.is_finished() {
            tick.tick().await;
        }
        let _ = run.settle(&files).await;
    });
}

/// What LibreChat's client shows a model for a failed execution: one of its fixed `error`
/// strings, and a line for `stderr` saying what happened and what to do.
fn model_error(f: &Failure) -> (StatusCode, String, String) {
    let (status, error, hint) = match f.kind {
        FailureKind::Timeout => (
            StatusCode::OK,
            "Time limit exceeded".to_string(),
            format!("{}: the program (tool waits included) ran out of time; do less per execution or ask for a longer timeout.", f.message),
        ),
        FailureKind::Fuel => (
            StatusCode::OK,
            "Time limit exceeded".to_string(),
            "The program used up its CPU budget; make it do less work.".to_string(),
        ),
        FailureKind::Memory => (StatusCode::OK, "Out of memory".to_string(), format!("{}; use less memory (process data in smaller pieces).", f.message)),
        FailureKind::Exit => {
            let code = f.exit_code.unwrap_or(1);
            (StatusCode::OK, format!("Sandbox exited with code {code}"), format!("The program called sys.exit({code})."))
        }
        FailureKind::RoundTrips => (
            StatusCode::OK,
            "Execution failed or timed out".to_string(),
            format!("{}: batch independent tool calls with asyncio.gather so that each round asks for many at once.", f.message),
        ),
        FailureKind::ToolCalls => (
            StatusCode::OK,
            "Execution failed or timed out".to_string(),
            format!("{}: call tools fewer times (filter or aggregate first).", f.message),
        ),
        FailureKind::Cancelled => (StatusCode::OK, "Execution failed or timed out".to_string(), "The execution was cancelled.".to_string()),
        // The traceback is in stderr already, unless the instance died before printing it.
        FailureKind::PythonError => {
            let hint = if f.stderr.contains(&f.message) { String::new() } else { f.message.clone() };
            (StatusCode::OK, f.message.clone(), hint)
        }
        FailureKind::InvalidTools => (StatusCode::BAD_REQUEST, f.message.clone(), String::new()),
        FailureKind::Shutdown => (StatusCode::SERVICE_UNAVAILABLE, f.message.clone(), String::new()),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, f.message.clone(), String::new()),
    };
    (status, error, hint)
}

fn with_hint(stderr: &str, hint: &str) -> String {
    if hint.is_empty() {
        return stderr.to_string();
    }
    let sep = if stderr.is_empty() || stderr.ends_with('\n') { "" } else { "\n" };
    format!("{stderr}{sep}{hint}\n")
}

async fn ended_response(state: &HttpState, run: &Arc<RunFiles>, stop: Stop) -> Response {
    let session_id = run.session.id.as_str();
    let settled = run.settle(&state.files).await;
    let over_quota = run.over_quota.lock().unwrap().clone();
    let quota = over_quota.or(match &settled {
        Err(FilesError::Quota(m)) => Some(m.clone()),
        _ => None,
    });
    let (stdout, stderr) = match &stop {
        Stop::Completed(c) => (&c.stdout, &c.stderr),
        Stop::Failed(f) => (&f.stdout, &f.stderr),
        Stop::Calls(..) => unreachable!("paused executions are answered by `pause`"),
    };
    if let Some(message) = quota {
        let hint = format!("{message}. Write less to /mnt/data or delete files you no longer need.");
        let body = json!({
            "status": "error", "session_id": session_id, "error": "Execution failed or timed out", "kind": "file_quota",
            "stdout": stdout, "stderr": with_hint(stderr, &hint),
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
            let (status, error, hint) = model_error(&f);
            let body = json!({
                "status": "error", "session_id": session_id, "error": error, "kind": f.kind.as_str(),
                "stdout": f.stdout, "stderr": with_hint(&f.stderr, &hint),
            });
            (status, Json(body)).into_response()
        }
        Stop::Calls(..) => unreachable!(),
    }
}

impl HttpState {
    /// Keeps the paused execution and answers `tool_call_required` with a token for `round`.
    /// The file quota is checked first: a program that wrote past it while running is stopped
    /// here rather than kept paused.
    async fn pause(&self, mut paused: Paused, calls: Vec<ToolCall>) -> Response {
        if !paused.run.check(&self.files, &paused.execution.control()).await {
            let stop = advance(&mut paused.execution).await;
            return ended_response(self, &paused.run, stop).await;
        }
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

async fn programmatic(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Body) -> Response {
    let (tenant, body) = match authenticated_body(&state, &headers, body).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let result =
        if body.get("continuation_token").is_some() { continuation(&state, tenant, body).await } else { initial(&state, tenant, &headers, body, true).await };
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn exec(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Body) -> Response {
    let (tenant, body) = match authenticated_body(&state, &headers, body).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    if let Some(lang) = body.get("lang").and_then(Value::as_str)
        && !matches!(lang, "py" | "python" | "python3")
    {
        return ApiError::bad_request(format!("unsupported language {lang:?}: only Python (\"py\") runs here")).into_response();
    }
    initial(&state, tenant, &headers, body, false).await.unwrap_or_else(IntoResponse::into_response)
}

async fn initial(state: &HttpState, tenant: String, headers: &HeaderMap, body: Value, with_tools: bool) -> Result<Response, ApiError> {
    let code = body.get("code").and_then(Value::as_str).ok_or_else(|| ApiError::bad_request("code (a string) is required"))?;
    let tools = if with_tools { parse_tools(&body)? } else { vec![] };
    let limits = parse_timeout(&body, &state.engine)?;
    let session_id = body.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty()).map_or_else(new_session_id, str::to_owned);
    let imports = parse_files(&body)?;
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let admission = state.tenants.admit(&tenant, request_id).map_err(refusal)?;
    let run = prepare_files(state, &tenant, &session_id, imports).await?;
    let expires_at_ms = now_ms() + limits.timeout.as_millis() as u64;
    let request = ExecutionRequest {
        code: code.to_string(),
        tools,
        limits: Some(limits),
        session_id: Some(session_id.clone()),
        data_dir: Some(run.session.path.clone()),
        tenant: Some(tenant.clone()),
    };
    let mut execution = state.engine.start(request).await?;
    admission.attach(execution.control());
    watch(state.files.clone(), run.clone(), execution.control());
    tracing::info!(execution = %execution.id(), %tenant, session = %session_id, "http execution started");
    match advance(&mut execution).await {
        Stop::Calls(round, calls) => {
            let paused = Paused { execution, run, tenant, session_id, round, pending: vec![], expires_at_ms, _admission: admission };
            Ok(state.pause(paused, calls).await)
        }
        ended => Ok(ended_response(state, &run, ended).await),
    }
}

fn parse_files(body: &Value) -> Result<Vec<(String, String)>, ApiError> {
    let Some(files) = body.get("files").filter(|f| !f.is_null()) else { return Ok(vec![]) };
    let files = files.as_array().ok_or_else(|| ApiError::bad_request("files must be an array"))?;
    files
        .iter()
        .map(|f| {
            let name = f.get("name").and_then(Value::as_str);
            let session = f.get("session_id").and_then(Value::as_str);
            match (name, session) {
                (Some(n), Some(s)) => Ok((n.to_string(), s.to_string())),
                _ => Err(ApiError::bad_request("every file needs a name and a session_id")),
            }
        })
        .collect()
}

/// The session directory, with the request's `files` from earlier sessions copied in.
async fn prepare_files(state: &HttpState, tenant: &str, session_id: &str, imports: Vec<(String, String)>) -> Result<Arc<RunFiles>, ApiError> {
    let (files, tenant, session_id) = (state.files.clone(), tenant.to_string(), session_id.to_string());
    let prepared = tokio::task::spawn_blocking(move || {
        let session = files.open_session(&tenant, &session_id)?;
        files.import(&session, &imports)?;
        let before = files.scan(&session)?;
        Ok::<_, FilesError>(RunFiles { session, before, over_quota: Mutex::new(None), settled: Mutex::new(None) })
    })
    .await
    .map_err(|e| FilesError::Io(format!("preparing files: {e}")))??;
    Ok(Arc::new(prepared))
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
    let stop = advance(&mut paused.execution).await;
    state.paused.lock().unwrap().remove(&claims.execution_id);
    drop(guard);
    match stop {
        Stop::Calls(round, calls) => {
            paused.round = round;
            Ok(state.pause(paused, calls).await)
        }
        ended => Ok(ended_response(state, &paused.run, ended).await),
    }
}

async fn cancel(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Body) -> Response {
    let (tenant, body) = match authenticated_body(&state, &headers, body).await {
        Ok(request) => request,
        Err(response) => return response,
    };
    let result = (|| {
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
        // A paused execution is forgotten now, not at its deadline: its instance, tenant slot
        // and request id are free for the next request.
        state.forget(control.id());
        Ok::<_, ApiError>(Json(json!({"status": "cancelled", "request_id": request_id})).into_response())
    })();
    result.unwrap_or_else(IntoResponse::into_response)
}
