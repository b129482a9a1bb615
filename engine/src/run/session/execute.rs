//! The `Execute` command: one program in the session's instance.

use std::sync::atomic::Ordering;

use wasmtime::Store;

use super::{Install, Serve};
use crate::api::events::Event;
use crate::instance::guest::Guest;
use crate::instance::host::HostState;
use crate::run::job::{Job, Start, run};

/// Runs one execution in the session's instance; the instance if the session goes on.
pub(super) async fn execute(
    serve: &Serve,
    store: &mut Store<HostState>,
    sandbox: Option<Guest>,
    job: Job,
    install: Install,
) -> Option<Guest> {
    install(store);
    // Closing the session cancels the execution too: its token is a child of the session's.
    let (event, kept) = run(&job, store, Start::Fresh(sandbox), true).await;
    store.data().broker.run_slot.release();
    let ending = match (&event, &kept) {
        (_, Some(_)) => None,
        (Event::Failed(f), None) => Some(format!("its execution ended with {}: {}", f.kind.as_str(), f.message)),
        _ => Some("its instance stopped".into()),
    };
    if let Some(reason) = ending {
        // Ended before the client hears of it, so a new execution is refused for the real
        // reason, not as busy.
        serve.shared.end(reason);
    }
    serve.shared.busy.store(false, Ordering::Release);
    let _ = job.events.send(event);
    kept
}
