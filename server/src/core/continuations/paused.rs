//! An execution paused between the request that paused it and the continuation that resumes
//! it, and how a request runs one on to its next stop.
//!
//! Which calls await answers is the engine's to know ([`ptc_engine::Control::pending_through`]);
//! a [`Paused`] keeps the live execution, the round its token may resume, and what the run
//! holds (its files, its tenant's admission).

use ptc_engine::{ApprovalRequest, Completion, Event, Execution, Failure, ToolCall};

use super::registry::Held;
use crate::core::runs::Run;
use crate::core::token::{now_ms, pause_of};

/// An execution waiting for the client's tool results between two requests.
pub(crate) struct Paused {
    /// The id its tokens and journal name: its engine id, or the first run's when it was
    /// resumed here by replay.
    pub id: String,
    /// The run: its execution, tenant slot and files.
    pub run: Run,
    pub tenant: String,
    pub session_id: String,
    /// The pause whose token may resume it ([`pause_of`]); any other token is a replay or a
    /// forgery.
    pub round: u32,
    pub expires_at_ms: u64,
    /// The journal's header, until the first pause saves it (cluster with a shared store).
    pub header: Option<Vec<u8>>,
    /// Whether its journal is kept in the shared store.
    pub journaled: bool,
    /// Taken over here from another node's journal or image (the usage counter it adds:
    /// `thaws` or `replays`), and not yet known to others: it becomes this node's (its owner
    /// in the store, its place among the paused) only once the continuation's round is
    /// claimed. A retried continuation that loses the claim drops its copy; a held-out run saw
    /// the loser keep one and name itself owner, then refuse every later token of it.
    pub adopted: Option<&'static str>,
}

impl Paused {
    /// The engine's round of its pause ([`pause_of`]).
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

impl Held for Paused {
    fn tenant(&self) -> Option<&str> {
        Some(&self.tenant)
    }

    fn ended(&self) -> bool {
        self.expires_at_ms <= now_ms() || self.run.execution.control().is_finished()
    }
}

/// Where an execution stopped: paused for tools (at a pause, see [`pause_of`]: calls to run,
/// and calls to decide on), or ended.
pub(crate) enum Stop {
    Calls(u32, Vec<ToolCall>, Vec<ApprovalRequest>),
    Ended(Result<Completion, Failure>),
}

/// Runs `execution` on to its next stop.
pub(crate) async fn advance(execution: &mut Execution) -> Stop {
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
