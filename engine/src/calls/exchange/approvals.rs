//! Calls held for a person's decision: held when the broker hands them out, told about at
//! the program's next blocking point, decided all or nothing, an approved one then pending
//! like any other and a denied one answered with the program's `ToolError`.

use std::collections::HashSet;

use super::{Announce, Exchange, Pending};
use crate::api::error::{Error, ErrorKind, Result};
use crate::api::events::{ApprovalRequest, Decision, ToolCall, ToolResult, Verdict};

impl Exchange {
    /// Guest side: these calls, handed out in `round` (their tool's label with each), wait
    /// for a person's decision before they may be answered.
    pub(crate) fn hold(&self, round: u32, requests: impl IntoIterator<Item = (String, ApprovalRequest)>) {
        let mut state = self.state();
        for (name, request) in requests {
            state.pending.insert(request.call.id.clone(), Pending { name, round, held: Some(request) });
        }
    }

    /// The tools (labels, sorted) of the calls held for a decision now, for the words of a
    /// deadline.
    pub(crate) fn held_tools(&self) -> Vec<String> {
        let state = self.state();
        let mut names: Vec<String> =
            state.pending.values().filter(|p| p.held.is_some()).map(|p| p.name.clone()).collect();
        names.sort();
        names
    }

    /// Guest side: these requests (just held) are to be told about at this blocking point.
    pub(crate) fn announce_asks(&self, round: u32, requests: Vec<ApprovalRequest>) {
        self.state().announce.extend(requests.into_iter().map(|r| Announce::Ask(round, r)));
    }

    /// The requests held for a decision now.
    pub(crate) fn held_requests(&self) -> Vec<ApprovalRequest> {
        self.state().pending.values().filter_map(|p| p.held.clone()).collect()
    }

    /// Guest side, after a replay went live: these calls its first run had handed out are
    /// still pending; they are told about at the next blocking point, those of tools that need
    /// approval held for a decision (`needs(namespace, name)`), unless `decided` (recorded in
    /// the journal) decides them at once.
    pub(crate) fn reannounce(&self, calls: Vec<(u32, ToolCall)>, needs: impl Fn(&ToolCall) -> bool) {
        let mut state = self.state();
        for (round, call) in calls {
            let Some(pending) = state.pending.get_mut(&call.id) else { continue };
            if pending.held.is_some() {
                continue;
            }
            let item = if needs(&call) {
                let request = ApprovalRequest { call, reason: None };
                pending.held = Some(request.clone());
                Announce::Ask(round, request)
            } else {
                Announce::Call(round, call)
            };
            state.announce.push(item);
        }
    }

    /// The held call `id`'s tool (namespace or "", name), if it is held.
    pub(crate) fn held_tool(&self, id: &str) -> Option<(String, String)> {
        let state = self.state();
        let call = &state.pending.get(id)?.held.as_ref()?.call;
        Some((call.namespace.clone().unwrap_or_default(), call.name.clone()))
    }

    /// Client side: a person's decisions on held calls. All or nothing, as [`Exchange::submit`]:
    /// an id that is not held (unknown, answered, already decided) or decided twice refuses
    /// the whole batch. An approved call becomes a pending call (with the approved input),
    /// announced at the program's next blocking point (now, if it is parked); a denied one is
    /// answered with the program's `ToolError`. Edited inputs must have been checked against
    /// the schema before.
    pub(crate) fn decide(&self, decisions: &[Decision]) -> Result<()> {
        let mut state = self.state();
        if state.finished {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        let mut batch = HashSet::new();
        for d in decisions {
            let problem = match state.pending.get(&d.id) {
                _ if !batch.insert(d.id.as_str()) => "is decided twice in this batch",
                Some(Pending { held: Some(_), .. }) => continue,
                Some(_) => "does not wait for a decision (it was approved already, or needs none)",
                None if state.answered.contains(&d.id) => "was already answered",
                None => "is not a call of this execution",
            };
            return Err(Error::new(ErrorKind::InvalidToolResult, format!("tool call id {:?} {problem}", d.id)));
        }
        for d in decisions {
            let pending = state.pending.get_mut(&d.id).expect("checked above");
            let request = pending.held.take().expect("checked above");
            let round = pending.round;
            // Any announcement of it still to come is for the request it no longer is.
            state.announce.retain(|a| !matches!(a, Announce::Ask(_, r) if r.call.id == d.id));
            match &d.verdict {
                Verdict::Approve { input } => {
                    let mut call = request.call;
                    if let Some(input) = input {
                        call.input = input.clone();
                    }
                    state.announce.push(Announce::Call(round, call));
                }
                Verdict::Deny { reason } => {
                    self.answer(&mut state, ToolResult::error(d.id.clone(), crate::calls::approval::denied(reason)));
                }
                Verdict::Unasked { message } => {
                    self.answer(&mut state, ToolResult::error(d.id.clone(), message.clone()));
                }
            }
        }
        drop(state);
        self.arrived.notify_one();
        Ok(())
    }
}
