//! The MCP front end: ptc-engine as a code-mode MCP server whose programs call the tools of
//! downstream MCP servers. `ptc-engine mcp --config FILE` serves it on stdio (for desktop
//! clients); `ptc-engine serve --mcp-config FILE` serves it over Streamable HTTP at `/mcp`,
//! behind the same API keys and tenant caps as the other APIs.

mod approvals;
mod catalog;
pub mod config;
pub mod convert;
pub mod downstream;
mod handler;
pub mod http_sessions;
mod program;
mod progress;
mod results;
#[allow(deprecated)] // sampling (see `sampling`)
mod run;
// Sampling is deprecated by SEP-2577 for a future protocol; it is still how an MCP server asks
// its client's model today, and what `llm_query` is for.
#[allow(deprecated)]
mod sampling;
mod state;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::core::auth::{ApiKeys, presented_key};
pub use config::McpConfig;
pub use downstream::Downstream;
pub use handler::CodeMode;
pub use http_sessions::{McpLimits, McpSessions};
pub use program::McpTenant;
pub use state::{DISCOVERY_ABOVE, McpState};

/// Serves one MCP client on stdin/stdout until it disconnects; the downstream servers are
/// stopped when it does.
pub async fn serve_stdio(state: Arc<McpState>) -> anyhow::Result<()> {
    let downstream = state.downstream.clone();
    let running = CodeMode::new(state).serve(rmcp::transport::stdio()).await?;
    let reason = running.waiting().await;
    downstream.close().await;
    tracing::info!(?reason, "MCP client disconnected");
    Ok(())
}

/// `/mcp` (Streamable HTTP), and its MCP sessions (to sweep and count). Every request needs an
/// API key when keys are configured; its tenant's executions count against the tenant's caps,
/// and its MCP sessions are its own (`http_sessions.rs`). Without keys (local mode) only
/// localhost Host headers are served, against DNS rebinding from a browser.
pub fn router(
    state: Arc<McpState>,
    keys: Arc<ApiKeys>,
    stop: CancellationToken,
    limits: McpLimits,
) -> (axum::Router, Arc<McpSessions>) {
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(stop);
    if !keys.is_empty() {
        config = config.disable_allowed_hosts();
    }
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(limits.idle);
    let manager = Arc::new(manager);
    let sessions = McpSessions::new(manager.clone(), limits);
    let service = StreamableHttpService::new(move || Ok(CodeMode::new(state.clone())), manager, config);
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(sessions.clone(), http_sessions::bind))
        .layer(axum::middleware::from_fn_with_state(keys, authenticate));
    (router, sessions)
}

async fn authenticate(State(keys): State<Arc<ApiKeys>>, mut request: Request, next: Next) -> Response {
    let tenant = {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        keys.tenant(presented_key(header("x-api-key"), header("authorization")))
    };
    match tenant {
        Ok(tenant) => {
            request.extensions_mut().insert(McpTenant(tenant));
            next.run(request).await
        }
        Err(e) => (
            StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({"error": format!("{}: send the API key as `Authorization: Bearer KEY` or `x-api-key`", e.message())})),
        )
            .into_response(),
    }
}
