//! The session's task: it owns the store and the instance and runs its commands one at a
//! time, hibernates when idle (and thaws for the next command), and ends when something ends
//! the session.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use wasmtime::Store;

use super::execute::execute;
use super::snapshot::snapshot;
use super::{Command, Serve};
use crate::calls::parked::Sleeper;
use crate::instance::guest::Guest;
use crate::instance::host::HostState;
use crate::run::job::Start;
use crate::run::sleep::{Asleep, Hibernation};

/// The session's task: runs its commands one at a time until something ends it; dropping the
/// store on return frees the instance. `first`: its instance, or (thawed from a sealed image)
/// its hibernated memory, thawed at its first command.
pub(crate) async fn serve(mut serve: Serve, mut store: Store<HostState>, first: Start) {
    metrics::gauge!("ptc_sessions_open").increment(1.0);
    let (mut sandbox, mut asleep) = match first {
        Start::Fresh(sandbox) => (sandbox, None),
        Start::Asleep(asleep) => (None, Some(asleep)),
    };
    let mut idle_since = tokio::time::Instant::now();
    // Rung when a start finds no free slot and this session has been idle longest.
    let wake = Arc::new(tokio::sync::Notify::new());
    // False once it declined: it would again. Its `Hibernation` is kept, holding its slot.
    let mut may_hibernate = true;
    let reason = loop {
        let hibernate = serve.hibernation.as_ref().filter(|_| may_hibernate && asleep.is_none() && sandbox.is_some());
        let hibernate_at = idle_since + hibernate.map_or(Duration::ZERO, |(_, after)| *after);
        let listed =
            hibernate.map(|(h, _)| h.stores.parked.list(idle_since.into_std(), Sleeper::Session(wake.clone())));
        let hibernate_now = async {
            tokio::select! {
                () = tokio::time::sleep_until(hibernate_at) => {}
                () = wake.notified() => {}
            }
        };
        let command = tokio::select! {
            biased;
            _ = serve.shared.ended.cancelled() => break None,
            _ = serve.shutdown.cancelled() => break Some("the server is shutting down".to_string()),
            _ = serve.closing.cancelled() => {
                let kept = keep_for_another(&serve, &mut store, sandbox.take(), asleep.is_some()).await;
                serve.shared.kept.store(kept, Ordering::Release);
                break Some("the server is shutting down".to_string());
            }
            _ = tokio::time::sleep_until(idle_since + serve.idle_timeout) => {
                break Some(format!("idle for {} s", serve.idle_timeout.as_secs()));
            }
            command = serve.commands.recv() => match command {
                Some(command) => command,
                None => break Some("closed".to_string()),
            },
            () = hibernate_now, if hibernate.is_some() => {
                let (hibernation, _) = hibernate.expect("checked");
                let guest = sandbox.take().expect("checked");
                match hibernation.freeze(&mut store, guest).await {
                    Ok(frozen) => asleep = Some(frozen),
                    Err(guest) => {
                        sandbox = Some(guest);
                        may_hibernate = false;
                    }
                }
                continue;
            }
        };
        // Busy now: not to be hibernated for a slot.
        drop(listed);
        if let (Some(frozen), Some((hibernation, _))) = (asleep.take(), &serve.hibernation) {
            match thaw_for_command(hibernation, &mut store, frozen).await {
                Ok(guest) => sandbox = Some(guest),
                Err(reason) => {
                    serve.shared.end(reason.clone());
                    command.refuse(&reason);
                    break None;
                }
            }
        }
        sandbox = match command {
            Command::Execute(job, install) => execute(&serve, &mut store, sandbox.take(), *job, install).await,
            Command::Snapshot { max_bytes, reply } => {
                snapshot(&serve, &mut store, sandbox.take(), max_bytes, reply).await
            }
        };
        if sandbox.is_none() {
            break None;
        }
        idle_since = tokio::time::Instant::now();
    };
    if let Some(reason) = reason {
        serve.shared.end(reason);
    }
    tracing::debug!(session = %serve.shared.id, reason = ?serve.shared.reason.lock().unwrap(), "session ended");
    metrics::gauge!("ptc_sessions_open").decrement(1.0);
}

/// The server is closing: its keeper takes the session's image first, so that another engine
/// can carry it on. Whether it did (a session already asleep was kept when it fell asleep).
async fn keep_for_another(serve: &Serve, store: &mut Store<HostState>, sandbox: Option<Guest>, asleep: bool) -> bool {
    match (&serve.hibernation, sandbox) {
        (Some((hibernation, _)), _) if hibernation.sealing.is_none() => false,
        (Some(_), None) => asleep,
        (Some((hibernation, _)), Some(guest)) => hibernation.freeze(store, guest).await.is_ok(),
        (None, _) => false,
    }
}

/// Thaws the hibernated session for its next command, and tells its keeper that its last
/// image no longer holds all of it; the words that end the session if the thaw fails.
async fn thaw_for_command(
    hibernation: &Hibernation,
    store: &mut Store<HostState>,
    frozen: Asleep,
) -> std::result::Result<Guest, String> {
    let guest =
        hibernation.thaw(store, frozen).await.map_err(|e| format!("thawing its hibernated instance failed: {e:#}"))?;
    if let Some(sealing) = &hibernation.sealing
        && let Err(why) = sealing.keeper.thawed().await
    {
        tracing::warn!(%why, "its keeper could not set its last image aside; the command runs");
        metrics::counter!("ptc_hibernate_keep_failures_total").increment(1);
    }
    Ok(guest)
}
