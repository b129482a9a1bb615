//! The one error a front end gets from the core, whatever refused: the engine, the tenant's
//! caps, the session registry or the file store. Its kind says whose fault it is and whether
//! trying again can help; each front end maps the kind to its wire (a gRPC status, an HTTP
//! status, an MCP tool error) in one place, and passes the message on as it is: it is written
//! for the client and the model behind it.

use ptc_engine::ErrorKind as EngineKind;

use super::files::FilesError;
use super::tenants::Refusal;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request itself is wrong (a bad id, limit, runtime, file name): fix it.
    Invalid,
    /// The request does not fit the state it meets: results for an execution that is not
    /// waiting for them, files on a server that keeps none.
    Precondition,
    /// No such session (or another tenant's, which is as unknown).
    NotFound,
    /// The id or request id is taken already.
    Exists,
    /// A cap of the server or the tenant is reached: try again later, or do less at once.
    Busy,
    /// The session is running another execution.
    SessionBusy,
    /// The tenant's file quota does not allow it.
    Quota,
    /// The server cannot take it now (shutting down, its store unreachable).
    Unavailable,
    /// A paused execution that cannot be resumed here: its session directory is gone.
    Lost,
    /// The server's own fault.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<ptc_engine::Error> for Error {
    fn from(e: ptc_engine::Error) -> Self {
        let kind = match e.kind() {
            EngineKind::InvalidRequest => ErrorKind::Invalid,
            EngineKind::InvalidToolResult => ErrorKind::Precondition,
            EngineKind::Busy | EngineKind::Limit => ErrorKind::Busy,
            EngineKind::SessionBusy => ErrorKind::SessionBusy,
            // The session (or execution) a request named has ended.
            EngineKind::Finished => ErrorKind::NotFound,
            EngineKind::Unavailable => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        };
        Error::new(kind, e.message())
    }
}

impl From<FilesError> for Error {
    fn from(e: FilesError) -> Self {
        match e {
            FilesError::Invalid(m) => Error::new(ErrorKind::Invalid, m),
            FilesError::Quota(m) => Error::new(ErrorKind::Quota, m),
            // The host's paths and errors are the operator's, not the client's.
            FilesError::Io(m) => {
                tracing::error!("session files: {m}");
                Error::new(ErrorKind::Internal, "the server could not prepare the session's files; try again")
            }
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::DuplicateRequest(m) => Error::new(ErrorKind::Exists, m),
            other => Error::new(ErrorKind::Busy, other.message()),
        }
    }
}
