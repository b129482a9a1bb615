//! Paused executions of the HTTP API, between the request that paused one and the
//! continuation that resumes it.
//!
//! Which calls await answers is the engine's to know ([`ptc_engine::Control::pending_through`]);
//! an entry here keeps the live execution, the round its token may resume, and what the run
//! holds (its files, its tenant's admission).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::core::runs::Run;
use crate::core::token::now_ms;

/// An execution waiting for the client's tool results between two requests.
pub(crate) struct Paused {
    /// The id its tokens and journal name: its engine id, or the first run's when it was
    /// resumed here by replay.
    pub id: String,
    /// The run: its execution, tenant slot and files.
    pub run: Run,
    pub tenant: String,
    pub session_id: String,
    /// The pause whose token may resume it ([`crate::core::token::pause_of`]); any other token is a replay
    /// or a forgery.
    pub round: u32,
    pub expires_at_ms: u64,
    /// The journal's header, until the first pause saves it (cluster with a shared store).
    pub header: Option<Vec<u8>>,
    /// Whether its journal is kept in the shared store.
    pub journaled: bool,
    /// Taken over here from another node's journal or image (the usage counter it adds:
    /// `thaws` or `replays`), and not yet known to others: it becomes this node's (its owner
    /// in the store, its place in [`Registry`]) only once the continuation's round is claimed.
    /// A retried continuation that loses the claim drops its copy; a held-out run saw the
    /// loser keep one and name itself owner, then refuse every later token of it.
    pub adopted: Option<&'static str>,
}

impl Paused {
    /// The engine's round of its pause ([`crate::core::token::pause_of`]).
    fn engine_round(&self) -> u32 {
        self.round.div_ceil(2)
    }

    /// The calls the client was shown and has not answered.
    pub(crate) fn pending(&self) -> Vec<String> {
        self.run.execution.control().pending_through(self.engine_round())
    }

    /// The calls the client was asked to decide on and has not.
    pub(crate) fn held(&self) -> Vec<String> {
        self.run.execution.control().held_through(self.engine_round())
    }
}

/// One paused execution's place. A continuation holds its lock while it resumes the execution
/// (a second request on the same token finds it locked: a replay) and empties it when done.
pub(crate) type Slot = Arc<tokio::sync::Mutex<Option<Paused>>>;

/// A place for `paused` (in the registry, or of a continuation's own while it adopts it).
pub(crate) fn slot(paused: Paused) -> Slot {
    Arc::new(tokio::sync::Mutex::new(Some(paused)))
}

/// The paused executions, by execution id.
#[derive(Default)]
pub(crate) struct Registry {
    slots: Mutex<HashMap<String, Slot>>,
}

impl Registry {
    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn len(&self) -> usize {
        self.slots().len()
    }

    pub(crate) fn insert(&self, paused: Paused) {
        let id = paused.id.clone();
        self.slots().insert(id, slot(paused));
    }

    pub(crate) fn get(&self, id: &str) -> Option<Slot> {
        self.slots().get(id).cloned()
    }

    pub(crate) fn remove(&self, id: &str) {
        self.slots().remove(id);
    }

    /// Forgets `id` at once, unless a request is resuming it right now (that request then
    /// sees it end and forgets it itself).
    pub(crate) fn forget(&self, id: &str) {
        let mut slots = self.slots();
        if slots.get(id).is_some_and(|slot| slot.try_lock().is_ok()) {
            slots.remove(id);
        }
    }

    /// Drops paused executions that have ended (deadline passed, cancelled, quota): this frees
    /// their handles and their tenants' slots. Returns their ids.
    pub(crate) fn sweep(&self) -> Vec<String> {
        let now = now_ms();
        let mut gone = Vec::new();
        self.slots().retain(|id, slot| {
            let keep = match slot.try_lock() {
                Ok(p) => p.as_ref().is_some_and(|p| p.expires_at_ms > now && !p.run.execution.control().is_finished()),
                Err(_) => true, // a request is using it right now
            };
            if !keep {
                gone.push(id.clone());
            }
            keep
        });
        gone
    }

    /// Drops every paused execution (shutdown): their instances end with them.
    pub(crate) fn clear(&self) {
        self.slots().clear();
    }
}
