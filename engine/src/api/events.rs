//! What an execution reports: tool-call batches, output as it is produced, and how it ended.

use std::time::Duration;

/// One event of an execution, in order. `Completed` or `Failed` is always the last.
#[derive(Debug, Clone)]
pub enum Event {
    /// Every call that was pending when the program blocked; answer any subset, in any order.
    /// `round` counts the batches handed out so far (1 for the first).
    ///
    /// `approvals` are calls of tools that need a person's approval
    /// ([`crate::api::request::ToolDef::with_approval`]): each is held, not to be run, until
    /// [`crate::run::execution::Control::decide`] answers it; the program's other calls go on meanwhile. A call
    /// approved later comes again in a `ToolCalls` of its own round, in `calls`, with the input
    /// it was approved with.
    ToolCalls {
        round: u32,
        calls: Vec<ToolCall>,
        approvals: Vec<ApprovalRequest>,
    },
    Output {
        stream: OutputStream,
        data: Vec<u8>,
    },
    Completed(Completion),
    Failed(Failure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    /// Unique and stable: the execution's id (its first 16 characters) and the call's place in
    /// the program's order of calls (`call_3_9f86d081884c7d65`), the same when the execution is
    /// thawed or replayed from its journal; a client may use it as an idempotency key.
    pub id: String,
    /// The tool's original name, as in its definition.
    pub name: String,
    /// The tool's namespace, as in its definition.
    pub namespace: Option<String>,
    /// The keyword arguments as JSON text (an object), already valid against the schema.
    pub input: String,
    /// The call's `execute_tool` span, when the engine traces: a client passes it on (W3C
    /// `traceparent`) so that the tool's own spans nest under the program's call.
    #[serde(skip)]
    pub trace: Option<opentelemetry::trace::SpanContext>,
}

impl ToolCall {
    pub fn input_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.input).unwrap_or(serde_json::Value::Null)
    }
}

/// A call held for a person's approval, and why the program makes it, if it said
/// (`_reason="..."`, an argument every tool that needs approval takes).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ApprovalRequest {
    pub call: ToolCall,
    pub reason: Option<String>,
}

/// A person's answer to an [`ApprovalRequest`]: [`crate::run::execution::Control::decide`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    /// The held call's id.
    pub id: String,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Verdict {
    /// Run the call: as it was made, or with `input` (JSON text of an object) in place of its
    /// arguments, checked against the tool's schema again.
    Approve { input: Option<String> },
    /// Do not run it: the program gets `ToolError("denied by the user: <reason>")`.
    Deny { reason: String },
    /// Nobody could be asked: the program gets `ToolError(message)` (say why, and what to do).
    Unasked { message: String },
}

impl Decision {
    pub fn approve(id: impl Into<String>) -> Self {
        Decision { id: id.into(), verdict: Verdict::Approve { input: None } }
    }

    /// Approved with other arguments (a JSON object as text).
    pub fn approve_with(id: impl Into<String>, input: impl Into<String>) -> Self {
        Decision { id: id.into(), verdict: Verdict::Approve { input: Some(input.into()) } }
    }

    pub fn deny(id: impl Into<String>, reason: impl Into<String>) -> Self {
        Decision { id: id.into(), verdict: Verdict::Deny { reason: reason.into() } }
    }

    pub fn unasked(id: impl Into<String>, message: impl Into<String>) -> Self {
        Decision { id: id.into(), verdict: Verdict::Unasked { message: message.into() } }
    }
}

/// The client's answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub id: String,
    /// `Ok(json_text)` or `Err(message)`; the program sees a value or a `ToolError`.
    pub outcome: Result<String, String>,
}

impl ToolResult {
    pub fn ok(id: impl Into<String>, value: &serde_json::Value) -> Self {
        ToolResult { id: id.into(), outcome: Ok(value.to_string()) }
    }

    pub fn ok_json(id: impl Into<String>, json: impl Into<String>) -> Self {
        ToolResult { id: id.into(), outcome: Ok(json.into()) }
    }

    pub fn error(id: impl Into<String>, message: impl Into<String>) -> Self {
        ToolResult { id: id.into(), outcome: Err(message.into()) }
    }
}

/// One call as it happened, for the execution's log.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCallRecord {
    pub id: String,
    pub name: String,
    pub namespace: Option<String>,
    pub input: String,
    /// `None` while unanswered (the execution ended first).
    pub outcome: Option<Result<String, String>>,
    /// 1-based round in which the call was handed over; 0 if it never left the sandbox
    /// (rejected by the schema).
    pub round: u32,
    pub duration: Duration,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub wall_time: Duration,
    /// Time spent creating the instance on the execution's path, with copying ahead the pages
    /// programs write: zero when a warm one was ready (see `EngineConfig::warm_instances`) and
    /// in a session.
    pub instantiate_time: Duration,
    pub round_trips: u32,
    pub tool_calls: u32,
    /// Fuel consumed, when metering is on.
    pub fuel_consumed: Option<u64>,
    /// Largest linear memory the instance reached, in bytes.
    pub peak_memory_bytes: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Output beyond `max_output_bytes` was dropped.
    pub output_truncated: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub stdout: String,
    pub stderr: String,
    /// The program's top-level `return` value as JSON text (`null` without one).
    pub return_value: String,
    pub tool_calls: Vec<ToolCallRecord>,
    pub stats: Stats,
}

/// Why an execution failed; stable names (`as_str`) for APIs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// An exception escaped the program (the traceback is in `stderr` and `traceback`).
    PythonError,
    /// `SystemExit` with a non-zero status.
    Exit,
    /// Tool definitions rejected before running: bad or colliding names, bad schema.
    InvalidTools,
    /// The wall-clock deadline passed (running or waiting for tools).
    Timeout,
    /// The program tried to grow memory past `max_memory_bytes`.
    Memory,
    /// The fuel budget ran out.
    Fuel,
    /// The program needed more than `max_round_trips` batches of tool calls.
    RoundTrips,
    /// The program made more than `max_tool_calls` tool calls.
    ToolCalls,
    /// The client cancelled or went away.
    Cancelled,
    /// The server is shutting down.
    Shutdown,
    /// A fault in the sandbox or the engine (a wasm trap that is not one of the above).
    Internal,
    /// Resumed on another server by running it again from its journal, the program did not
    /// repeat its first run (other tool calls, or the clock read at another point).
    Diverged,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::PythonError => "python_error",
            FailureKind::Exit => "exit",
            FailureKind::InvalidTools => "invalid_tools",
            FailureKind::Timeout => "timeout",
            FailureKind::Memory => "memory",
            FailureKind::Fuel => "fuel",
            FailureKind::RoundTrips => "round_trips",
            FailureKind::ToolCalls => "tool_calls",
            FailureKind::Cancelled => "cancelled",
            FailureKind::Shutdown => "shutdown",
            FailureKind::Internal => "internal",
            FailureKind::Diverged => "diverged",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
    /// The Python traceback for `PythonError`, user line numbers only.
    pub traceback: String,
    pub exit_code: Option<i32>,
    /// Output produced before the failure.
    pub stdout: String,
    pub stderr: String,
    pub tool_calls: Vec<ToolCallRecord>,
    pub stats: Stats,
}
