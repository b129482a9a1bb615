//! The `Snapshot` command: the session's globals taken out of its instance, within its budget.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::oneshot;
use wasmtime::Store;

use super::guest_call::guest_call;
use super::{Dropped, Serve, SessionState};
use crate::api::error::{Error, ErrorKind, Result};
use crate::instance::guest::Guest;
use crate::instance::host::HostState;

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
    let state = guest_call(store, serve.budget, &serve.shutdown, "taking the snapshot", |store| {
        Box::pin(async move { sandbox.snapshot(store, max_bytes).await })
    })
    .await?
    .map_err(Error::invalid)?;
    tracing::debug!(bytes = state.data.len(), elapsed = ?started.elapsed(), "session snapshot");
    Ok(SessionState {
        data: state.data,
        kept: state.kept,
        modules: state.modules,
        dropped: state.dropped.into_iter().map(|d| Dropped { name: d.name, reason: d.reason }).collect(),
    })
}
