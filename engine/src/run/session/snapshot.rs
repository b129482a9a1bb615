//! The `Snapshot` command: the session's globals taken out of its instance (a JavaScript
//! session's memory), within its budget.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::oneshot;
use wasmtime::Store;

use super::guest_call::guest_call;
use super::{Dropped, Serve, SessionState};
use crate::api::error::{Error, ErrorKind, Result};
use crate::api::request::Runtime;
use crate::instance::guest::Guest;
use crate::instance::host::HostState;
use crate::pages;

/// Takes a snapshot of the session's instance for `reply`; the instance if the session goes on.
pub(super) async fn snapshot(
    serve: &Serve,
    store: &mut Store<HostState>,
    sandbox: Option<Guest>,
    max_bytes: u64,
    reply: oneshot::Sender<Result<SessionState>>,
) -> Option<Guest> {
    let instance = sandbox.as_ref().expect("a live session has its instance");
    let result = take_snapshot(serve, store, instance, max_bytes).await;
    // A trap stopped the instance: the session ends before the client hears why.
    let stopped = match &result {
        Err(e) if matches!(e.kind(), ErrorKind::Engine | ErrorKind::Limit) => {
            serve.shared.end(format!("taking its snapshot stopped it: {}", e.message()));
            true
        }
        _ => false,
    };
    serve.shared.busy.store(false, Ordering::Release);
    let _ = reply.send(result);
    if stopped { None } else { sandbox }
}

async fn take_snapshot(
    serve: &Serve,
    store: &mut Store<HostState>,
    sandbox: &Guest,
    max_bytes: u64,
) -> Result<SessionState> {
    let started = Instant::now();
    let mut state = guest_call(store, serve.budget, &serve.shutdown, "taking the snapshot", |store| {
        Box::pin(async move { sandbox.snapshot(store, max_bytes).await })
    })
    .await?
    .map_err(Error::invalid)?;
    if sandbox.runtime() == Runtime::Javascript {
        state.data = memory(serve, store, sandbox, max_bytes).await?;
    }
    tracing::debug!(bytes = state.data.len(), elapsed = ?started.elapsed(), "session snapshot");
    Ok(SessionState {
        data: state.data,
        kept: state.kept,
        modules: state.modules,
        dropped: state.dropped.into_iter().map(|d| Dropped { name: d.name, reason: d.reason }).collect(),
    })
}

/// A JavaScript session's snapshot: the pages of its memory that differ from a fresh
/// instance's (`pages/snapshot.rs`), at most `max_bytes`.
async fn memory(serve: &Serve, store: &mut Store<HostState>, sandbox: &Guest, max_bytes: u64) -> Result<Vec<u8>> {
    let image = serve.stores.image(Runtime::Javascript).await?;
    let frozen = pages::freeze(store, sandbox, &image, true)
        .await
        .map_err(|why| Error::invalid(format!("the session's memory cannot be taken as a snapshot: {why}")))?;
    let data = pages::snapshot::encode(&frozen, ptc_runtime_js_wasm::COMPONENT_SHA256);
    if data.len() as u64 > max_bytes {
        return Err(Error::invalid(format!(
            "the session's state is {} bytes, more than the {max_bytes} a snapshot may hold: delete large globals \
             (set them to null) or keep them in files, then snapshot again",
            data.len()
        )));
    }
    Ok(data)
}
