//! The MCP sessions of `/mcp` (protocols before 2026-07-28): each bound to the key that
//! opened it, at most [`McpLimits::max_per_tenant`] per tenant, and ended after
//! [`McpLimits::idle`] without a request from its client.
//!
//! rmcp's session manager knows sessions by id alone: with its own key and another tenant's
//! `Mcp-Session-Id`, a tenant once ran programs in that tenant's live session and could end it.
//! So a middleware in front of it binds every new session id (from the initialize response's
//! `Mcp-Session-Id` header) to the tenant that opened it, and answers a request naming a
//! session of another tenant exactly as rmcp answers an unknown id (404 `Not Found: Session
//! not found`; a DELETE, 202). Ids are 128 random bits, so only a client that was given one can
//! name it. A session's GET stream (notifications) ends with the session: a client's streams
//! cannot outlive [`McpLimits::idle`] of silence, whatever rmcp's pings keep open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use super::program::McpTenant;

const SESSION_HEADER: &str = "mcp-session-id";

/// Bounds on MCP sessions over HTTP.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpLimits {
    /// MCP sessions one tenant keeps open; opening one more ends its session idle the longest.
    /// Default 64.
    pub max_per_tenant: usize,
    /// An MCP session without a request from its client for this long is ended (its streams
    /// close, and its live session with it). Default 5 minutes, rmcp's own keep-alive.
    pub idle: Duration,
}

impl Default for McpLimits {
    fn default() -> Self {
        McpLimits { max_per_tenant: 64, idle: Duration::from_secs(300) }
    }
}

struct Bound {
    tenant: String,
    last_seen: Instant,
}

/// The open MCP sessions and their tenants.
pub struct McpSessions {
    manager: Arc<LocalSessionManager>,
    limits: McpLimits,
    bound: Mutex<HashMap<Arc<str>, Bound>>,
}

impl McpSessions {
    pub fn new(manager: Arc<LocalSessionManager>, limits: McpLimits) -> Arc<Self> {
        Arc::new(McpSessions { manager, limits, bound: Mutex::default() })
    }

    /// MCP sessions open now (all tenants).
    pub fn len(&self) -> usize {
        self.bound.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids of `tenant`'s open MCP sessions.
    pub fn ids(&self, tenant: &str) -> Vec<String> {
        self.bound.lock().unwrap().iter().filter(|(_, b)| b.tenant == tenant).map(|(id, _)| id.to_string()).collect()
    }

    /// Whether session `id` is `tenant`'s (and then it was just used).
    fn touch(&self, id: &str, tenant: &str) -> bool {
        match self.bound.lock().unwrap().get_mut(id) {
            Some(b) if b.tenant == tenant => {
                b.last_seen = Instant::now();
                true
            }
            _ => false,
        }
    }

    fn bind(&self, id: &str, tenant: &str) {
        let bound = Bound { tenant: tenant.to_string(), last_seen: Instant::now() };
        self.bound.lock().unwrap().insert(id.into(), bound);
        metrics::gauge!("ptc_mcp_sessions").set(self.len() as f64);
    }

    /// Ends `ids`' sessions (their streams and handlers go with them).
    async fn end(&self, ids: Vec<Arc<str>>) {
        if ids.is_empty() {
            return;
        }
        {
            let mut bound = self.bound.lock().unwrap();
            for id in &ids {
                bound.remove(id);
            }
        }
        for id in ids {
            let _ = self.manager.close_session(&id).await;
        }
        metrics::gauge!("ptc_mcp_sessions").set(self.len() as f64);
    }

    /// Past `tenant`'s cap (a new session was just bound), ends its sessions idle the longest.
    async fn make_room(&self, tenant: &str) {
        let over = {
            let bound = self.bound.lock().unwrap();
            let mut mine: Vec<_> = bound.iter().filter(|(_, b)| b.tenant == tenant).collect();
            let excess = mine.len().saturating_sub(self.limits.max_per_tenant);
            mine.sort_by_key(|(_, b)| b.last_seen);
            mine.into_iter().take(excess).map(|(id, _)| id.clone()).collect::<Vec<_>>()
        };
        if !over.is_empty() {
            tracing::info!(tenant, "ending the tenant's MCP session idle the longest for a new one");
            self.end(over).await;
        }
    }

    /// Forgets sessions rmcp has ended by itself and ends those idle too long.
    pub async fn sweep(&self) {
        let ids: Vec<(Arc<str>, bool)> = {
            let bound = self.bound.lock().unwrap();
            bound.iter().map(|(id, b)| (id.clone(), b.last_seen.elapsed() >= self.limits.idle)).collect()
        };
        let mut ended = Vec::new();
        for (id, idle) in ids {
            if idle || !self.manager.has_session(&id).await.unwrap_or(false) {
                ended.push(id);
            }
        }
        self.end(ended).await;
    }

    /// Sweeps every few seconds until `stop`.
    pub async fn run_sweeper(self: Arc<Self>, stop: CancellationToken) {
        let every = (self.limits.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(15));
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sweep().await,
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// The middleware in front of rmcp's service (after authentication put the tenant in).
pub(crate) async fn bind(State(sessions): State<Arc<McpSessions>>, request: Request, next: Next) -> Response {
    let tenant = request.extensions().get::<McpTenant>().map(|t| t.0.clone()).unwrap_or_default();
    let id = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    match id {
        Some(id) => {
            if !sessions.touch(&id, &tenant) {
                // As rmcp answers an id it does not know.
                return if request.method() == Method::DELETE {
                    StatusCode::ACCEPTED.into_response()
                } else {
                    (StatusCode::NOT_FOUND, Body::from("Not Found: Session not found")).into_response()
                };
            }
            let deleting = request.method() == Method::DELETE;
            let response = next.run(request).await;
            if deleting && response.status().is_success() {
                sessions.end(vec![id.into()]).await;
            }
            response
        }
        None => {
            // An initialize (or a request of protocol 2026-07-28, which has no sessions).
            let response = next.run(request).await;
            if let Some(new) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
                sessions.bind(new, &tenant);
                sessions.make_room(&tenant).await;
            }
            response
        }
    }
}
