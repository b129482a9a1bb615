//! One run over the HTTP API as LibreChat sees it: a first request or a continuation decoded
//! into the core's continuation protocol, and the [`Turn`] it returns encoded: a pause (a
//! continuation token, the calls and the decisions asked for), or the end as LibreChat's
//! result.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::Span as _;
use ptc_engine::{FailureKind, Runtime, ToolDef};
use serde_json::json;

use super::api::{Answers, ApiError, ApprovalOut, DecisionSpec, RunOptions, ToolCallOut, ToolResultSpec};
use super::state::{HttpState, REQUEST_ID_HEADER};
use crate::core::advice::{self, Advice};
use crate::core::continuations::{self, Forward, Program, Turn};
use crate::core::runs::{Ending, Outcome};
use crate::traces;

/// Starts a first request's program (`/exec`, or `/exec/programmatic` without a token) and
/// answers where it stopped: paused for tools, or ended.
pub(super) async fn initial(
    state: &HttpState,
    tenant: String,
    headers: &HeaderMap,
    code: Option<String>,
    tools: Vec<ToolDef>,
    options: RunOptions,
) -> Result<Response, ApiError> {
    let code = code.ok_or_else(|| ApiError::bad_request("code (a string) is required"))?;
    let runtime = runtime(state, options.lang.as_deref(), options.runtime.as_deref())?;
    let program = Program {
        code,
        tools,
        runtime,
        timeout_ms: options.timeout,
        session_id: options.session_id,
        imports: options.files.unwrap_or_default().into_iter().map(Into::into).collect(),
        network_allow: options.network_allow.unwrap_or_default(),
        trace_parent: None,
    };
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let (span, program) = traced(state, headers, &tenant, program);
    let turn = state.continuations.start(tenant, request_id, program).await;
    Ok(response(ended(span, turn)?))
}

/// The runtime a run names: by `runtime`, by LibreChat's `lang`, or the server's default.
fn runtime(state: &HttpState, lang: Option<&str>, runtime: Option<&str>) -> Result<Runtime, ApiError> {
    let named = runtime
        .map(|name| name.parse().map_err(|e: ptc_engine::Error| ApiError::bad_request(e.message())))
        .transpose()?;
    let python = |r: Runtime| matches!(r, Runtime::Python | Runtime::PythonData);
    let by_lang = match lang {
        None => None,
        Some("py" | "python" | "python3") => {
            let default = if python(state.runtime) { state.runtime } else { Runtime::Python };
            Some(named.filter(|r| python(*r)).unwrap_or(default))
        }
        Some("js" | "javascript") => Some(Runtime::Javascript),
        Some("ts" | "typescript") => Some(Runtime::Typescript),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported language {other:?}: send Python (\"py\"), JavaScript (\"js\") or TypeScript (\"ts\")"
            )));
        }
    };
    match (by_lang, named) {
        (Some(lang), Some(named)) if lang != named => Err(ApiError::bad_request(format!(
            "lang {:?} and runtime {:?} disagree: send one of them",
            lang.as_str(),
            named.as_str()
        ))),
        (Some(runtime), _) | (None, Some(runtime)) => Ok(runtime),
        (None, None) => Ok(state.runtime),
    }
}

/// The request's span (`POST /exec`), under the caller's `traceparent` header, when the server
/// traces; the execution's span goes under it.
fn traced(state: &HttpState, headers: &HeaderMap, tenant: &str, mut program: Program) -> (Option<BoxedSpan>, Program) {
    let span = request_span(state, headers, tenant);
    program.trace_parent = span.as_ref().map(|s| s.span_context().clone());
    (span, program)
}

fn request_span(state: &HttpState, headers: &HeaderMap, tenant: &str) -> Option<BoxedSpan> {
    let attributes =
        vec![KeyValue::new("http.request.method", "POST"), KeyValue::new("ptc.tenant", tenant.to_string())];
    let tracer = state.core.engine.config().tracer.as_ref();
    traces::request_span(tracer, "POST /exec", traces::from_headers(headers).as_ref(), attributes)
}

/// `turn`, with the request's span ended as it ended (a refusal as its status).
fn ended(span: Option<BoxedSpan>, turn: Result<Turn, crate::core::Error>) -> Result<Turn, crate::core::Error> {
    if let (Some(mut span), Err(e)) = (span, &turn) {
        span.set_status(opentelemetry::trace::Status::error(format!("{:?}", e.kind())));
    }
    turn
}

/// Answers a continuation with `token` (wherever its execution is held).
pub(super) async fn continuation(
    state: &HttpState,
    tenant: String,
    headers: &HeaderMap,
    token: &str,
    answers: Answers,
) -> Result<Response, ApiError> {
    let Answers { results, decisions } = answers;
    let answers = continuations::Answers {
        results: results.iter().map(ToolResultSpec::to_tool_result).collect(),
        decisions: decisions.iter().map(DecisionSpec::to_decision).collect(),
        // As the node holding the execution is asked, if it is another: made only then.
        forward: Forward {
            headers,
            body: Box::new(move || {
                json!({"continuation_token": token, "tool_results": results, "decisions": decisions})
                    .to_string()
                    .into_bytes()
            }),
        },
    };
    let span = request_span(state, headers, &tenant);
    let turn = state.continuations.resume(tenant, token, answers).await;
    Ok(response(ended(span, turn)?))
}

/// A turn as LibreChat's client reads it.
fn response(turn: Turn) -> Response {
    match turn {
        Turn::Paused { session_id, token, calls, approvals } => {
            let tool_calls: Vec<ToolCallOut> = calls
                .into_iter()
                .map(|c| ToolCallOut {
                    input: c.input_value(),
                    traceparent: c.trace.as_ref().map(|span| traces::traceparent(Some(span))),
                    id: c.id,
                    name: c.name,
                })
                .collect();
            let mut body = json!({
                "status": "tool_call_required", "session_id": session_id,
                "continuation_token": token, "tool_calls": tool_calls,
            });
            if !approvals.is_empty() {
                let approvals: Vec<ApprovalOut> = approvals
                    .into_iter()
                    .map(|a| ApprovalOut {
                        input: a.call.input_value(),
                        id: a.call.id,
                        name: a.call.name,
                        reason: a.reason,
                    })
                    .collect();
                body["approvals"] = json!(approvals);
            }
            Json(body).into_response()
        }
        Turn::Ended { session_id, ending } => ended_response(&session_id, ending),
        // The model is told why and what to do.
        Turn::Lost { session_id, why } => Json(json!({
            "status": "error", "session_id": session_id, "error": "Execution failed or timed out", "kind": "diverged",
            "stdout": "", "stderr": format!("{why}\n"),
        }))
        .into_response(),
        Turn::Forwarded(response) => response,
    }
}

/// The response for an execution that has ended: its output and files, or what the model is
/// told about its failure (a file quota it broke comes first).
fn ended_response(session_id: &str, ending: Ending) -> Response {
    let Ending { outcome, files, .. } = ending;
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
