//! What every connection of the MCP front end shares ([`McpState`]): the core, the downstream
//! servers, the executions parked for sampling, and the last rendering of the tools'
//! signatures (which downstream schemas can be checked is the engine's schema cache's).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ptc_engine::{Limits, Runtime, ToolDef, ToolDescription};

use super::downstream::Downstream;
use super::program::Program;
use crate::core::Core;
use crate::core::continuations::Registry;
use crate::core::continuations::registry::PARKING;
use crate::core::sessions::Sessions;

/// What every connection of the front end shares.
pub struct McpState {
    /// The core; on stdio, where one client owns the server, its requests name no tenant, so
    /// no tenant's caps apply.
    pub core: Core,
    pub downstream: Arc<Downstream>,
    /// Defaults of every execution; `execute_code(timeout_ms=...)` may change the deadline
    /// within the engine's ceilings.
    pub limits: Limits,
    /// Executions waiting for their client to sample or approve (protocol 2026-07-28), by
    /// handle, within the core's parking caps.
    pub(super) parked: Registry<Program>,
    /// The last rendering of the callable tools' signatures, for `execute_code`'s description:
    /// every client lists the tools, and rendering them takes an instance.
    described: Mutex<Described>,
    /// `Some`: programs keep their globals (variables, imports, functions) and `/mnt/data`
    /// (if the core keeps files) in live sessions of the core's registry: one per MCP session,
    /// or (protocol 2026-07-28 over HTTP, which has no MCP sessions) those a program names
    /// with `session`. `None`: each program runs in a fresh sandbox.
    pub sessions: Option<Arc<Sessions>>,
    /// The Python every program runs in.
    pub runtime: Runtime,
    /// Handlers alive (one per MCP session over HTTP, per request at protocol 2026-07-28) and
    /// their listeners for tool changes: what an ended session must not leave behind.
    pub(super) handlers: Arc<AtomicUsize>,
    pub(super) listeners: Arc<AtomicUsize>,
    /// Above this many callable tools, `execute_code`'s description names servers instead of
    /// listing every tool, and programs find tools with `search_tools` (`catalog.rs`).
    pub discovery_above: usize,
}

/// [`McpState::discovery_above`]'s default. Listed, the 102 tools of five real MCP servers took
/// 4,472 tokens of `execute_code`'s description, about 40 per tool; in discovery mode 474, and
/// 786 for 510 tools (`just discovery`). Forty tools listed cost about as much as a search round.
pub const DISCOVERY_ABOVE: usize = 40;

impl McpState {
    /// The front end over `core`: programs call `downstream`'s tools and run in `runtime`,
    /// in live sessions when `stateful`; above `discovery_above` tools, programs find them with
    /// `search_tools` instead of reading them all in the description.
    pub fn new(
        core: Core,
        downstream: Arc<Downstream>,
        runtime: Runtime,
        stateful: bool,
        discovery_above: usize,
    ) -> Arc<Self> {
        Arc::new(McpState {
            limits: core.engine.config().default_limits.clone(),
            sessions: stateful.then(|| core.sessions.clone()),
            core,
            downstream,
            parked: Registry::with_caps(PARKING),
            described: Mutex::default(),
            runtime,
            handlers: Arc::default(),
            listeners: Arc::default(),
            discovery_above,
        })
    }

    /// MCP handlers alive now.
    pub fn handlers(&self) -> usize {
        self.handlers.load(Ordering::Acquire)
    }

    /// Listeners for tool changes alive now (one per MCP session that initialized).
    pub fn listeners(&self) -> usize {
        self.listeners.load(Ordering::Acquire)
    }

    /// The signatures of `defs`, rendered once for as long as the tools stay the same; a
    /// rendering is admitted like an execution of `tenant`.
    pub(super) async fn described(
        &self,
        defs: &[ToolDef],
        tenant: Option<&str>,
    ) -> Result<Arc<ToolDescription>, String> {
        // What it depends on beside the tools: the result shapes the tenant has seen.
        let shapes = self.core.engine.result_shapes_version(tenant);
        let key = tenant.map(String::from);
        {
            let mut cache = self.described.lock().unwrap();
            if cache.defs.as_slice() != defs {
                cache.defs = defs.to_vec();
                cache.by_tenant.clear();
            }
            if let Some((version, described)) = cache.by_tenant.get(&key)
                && *version == shapes
            {
                return Ok(described.clone());
            }
        }
        let described = Arc::new(self.describe_admitted(defs, tenant, self.runtime).await?);
        let mut cache = self.described.lock().unwrap();
        if cache.defs.as_slice() == defs {
            if cache.by_tenant.len() >= DESCRIBED_TENANTS {
                cache.by_tenant.clear();
            }
            cache.by_tenant.insert(key, (shapes, described.clone()));
        }
        Ok(described)
    }

    /// Renders `defs` in an instance, admitted like one of `tenant`'s executions.
    pub(super) async fn describe_admitted(
        &self,
        defs: &[ToolDef],
        tenant: Option<&str>,
        runtime: ptc_engine::Runtime,
    ) -> Result<ToolDescription, String> {
        let _admission = match tenant {
            Some(tenant) => Some(
                self.core
                    .tenants
                    .admit(tenant, None, self.core.engine.paused_executions_of(tenant))
                    .map_err(|r| r.message().to_string())?,
            ),
            None => None,
        };
        self.core
            .engine
            .describe_tools_in(runtime, defs, tenant)
            .await
            .map_err(|e| format!("the downstream tools cannot be offered to programs: {}", e.message()))
    }
}

/// Renderings of the current tools kept at once (one per tenant: each sees the result shapes
/// it observed); past it they are all dropped and rendered again as needed.
const DESCRIBED_TENANTS: usize = 256;

/// The signatures of the downstream tools as last rendered, per tenant, with the version of
/// the tenant's result shapes each was rendered with.
#[derive(Default)]
pub(super) struct Described {
    defs: Vec<ToolDef>,
    by_tenant: HashMap<Option<String>, (u64, Arc<ToolDescription>)>,
}
