//! Which node answers a continuation or a cancel: this one, when it holds the execution; the
//! node that does, forwarded once with the client's credentials; or, when that node is gone,
//! this one from what the store or the disk kept ([`super::replay`]).

use axum::http::HeaderMap;

use super::resume::{expired, invalid_token};
use super::{Answers, Continuations, Turn};
use crate::cluster::ForwardError;
use crate::core::error::{Error, ErrorKind};
use crate::core::token::{TokenError, now_ms};

/// What a cancel found.
pub enum Cancelled {
    /// The execution was cancelled here, or its journal dropped.
    Done,
    /// The node that holds it answered.
    Forwarded(axum::response::Response),
    /// No execution of the tenant has that request id.
    Unknown,
}

impl Continuations {
    /// Answers a continuation with `token`: resumes its execution here, or forwards it to the
    /// node that holds it, or carries it on from what was kept when that node is gone.
    pub async fn resume(&self, tenant: String, token: &str, answers: Answers<'_>) -> Result<Turn, Error> {
        let claims = match self.signer.verify(token, now_ms()) {
            Ok(c) if c.tenant == tenant => c,
            Ok(_) | Err(TokenError::Invalid) => return Err(invalid_token()),
            Err(TokenError::Expired) => return Err(expired()),
        };
        let Answers { results, decisions, forward } = answers;
        let cluster = &self.cluster;
        if let Some(claim) = self.paused.claim(&claims.execution_id) {
            // A second request racing on the same execution is a replay of the same token.
            let Ok(held) = claim else { return Err(invalid_token()) };
            // A copy of an earlier round than the token's, which another node's token names:
            // the execution went on there. This copy is stale, and the token goes to its owner.
            let stale = held.as_ref().is_some_and(|p| p.round < claims.round);
            if !(stale && !claims.node.is_empty() && claims.node != cluster.node) {
                return self.resume_held(&tenant, &claims, held, results, decisions).await;
            }
            tracing::info!(execution = %claims.execution_id, node = %claims.node, "a stale copy: forwarding to the owner");
            drop(held);
            self.paused.forget(&claims.execution_id);
        }
        // Another node's: forwarded once, with the client's credentials; its answer is ours.
        if !claims.node.is_empty() && claims.node != cluster.node && !cluster.forwarded(forward.headers) {
            let body = (forward.body)();
            match cluster.forward(&claims.node, "/exec/programmatic", forward.headers, body).await {
                Ok(response) => return Ok(Turn::Forwarded(response)),
                Err(e) if !cluster.durable() => return Err(owner_unreachable(&claims.node, e)),
                Err(e) => {
                    tracing::warn!(node = %claims.node, "continuation: the owner is unreachable ({e:?}); replaying")
                }
            }
        }
        if cluster.durable() {
            return self.replay(tenant, claims, results, decisions).await;
        }
        if self.images.is_some() {
            return self.thaw_from_disk(tenant, claims, results, decisions).await;
        }
        Err(expired())
    }

    /// Cancels `tenant`'s execution with `request_id`: here, or forwarded to the node that
    /// holds it, or, when that node is lost, by dropping its journal (nobody may resume it).
    pub async fn cancel(&self, tenant: &str, request_id: &str, headers: &HeaderMap) -> Cancelled {
        if let Some(control) = self.core.tenants.by_request_id(tenant, request_id) {
            control.cancel();
            // A paused execution is forgotten now, not at its deadline: its instance, tenant
            // slot and request id are free for the next request.
            self.paused.forget(control.id());
            self.forget_image(control.id());
            let _ = self.cluster.store.forget(control.id()).await;
            return Cancelled::Done;
        }
        let cluster = &self.cluster;
        if let Ok(Some((id, node))) = cluster.store.request(tenant, request_id).await {
            if node != cluster.node && !cluster.forwarded(headers) {
                let body = serde_json::json!({"request_id": request_id}).to_string().into_bytes();
                match cluster.forward(&node, "/exec/programmatic/cancel", headers, body).await {
                    Ok(response) => return Cancelled::Forwarded(response),
                    Err(e) => tracing::warn!(%node, "cancel: the owner is unreachable ({e:?}); its journal is dropped"),
                }
            }
            self.paused.forget(&id);
            if cluster.store.forget(&id).await.is_ok() {
                return Cancelled::Done;
            }
        }
        Cancelled::Unknown
    }
}

/// The error when the node holding an execution cannot be reached and no store outlives it:
/// nobody else can resume it, so the client is told to run the program again.
fn owner_unreachable(node: &str, e: ForwardError) -> Error {
    let why = match e {
        ForwardError::Unknown => "this server has no address for it (--peers)".to_string(),
        ForwardError::Unreachable(e) => format!("it cannot be reached: {e}"),
    };
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "this execution is held by server {node:?}, and {why}; without a shared store (--redis-url) no other \
             server can resume it: run the program again"
        ),
    )
}
