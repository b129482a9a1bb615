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

use super::state::HttpState;
use crate::core::auth::presented_key;
use crate::core::files::FilesError;
use crate::core::tenants::Refusal;
use crate::core::{Error, ErrorKind};
use crate::front::http::conn::read_body;
use ptc_engine::{ToolDef, ToolResult};

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
    /// A person's answers to the calls a pause listed in `approvals` (tools given with
    /// `requires_approval`).
    pub decisions: Option<Vec<DecisionSpec>>,
}

/// `POST /exec`: a run without tools.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ExecRequest {
    pub code: Option<String>,
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
    /// LibreChat's language: `py` (or `python`, `python3`: the server's default runtime), `js`
    /// (`javascript`) or `ts` (`typescript`); `runtime`, when given too, must agree.
    pub lang: Option<String>,
    /// `python`, `python-data`, `javascript` or `typescript`; absent: what `lang` says, else the server's
    /// default (`--http-runtime`).
    pub runtime: Option<String>,
    /// Narrows the tenant's network policy to these hosts.
    pub network_allow: Option<Vec<String>>,
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
    /// Each call waits for a person's decision: a pause lists it in `approvals`, and the
    /// continuation answers it in `decisions` before it is run.
    #[serde(default)]
    pub requires_approval: bool,
    /// JSON Schema of what the tool returns, shown after its signature; without it, the shape
    /// earlier results had is shown once seen.
    #[serde(default)]
    pub returns: Option<Value>,
}

impl From<ToolSpec> for ToolDef {
    fn from(t: ToolSpec) -> Self {
        let mut def = ToolDef::new(t.name).with_description(t.description.unwrap_or_default());
        def.parameters = t.parameters.map(Arc::new);
        def.returns = t.returns.map(Arc::new);
        if t.requires_approval {
            def = def.with_approval();
        }
        def
    }
}

/// A person's decision on a call a pause listed in `approvals`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(crate) struct DecisionSpec {
    pub call_id: String,
    pub approve: bool,
    /// With `approve`: the arguments to run it with instead (an object), checked against the
    /// tool's schema again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Without `approve`: why, for the program's `ToolError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl DecisionSpec {
    pub(crate) fn to_decision(&self) -> ptc_engine::Decision {
        let id = self.call_id.clone();
        match (self.approve, &self.input) {
            (true, None) => ptc_engine::Decision::approve(id),
            (true, Some(input)) => ptc_engine::Decision::approve_with(id, input.to_string()),
            (false, _) => ptc_engine::Decision::deny(id, self.reason.clone().unwrap_or_default()),
        }
    }
}

/// What a continuation brings: results for the calls a pause listed, and decisions on the
/// calls it asked approval for.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    pub results: Vec<ToolResultSpec>,
    pub decisions: Vec<DecisionSpec>,
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

impl From<FileSpec> for crate::core::files::Import {
    fn from(f: FileSpec) -> Self {
        crate::core::files::Import { name: f.name, session_id: f.session_id, id: f.id }
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
    pub(crate) fn to_tool_result(&self) -> ToolResult {
        let id = self.call_id.clone();
        if self.is_error == Some(true) {
            let message = self.error_message.as_deref().filter(|m| !m.is_empty());
            return ToolResult::error(id, message.unwrap_or("Tool execution failed"));
        }
        if let Value::String(s) = &self.result {
            let t = s.trim_start();
            if (t.starts_with('{') || t.starts_with('['))
                && let Ok(decoded) = serde_json::from_str::<Value>(s)
            {
                return ToolResult::ok(id, &decoded);
            }
        }
        ToolResult::ok(id, &self.result)
    }
}

/// A tool call as `tool_call_required` lists it.
#[derive(Debug, Serialize)]
pub(crate) struct ToolCallOut {
    pub id: String,
    pub name: String,
    pub input: Value,
    /// The call's `execute_tool` span (W3C), when the server traces: send it on as the
    /// tool's `traceparent` header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A call that waits for a person's decision, as `tool_call_required` lists it in `approvals`.
#[derive(Debug, Serialize)]
pub(crate) struct ApprovalOut {
    pub id: String,
    pub name: String,
    pub input: Value,
    /// The program's words on why it makes the call, if it gave any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
        state.core.keys.tenant(key).map(Tenant).map_err(|e| ApiError::new(StatusCode::UNAUTHORIZED, e.message()))
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

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match e.kind() {
            ErrorKind::Invalid | ErrorKind::Precondition => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Exists | ErrorKind::SessionBusy => StatusCode::CONFLICT,
            ErrorKind::Busy => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Quota => StatusCode::INSUFFICIENT_STORAGE,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.message())
    }
}

/// Refusals on their way to the wire, through the core's one error.
macro_rules! through_core_error {
    ($($from:ty),*) => {$(
        impl From<$from> for ApiError {
            fn from(e: $from) -> Self {
                Error::from(e).into()
            }
        }
    )*};
}
through_core_error!(ptc_engine::Error, FilesError, Refusal);
