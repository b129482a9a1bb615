//! One run over the HTTP API: its start (journaled or kept on disk when it pauses), each
//! pause as the client sees it (a continuation token, the calls and the decisions asked for),
//! and its end as LibreChat's result.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use ptc_engine::{ApprovalRequest, Event, Execution, ExecutionRequest, FailureKind, Journal, ToolCall, ToolDef};
use ptc_engine::{JournalTake, Runtime};
use serde_json::json;

use super::api::{ApiError, ApprovalOut, RunOptions, ToolCallOut};
use super::paused::Paused;
use super::state::{HttpState, REQUEST_ID_HEADER};
use crate::cluster::{JournalHeader, Saving, Segment, StoreKeeper};
use crate::core::advice::{self, Advice};
use crate::core::images::DiskKeeper;
use crate::core::runs::{self, DataDir, Ending, Launch, Outcome, Run};
use crate::core::token::{Claims, now_ms, pause_of, ttl_until};

/// Where an execution stopped: paused for tools (at a pause, see [`pause_of`]: calls to run,
/// and calls to decide on), or ended.
pub(super) enum Stop {
    Calls(u32, Vec<ToolCall>, Vec<ApprovalRequest>),
    Ended(Result<ptc_engine::Completion, ptc_engine::Failure>),
}

pub(super) async fn advance(execution: &mut Execution) -> Stop {
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
pub(super) fn keeper(
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
    let network_allow = options.network_allow.unwrap_or_default();
    let network = state.core.networks.for_run(Some(&tenant), &network_allow)?;
    // What another node needs to run it again, or to thaw it (the files `/mnt/data` started
    // with are added once it has started).
    let header = JournalHeader {
        code,
        tools,
        tenant: tenant.clone(),
        session_id: session_id.clone(),
        runtime: runtime.as_str().to_string(),
        seed: journal.as_ref().map(|j| hex::encode(j.seed)).unwrap_or_default(),
        expires_at_ms,
        files: Vec::new(),
        network_allow,
    };
    let mut request = ExecutionRequest::new(header.code.clone())
        .with_tools(header.tools.clone())
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
    let header = kept_header(&run, header, stored, on_disk, &disk_header);
    let id = run.execution.id().to_string();
    tracing::info!(execution = %id, %tenant, session = %session_id, "http execution started");
    record_start(state, &tenant, request_id, &id, ttl, journaling).await;
    let journaled = header.is_some();
    let mut paused = Paused { id, journaled, header, run, tenant, session_id, round: 0, expires_at_ms, adopted: None };
    let stop = advance(&mut paused.run.execution).await;
    Ok(answer(state, paused, stop).await)
}

/// The `header` of a run just started, with the files `/mnt/data` started with, serialised
/// where it is kept: returned for the store (`stored`: its first pause saves it there), or
/// set in `disk_header` for a single server's disk (`on_disk`: its images are kept with it).
pub(super) fn kept_header(
    run: &Run,
    mut header: JournalHeader,
    stored: bool,
    on_disk: bool,
    disk_header: &OnceLock<Vec<u8>>,
) -> Option<Vec<u8>> {
    if !stored && !on_disk {
        return None;
    }
    header.files = run.files_before();
    let header = serde_json::to_vec(&header).expect("a header serialises");
    if on_disk {
        let _ = disk_header.set(header.clone());
    }
    stored.then_some(header)
}

/// Tells the cluster's store about a run just started: its `request_id` (so that a cancel
/// reaching another node finds it here), and, when `journaling`, one more execution of its
/// tenant. Neither is needed to answer the request: a failure is logged (the request id) or
/// let go (the count).
pub(super) async fn record_start(
    state: &HttpState,
    tenant: &str,
    request_id: Option<&str>,
    id: &str,
    ttl: Duration,
    journaling: bool,
) {
    let cluster = &state.cluster;
    if let Some(request_id) = request_id
        && !cluster.is_single()
        && let Err(e) = cluster.store.set_request(tenant, request_id, id, &cluster.node, ttl).await
    {
        tracing::warn!("recording request id {request_id:?}: {e}");
    }
    if journaling {
        let _ = cluster.store.add_usage(tenant, "executions", 1).await;
    }
}

/// The answer to a request that ran `paused` on to `stop`: paused for tools (kept, and
/// answered with a token), or ended.
pub(super) async fn answer(state: &HttpState, mut paused: Paused, stop: Stop) -> Response {
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

/// Keeps the paused execution and answers `tool_call_required` with a token for its round.
/// The file quota is checked first: a program that wrote past it while running is stopped
/// here rather than kept paused. With a shared store, what its journal recorded since the last
/// pause is saved first, so that any node can resume it with the token.
pub(super) async fn pause(
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
        let ttl = ttl_until(paused.expires_at_ms);
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
pub(super) async fn ended_response(run: &Run, end: Result<ptc_engine::Completion, ptc_engine::Failure>) -> Response {
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
pub(super) fn failure_status(kind: FailureKind) -> StatusCode {
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
