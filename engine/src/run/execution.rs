//! A running (or paused) execution's handle ([`Execution`]) and its control ([`Control`]);
//! the task that drives the instance is [`super::job`].

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::api::error::{Error, ErrorKind, Result};
use crate::api::events::{Decision, Event, ToolResult, Verdict};
use crate::api::journal::{JournalTake, Recorder};
use crate::calls::exchange::Exchange;
use crate::calls::schema::Schemas;

use super::trace::{self, Trace};

/// The client's side of one execution. Dropping it cancels the execution and frees the instance.
pub struct Execution {
    control: Control,
    events: UnboundedReceiver<Event>,
}

impl Execution {
    pub(crate) fn new(control: Control, events: UnboundedReceiver<Event>) -> Self {
        Execution { control, events }
    }

    pub fn id(&self) -> &str {
        &self.control.id
    }

    /// The next event; `None` after the final `Completed`/`Failed` has been taken.
    pub async fn next_event(&mut self) -> Option<Event> {
        let mut event = self.events.recv().await;
        if let (Some(trace), Some(event)) = (&self.control.trace, &mut event) {
            trace.event(event);
        }
        event
    }

    /// See [`Control::submit`].
    pub fn submit(&self, results: Vec<ToolResult>) -> Result<()> {
        self.control.submit(results)
    }

    /// See [`Control::decide`].
    pub async fn decide(&self, decisions: Vec<Decision>) -> Result<()> {
        self.control.decide(decisions).await
    }

    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// A cloneable handle for submitting results or cancelling from elsewhere.
    pub fn control(&self) -> Control {
        self.control.clone()
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        self.control.cancel();
    }
}

/// Submits results to, or cancels, an execution; does not keep it alive.
#[derive(Clone)]
pub struct Control {
    pub(crate) id: Arc<str>,
    pub(crate) exchange: Arc<Exchange>,
    pub(crate) cancel: CancellationToken,
    /// A journaled execution's recorder ([`crate::api::request::ExecutionRequest::journal`]).
    pub(crate) journal: Option<Arc<Recorder>>,
    /// The tools' compiled input schemas, which approved inputs that were changed must fit.
    pub(crate) schemas: Arc<Schemas>,
    /// Its spans, when the engine traces.
    pub(crate) trace: Option<Arc<Trace>>,
}

impl Control {
    /// Whether the program is parked waiting for tool results right now.
    pub fn is_paused(&self) -> bool {
        self.exchange.is_paused()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Hands results for any subset of the pending calls to the program.
    ///
    /// All or nothing: if one id is unknown, repeated in `results`, or already answered, the
    /// whole batch is refused with [`ErrorKind::InvalidToolResult`] and the execution carries
    /// on untouched. A result that claims success but is not valid JSON, or that is larger than
    /// `Ceilings::max_tool_result_bytes`, reaches the program as a `ToolError` saying so.
    /// After the end (or a cancel) it is refused with [`ErrorKind::Finished`].
    pub fn submit(&self, results: Vec<ToolResult>) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        let outcomes = self.trace.as_ref().map(|_| trace::outcomes(&results));
        self.exchange.submit(results)?;
        if let (Some(trace), Some(outcomes)) = (&self.trace, outcomes) {
            trace.answered(&outcomes);
        }
        Ok(())
    }

    /// A person's decisions on calls held for approval ([`crate::api::events::Event::ToolCalls`]'s
    /// `approvals`): approved ones go out again as calls (a `ToolCalls` event of their round),
    /// with the arguments they were approved with, which must fit the tool's schema; a denied
    /// one raises `ToolError("denied by the user: <reason>")` in the program.
    ///
    /// All or nothing, like [`Control::submit`]: a call that is not held (unknown, answered,
    /// decided already) or decided twice, or changed arguments that do not fit, refuse the whole
    /// batch with [`ErrorKind::InvalidToolResult`], saying why, and nothing changes. A journaled
    /// execution records the decisions, so a replay of it asks nobody again.
    pub async fn decide(&self, decisions: Vec<Decision>) -> Result<()> {
        let decisions = self.check_decisions(decisions).await?;
        self.apply_decisions(&decisions)
    }

    /// [`Control::decide`]'s first half: checks changed arguments against their tools' schemas
    /// (off the async workers when that is costly), and returns the decisions as they are to
    /// be applied; nothing changes yet.
    pub async fn check_decisions(&self, mut decisions: Vec<Decision>) -> Result<Vec<Decision>> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        for d in &mut decisions {
            let Verdict::Approve { input: Some(input) } = &mut d.verdict else { continue };
            // A person's edit is checked like the program's call was; a tool that takes no
            // schema still takes an object only.
            let Some((namespace, name)) = self.exchange.held_tool(&d.id) else { continue };
            let (text, _) = crate::calls::approval::take_reason(input);
            if !matches!(serde_json::from_str(&text), Ok(serde_json::Value::Object(_))) {
                return Err(Error::new(
                    ErrorKind::InvalidToolResult,
                    format!("the changed arguments of call {:?} are not a JSON object", d.id),
                ));
            }
            let checked = match self.schemas.check_inline(&namespace, &name, &text) {
                Some(checked) => checked,
                None => {
                    let (schemas, t) = (self.schemas.clone(), text.clone());
                    tokio::task::spawn_blocking(move || schemas.check(&namespace, &name, &t))
                        .await
                        .unwrap_or_else(|e| Err(format!("checking the input failed: {e}")))
                }
            };
            if let Err(problem) = checked {
                return Err(Error::new(
                    ErrorKind::InvalidToolResult,
                    format!("the changed arguments of call {:?} do not fit the tool: {problem}", d.id),
                ));
            }
            *input = text;
        }
        Ok(decisions)
    }

    /// [`Control::decide`]'s second half, for decisions [`Control::check_decisions`] returned.
    pub fn apply_decisions(&self, decisions: &[Decision]) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::new(ErrorKind::Finished, "the execution has already ended"));
        }
        self.exchange.decide(decisions)?;
        if let Some(journal) = &self.journal {
            for d in decisions {
                journal.decision(d);
            }
        }
        if let Some(trace) = &self.trace {
            trace.decided(decisions);
        }
        Ok(())
    }

    /// Ids of the calls handed out in rounds up to `round` (of [`crate::api::events::Event::ToolCalls`])
    /// that may be answered now and are not, oldest round first.
    pub fn pending_through(&self, round: u32) -> Vec<String> {
        self.exchange.pending_through(round, false)
    }

    /// Ids of the calls handed out in rounds up to `round` that wait for a person's decision
    /// ([`Control::decide`]), oldest round first.
    pub fn held_through(&self, round: u32) -> Vec<String> {
        self.exchange.pending_through(round, true)
    }

    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Asks the program off the native stack at its next wait for tools (now, if it is
    /// parked): the guest unwinds its event loop out of the instance's export, leaving its
    /// tasks in memory, and the engine re-enters it in the same instance at once. This is
    /// hibernation's first step, without the saving (`docs/hibernation.md`); nothing calls it
    /// but tests yet. A program running an event loop of its own (`asyncio.run` in its
    /// code) declines and stays parked.
    #[doc(hidden)]
    pub fn request_unwind(&self) {
        self.exchange.request_unwind();
    }

    /// Whether [`Control::request_unwind`]'s request still waits for the program's next wait
    /// for tools; once taken, that wait unwinds whatever answers arrive meanwhile.
    #[doc(hidden)]
    pub fn unwind_requested(&self) -> bool {
        self.exchange.unwind_requested()
    }

    pub fn is_finished(&self) -> bool {
        self.exchange.is_finished()
    }

    /// What a journaled execution recorded since the last take (all of it, the first time):
    /// call it at each pause and keep the entries, in order, after those of the request's
    /// [`crate::api::journal::Journal`]. `None` for an execution that is not journaled.
    pub fn take_journal(&self) -> Option<JournalTake> {
        self.journal.as_ref().map(|j| j.take())
    }
}
