//! ptc-server: the front ends of ptc-engine and the `ptc-engine` binary (`serve`, `run`).
//!
//! `ptc-engine serve` runs the gRPC service with health and reflection, the LibreChat-compatible
//! HTTP Code API, the MCP endpoint (`/mcp`), and Prometheus metrics, with graceful shutdown;
//! `ptc-engine mcp` is the MCP front end on stdio. Every front end is a thin
//! layer over the library's [`ptc_engine::Engine`] and uses only its public API.

#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod cluster;
pub mod core;
pub mod entry;
pub mod execute;
pub mod front;
pub mod local;
pub mod metrics;
pub mod proto;
pub mod traces;

/// The allocator the server's binaries use (`ptc-engine`, the density harness's child):
/// jemalloc, with its background threads giving freed memory back. 60 s after 2,000 paused
/// programs with some state had ended, a server held 363 MiB PSS with glibc's malloc, 203 with
/// mimalloc and 134 with jemalloc (94 before them), at throughput within noise of glibc's (a
/// held-out run saw glibc keep 4,164 of 5,157 MiB after 20,000; `docs/benchmarks.md`, Density).
pub use tikv_jemallocator::Jemalloc as Allocator;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::core::Core;
use crate::core::auth::ApiKeys;
use crate::core::continuations::Continuations;
use crate::core::tenants::{TenantLimits, Tenants};
use crate::core::{files, sessions, token};
use crate::front::http::conn;
use crate::front::{grpc, http, mcp};
use crate::proto::sandbox_server::SandboxServer;
use ptc_engine::{Engine, EngineConfig};

/// Everything `serve` needs; `ServerConfig::default()` is the embedded default (what
/// `ptc-engine serve` runs with no flags), [`ServerConfig::ephemeral`] the same on free ports.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub api_keys: ApiKeys,
    /// Key for signing HTTP continuation tokens; `None` generates one at start.
    pub token_secret: Option<String>,
    /// Session files (`/mnt/data`) of the HTTP API and of live sessions.
    pub files: files::FilesConfig,
    pub tenant_limits: TenantLimits,
    /// HTTP connection and body bounds.
    pub http_limits: conn::HttpLimits,
    /// Largest gRPC message either way; a larger one ends the stream with
    /// `RESOURCE_EXHAUSTED` naming the limit. Default 16 MiB.
    pub grpc_max_message_bytes: usize,
    /// The most file bytes one gRPC execution returns with `Start.return_files`; files past it
    /// come back named, without content. Default 2 MiB, so that the final message stays within
    /// gRPC clients' usual 4 MiB receive limit with the output it also carries.
    pub grpc_max_returned_file_bytes: u64,
    pub engine: EngineConfig,
    /// How long running executions may finish after a shutdown signal before they fail with
    /// kind `shutdown`.
    pub shutdown_grace: Duration,
    /// Downstream MCP servers whose tools programs run through `/mcp` may call.
    pub mcp: mcp::McpConfig,
    /// Live sessions: caps, idle timeouts, snapshot size.
    pub sessions: sessions::SessionLimits,
    /// Run every `execute_code` of `/mcp` in a fresh sandbox instead of one live session per
    /// MCP session. Default false.
    pub mcp_stateless: bool,
    /// MCP sessions of `/mcp` per tenant, and how long one may sit idle.
    pub mcp_limits: mcp::McpLimits,
    /// The runtime of every `/mcp` program. Default `python`; `python-data` needs
    /// [`EngineConfig::python_data`].
    pub mcp_runtime: ptc_engine::Runtime,
    /// Above this many tools, `/mcp`'s `execute_code` names servers instead of listing every
    /// tool, and programs find tools with `search_tools` (docs/mcp.md). Default 40.
    pub mcp_discovery_above: usize,
    /// The runtime of an HTTP API run that names none (LibreChat's client never does).
    /// Default `python`; `python-data` needs [`EngineConfig::python_data`].
    pub http_runtime: ptc_engine::Runtime,
    /// This node's id, named in the continuation tokens it issues. Default: the host name.
    pub node_id: String,
    /// How to reach the other nodes (`--peers`). Default none: a single server.
    pub peers: cluster::Peers,
    /// The shared store of a cluster (`redis://…`): journals of paused executions, so that
    /// another node can finish them. Default none.
    pub redis_url: Option<String>,
    /// Bytes of journals in the shared store, per tenant and in all.
    pub journal_limits: cluster::JournalLimits,
    /// What each tenant's programs may reach over HTTP (`--network-policy`); empty: nothing.
    pub network: core::network::NetworkPolicies,
    /// Where spans go (`--otlp-endpoint`). Default none: no spans are made.
    pub otlp: Option<traces::OtlpConfig>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            grpc_addr: ([127, 0, 0, 1], 50051).into(),
            http_addr: ([127, 0, 0, 1], 8080).into(),
            token_secret: None,
            files: files::FilesConfig::default(),
            metrics_addr: ([127, 0, 0, 1], 9090).into(),
            api_keys: ApiKeys::default(),
            tenant_limits: TenantLimits::default(),
            http_limits: conn::HttpLimits::default(),
            grpc_max_message_bytes: 16 * 1024 * 1024,
            grpc_max_returned_file_bytes: 2 * 1024 * 1024,
            engine: {
                let mut engine = EngineConfig::default();
                // A server answers "busy" at once: its clients retry or go elsewhere.
                engine.when_busy = ptc_engine::WhenBusy::Refuse;
                engine.cache_dir = Some(default_cache_dir());
                engine.ahead_dir = std::env::var_os("PTC_AHEAD_DIR").filter(|dir| !dir.is_empty()).map(PathBuf::from);
                engine
            },
            shutdown_grace: Duration::from_secs(10),
            mcp: mcp::McpConfig::default(),
            sessions: sessions::SessionLimits::default(),
            mcp_stateless: false,
            mcp_limits: mcp::McpLimits::default(),
            mcp_runtime: ptc_engine::Runtime::Python,
            mcp_discovery_above: mcp::DISCOVERY_ABOVE,
            http_runtime: ptc_engine::Runtime::Python,
            node_id: cluster::default_node_id(),
            peers: cluster::Peers::None,
            redis_url: None,
            journal_limits: cluster::JournalLimits::default(),
            network: Default::default(),
            otlp: None,
        }
    }
}

impl ServerConfig {
    /// The default configuration with every listener on a free port of 127.0.0.1 (`run
    /// --local`, tests, benches).
    pub fn ephemeral() -> Self {
        let free = SocketAddr::from(([127, 0, 0, 1], 0));
        ServerConfig { grpc_addr: free, http_addr: free, metrics_addr: free, ..ServerConfig::default() }
    }
}

/// Where the server caches the compiled component: `$XDG_CACHE_HOME/ptc-engine`, else
/// `~/.cache/ptc-engine`, else `<temp dir>/ptc-engine` (`--cache-dir` / `PTC_CACHE_DIR`
/// override it).
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("ptc-engine");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache").join("ptc-engine");
    }
    std::env::temp_dir().join("ptc-engine")
}

/// A started server. `shutdown()` begins a graceful stop; `wait()` returns when it is done.
pub struct RunningServer {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub http: Arc<http::HttpState>,
    pub metrics_addr: SocketAddr,
    pub engine: Engine,
    pub tenants: Arc<Tenants>,
    /// Live sessions (gRPC and MCP).
    pub sessions: Arc<sessions::Sessions>,
    /// The MCP front end of `/mcp` (its handlers, downstream servers, parked executions).
    pub mcp: Arc<mcp::McpState>,
    /// The MCP sessions of `/mcp`.
    pub mcp_sessions: Arc<mcp::McpSessions>,
    /// The downstream MCP servers' connections.
    pub downstream: Arc<mcp::Downstream>,
    /// HTTP requests in progress per tenant.
    pub requests: Arc<conn::RequestShares>,
    /// This node, its peers and the store they share.
    pub cluster: Arc<cluster::Cluster>,
    shutdown: CancellationToken,
    /// The listeners, the sweeper and the shutdown sequence.
    tasks: TaskTracker,
    /// The OTLP exporter, when there is one.
    traces: Option<Arc<traces::Traces>>,
}

impl RunningServer {
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Sends the spans that have ended to the collector now (they otherwise wait for their
    /// batch, `OtlpConfig::batch_delay`).
    pub fn flush_traces(&self) {
        if let Some(traces) = &self.traces {
            traces.flush();
        }
    }

    pub async fn wait(self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Once the engine has failed what still ran, how long the streams and watchers get to deliver
/// the final events (a client that stops reading must not hold the shutdown up).
const FINAL_EVENTS_GRACE: Duration = Duration::from_secs(5);

/// Binds the listeners (port 0 picks a free port) and starts serving: the shared core, then
/// each front end over it, then the shutdown sequence.
pub async fn start(config: ServerConfig) -> anyhow::Result<RunningServer> {
    // Its HTTPS clients (the OTLP exporter, downstream MCP servers, a cluster's forwarding)
    // build on the process's crypto provider.
    ptc_engine::install_crypto_provider();
    if config.api_keys.is_empty() {
        tracing::warn!(
            "NO API KEYS CONFIGURED: local development mode, every caller is tenant \"local\". \
             Set --api-keys / PTC_API_KEYS before exposing this server."
        );
    } else {
        tracing::info!(tenants = config.api_keys.tenants(), "API keys loaded");
    }
    let grpc_listener = listen(config.grpc_addr, "gRPC", "--grpc-addr").await?;
    let metrics_listener = listen(config.metrics_addr, "metrics", "--metrics-addr").await?;
    let http_listener = listen(config.http_addr, "HTTP", "--http-addr").await?;
    let signer = token::Signer::new(config.token_secret.as_deref());
    let cluster = build_cluster(&config, &signer).await?;
    let mut config = config;
    let traces = match &config.otlp {
        Some(otlp) => {
            let (traces, tracer) = traces::Traces::start(otlp, &config.node_id)?;
            config.engine.tracer = Some(tracer);
            Some(Arc::new(traces))
        }
        None => None,
    };
    let core = build_core(&config, &signer, &cluster).await?;
    let downstream = mcp::Downstream::new(&config.mcp);
    let mcp = mcp::McpState::new(
        core.clone(),
        downstream.clone(),
        config.mcp_runtime,
        !config.mcp_stateless,
        config.mcp_discovery_above,
    );
    // A single server with a token secret keeps its hibernated executions on disk: its tokens
    // outlive a restart, and so do they (without a secret, neither does).
    let images = match cluster.is_single() && config.token_secret.as_deref().is_some_and(|s| !s.is_empty()) {
        true => Some(core::images::DiskImages::open(&config.files.dir, config.journal_limits).map_err(|e| {
            anyhow::anyhow!("cannot keep hibernated executions under {}: {e}", config.files.dir.display())
        })?),
        false => None,
    };
    let continuations = Continuations::new(core.clone(), signer, cluster.clone(), images);
    let http = http::HttpState::new(core.clone(), continuations, config.http_limits.clone(), config.http_runtime);
    let requests = conn::RequestShares::new(config.tenant_limits.max_requests, core.keys.clone());

    let shutdown = CancellationToken::new();
    let stop_serving = CancellationToken::new();
    let tasks = TaskTracker::new();
    let (grpc_addr, http_addr, metrics_addr) =
        (grpc_listener.local_addr()?, http_listener.local_addr()?, metrics_listener.local_addr()?);
    let (health_reporter, grpc) = serve_grpc(&config, &core, grpc_listener, stop_serving.clone()).await?;
    tasks.spawn(grpc);
    let (mcp_router, mcp_sessions) =
        mcp::router(mcp.clone(), core.keys.clone(), stop_serving.clone(), config.mcp_limits);
    let mut app = http::router(http.clone()).merge(mcp_router);
    if core.keys.is_empty() {
        app = app.layer(axum::middleware::from_fn(conn::local_only));
    }
    let app = app.layer(axum::middleware::from_fn_with_state(requests.clone(), conn::tenant_share));
    tasks.spawn(conn::serve(http_listener, app, config.http_limits.clone(), stop_serving.clone()));
    tasks.spawn(http::sweep(http.clone(), stop_serving.clone()));
    tasks.spawn(mcp_sessions.clone().run_sweeper(stop_serving.clone()));
    tasks.spawn(close_idle_downstream(downstream.clone(), stop_serving.clone()));
    tasks.spawn(serve_metrics(metrics_listener, shutdown.clone(), stop_serving.clone()));
    let stopping = Stopping {
        core: core.clone(),
        http: http.clone(),
        downstream: downstream.clone(),
        health_reporter,
        traces: traces.clone(),
    };
    tasks.spawn(stopping.run(shutdown.clone(), config.shutdown_grace, stop_serving));

    tracing::info!(grpc = %grpc_addr, http = %http_addr, metrics = %metrics_addr, "serving");
    Ok(RunningServer {
        grpc_addr,
        http_addr,
        http,
        metrics_addr,
        engine: core.engine.clone(),
        tenants: core.tenants.clone(),
        sessions: core.sessions.clone(),
        mcp,
        mcp_sessions,
        downstream,
        requests,
        cluster,
        shutdown,
        tasks,
        traces,
    })
}

/// The engine (compiled off the async threads), the tenants' caps, the session files and the
/// live sessions: what every front end holds.
async fn build_core(
    config: &ServerConfig,
    signer: &token::Signer,
    cluster: &Arc<cluster::Cluster>,
) -> anyhow::Result<Core> {
    let mut engine_config = config.engine.clone();
    // Nodes that share the token secret thaw each other's hibernated executions.
    if engine_config.seal_key.is_none() {
        engine_config.seal_key = Some(signer.derive(b"ptc-engine hibernated executions v1"));
    }
    let engine = tokio::task::spawn_blocking(move || Engine::new(engine_config)).await??;
    engine.warm_up();
    let files = files::FileStore::new(config.files.clone())
        .map_err(|e| anyhow::anyhow!("cannot open the files directory {}: {e}", config.files.dir.display()))?;
    let files = Arc::new(files);
    let key = sessions::snapshot_key(signer);
    let sessions =
        sessions::Sessions::new(engine.clone(), config.sessions.clone(), key, Some(files), Some(cluster.clone()));
    Ok(Core {
        engine,
        keys: Arc::new(config.api_keys.clone()),
        tenants: Tenants::new(config.tenant_limits),
        sessions,
        tasks: TaskTracker::new(),
        networks: Arc::new(core::network::Networks::new(config.network.clone())),
    })
}

/// This node, its peers and the store they share (in memory for a single server).
async fn build_cluster(config: &ServerConfig, signer: &token::Signer) -> anyhow::Result<Arc<cluster::Cluster>> {
    let store: Arc<dyn cluster::Store> = match &config.redis_url {
        Some(url) => Arc::new(
            cluster::RedisStore::connect(url, config.journal_limits)
                .await
                .map_err(|e| anyhow::anyhow!("the cluster store's URL {url:?} is not one: {e}"))?,
        ),
        None => Arc::new(cluster::MemoryStore::default()),
    };
    cluster::check_node_id(&config.node_id).map_err(|e| anyhow::anyhow!(e))?;
    let forward_key = signer.derive(b"ptc-engine cluster forwarding");
    Ok(Arc::new(cluster::Cluster::new(config.node_id.clone(), config.peers.clone(), store, &forward_key)))
}

/// The gRPC listener: the sandbox service with health (serving until the reporter says
/// otherwise) and reflection.
async fn serve_grpc(
    config: &ServerConfig,
    core: &Core,
    listener: TcpListener,
    stop: CancellationToken,
) -> anyhow::Result<(tonic_health::server::HealthReporter, impl std::future::Future<Output = ()> + use<>)> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<SandboxServer<grpc::SandboxService>>().await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    // grpcurl 1.8 only speaks the older v1alpha reflection protocol.
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let service =
        grpc::SandboxService::new(core.clone(), config.grpc_max_message_bytes, config.grpc_max_returned_file_bytes);
    // A snapshot message holds the state and files (at most --max-snapshot-bytes together),
    // the names of what was kept and dropped, and its seal: 1 MiB covers all but the state.
    let snapshot_message_bytes =
        usize::try_from(config.sessions.max_snapshot_bytes).unwrap_or(usize::MAX).saturating_add(1 << 20);
    let service = grpc::Limited::new(service, config.grpc_max_message_bytes, snapshot_message_bytes);
    Ok((health_reporter, async move {
        let result = tonic::transport::Server::builder()
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(service)
            // Without TCP_NODELAY every small message waits out delayed ACKs (~40 ms a round).
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                stop.cancelled_owned(),
            )
            .await;
        if let Err(e) = result {
            tracing::error!("gRPC server failed: {e}");
        }
    }))
}

/// Closes downstream MCP servers idle too long, every minute until `stop`.
async fn close_idle_downstream(downstream: Arc<mcp::Downstream>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tick.tick() => downstream.close_idle().await,
            _ = stop.cancelled() => return,
        }
    }
}

/// A listener on `addr` (with `SO_REUSEADDR`, as tokio sets on Unix, so that connections of
/// an earlier run in `TIME_WAIT` do not hold the port); a failure names the address, what it
/// was for and the flag that sets it.
async fn listen(addr: std::net::SocketAddr, what: &str, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("cannot listen for {what} on {addr} ({flag}): {e}"))
}

/// The metrics listener (Prometheus, and readiness until `shutdown`).
async fn serve_metrics(listener: TcpListener, shutdown: CancellationToken, stop: CancellationToken) {
    let app = metrics::router(shutdown);
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
        tracing::error!("metrics server failed: {e}");
    }
}

/// What the shutdown sequence stops.
struct Stopping {
    core: Core,
    http: Arc<http::HttpState>,
    downstream: Arc<mcp::Downstream>,
    health_reporter: tonic_health::server::HealthReporter,
    traces: Option<Arc<traces::Traces>>,
}

impl Stopping {
    /// Once `signal` fires: stop taking executions, let running ones finish within `grace`,
    /// fail the rest (kind `shutdown`), let their final events reach the clients, then close
    /// the listeners (`stop_serving`).
    async fn run(self, signal: CancellationToken, grace: Duration, stop_serving: CancellationToken) {
        signal.cancelled().await;
        let Stopping { core, http, downstream, health_reporter, traces } = self;
        let engine = &core.engine;
        tracing::info!(grace = ?grace, live = engine.live_instances(), "shutting down");
        health_reporter.set_not_serving::<SandboxServer<grpc::SandboxService>>().await;
        engine.stop_accepting();
        // What waits for its tools hibernates now: what has a keeper (an HTTP execution with
        // a token secret, or in a cluster) is kept, for this server after its restart or
        // another to thaw. It can still be continued here meanwhile.
        let asked = engine.hibernate_waiting();
        tracing::info!(asked, "asked the waiting executions to hibernate");
        core.sessions.clear();
        if tokio::time::timeout(grace, engine.drained()).await.is_err() {
            engine.shutdown();
            engine.drained().await;
        }
        http.continuations.clear();
        downstream.close().await;
        core.tasks.close();
        if tokio::time::timeout(FINAL_EVENTS_GRACE, core.tasks.wait()).await.is_err() {
            tracing::warn!("some clients did not take their final events in time");
        }
        if let Some(traces) = traces {
            // The batch processor's thread blocks on its last export.
            let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        }
        stop_serving.cancel();
    }
}
