//! The downstream servers of the MCP front end, in the format desktop clients already use
//! (`{"mcpServers": {"NAME": {...}}}`), plus which of their tools programs may call.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use serde::Deserialize;

/// A per-call timeout unless a server sets `timeoutMs`: long enough for a slow search, short
/// enough that a hung server cannot hold an execution for its whole deadline.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long connecting to a server (starting it and the MCP handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpConfig {
    /// By name; the name is the tools' namespace in programs (`await NAME.tool(...)`).
    pub servers: BTreeMap<String, ServerSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub transport: Transport,
    pub callable: Callable,
    pub approve: Approve,
    pub call_timeout: Duration,
    pub isolation: Isolation,
}

/// Whether tenants share a server's process (or connection), or each gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// One process (connection) for all tenants (`"isolation": "shared"`, the default): a call
    /// that crashes or wedges it fails the other tenants' calls in flight too (with a message
    /// that says the server stopped and will be restarted: retry).
    #[default]
    Shared,
    /// One process (connection) per tenant (`"isolation": "tenant"`), started on the tenant's
    /// first use and stopped after it sat unused for a while: one tenant's crash or state never
    /// reaches another's.
    Tenant,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on its stdin/stdout.
    Stdio { command: String, args: Vec<String>, env: HashMap<String, String>, cwd: Option<PathBuf> },
    /// A Streamable HTTP endpoint (http or https), with headers checked when the file is read.
    Http { url: String, headers: HashMap<HeaderName, HeaderValue> },
}

/// Which of a server's tools wait for the user's approval at each call (asked through MCP
/// elicitation; `ToolDef::requires_approval`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Approve {
    /// No `"approve"`: under the default rule, the tools it would hide for not being read-only
    /// are callable with approval when the connected client can ask its user (elicitation).
    #[default]
    WhenHidden,
    /// Exactly these (`"approve": ["a", "b"]`, `["*"]` every tool; `[]` none): callable (unless
    /// denied), each call asked.
    These(Vec<String>),
}

impl Approve {
    fn names(&self, tool: &str) -> bool {
        matches!(self, Approve::These(names) if names.iter().any(|n| n == "*" || n == tool))
    }

    /// Whether `tool`, callable or not by `callable`'s rule (`allowed`), is callable, and if
    /// so whether each call needs approval; `elicits`: the client can ask its user.
    pub fn decide(&self, callable: &Callable, tool: &str, allowed: bool, elicits: bool) -> (bool, bool) {
        match self {
            Approve::These(_) if self.names(tool) => {
                (!matches!(callable, Callable::Deny(d) if d.iter().any(|n| n == tool)), true)
            }
            Approve::These(_) => (allowed, false),
            Approve::WhenHidden if !allowed && elicits && *callable == Callable::ReadOnlyIfAnnotated => (true, true),
            Approve::WhenHidden => (allowed, false),
        }
    }
}

/// Which of a server's tools programs may call.
#[derive(Debug, Clone, PartialEq)]
pub enum Callable {
    /// The default: the tools annotated `readOnlyHint: true` if the server annotates any tool
    /// with `readOnlyHint`, else every tool.
    ReadOnlyIfAnnotated,
    /// Exactly these (`"allow": ["a", "b"]`); `["*"]` is every tool.
    Allow(Vec<String>),
    /// Every tool but these (`"deny": ["x"]`).
    Deny(Vec<String>),
}

impl Callable {
    /// Whether `tool` (with its `readOnlyHint`, if any) is callable, given whether the server
    /// annotates any of its tools.
    pub fn allows(&self, tool: &str, read_only: Option<bool>, server_annotates: bool) -> bool {
        match self {
            Callable::ReadOnlyIfAnnotated => !server_annotates || read_only == Some(true),
            Callable::Allow(names) => names.iter().any(|n| n == "*" || n == tool),
            Callable::Deny(names) => !names.iter().any(|n| n == tool),
        }
    }

    /// Why a tool is not callable, in words for a model.
    pub fn why_not(&self) -> &'static str {
        match self {
            Callable::ReadOnlyIfAnnotated => {
                "it is not marked read-only (only read-only tools are callable by default; with a client that can ask \
                 its user, through MCP elicitation, it is callable with their approval)"
            }
            Callable::Allow(_) => "it is not in the server's allow list",
            Callable::Deny(_) => "it is in the server's deny list",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(rename = "mcpServers")]
    mcp_servers: BTreeMap<String, RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: HashMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: HashMap<String, String>,
    allow: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    /// Tools whose every call waits for the user's approval: see [`Approve`].
    approve: Option<Vec<String>>,
    timeout_ms: Option<u64>,
    /// `"shared"` (default) or `"tenant"`: see [`Isolation`].
    isolation: Option<String>,
    /// Desktop clients' switch; a disabled server is skipped.
    #[serde(default)]
    disabled: bool,
    // Other clients' approval lists: accepted so their files load, meaningless here.
    #[serde(rename = "alwaysAllow")]
    _always_allow: Option<serde_json::Value>,
    #[serde(rename = "autoApprove")]
    _auto_approve: Option<serde_json::Value>,
}

impl McpConfig {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = serde_json::from_str(text).map_err(|e| format!("not a valid MCP servers file: {e}"))?;
        let mut servers = BTreeMap::new();
        for (name, raw) in file.mcp_servers {
            if raw.disabled {
                continue;
            }
            let spec = server(&name, raw).map_err(|e| format!("server {name:?}: {e}"))?;
            servers.insert(name, spec);
        }
        Ok(McpConfig { servers })
    }
}

fn server(name: &str, raw: RawServer) -> Result<ServerSpec, String> {
    if name.is_empty() || !name.chars().any(|c| c.is_ascii_alphanumeric()) {
        return Err("a server's name becomes its namespace in programs; it needs a letter or digit".into());
    }
    let transport = match (raw.kind.as_deref(), raw.command, raw.url) {
        (Some("sse"), _, _) => {
            return Err(
                "the SSE transport is deprecated and not supported; use the server's Streamable HTTP URL".into()
            );
        }
        (None | Some("stdio"), Some(command), None) => {
            if !raw.headers.is_empty() {
                return Err("\"headers\" apply to a \"url\" server, not a \"command\"".into());
            }
            Transport::Stdio { command, args: raw.args, env: raw.env, cwd: raw.cwd }
        }
        (None | Some("http" | "streamable-http" | "streamableHttp"), None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url {url:?} must start with http:// or https://"));
            }
            if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() {
                return Err("\"args\", \"env\" and \"cwd\" apply to a \"command\" server, not a \"url\"".into());
            }
            let mut headers = HashMap::with_capacity(raw.headers.len());
            for (k, v) in &raw.headers {
                let name = HeaderName::try_from(k.as_str()).map_err(|_| format!("header name {k:?} is not valid"))?;
                let value =
                    HeaderValue::try_from(v.as_str()).map_err(|_| format!("the value of header {k:?} is not valid"))?;
                headers.insert(name, value);
            }
            Transport::Http { url, headers }
        }
        (_, Some(_), Some(_)) => return Err("give either \"command\" or \"url\", not both".into()),
        (Some(kind), _, _) if !matches!(kind, "stdio" | "http" | "streamable-http" | "streamableHttp") => {
            return Err(format!("unknown \"type\" {kind:?}; use \"stdio\" or \"http\""));
        }
        _ => return Err("needs \"command\" (a program speaking MCP on stdio) or \"url\" (Streamable HTTP)".into()),
    };
    let callable = match (raw.allow, raw.deny) {
        (Some(_), Some(_)) => return Err("give \"allow\" or \"deny\", not both".into()),
        (Some(allow), None) => Callable::Allow(allow),
        (None, Some(deny)) => Callable::Deny(deny),
        (None, None) => Callable::ReadOnlyIfAnnotated,
    };
    let call_timeout = match raw.timeout_ms {
        Some(0) => return Err("\"timeoutMs\" must be positive".into()),
        Some(ms) => Duration::from_millis(ms),
        None => DEFAULT_CALL_TIMEOUT,
    };
    let isolation = match raw.isolation.as_deref() {
        None | Some("shared") => Isolation::Shared,
        Some("tenant") => Isolation::Tenant,
        Some(other) => {
            return Err(format!(
                "unknown \"isolation\" {other:?}: use \"shared\" (one process for all tenants) or \"tenant\" (one per tenant)"
            ));
        }
    };
    let approve = raw.approve.map_or(Approve::WhenHidden, Approve::These);
    Ok(ServerSpec { transport, callable, approve, call_timeout, isolation })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_desktop_client_files() {
        let config = McpConfig::parse(
            r#"{"mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
                "web": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"},
                        "allow": ["search"], "timeoutMs": 5000},
                "gh": {"command": "gh-mcp", "env": {"TOKEN": "t"}, "deny": ["delete_repo"], "alwaysAllow": []},
                "off": {"command": "nothing", "disabled": true}
            }}"#,
        )
        .unwrap();
        assert_eq!(config.servers.keys().collect::<Vec<_>>(), ["fs", "gh", "web"]);
        let fs = &config.servers["fs"];
        assert!(matches!(&fs.transport, Transport::Stdio { command, args, .. } if command == "npx" && args.len() == 3));
        assert_eq!(fs.callable, Callable::ReadOnlyIfAnnotated);
        assert_eq!(fs.call_timeout, DEFAULT_CALL_TIMEOUT);
        let web = &config.servers["web"];
        assert!(
            matches!(&web.transport, Transport::Http { url, headers } if url.starts_with("https") && headers.len() == 1)
        );
        assert_eq!(web.call_timeout, Duration::from_secs(5));
        assert!(web.callable.allows("search", None, false) && !web.callable.allows("fetch", None, false));
        assert!(!config.servers["gh"].callable.allows("delete_repo", Some(true), true));
        assert_eq!(config.servers["gh"].isolation, Isolation::Shared);
        let tenant = McpConfig::parse(r#"{"mcpServers": {"a": {"command": "x", "isolation": "tenant"}}}"#).unwrap();
        assert_eq!(tenant.servers["a"].isolation, Isolation::Tenant);
    }

    #[test]
    fn the_default_takes_read_only_tools_when_the_server_annotates() {
        let c = Callable::ReadOnlyIfAnnotated;
        assert!(c.allows("read", Some(true), true));
        assert!(!c.allows("write", Some(false), true));
        assert!(!c.allows("unmarked", None, true), "a server that annotates: unmarked is not read-only");
        assert!(c.allows("anything", None, false), "a server that annotates nothing: all");
        assert!(Callable::Allow(vec!["*".into()]).allows("write", Some(false), true));
    }

    #[test]
    fn approval_is_asked_for_what_the_list_names_and_by_default_for_what_would_be_hidden() {
        let default = Callable::ReadOnlyIfAnnotated;
        // The default: a write tool is hidden from a client that cannot ask, asked otherwise.
        assert_eq!(Approve::WhenHidden.decide(&default, "write", false, false), (false, false));
        assert_eq!(Approve::WhenHidden.decide(&default, "write", false, true), (true, true));
        assert_eq!(Approve::WhenHidden.decide(&default, "read", true, true), (true, false));
        // An explicit allow list is the operator's choice: nothing is asked unless listed.
        let allow = Callable::Allow(vec!["a".into()]);
        assert_eq!(Approve::WhenHidden.decide(&allow, "b", false, true), (false, false));
        // Listed: callable (but not past a deny) and asked, whether or not the client can ask.
        let listed = Approve::These(vec!["write".into()]);
        assert_eq!(listed.decide(&default, "write", false, false), (true, true));
        assert_eq!(listed.decide(&Callable::Deny(vec!["write".into()]), "write", false, true), (false, true));
        assert_eq!(
            listed.decide(&default, "other", false, true),
            (false, false),
            "an explicit list turns the default off"
        );
        assert_eq!(Approve::These(vec!["*".into()]).decide(&default, "read", true, true), (true, true));
        let config = McpConfig::parse(r#"{"mcpServers": {"a": {"command": "x", "approve": ["rm"]}}}"#).unwrap();
        assert_eq!(config.servers["a"].approve, Approve::These(vec!["rm".into()]));
    }

    #[test]
    fn mistakes_are_named() {
        let err = |text: &str| McpConfig::parse(text).unwrap_err();
        assert!(err(r#"{"mcpServers": {"a": {}}}"#).contains("server \"a\": needs \"command\""));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "url": "http://y"}}}"#).contains("not both"));
        assert!(err(r#"{"mcpServers": {"a": {"url": "ftp://y"}}}"#).contains("must start with http"));
        assert!(err(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://y"}}}"#).contains("SSE"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "allow": [], "deny": []}}}"#).contains("not both"));
        assert!(err(r#"{"mcpServers": {"a": {"command": "x", "alow": []}}}"#).contains("unknown field `alow`"));
        assert!(err(r#"{"mcpServers": {"a": {"url": "http://y", "headers": {"a b": "c"}}}}"#).contains("header name"));
        assert!(err(r#"{"mcpServers": {"--": {"command": "x"}}}"#).contains("letter or digit"));
        assert!(err(r#"{"servers": {}}"#).contains("not a valid MCP servers file"));
        assert!(
            err(r#"{"mcpServers": {"a": {"command": "x", "isolation": "pod"}}}"#).contains("unknown \"isolation\"")
        );
    }
}
