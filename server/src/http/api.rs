//! The HTTP API's wire types and the pieces every handler shares: the typed JSON extractor,
//! the tenant extractor, the error response, and what a model is told when a program fails.

use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::HttpState;
use crate::auth::presented_key;
use crate::conn::read_body;
use crate::files::FilesError;
use crate::tenants::Refusal;
use ptc_engine::{ErrorKind, Failure, FailureKind, ToolDef, ToolResult};

/// `POST /exec/programmatic`: a new run (`code`), or the continuation of a paused one
/// (`continuation_token` and `tool_results`). Fields LibreChat sends that this server does not
/// use are ignored.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ProgrammaticRequest {
    pub code: Option<String>,
    pub tools: Option<Vec<ToolSpec>>,
    #[serde(flatten)]
    pub run: RunOptions,
    pub continuation_token: Option<String>,
    pub tool_results: Option<Vec<ToolResultSpec>>,
}

/// `POST /exec`: a run without tools.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ExecRequest {
    pub code: Option<String>,
    pub lang: Option<String>,
    #[serde(flatten)]
    pub run: RunOptions,
}

/// What both kinds of run accept.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunOptions {
    /// Milliseconds, within the engine's ceilings.
    pub timeout: Option<u64>,
    pub session_id: Option<String>,
    pub files: Option<Vec<FileSpec>>,
    /// `python` or `python-data`; absent: the server's default (`--http-runtime`).
    pub runtime: Option<String>,
}

/// `POST /exec/programmatic/cancel`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CancelRequest {
    pub request_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
}

impl From<ToolSpec> for ToolDef {
    fn from(t: ToolSpec) -> Self {
        let mut def = ToolDef::new(t.name).with_description(t.description.unwrap_or_default());
        def.parameters = t.parameters;
        def
    }
}

/// A file of an earlier session of the same tenant, to copy into this run's `/mnt/data`, as
/// LibreChat sends it: `{id, session_id, name}`, or (its newer releases) `{id, storage_session_id,
/// name, kind, resource_id, version?}`, whose extra fields name LibreChat's own owner of the
/// file and are not needed here (the tenant owns its sessions).
#[derive(Debug, Deserialize)]
pub(crate) struct FileSpec {
    pub name: String,
    #[serde(alias = "storage_session_id")]
    pub session_id: String,
    #[serde(default)]
    pub id: Option<String>,
}

impl From<FileSpec> for crate::files::Import {
    fn from(f: FileSpec) -> Self {
        crate::files::Import { name: f.name, session_id: f.session_id, id: f.id }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub(crate) struct ToolResultSpec {
    pub call_id: String,
    #[serde(default)]
    pub result: Value,
    #[serde(default)]
    pub is_error: Option<bool>,
    #[serde(default)]
    pub error_message: Option<String>,
}

impl ToolResultSpec {
    /// The result as the program should see it: LibreChat's tools mostly return JSON *text*,
    /// so a string holding a JSON object or array is decoded; any other value is passed as is.
    pub(crate) fn into_tool_result(self) -> ToolResult {
        if self.is_error == Some(true) {
            let message = self.error_message.filter(|m| !m.is_empty());
            return ToolResult::error(self.call_id, message.as_deref().unwrap_or("Tool execution failed"));
        }
        if let Value::String(s) = &self.result {
            let t = s.trim_start();
            if (t.starts_with('{') || t.starts_with('['))
                && let Ok(decoded) = serde_json::from_str::<Value>(s)
            {
                return ToolResult::ok(self.call_id, &decoded);
            }
        }
        ToolResult::ok(self.call_id, &self.result)
    }
}

/// A tool call as `tool_call_required` lists it.
#[derive(Debug, Serialize)]
pub(crate) struct ToolCallOut {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// The request body as `T`, read within the server's body bounds. A body that is not JSON is
/// refused with `Invalid JSON: …`, JSON of the wrong shape with `Invalid request: …`.
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Arc<HttpState>> for ApiJson<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<HttpState>) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        // Only JSON: a browser may send a `text/plain` body to another site without asking it
        // first, never `application/json`.
        let json =
            parts.headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| {
                let essence = ct.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
                essence == "application/json" || essence.ends_with("+json")
            });
        if !json {
            let message = "the request body must be JSON sent with `Content-Type: application/json`";
            return Err(ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, message).into_response());
        }
        let bytes = read_body(&state.limits, &parts.headers, body).await?;
        // One parse straight into `T`; its error says whether the text or the shape was wrong.
        serde_json::from_slice(&bytes).map(ApiJson).map_err(|e| {
            let message = if e.is_syntax() || e.is_eof() {
                format!("Invalid JSON: {e}")
            } else if bytes.trim_ascii_start().first() != Some(&b'{') {
                "the request body must be a JSON object".to_string()
            } else {
                format!("Invalid request: {e}")
            };
            ApiError::bad_request(message).into_response()
        })
    }
}

/// The caller's tenant, from its API key (`x-api-key` or `Authorization: Bearer`).
pub(crate) struct Tenant(pub String);

impl FromRequestParts<Arc<HttpState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<HttpState>) -> Result<Self, ApiError> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let key = presented_key(header("x-api-key"), header("authorization"));
        state.keys.tenant(key).map(Tenant).map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e.message()))
    }
}

/// An error response: `{status: "error", error}`.
#[derive(Debug)]
pub(crate) struct ApiError(StatusCode, String);

impl ApiError {
    pub(crate) fn new(status: StatusCode, error: impl Into<String>) -> Self {
        ApiError(status, error.into())
    }

    pub(crate) fn bad_request(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error)
    }

    pub(crate) fn message(&self) -> &str {
        &self.1
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"status": "error", "error": self.1}))).into_response()
    }
}

impl From<ptc_engine::Error> for ApiError {
    fn from(e: ptc_engine::Error) -> Self {
        let status = match e.kind() {
            ErrorKind::InvalidRequest | ErrorKind::InvalidToolResult | ErrorKind::Finished => StatusCode::BAD_REQUEST,
            ErrorKind::Busy => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
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
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the server could not prepare the session's files; try again",
                )
            }
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::DuplicateRequest(m) => ApiError::new(StatusCode::CONFLICT, m),
            other => ApiError::new(StatusCode::TOO_MANY_REQUESTS, other.message()),
        }
    }
}

/// What LibreChat's client shows a model for a failed execution: one of its fixed `error`
/// strings, and a line for `stderr` saying what happened and what to do.
pub(crate) fn model_error(f: &Failure) -> (StatusCode, String, String) {
    let failed = || "Execution failed or timed out".to_string();
    match f.kind {
        FailureKind::Timeout => (
            StatusCode::OK,
            "Time limit exceeded".to_string(),
            format!(
                "{}: the program (tool waits included) ran out of time; do less per execution or ask for a longer timeout.",
                f.message
            ),
        ),
        FailureKind::Fuel => (
            StatusCode::OK,
            "Time limit exceeded".to_string(),
            "The program used up its CPU budget; make it do less work.".to_string(),
        ),
        FailureKind::Memory => (
            StatusCode::OK,
            "Out of memory".to_string(),
            format!("{}; use less memory (process data in smaller pieces).", f.message),
        ),
        FailureKind::Exit => {
            let code = f.exit_code.unwrap_or(1);
            (
                StatusCode::OK,
                format!("Sandbox exited with code {code}"),
                format!("The program called sys.exit({code})."),
            )
        }
        FailureKind::RoundTrips => (
            StatusCode::OK,
            failed(),
            format!(
                "{}: batch independent tool calls with asyncio.gather so that each round asks for many at once.",
                f.message
            ),
        ),
        FailureKind::ToolCalls => {
            (StatusCode::OK, failed(), format!("{}: call tools fewer times (filter or aggregate first).", f.message))
        }
        FailureKind::Cancelled => (StatusCode::OK, failed(), "The execution was cancelled.".to_string()),
        // The traceback (or, for a C-stack overflow, the engine's line) is in stderr already,
        // unless the output limit cut it off.
        FailureKind::PythonError => {
            let hint = if f.stderr.contains(&f.message) { String::new() } else { f.message.clone() };
            (StatusCode::OK, f.message.clone(), hint)
        }
        FailureKind::InvalidTools => (StatusCode::BAD_REQUEST, f.message.clone(), String::new()),
        FailureKind::Shutdown => (StatusCode::SERVICE_UNAVAILABLE, f.message.clone(), String::new()),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, f.message.clone(), String::new()),
    }
}

/// `stderr` with `hint` on a line of its own after it.
pub(crate) fn with_hint(stderr: &str, hint: &str) -> String {
    if hint.is_empty() {
        return stderr.to_string();
    }
    let sep = if stderr.is_empty() || stderr.ends_with('\n') { "" } else { "\n" };
    format!("{stderr}{sep}{hint}\n")
}
