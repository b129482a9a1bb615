//! The downstream MCP servers whose tools programs call: one client connection each, made on
//! first use, listed with pagination, re-listed after `notifications/tools/list_changed`, and
//! made again after a crash (a stdio server is restarted on the next call).
//!
//! A server with `"isolation": "tenant"` has one connection (one process, for a stdio server)
//! per tenant instead of one for all: made on the tenant's first use, closed once unused for
//! [`IDLE_INSTANCE`], at most [`MAX_INSTANCES`] per server (past that, the one unused longest
//! is closed first).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation, Tool};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::broadcast;

use super::config::{CONNECT_TIMEOUT, Isolation, McpConfig, ServerSpec, Transport};
use super::convert;

/// How long a tenant's own instance of a server may sit unused before it is closed.
pub const IDLE_INSTANCE: Duration = Duration::from_secs(600);
/// Tenants' own instances of one server alive at once.
pub const MAX_INSTANCES: usize = 64;

/// Every configured server. Cheap to share; connections are made lazily.
pub struct Downstream {
    servers: Vec<Configured>,
    changed: broadcast::Sender<()>,
}

/// One configured server and its instances: one for all tenants (key ""), or one per tenant.
struct Configured {
    name: String,
    spec: ServerSpec,
    instances: Mutex<HashMap<String, Arc<Server>>>,
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
    /// Each call waits for the user's approval (`config::Approve`).
    pub approval: bool,
}

pub struct Server {
    pub name: String,
    spec: ServerSpec,
    /// When a call or a listing last used it (per-tenant instances are closed when idle).
    last_used: Mutex<Instant>,
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
            .map(|(name, spec)| Configured { name: name.clone(), spec: spec.clone(), instances: Mutex::default() })
            .collect();
        Arc::new(Downstream { servers, changed })
    }

    /// Fires when any server's tool list changed (or a restarted server listed new tools).
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.changed.subscribe()
    }

    /// The instance of server `name` that `tenant`'s calls go to (made if needed).
    pub fn server(&self, name: &str, tenant: Option<&str>) -> Option<Arc<Server>> {
        let entry = self.servers.iter().find(|s| s.name == name)?;
        Some(self.instance(entry, tenant))
    }

    fn instance(&self, entry: &Configured, tenant: Option<&str>) -> Arc<Server> {
        let key = match entry.spec.isolation {
            Isolation::Shared => "",
            Isolation::Tenant => tenant.unwrap_or(crate::core::auth::LOCAL_TENANT),
        };
        let mut instances = entry.instances.lock().unwrap();
        if let Some(server) = instances.get(key) {
            *server.last_used.lock().unwrap() = Instant::now();
            return server.clone();
        }
        if !key.is_empty() && instances.len() >= MAX_INSTANCES {
            let oldest = instances.iter().min_by_key(|(_, s)| *s.last_used.lock().unwrap()).map(|(k, _)| k.clone());
            if let Some(server) = oldest.and_then(|k| instances.remove(&k)) {
                tracing::info!(server = %entry.name, "closing the instance unused longest for another tenant's");
                tokio::spawn(async move { server.close().await });
            }
        }
        let server = Arc::new(Server {
            name: entry.name.clone(),
            spec: entry.spec.clone(),
            last_used: Mutex::new(Instant::now()),
            conn: tokio::sync::Mutex::new(None),
            tools: Mutex::new(None),
            stale: Arc::new(AtomicBool::new(true)),
            changed: self.changed.clone(),
        });
        instances.insert(key.to_string(), server.clone());
        server
    }

    /// Every server's tools as `tenant` sees them, listed concurrently (connecting where needed).
    /// Every server's tools, as callable for a client that can ask its user (`elicits`) or not.
    pub async fn listings(&self, tenant: Option<&str>, elicits: bool) -> Vec<Listing> {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, entry) in self.servers.iter().enumerate() {
            let server = self.instance(entry, tenant);
            tasks.spawn(async move { (i, server.listing(elicits).await) });
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

    /// Closes tenants' own instances unused for [`IDLE_INSTANCE`].
    pub async fn close_idle(&self) {
        let mut idle = Vec::new();
        for entry in &self.servers {
            entry.instances.lock().unwrap().retain(|key, server| {
                let keep = key.is_empty() || server.last_used.lock().unwrap().elapsed() < IDLE_INSTANCE;
                if !keep {
                    idle.push(server.clone());
                }
                keep
            });
        }
        for server in idle {
            server.close().await;
        }
    }

    /// Instances alive now (one per shared server in use, one per tenant for the others).
    pub fn instances(&self) -> usize {
        self.servers.iter().map(|e| e.instances.lock().unwrap().len()).sum()
    }

    /// Closes every connection (stdio servers are stopped, their process groups killed).
    pub async fn close(&self) {
        for entry in &self.servers {
            let instances: Vec<Arc<Server>> = entry.instances.lock().unwrap().drain().map(|(_, s)| s).collect();
            for server in instances {
                server.close().await;
            }
        }
    }
}

impl Server {
    pub fn call_timeout(&self) -> Duration {
        self.spec.call_timeout
    }

    async fn close(&self) {
        if let Some(conn) = self.conn.lock().await.take() {
            let _ = conn.cancel().await;
        }
    }

    async fn listing(&self, elicits: bool) -> Listing {
        let tools = self.tools().await.map(|tools| {
            let annotates = tools.iter().any(|t| t.annotations.as_ref().is_some_and(|a| a.read_only_hint.is_some()));
            tools
                .iter()
                .map(|tool| {
                    let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint);
                    let allowed = self.spec.callable.allows(&tool.name, read_only, annotates);
                    let (callable, approval) =
                        self.spec.approve.decide(&self.spec.callable, &tool.name, allowed, elicits);
                    let not_callable = (!callable).then(|| self.spec.callable.why_not());
                    ListedTool { tool: tool.clone(), not_callable, approval }
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
    /// `call_id` (the program's call's id: unique, and the same when the execution is
    /// replayed or thawed) goes in `_meta` as [`IDEMPOTENCY_KEY`], and the call's span
    /// (`traceparent`, W3C; empty: none) as `traceparent`, so that the server's spans nest
    /// under the program's call.
    pub async fn call(&self, tool: &str, arguments: Value, call_id: &str, traceparent: &str) -> Result<Value, String> {
        *self.last_used.lock().unwrap() = Instant::now();
        let label = format!("{}.{tool}", self.name);
        let peer = self.peer().await?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(args) = arguments {
            params = params.with_arguments(args);
        }
        let mut meta = rmcp::model::MetaObject::default();
        meta.0.insert(IDEMPOTENCY_KEY.into(), Value::String(call_id.to_string()));
        if !traceparent.is_empty() {
            meta.0.insert("traceparent".into(), Value::String(traceparent.to_string()));
        }
        params.meta = Some(rmcp::model::RequestMetaObject(meta));
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

/// The `_meta` key of a downstream call that names it: the program's call's id, unique, and
/// the same if the program's execution is replayed or thawed, so a server can tell a call
/// it has already carried out.
pub const IDEMPOTENCY_KEY: &str = "ptc-engine/idempotency-key";

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
