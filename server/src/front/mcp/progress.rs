//! What an `execute_code` call tells its client while the program runs, when the client asked
//! for progress (a `progressToken` in the call's `_meta`): the lines the program prints, each
//! nested call as it starts and ends, and each call that waits for the user's approval, as
//! `notifications/progress`. A client over stdio otherwise saw nothing until the result, even
//! for the seconds a person took to decide (issue 48).
//!
//! Rate-limited and bounded: at most one notification per [`EVERY`], what comes between joined
//! into the next and cut to its last [`MAX_CHARS`] characters; a call's name and how long it
//! took are said, never its arguments or its result (they are the program's, and may hold
//! what the model must not see twice or at all).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptc_engine::{ApprovalRequest, Decision, ToolCall, ToolResult, Verdict};
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext};
use tokio::time::Instant;

use super::results::tail;

/// At most one notification this often: four a second, whatever the program prints.
pub(super) const EVERY: Duration = Duration::from_millis(250);

/// One notification's message at most (its last characters: the newest lines).
const MAX_CHARS: usize = 1000;

/// The progress of one program: said to the `execute_code` call that runs it now (its retries
/// included, each with a token of its own), and to nobody when that call sent no token.
#[derive(Default)]
pub(super) struct Progress {
    to: Option<(ProgressToken, Peer<RoleServer>)>,
    /// Notifications sent so far (the `progress` value, which only grows).
    sent: u32,
    /// What is to be said next.
    pending: String,
    /// When the last notification went out.
    last: Option<Instant>,
    /// Calls started and not yet ended: their names and when they started.
    running: HashMap<String, (String, Instant)>,
    /// Calls that ended while the program was parked, said at the retry.
    parked: ParkedEnds,
}

/// Where the calls that end while a program is parked are noted: its id, whether it
/// succeeded, and when (as many as the program made calls, at most).
#[derive(Clone, Default)]
pub(super) struct ParkedEnds(Arc<Mutex<Vec<(String, bool, Instant)>>>);

impl ParkedEnds {
    /// Notes `result`'s call as ended now.
    pub(super) fn ended(&self, result: &ToolResult) {
        let mut ends = self.0.lock().unwrap_or_else(|e| e.into_inner());
        ends.push((result.id.clone(), result.outcome.is_ok(), Instant::now()));
    }
}

/// A call's name as the program wrote it: `namespace.name`.
fn label(call: &ToolCall) -> String {
    super::convert::label(call.namespace.as_deref(), &call.name)
}

impl Progress {
    /// Says what follows to the client of `ctx`, if it asked for progress. A retry's token is
    /// new, and so its count starts again.
    pub(super) fn attach(&mut self, ctx: &RequestContext<RoleServer>) {
        self.to = ctx.meta.get_progress_token().map(|token| (token, ctx.peer.clone()));
        (self.sent, self.last) = (0, None);
        let parked = std::mem::take(&mut *self.parked.0.lock().unwrap_or_else(|e| e.into_inner()));
        for (id, ok, at) in parked {
            self.ended_at(&id, ok, at);
        }
    }

    /// Where a parked program's calls note their ends.
    pub(super) fn parked_ends(&self) -> ParkedEnds {
        self.parked.clone()
    }

    /// Text the program printed.
    pub(super) fn printed(&mut self, data: &[u8]) {
        if self.to.is_some() {
            self.pending.push_str(&String::from_utf8_lossy(data));
            self.bound();
        }
    }

    /// A round's calls, handed on: each is said to start, or to wait for the user.
    pub(super) fn calls(&mut self, calls: &[ToolCall], approvals: &[ApprovalRequest]) {
        if self.to.is_none() {
            return;
        }
        let now = Instant::now();
        for call in calls {
            self.line(&format!("[call] {} started", label(call)));
            self.running.insert(call.id.clone(), (label(call), now));
        }
        for asked in approvals {
            self.line(&format!("[call] {} is waiting for the user's approval", label(&asked.call)));
            self.running.insert(asked.call.id.clone(), (label(&asked.call), now));
        }
    }

    /// The user's answer about a held call (an approved call then comes again, to be run).
    pub(super) fn decided(&mut self, decision: &Decision) {
        let Some((name, _)) = self.running.remove(&decision.id) else { return };
        let said = match decision.verdict {
            Verdict::Approve { .. } => "approved by the user",
            Verdict::Deny { .. } => "denied by the user",
            Verdict::Unasked { .. } => "not run: nobody could be asked for approval",
        };
        self.line(&format!("[call] {name} {said}"));
    }

    /// A call's end.
    pub(super) fn ended(&mut self, result: &ToolResult) {
        self.ended_at(&result.id, result.outcome.is_ok(), Instant::now());
    }

    fn ended_at(&mut self, id: &str, ok: bool, at: Instant) {
        let Some((name, started)) = self.running.remove(id) else { return };
        let took = at.saturating_duration_since(started).as_millis();
        let how = if ok { "finished" } else { "failed" };
        self.line(&format!("[call] {name} {how} in {took} ms"));
    }

    /// When the next notification is due: `None` while there is nothing to say.
    pub(super) fn due(&self) -> Option<Instant> {
        if self.pending.is_empty() || self.to.is_none() {
            return None;
        }
        Some(self.last.map_or_else(Instant::now, |last| last + EVERY))
    }

    /// Sends what is pending if it is due.
    pub(super) async fn send_due(&mut self) {
        if self.due().is_some_and(|due| due <= Instant::now()) {
            self.flush().await;
        }
    }

    /// Sends what is pending now: at the program's end, or when it is parked.
    pub(super) async fn flush(&mut self) {
        let Some((token, peer)) = &self.to else { return };
        if self.pending.is_empty() {
            return;
        }
        let message = std::mem::take(&mut self.pending);
        self.sent += 1;
        self.last = Some(Instant::now());
        let param = ProgressNotificationParam::new(token.clone(), self.sent.into())
            .with_message(tail(message.trim_end(), MAX_CHARS));
        // A client that has gone away gets the result, or nothing, as before.
        let _ = peer.notify_progress(param).await;
    }

    fn line(&mut self, line: &str) {
        if !self.pending.is_empty() && !self.pending.ends_with('\n') {
            self.pending.push('\n');
        }
        self.pending.push_str(line);
        self.pending.push('\n');
        self.bound();
    }

    fn bound(&mut self) {
        if self.pending.len() > 4 * MAX_CHARS {
            self.pending = tail(&self.pending, MAX_CHARS);
        }
    }
}
