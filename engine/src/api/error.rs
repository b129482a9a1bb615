//! The error type at the library's boundary: one struct with a machine-readable kind.
//!
//! These are errors of a *request* (refused before or beside an execution). How an execution
//! itself ends badly is a [`crate::api::events::FailureKind`] inside a `Failed` event instead.

use std::fmt;

use crate::api::events::FailureKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is malformed or breaks a limit (code too large, bad tool schema, ...).
    InvalidRequest,
    /// Every execution slot is taken and the engine is configured to refuse, not queue.
    Busy,
    /// Tool results named a call that is unknown, repeated, or already answered.
    InvalidToolResult,
    /// The execution has already ended (or was dropped); nothing more can be sent to it.
    Finished,
    /// The engine could not be built or the sandbox could not be instantiated.
    Engine,
    /// The engine is shutting down and takes no new executions.
    Unavailable,
    /// A live session is running another execution (one at a time per session).
    SessionBusy,
    /// Work outside an execution (a session's snapshot or restore) ran out of the session's
    /// time or fuel, which stopped its instance.
    Limit,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Busy => "busy",
            ErrorKind::InvalidToolResult => "invalid_tool_result",
            ErrorKind::Finished => "finished",
            ErrorKind::Engine => "engine",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::SessionBusy => "session_busy",
            ErrorKind::Limit => "limit",
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    pub(crate) fn engine(context: &str, err: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Engine, format!("{context}: {err:#}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the host ended an instance by trapping it: raised as the `wasmtime::Error` of a host
/// import or of the memory limiter, and downcast by the driver (as wasmtime-wasi does with
/// `I32Exit`) into the execution's [`crate::api::events::FailureKind`] and message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(crate) struct HostTrap {
    pub(crate) kind: FailureKind,
    pub(crate) message: String,
}

impl HostTrap {
    pub(crate) fn raise(kind: FailureKind, message: impl Into<String>) -> wasmtime::Error {
        wasmtime::Error::new(HostTrap { kind, message: message.into() })
    }
}
