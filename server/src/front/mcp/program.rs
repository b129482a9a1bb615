//! What the rest of the MCP front end shares about one program and its connection: how the
//! connection's programs keep state ([`Mode`]), a program between two calls of its client
//! ([`Program`]), the connection's live session ([`HeldSession`]), and what a request says of
//! its tenant and its client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ptc_engine::{Decision, ToolResult};
use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;
use tokio::task::JoinSet;

use crate::core::continuations::registry::Held;
use crate::core::runs::Run;
use crate::core::sessions::{LiveSession, Sessions};

/// The tenant an authenticated HTTP request runs for (put there by the `/mcp` route's auth).
#[derive(Debug, Clone)]
pub struct McpTenant(pub String);

/// How the programs of one connection keep state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Each program in a fresh sandbox.
    Fresh,
    /// All programs of the MCP session in one live session.
    Persistent,
    /// Fresh unless the program names a session (`session="new"` or an earlier result's id).
    Handles,
}

impl Mode {
    /// How a connection's programs keep state when the front end keeps live sessions
    /// (`sessions`): in one live session per MCP session (stdio; over HTTP, protocols before
    /// 2026-07-28), in sessions they name (2026-07-28 over HTTP, which removed MCP sessions, so
    /// each request there gets a handler of its own), or not.
    pub(super) fn of(ctx: &RequestContext<RoleServer>, sessions: bool) -> Mode {
        let http = ctx.extensions.get::<axum::http::request::Parts>().is_some();
        let modern = ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        match (sessions, http && modern) {
            (false, _) => Mode::Fresh,
            (true, false) => Mode::Persistent,
            (true, true) => Mode::Handles,
        }
    }
}

/// Whether the client can ask its user (MCP elicitation, in a form): tools then become callable
/// with the user's approval (`config::Approve`).
pub(super) fn elicits(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities().is_some_and(|c| c.elicitation.is_some())
}

/// The tenant an MCP request runs for (HTTP; `None` on stdio).
pub(super) fn tenant_of(extensions: &rmcp::model::Extensions) -> Option<String> {
    extensions.get::<axum::http::request::Parts>().and_then(|p| p.extensions.get::<McpTenant>()).map(|t| t.0.clone())
}

/// A connection's live sessions (persistent mode): one for its Python programs, one for its
/// JavaScript and TypeScript ones, each opened by its first program.
#[derive(Default)]
pub(super) struct HeldSessions {
    pub python: Option<HeldSession>,
    pub javascript: Option<HeldSession>,
}

/// A connection's live session in the registry; closed when the MCP session ends.
pub(super) struct HeldSession {
    pub sessions: Arc<Sessions>,
    pub tenant: String,
    pub id: String,
    pub live: LiveSession,
}

impl Drop for HeldSession {
    fn drop(&mut self) {
        self.sessions.close(&self.tenant, &self.id);
    }
}

/// A program between two calls of its client (protocol 2026-07-28 sampling), or within one.
pub(super) struct Program {
    pub run: Run,
    /// Downstream calls (and pre-2026 sampling requests) in flight; they keep running while
    /// the execution is parked.
    pub calls: JoinSet<ToolResult>,
    pub started: Instant,
    pub timeout_limit: Duration,
    pub tenant: Option<String>,
    /// llm_query calls the client was asked to sample for.
    pub awaiting: Vec<String>,
    /// Calls the client was asked to have its user approve (protocol 2026-07-28).
    pub asked: Vec<String>,
    /// The user's answers to approval requests in flight (before protocol 2026-07-28).
    pub decisions: JoinSet<Decision>,
    /// Said before the program's output (a new live session replaced one that ended).
    pub notice: Option<String>,
    /// The id of the session the program named (`session`), said after its output.
    pub named: Option<String>,
    /// What its client is told while it runs; kept while it is parked, so that the retry's
    /// progress names the calls that started before.
    pub progress: super::progress::Progress,
}

impl Held for Program {
    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    fn ended(&self) -> bool {
        self.started.elapsed() >= self.timeout_limit || self.run.execution.control().is_finished()
    }
}
