//! A continuation: a `POST /exec/programmatic` with a continuation token, which hands a paused
//! execution the client's tool results and decisions. The execution held here at the token's
//! round is resumed (`resume`); a token of another node's goes to that node; an execution
//! whose node is gone, or that this server held before it restarted, is carried on from what
//! the store or the disk kept ([`super::replay`]).

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;

use super::api::{Answers, ApiError};
use super::replay::{self, replay};
use super::resume::resume;
use super::state::HttpState;
use crate::cluster::ForwardError;
use crate::core::token::{TokenError, now_ms};

/// Answers a continuation with `token`: resumes its execution here, or forwards it to the
/// node that holds it, or carries it on from what was kept when that node is gone.
pub(super) async fn continuation(
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
            Err(e) if !cluster.durable() => return Err(owner_unreachable(&claims.node, e)),
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

/// The answer when the node holding an execution cannot be reached and no store outlives it:
/// nobody else can resume it, so the client is told to run the program again.
fn owner_unreachable(node: &str, e: ForwardError) -> ApiError {
    let why = match e {
        ForwardError::Unknown => "this server has no address for it (--peers)".to_string(),
        ForwardError::Unreachable(e) => format!("it cannot be reached: {e}"),
    };
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "this execution is held by server {node:?}, and {why}; without a shared store (--redis-url) no other \
             server can resume it: run the program again"
        ),
    )
}
