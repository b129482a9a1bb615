//! A continuation whose execution's node is gone (cluster with a shared store). When the
//! execution had hibernated at the round the token resumes, its sealed image (kept beside the
//! journal) is thawed here and goes on exactly where it stopped. Otherwise the journal is
//! loaded from the store and the program run again from it, the recorded rounds answered by
//! the engine itself, up to the round the token resumes. Either way it is resumed with the
//! client's results as a copy of this request's own, and becomes this node's (its owner in
//! the store, its place among the paused) only once the round is claimed (`resume`): of two
//! nodes given the same continuation, the one that loses the claim drops its copy.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ptc_engine::{Entry, ExecutionRequest, Journal, Limits, Runtime};
use serde_json::json;

use super::api::{Answers, ApiError};
use super::paused::{self, Paused};
use super::resume::resume;
use super::run::{Stop, advance, ended_response};
use super::state::HttpState;
use crate::cluster::JournalHeader;
use crate::core::ErrorKind;
use crate::core::runs::{DataDir, Launch, Thaw};
use crate::core::token::{Claims, now_ms};

/// Resumes an execution whose node is gone, from what the shared store kept of it: thaws its
/// sealed image when it hibernated at the token's round, or else runs its program again from
/// the journal ([`run_again`]); either way it is then handed the client's results.
pub(super) async fn replay(
    state: &HttpState,
    tenant: String,
    claims: Claims,
    answers: Answers,
) -> Result<Response, ApiError> {
    let cluster = &state.cluster;
    let (header, journal, image) = match load_journal(state, &tenant, &claims).await? {
        Some(Loaded::Kept { header, journal, image }) => (header, journal, image),
        Some(Loaded::Behind(header)) => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            return Ok(lost_response(&header.session_id, NOT_KEPT_SINCE));
        }
        None => return Err(ApiError::bad_request("Execution expired")),
    };
    if let Some(image) = image
        && let Some(paused) = thaw(state, &tenant, &claims, &header, image).await?
    {
        return resume(state, &tenant, &claims, paused::slot(paused), answers).await;
    }
    let Some(journal) = journal else {
        let _ = cluster.store.forget(&claims.execution_id).await;
        return Ok(lost_response(&header.session_id, NOT_KEPT));
    };
    run_again(state, tenant, claims, header, journal, answers).await
}

/// Runs the program of the execution `claims` resumes again from its `journal` (the recorded
/// tool results answered at once, the calls checked against the record) up to the token's
/// round, and resumes it there with the client's `answers`. A run that stops anywhere else
/// diverged from the first, and is lost; one that ends is answered as ended.
async fn run_again(
    state: &HttpState,
    tenant: String,
    claims: Claims,
    header: JournalHeader,
    journal: Journal,
    answers: Answers,
) -> Result<Response, ApiError> {
    let cluster = &state.cluster;
    let started = std::time::Instant::now();
    let admitted = state.core.admit(Some(&tenant), None)?;
    let limits = limits_until(state, header.expires_at_ms);
    let runtime = runtime_of(&header)?;
    // Its first run's id: the same calls get the same ids (a client may have run some).
    let mut request = ExecutionRequest::new(header.code)
        .with_id(claims.execution_id.clone())
        .with_tools(header.tools)
        .with_limits(limits)
        .with_session_id(header.session_id.clone())
        .with_tenant(tenant.clone())
        .with_runtime(runtime)
        .with_journal(journal);
    request.network = state.core.networks.for_run(Some(&tenant), &header.network_allow)?;
    request.keeper = super::run::keeper(state, &tenant, header.expires_at_ms, true, &Arc::default());
    let dir = DataDir::Rewound { id: header.session_id.clone(), before: header.files };
    let mut run = match state.core.start(admitted, Launch { request, dir, thaw: None }).await {
        Ok(run) => run,
        Err(e) if e.kind() == ErrorKind::Lost => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            return Ok(lost_response(&header.session_id, e.message()));
        }
        Err(e) => return Err(e.into()),
    };
    match advance(&mut run.execution).await {
        Stop::Calls(round, _, _) if round == claims.round => {
            tracing::info!(execution = %claims.execution_id, round, elapsed = ?started.elapsed(), "resumed by replay");
            metrics::histogram!("ptc_replay_seconds").record(started.elapsed().as_secs_f64());
            let (id, session_id, expires_at_ms) =
                (claims.execution_id.clone(), header.session_id, header.expires_at_ms);
            let paused = Paused {
                id,
                run,
                tenant: tenant.clone(),
                session_id,
                round,
                expires_at_ms,
                header: None,
                journaled: true,
                adopted: Some("replays"),
            };
            resume(state, &tenant, &claims, paused::slot(paused), answers).await
        }
        Stop::Calls(round, _, _) => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            let why = format!(
                "running it again stopped for tools at round {round}, not at round {} where it was paused",
                claims.round
            );
            Ok(lost_response(&header.session_id, &Journal::diverged(&why)))
        }
        Stop::Ended(end) => {
            let _ = cluster.store.forget(&claims.execution_id).await;
            let _ = cluster.store.add_usage(&tenant, "replays", 1).await;
            Ok(ended_response(&run, end).await)
        }
    }
}

/// A single server's continuation that finds no paused execution (the server restarted):
/// the execution's image on disk, if it hibernated at the token's round, is thawed here.
pub(super) async fn thaw_from_disk(
    state: &HttpState,
    tenant: String,
    claims: Claims,
    answers: Answers,
) -> Result<Response, ApiError> {
    let images = state.images.as_ref().expect("a server that keeps images");
    let Some(kept) = images.load(&claims.execution_id).await else {
        return Err(ApiError::bad_request("Execution expired"));
    };
    if kept.header.tenant != tenant || kept.round > claims.round {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }
    // It had gone on past its image when the server stopped: that part is lost.
    if kept.round < claims.round {
        images.forget(&claims.execution_id);
        return Ok(lost_response(&kept.header.session_id, NOT_KEPT_SINCE));
    }
    match thaw(state, &tenant, &claims, &kept.header, kept.image).await? {
        Some(paused) => resume(state, &tenant, &claims, paused::slot(paused), answers).await,
        None => {
            images.forget(&claims.execution_id);
            Err(ApiError::bad_request("Execution expired"))
        }
    }
}

/// Thaws the execution `claims` resumes from its sealed `image` (which the store or the disk
/// kept for the token's round), paused as it was; `None` when the image is refused or the thaw
/// fails (the log says why): a cluster then replays the journal instead.
async fn thaw(
    state: &HttpState,
    tenant: &str,
    claims: &Claims,
    header: &JournalHeader,
    image: Vec<u8>,
) -> Result<Option<Paused>, ApiError> {
    let started = std::time::Instant::now();
    let runtime = runtime_of(header)?;
    let admitted = state.core.admit(Some(tenant), None)?;
    let limits = limits_until(state, header.expires_at_ms);
    let mut request = ExecutionRequest::new(String::new())
        .with_tools(header.tools.clone())
        .with_limits(limits)
        .with_session_id(header.session_id.clone())
        .with_tenant(tenant.to_string())
        .with_runtime(runtime);
    request.network = state.core.networks.for_run(Some(tenant), &header.network_allow)?;
    let disk_header = Arc::new(OnceLock::new());
    let _ = disk_header.set(serde_json::to_vec(header).expect("a header serialises"));
    request.keeper = super::run::keeper(state, tenant, header.expires_at_ms, true, &disk_header);
    if state.cluster.durable() {
        // It has no journal here (the one in the store is of the run before the image): its
        // image is what carries it on, so it hibernates as soon as it waits again, a few ms
        // after its client has the token, rather than a second later.
        request = request.with_hibernate_after(Duration::ZERO);
    }
    let dir = DataDir::Reopened { id: header.session_id.clone(), before: header.files.clone() };
    let thaw = Thaw { id: claims.execution_id.clone(), image };
    let run = match state.core.start(admitted, Launch { request, dir, thaw: Some(thaw) }).await {
        Ok(run) => run,
        Err(e) => {
            tracing::warn!(execution = %claims.execution_id, "not thawed: {}", e.message());
            metrics::counter!("ptc_thaw_refused_total").increment(1);
            return Ok(None);
        }
    };
    tracing::info!(execution = %claims.execution_id, round = claims.round, elapsed = ?started.elapsed(), "resumed by thaw");
    metrics::histogram!("ptc_thaw_elsewhere_seconds").record(started.elapsed().as_secs_f64());
    Ok(Some(Paused {
        id: claims.execution_id.clone(),
        run,
        tenant: tenant.to_string(),
        session_id: header.session_id.clone(),
        round: claims.round,
        expires_at_ms: header.expires_at_ms,
        header: None,
        // The store knows it: the token's round is claimed there, and its end forgets it.
        journaled: true,
        adopted: Some("thaws"),
    }))
}

/// What the store kept of an execution whose node is gone.
enum Loaded {
    /// At the token's round: its journal (none for a python-data run) and its sealed image,
    /// when it hibernated at that round.
    Kept { header: JournalHeader, journal: Option<Journal>, image: Option<Vec<u8>> },
    /// Of an earlier round than the token's: what it did since was not kept.
    Behind(JournalHeader),
}

/// The journal of the execution `claims` resumes, from the shared store, ready to replay (none
/// for a python-data run), and its sealed image when it hibernated at the token's round;
/// `None` if it is gone or its deadline passed. A token of an older round, or another tenant's, is refused.
async fn load_journal(state: &HttpState, tenant: &str, claims: &Claims) -> Result<Option<Loaded>, ApiError> {
    let unavailable = |e: crate::cluster::StoreError| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("{e}; try the continuation again shortly"))
    };
    let malformed = |e: &dyn std::fmt::Display| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("a malformed journal: {e}"))
    };
    let Some(saved) = state.cluster.store.load(&claims.execution_id).await.map_err(unavailable)? else {
        return Ok(None);
    };
    let header: JournalHeader = serde_json::from_slice(&saved.header).map_err(|e| malformed(&e))?;
    if header.tenant != tenant {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }
    // An older round's token was used already (here or on the node that resumed it).
    if saved.round > claims.round {
        return Err(ApiError::bad_request("Invalid continuation token"));
    }
    // Its node went on past what it kept (a run thawed there is kept only once it hibernates
    // again, a few ms after its pause) and was lost before that.
    if saved.round < claims.round {
        return Ok(Some(Loaded::Behind(header)));
    }
    if header.expires_at_ms <= now_ms() {
        return Ok(None);
    }
    let mut entries: Vec<Entry> = Vec::new();
    for segment in &saved.segments {
        let part: Vec<Entry> = serde_json::from_slice(segment).map_err(|e| malformed(&e))?;
        entries.extend(part);
    }
    let image = saved.image.filter(|(round, _)| *round == claims.round).map(|(_, image)| image);
    // A python-data run has no seed: it was never journaled, only its image kept.
    if header.seed.is_empty() {
        return Ok(Some(Loaded::Kept { header, journal: None, image }));
    }
    let mut seed = [0u8; 32];
    hex::decode_to_slice(&header.seed, &mut seed).map_err(|e| malformed(&e))?;
    Ok(Some(Loaded::Kept { header, journal: Some(Journal::replay(seed, entries)), image }))
}

/// Why a python-data run whose server was lost cannot go on here.
const NOT_KEPT: &str = "this execution's server was lost before another could take it over: a python-data program is \
                        carried on elsewhere only from its kept memory, which was missing or made by a server whose \
                        python-data runtime differs from this one's. Run the program again from the start";

/// Why a run whose node was lost just after its last pause cannot go on here.
const NOT_KEPT_SINCE: &str = "this execution's server was lost right after its last pause, before it had kept what the \
                              program did since the round before; no other server can carry it on. Run the program \
                              again from the start";

/// An execution that cannot be resumed: the model is told why and what to do.
fn lost_response(session_id: &str, why: &str) -> Response {
    let stderr = format!("{why}\n");
    Json(json!({
        "status": "error", "session_id": session_id, "error": "Execution failed or timed out", "kind": "diverged",
        "stdout": "", "stderr": stderr,
    }))
    .into_response()
}

/// The limits of an execution carried on here: the first run's deadline (`expires_at_ms`)
/// holds; the engine's shortest timeout is its floor.
fn limits_until(state: &HttpState, expires_at_ms: u64) -> Limits {
    let engine = &state.core.engine;
    let remaining = expires_at_ms.saturating_sub(now_ms());
    let timeout = Duration::from_millis(remaining).max(engine.config().ceilings.min_timeout);
    engine.config().default_limits.clone().with_timeout(timeout)
}

/// The runtime a stored execution ran in.
fn runtime_of(header: &JournalHeader) -> Result<Runtime, ApiError> {
    header.runtime.parse().map_err(|e: ptc_engine::Error| ApiError::bad_request(e.message()))
}
