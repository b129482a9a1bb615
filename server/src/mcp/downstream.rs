//! The downstream MCP servers whose tools programs call: one client connection each, made on
//! first use, listed with pagination, re-listed after `notifications/tools/list_changed`, and
//! made again after a crash (a stdio server is restarted on the next call).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation, Tool};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::broadcast;

use super::config::{CONNECT_TIMEOUT, McpConfig, ServerSpec, Transport};
use super::convert;

/// Every configured server. Cheap to share; connections are made lazily.
pub struct Downstream {
    servers: Vec<Arc<Server>>,
    changed: broadcast::Sender<()>,
}

/// One server's tools as last listed, with which of them programs may call.
#[derive(Debug, Clone)]
pub struct Listing {
    pub server: String,
    /// `Err(message)` when the server could not be reached or listed.
    pub tools: Result<Vec<ListedTool>, String>,
}

#[derive(Debug, Clone)]
pub struct ListedTool {
    pub tool: Tool,
    /// `None` if callable, else why not (for a model).
    pub not_callable: Option<&'static str>,
}

pub struct Server {
    pub name: String,
    spec: ServerSpec,
    /// The live connection; replaced when its transport has closed.
    conn: tokio::sync::Mutex<Option<RunningService<RoleClient, Client>>>,
    /// Tools as last listed; `None` before the first listing or after a change notification.
    tools: Mutex<Option<Arc<Vec<Tool>>>>,
    stale: Arc<AtomicBool>,
    changed: broadcast::Sender<()>,
}

/// Our side of one connection: hears that the server's tools changed.
#[derive(Clone)]
pub struct Client {
    stale: Arc<AtomicBool>,
    changed: broadcast::Sender<()>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut config = ClientConfig::default();
        config.client_info = Implementation::new("ptc-engine", env!("CARGO_PKG_VERSION"));
        config
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
        let _ = self.changed.send(());
    }
}

impl Downstream {
    pub fn new(config: &McpConfig) -> Arc<Self> {
        let (changed, _) = broadcast::channel(16);
        let servers = config
            .servers
            .iter()
            .map(|(name, spec)| {
                Arc::new(Server {
                    name: name.clone(),
                    spec: spec.clone(),
                    conn: tokio::sync::Mutex::new(None),
                    tools: Mutex::new(None),
                    stale: Arc::new(AtomicBool::new(true)),
                    changed: changed.clone(),
                })
            })
            .collect();
        Arc::new(Downstream { servers, changed })
    }

    /// Fires when any server's tool list changed (or a restarted server listed new tools).
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.changed.subscribe()
    }

    pub fn server(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// Every server's tools, listed concurrently (connecting where needed).
    pub async fn listings(&self) -> Vec<Listing> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, server) in self.servers.iter().enumerate() {
            let server = server.clone();
            tasks.spawn(async move { (i, server.listing().await) });
        }
        let mut out: Vec<Option<Listing>> = vec![None; self.servers.len()];
        while let Some(done) = tasks.join_next().await {
            if let Ok((i, listing)) = done {
                out[i] = Some(listing);
            }
        }
        out.into_iter()
            .zip(&self.servers)
            .map(|(l, s)| l.unwrap_or_else(|| Listing { server: s.name.clone(), tools: Err("listing failed".into()) }))
            .collect()
    }

    /// Closes every connection (stdio servers are stopped, their process groups killed).
    pub async fn close(&self) {
        for server in &self.servers {
            if let Some(conn) = server.conn.lock().await.take() {
                let _ = conn.cancel().await;
            }
        }
    }
}

impl Server {
    pub fn call_timeout(&self) -> Duration {
        self.spec.call_timeout
    }

    async fn listing(&self) -> Listing {
        let tools = self.tools().await.map(|tools| {
            let annotates = tools.iter().any(|t| t.annotations.as_ref().is_some_and(|a| a.read_only_hint.is_some()));
            tools
                .iter()
                .map(|tool| {
                    let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
                    let callable = self.spec.callable.allows(&tool.name, read_only, annotates);
                    ListedTool { tool: tool.clone(), not_callable: (!callable).then(|| self.spec.callable.why_not()) }
                })
                .collect()
        });
        Listing { server: self.name.clone(), tools }
    }

    /// The server's tools, listed again if they changed since.
    pub async fn tools(&self) -> Result<Arc<Vec<Tool>>, String> {
        if !self.stale.load(Ordering::SeqCst)
            && let Some(tools) = self.tools.lock().unwrap().clone()
        {
            return Ok(tools);
        }
        let peer = self.peer().await?;
        // Cleared before listing: a change notified during the listing lists again next time.
        self.stale.store(false, Ordering::SeqCst);
        let listed = tokio::time::timeout(CONNECT_TIMEOUT, peer.list_all_tools())
            .await
            .map_err(|_| format!("listing the tools of {:?} timed out", self.name))?
            .map_err(|e| {
                self.stale.store(true, Ordering::SeqCst);
                format!("listing the tools of {:?} failed: {e}", self.name)
            })?;
        let mut seen = HashSet::new();
        let tools: Vec<Tool> = listed.into_iter().filter(|t| seen.insert(t.name.clone())).collect();
        let tools = Arc::new(tools);
        *self.tools.lock().unwrap() = Some(tools.clone());
        Ok(tools)
    }

    /// The live connection's peer, connecting (or restarting a crashed server) first if needed.
    async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut conn = self.conn.lock().await;
        if let Some(live) = conn.as_ref()
            && !live.is_transport_closed()
        {
            return Ok(live.peer().clone());
        }
        if conn.take().is_some() {
            tracing::warn!(server = %self.name, "downstream MCP server connection closed; reconnecting");
            // A restarted server may list other tools.
            self.stale.store(true, Ordering::SeqCst);
        }
        let client = Client { stale: self.stale.clone(), changed: self.changed.clone() };
        let running = tokio::time::timeout(CONNECT_TIMEOUT, connect(&self.spec.transport, client))
            .await
            .map_err(|_| format!("connecting to MCP server {:?} timed out after {CONNECT_TIMEOUT:?}", self.name))?
            .map_err(|e| format!("cannot connect to MCP server {:?}: {e}", self.name))?;
        let peer = running.peer().clone();
        *conn = Some(running);
        Ok(peer)
    }

    /// Calls `tool` with `arguments`; `Err` is the message of the program's `ToolError`.
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<Value, String> {
        let label = format!("{}.{tool}", self.name);
        let peer = self.peer().await?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(args) = arguments {
            params = params.with_arguments(args);
        }
        let timeout = self.spec.call_timeout;
        match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => Err(format!(
                "{label} did not answer within {} s (the server's timeoutMs); try a smaller request or try again later",
                timeout.as_secs_f64()
            )),
            Ok(Ok(result)) => convert::tool_result(result),
            Ok(Err(ServiceError::McpError(e))) => Err(format!("{label} refused the call: {}", e.message)),
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => Err(format!(
                "MCP server {:?} stopped while handling {label}; it will be restarted on the next call",
                self.name
            )),
            Ok(Err(e)) => Err(format!("{label} failed: {e}")),
        }
    }
}

/// The variables a stdio server inherits from ptc-engine (as Claude Desktop passes them on).
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ"];

async fn connect(transport: &Transport, client: Client) -> Result<RunningService<RoleClient, Client>, String> {
    match transport {
        Transport::Stdio { command, args, env, cwd } => {
            let mut cmd = CommandWrap::with_new(command, |c| {
                // Only what desktop clients pass on, plus the server's own `env`: never
                // ptc-engine's secrets (API keys, token secret) or the rest of its environment.
                let inherited = INHERITED_ENV.iter().filter_map(|k| std::env::var_os(k).map(|v| (k, v)));
                c.args(args).env_clear().envs(inherited).envs(env);
                if let Some(dir) = cwd {
                    c.current_dir(dir);
                }
            });
            // Its own process group, killed whole: `npx` and shell wrappers leave no orphans.
            cmd.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
            let child = TokioChildProcess::new(cmd).map_err(|e| format!("cannot start {command:?}: {e}"))?;
            client.serve(child).await.map_err(|e| e.to_string())
        }
        Transport::Http { url, headers } => {
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers.clone());
            client.serve(StreamableHttpClientTransport::from_config(config)).await.map_err(|e| e.to_string())
        }
    }
}
