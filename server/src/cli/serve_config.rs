//! How `serve`'s flags become a [`ServerConfig`]: each group of flags sets its own part, and
//! [`ServeArgs::server_config`] applies them in the order their checks need.

use std::time::Duration;

use ptc_engine::{ComponentSource, EngineConfig, MIB};

use super::{
    ClusterArgs, CompileArgs, EngineArgs, FileArgs, GrpcArgs, HttpArgs, LimitArgs, ListenArgs, McpServeArgs, ServeArgs,
    SessionArgs, TenantArgs, defaults,
};
use crate::ServerConfig;
use crate::core::auth::ApiKeys;

impl CompileArgs {
    /// The engine settings to compile for: `serve`'s defaults with these engine flags.
    pub fn engine_config(&self) -> EngineConfig {
        let mut engine = defaults().engine.clone();
        self.engine.apply(&mut engine);
        engine
    }
}

impl ServeArgs {
    pub fn server_config(&self) -> Result<ServerConfig, String> {
        let mut config = defaults().clone();
        // The engine first: the checks below read what it enables (the data runtime, fuel).
        self.engine.apply(&mut config.engine);
        for (flag, runtime) in [("--http-runtime", self.http.http_runtime), ("--mcp-runtime", self.mcp.mcp_runtime)] {
            if runtime == ptc_engine::Runtime::PythonData && config.engine.python_data.is_none() {
                return Err(format!("{flag} python-data needs --python-data"));
            }
        }
        if matches!(self.mcp.mcp_runtime, ptc_engine::Runtime::Javascript | ptc_engine::Runtime::Typescript) {
            return Err(super::MCP_PYTHON_ONLY.into());
        }
        self.limits.apply(&mut config.engine)?;
        self.listen.apply(&mut config);
        self.http.apply(&mut config);
        self.grpc.apply(&mut config);
        self.files.apply(&mut config);
        self.sessions.apply(&mut config);
        // After the HTTP limits (a tenant's default share of requests is a part of them).
        self.tenants.apply(&mut config)?;
        self.mcp.apply(&mut config)?;
        // After the tenants' flags (a cluster needs --token-secret).
        self.cluster.apply(&mut config)?;
        // After the files' and the tenants' (where images go, and whether there are tenants).
        self.hibernated_images(&mut config);
        config.otlp = self.traces.otlp();
        Ok(config)
    }

    /// Where hibernated images go and what they may take: in memory, then on disk under the
    /// files directory, and per tenant when there are tenants.
    fn hibernated_images(&self, config: &mut ServerConfig) {
        let engine = &mut config.engine;
        if let Some(mib) = self.engine.hibernated_memory_mib {
            engine.hibernated_memory = mib * MIB;
        } else {
            engine.hibernated_memory = engine.memory_budget / 8;
        }
        let dir = config.files.dir.join(".hibernated-images");
        let disk = match self.engine.hibernated_disk_mib {
            Some(mib) => mib * MIB,
            // At most half of what the disk has free now.
            None => engine.hibernated_disk.min(free_bytes(&config.files.dir).map_or(u64::MAX, |free| free / 2)),
        };
        engine.hibernated_dir = (disk > 0).then_some(dir);
        engine.hibernated_disk = disk;
        engine.tenant_hibernated = match self.tenants.tenant_hibernated_mib {
            Some(0) => None,
            Some(mib) => Some(mib * MIB),
            None if self.tenants.api_keys.is_empty() => None,
            None => Some((engine.hibernated_memory + disk) / 4),
        };
    }
}

/// Bytes free on the file system of `dir` (or of its nearest existing ancestor).
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let existing = dir.ancestors().find(|d| d.exists())?;
    let stat = rustix::fs::statvfs(existing).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

impl ListenArgs {
    fn apply(&self, config: &mut ServerConfig) {
        config.grpc_addr = self.grpc_addr;
        config.http_addr = self.http_addr;
        config.metrics_addr = self.metrics_addr;
        config.shutdown_grace = Duration::from_secs(self.shutdown_grace_secs);
    }
}

impl TenantArgs {
    /// Needs `config.http_limits` set.
    fn apply(&self, config: &mut ServerConfig) -> Result<(), String> {
        let engine = &mut config.engine;
        engine.tenant_memory_budget = self.tenant_memory_budget_mib.map(|m| m * MIB);
        engine.tenant_max_running = match self.tenant_max_running {
            Some(0) => None,
            Some(n) => Some(n),
            None if self.api_keys.is_empty() => None,
            None => Some(ptc_engine::default_tenant_max_running()),
        };
        config.token_secret = self.token_secret.clone();
        config.api_keys = ApiKeys::parse(&self.api_keys)?;
        if let Some(path) = &self.network_policy {
            config.network = crate::core::network::NetworkPolicies::load(path)?;
        }
        config.tenant_limits.max_concurrent = self.tenant_max_concurrent;
        config.tenant_limits.max_paused = self.tenant_max_paused;
        config.tenant_limits.max_requests = match self.tenant_max_requests {
            Some(0) => None,
            Some(n) => Some(n),
            None if self.api_keys.is_empty() => None,
            None => Some((config.http_limits.max_connections / 4).max(1)),
        };
        Ok(())
    }
}

impl EngineArgs {
    fn apply(&self, engine: &mut EngineConfig) {
        if let Some(component) = &self.component {
            engine.component = ComponentSource::File(component.clone());
        }
        if self.python_data || self.python_data_artifacts.is_some() {
            engine.python_data =
                Some(self.python_data_artifacts.clone().unwrap_or_else(ptc_engine::python_data_artifacts));
        }
        if let Some(dir) = &self.cache_dir {
            engine.cache_dir = Some(dir.clone());
        }
        if let Some(dir) = &self.ahead_dir {
            engine.ahead_dir = Some(dir.clone());
        }
        if let Some(mib) = self.memory_budget_mib {
            engine.memory_budget = mib * MIB;
        }
        engine.max_concurrent =
            self.max_concurrent.unwrap_or_else(|| ptc_engine::default_max_concurrent(engine.memory_budget));
        engine.fuel = self.fuel;
        engine.pooling = !self.no_pooling;
        engine.warm_instances = self.warm_instances;
        engine.memory_reservation = self.memory_reservation_mib.map(|m| m * MIB);
        engine.hibernate_after = (self.hibernate_after_ms > 0).then(|| Duration::from_millis(self.hibernate_after_ms));
        engine.observe_result_shapes = !self.no_result_shapes;
    }
}

impl LimitArgs {
    /// Needs `engine.fuel` set: the default limits are checked against the ceilings.
    fn apply(&self, engine: &mut EngineConfig) -> Result<(), String> {
        let limits = &mut engine.default_limits;
        limits.timeout = Duration::from_millis(self.timeout_ms);
        limits.max_round_trips = self.max_round_trips;
        limits.max_tool_calls = self.max_tool_calls;
        limits.max_memory_bytes = self.max_memory_mib * MIB;
        limits.max_output_bytes = self.max_output_bytes;
        let ceilings = &mut engine.ceilings;
        ceilings.max_timeout = Duration::from_millis(self.max_timeout_ms);
        ceilings.max_code_bytes = self.max_code_bytes;
        ceilings.max_tools = self.max_tools;
        ceilings.max_tool_input_bytes = self.max_tool_input_bytes;
        ceilings.max_tool_result_bytes = self.max_tool_result_bytes;
        ceilings.max_call_log_bytes = self.max_call_log_bytes;
        engine.ceilings.check(&engine.default_limits, engine.fuel).map_err(|e| format!("default limits: {e}"))
    }
}

impl HttpArgs {
    fn apply(&self, config: &mut ServerConfig) {
        let http = &mut config.http_limits;
        http.max_body_bytes = self.http_max_body_bytes;
        http.max_connections = self.http_max_connections.max(1);
        http.header_timeout = Duration::from_secs(self.http_header_timeout_secs.max(1));
        http.body_timeout = Duration::from_secs(self.http_body_timeout_secs.max(1));
        http.max_upload_bytes = self.http_max_upload_bytes;
        http.upload_timeout = Duration::from_secs(self.http_upload_timeout_secs.max(1));
        config.http_runtime = self.http_runtime;
    }
}

impl GrpcArgs {
    fn apply(&self, config: &mut ServerConfig) {
        config.grpc_max_message_bytes = self.grpc_max_message_bytes;
        config.grpc_max_returned_file_bytes = self.grpc_max_returned_file_bytes;
    }
}

impl FileArgs {
    fn apply(&self, config: &mut ServerConfig) {
        let files = &mut config.files;
        if let Some(dir) = &self.files_dir {
            files.dir = dir.clone();
        }
        files.ttl = Duration::from_secs(self.files_ttl_secs);
        files.quota_bytes = self.files_quota_bytes;
        files.quota_files = self.files_quota_files;
    }
}

impl SessionArgs {
    fn apply(&self, config: &mut ServerConfig) {
        let sessions = &mut config.sessions;
        sessions.max_per_tenant = self.max_sessions_per_tenant.max(1);
        sessions.max_idle_timeout = Duration::from_secs(self.max_session_idle_secs.max(1));
        sessions.idle_timeout = Duration::from_secs(self.session_idle_secs.max(1)).min(sessions.max_idle_timeout);
        sessions.max_snapshot_bytes = self.max_snapshot_bytes;
    }
}

impl McpServeArgs {
    fn apply(&self, config: &mut ServerConfig) -> Result<(), String> {
        if let Some(path) = &self.mcp_config {
            config.mcp = crate::front::mcp::McpConfig::load(path)?;
        }
        config.mcp_stateless = self.mcp_stateless;
        config.mcp_limits.max_per_tenant = self.mcp_max_sessions_per_tenant.max(1);
        config.mcp_limits.idle = Duration::from_secs(self.mcp_session_idle_secs.max(1));
        config.mcp_runtime = self.mcp_runtime;
        config.mcp_discovery_above = self.mcp_discovery_above;
        Ok(())
    }
}

impl ClusterArgs {
    /// Needs `config.token_secret` set.
    fn apply(&self, config: &mut ServerConfig) -> Result<(), String> {
        if let Some(node) = &self.node_id {
            config.node_id = node.clone();
        }
        if let Some(peers) = &self.peers {
            config.peers = crate::cluster::Peers::parse(peers).map_err(|e| format!("--peers: {e}"))?;
        }
        config.redis_url = self.redis_url.clone().filter(|u| !u.is_empty());
        config.journal_limits.tenant_bytes = self.journal_tenant_max_mib << 20;
        config.journal_limits.total_bytes = self.journal_max_mib << 20;
        let clustered = config.redis_url.is_some() || !matches!(config.peers, crate::cluster::Peers::None);
        if clustered && config.token_secret.as_deref().is_none_or(str::is_empty) {
            return Err("a cluster (--peers or --redis-url) needs --token-secret, the same on every node: \
                        each node must verify the tokens the others issue"
                .into());
        }
        Ok(())
    }
}
