//! One MCP connection's handler ([`CodeMode`]): the two tools it lists (`execute_code`,
//! `describe_tools`), how its programs keep state ([`Mode`]), and the listener that tells its
//! client when the downstream tools change.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::catalog::{catalog, intro};
use super::program::{Mode, elicits, tenant_of};
use super::results::{object, output_schema};
use super::run::Runs;
use super::state::McpState;
use ptc_engine::ToolDef;

/// One MCP connection's handler (cheap to clone: everything is shared).
#[derive(Clone)]
pub struct CodeMode {
    /// The front end's state, and this MCP session's live session.
    runs: Runs,
    /// Cancelled when the last clone of the handler goes, which rmcp drops when the MCP session
    /// ends: what the session's own tasks (the tool-change listener) stop on. A listener that
    /// waited on the broadcast alone outlived its session, ~6.5 KiB each for good.
    ended: Arc<Ended>,
}

struct Ended {
    token: tokio_util::sync::CancellationToken,
    handlers: Arc<std::sync::atomic::AtomicUsize>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        self.token.cancel();
        self.handlers.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!("ptc_mcp_handlers").decrement(1.0);
    }
}

impl CodeMode {
    pub fn new(state: Arc<McpState>) -> Self {
        metrics::gauge!("ptc_mcp_handlers").increment(1.0);
        state.handlers.fetch_add(1, Ordering::AcqRel);
        let handlers = state.handlers.clone();
        let ended = Arc::new(Ended { token: tokio_util::sync::CancellationToken::new(), handlers });
        CodeMode { runs: Runs { state, live: Arc::default() }, ended }
    }

    async fn describe(
        &self,
        args: &JsonObject,
        tenant: Option<&str>,
        elicits: bool,
    ) -> Result<CallToolResult, McpError> {
        let runtime = match args.get("language") {
            None | Some(Value::Null) => self.runs.state.runtime,
            Some(Value::String(l)) if l == "python" => self.runs.state.runtime,
            Some(Value::String(l)) if l == "javascript" || l == "typescript" => ptc_engine::Runtime::Javascript,
            Some(_) => {
                let why = "describe_tools: \"language\" must be \"python\", \"javascript\" or \"typescript\"";
                return Ok(CallToolResult::error(vec![ContentBlock::text(why)]));
            }
        };
        let names: Option<Vec<String>> = match args.get("names") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|_| {
                McpError::invalid_params(
                    "describe_tools: \"names\" must be a list of tool names like \"server.tool\"",
                    None,
                )
            })?),
        };
        let catalog = catalog(&self.runs.state, false, Mode::Fresh, tenant, elicits)
            .await
            .map_err(|e| McpError::internal_error(e, None))?;
        let qualified = |d: &ToolDef| format!("{}.{}", d.namespace.as_deref().unwrap_or_default(), d.name);
        let chosen: Vec<ToolDef> = match &names {
            None => catalog.defs.clone(),
            Some(names) => {
                let unknown: Vec<&String> =
                    names.iter().filter(|n| !catalog.defs.iter().any(|d| &qualified(d) == *n)).collect();
                if !unknown.is_empty() {
                    let known: Vec<String> = catalog.defs.iter().map(qualified).collect();
                    return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                        "no callable tool named {}; the callable tools are: {}",
                        unknown.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", "),
                        known.join(", ")
                    ))]));
                }
                catalog.defs.iter().filter(|d| names.contains(&qualified(d))).cloned().collect()
            }
        };
        let described = match self.runs.state.describe_admitted(&chosen, tenant, runtime).await {
            Ok(described) => described,
            Err(why) => return Ok(CallToolResult::error(vec![ContentBlock::text(why)])),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(described.stub)]))
    }
}

/// What `execute_code`'s description says of JavaScript and TypeScript programs, after the
/// Python it describes.
const JAVASCRIPT: &str = "\n\nJavaScript or TypeScript instead: pass language=\"javascript\" (or \"typescript\"). The same \
tools, each called with one object of its arguments: `await server.tool({arg: value})`; run independent calls at once \
with `await Promise.all([...])`. A failing tool rejects with a ToolError; console.log prints; the last expression's value, \
or a top-level `return`, is the result; `await llm_query({prompt: \"...\"})` asks your client's model. JavaScript and \
TypeScript programs keep their state as Python's do, in sessions of their own; inside them \
console.log(search_tools(\"create an issue\")) and describe_tools([\"server.tool\"]) give TypeScript \
declarations, as does the describe_tools tool with language=\"typescript\".";

impl ServerHandler for CodeMode {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("ptc-engine", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Call execute_code with one Python program (or JavaScript or TypeScript, with `language`) that calls \
                 the downstream tools as async functions; only what it prints or returns comes back.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mode = Mode::of(&ctx, self.runs.state.sessions.is_some());
        let tenant = tenant_of(&ctx.extensions);
        let description = match catalog(&self.runs.state, true, mode, tenant.as_deref(), elicits(&ctx)).await {
            Ok(catalog) => catalog.description,
            Err(e) => {
                let policy = self.runs.state.core.networks.policy(tenant.as_deref());
                format!("{}\n\nNo tools can be offered now: {e}", intro(self.runs.state.runtime, policy))
            }
        };
        let description = format!("{description}{JAVASCRIPT}");
        let mut input = json!({
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The program (Python unless `language` says otherwise)."},
                "language": {"type": "string", "enum": ["python", "javascript", "typescript"], "description": "The program's language; default python."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Deadline for the whole run, tool calls included."}
            },
            "required": ["code"]
        });
        if mode == Mode::Handles {
            input["properties"]["session"] = json!({
                "type": "string",
                "description": "\"new\" to run in a new session that keeps its state for later calls, or the id of the session an earlier result named to continue in it; omit for a one-off program."
            });
        }
        let mut execute = Tool::new("execute_code", description, object(input));
        execute.output_schema = Some(output_schema());
        let describe = Tool::new(
            "describe_tools",
            "The full Python stub (docstrings, every parameter) of the named tools, e.g. [\"github.create_issue\"]; all tools if no names are given. With language=\"typescript\" (or \"javascript\"), their TypeScript declarations (.d.ts) for JavaScript programs.",
            object(json!({
                "type": "object",
                "properties": {
                    "names": {"type": "array", "items": {"type": "string"}},
                    "language": {"type": "string", "enum": ["python", "javascript", "typescript"], "description": "The language of the declarations; default python."}
                }
            })),
        );
        Ok(ListToolsResult::with_all_items(vec![execute, describe]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let result = match request.name.as_ref() {
            "execute_code" => return self.runs.execute(request, ctx).await,
            "describe_tools" => {
                let tenant = tenant_of(&ctx.extensions);
                self.describe(&request.arguments.unwrap_or_default(), tenant.as_deref(), elicits(&ctx)).await?
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("unknown tool {other:?}; this server has execute_code and describe_tools"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        // A downstream tool list changed: so did execute_code's description. Until the MCP
        // session ends (its handler is dropped), whatever the downstream servers do.
        let mut changes = self.runs.state.downstream.subscribe();
        let ended = self.ended.token.clone();
        let peer = ctx.peer;
        let listeners = self.runs.state.listeners.clone();
        listeners.fetch_add(1, Ordering::AcqRel);
        metrics::gauge!("ptc_mcp_listeners").increment(1.0);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = ended.cancelled() => break,
                    changed = changes.recv() => {
                        if changed.is_err() || peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                    }
                }
            }
            listeners.fetch_sub(1, Ordering::AcqRel);
            metrics::gauge!("ptc_mcp_listeners").decrement(1.0);
        });
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, ctx: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.runs.state.downstream.subscribe();
        loop {
            tokio::select! {
                _ = ctx.cancelled() => return Ok(()),
                changed = changes.recv() => {
                    if changed.is_err() || ctx.sink().notify_tool_list_changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }
}
