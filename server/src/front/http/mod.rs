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
mod run;
mod state;

use run::{continuation, initial};
pub use state::HttpState;
use state::REQUEST_ID_HEADER;

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::core::continuations::Cancelled;
use api::{Answers, ApiError, ApiJson, CancelRequest, ExecRequest, ProgrammaticRequest, Tenant};
use ptc_engine::ToolDef;

/// The background work of the HTTP API, until `stop`: expired paused executions every second,
/// session retention every minute.
pub async fn sweep(state: Arc<HttpState>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    for n in 0u64.. {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        state.continuations.sweep();
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
    match state.continuations.cancel(&tenant, &request_id, &headers).await {
        Cancelled::Done => Ok(Json(json!({"status": "cancelled", "request_id": request_id})).into_response()),
        Cancelled::Forwarded(response) => Ok(response),
        Cancelled::Unknown => {
            Err(ApiError::new(StatusCode::NOT_FOUND, format!("no running execution with request id {request_id:?}")))
        }
    }
}
