//! The tool catalogue: the downstream tools a program may call (a tool whose schema cannot be
//! checked is set aside, with the reason), and `execute_code`'s description of them.

use ptc_engine::{DescribedTool, NetworkPolicy, Runtime, ToolDef};

use super::convert::tool_def;
use super::downstream::Listing;
use super::program::Mode;
use super::state::McpState;
use crate::core::sessions::Sessions;

/// The callable tools as a program sees them, and what the model is told about them.
pub(super) struct Catalog {
    pub defs: Vec<ToolDef>,
    /// `execute_code`'s description.
    pub description: String,
}

/// The callable tools, and with `describe` also execute_code's description (which costs
/// an instance to render the signatures, so an execution does without it). A tool whose
/// input schema this server cannot check (`check_tool_schema`) is set aside as not callable,
/// with the reason, rather than failing every program.
/// `elicits`: the client can ask its user (MCP elicitation), which makes tools callable
/// with the user's approval (`config::Approve`).
pub(super) async fn catalog(
    state: &McpState,
    describe: bool,
    mode: Mode,
    tenant: Option<&str>,
    elicits: bool,
) -> Result<Catalog, String> {
    let listings = state.downstream.listings(tenant, elicits).await;
    let mut defs = Vec::new();
    let mut not_callable = Vec::new();
    let mut unavailable = Vec::new();
    for Listing { server, tools } in &listings {
        match tools {
            Ok(tools) => {
                for t in tools {
                    if let Some(why) = t.not_callable {
                        not_callable.push(format!("{server}.{} ({why})", t.tool.name));
                        continue;
                    }
                    let def = tool_def(server, &t.tool);
                    match state.core.engine.schemas().problem(tenant, &def) {
                        None if t.approval => defs.push(def.with_approval()),
                        None => defs.push(def),
                        Some(why) => not_callable.push(format!("{server}.{} ({why})", t.tool.name)),
                    }
                }
            }
            Err(e) => unavailable.push(format!("{server}: {e}")),
        }
    }
    if !describe {
        return Ok(Catalog { defs, description: String::new() });
    }
    let described = state.described(&defs, tenant).await?;
    let mut text = intro(state.runtime, state.core.networks.policy(tenant));
    text.push_str(&state_text(state, mode));
    if defs.len() > state.discovery_above {
        text.push_str(&discovery_text(&described.tools, not_callable.len(), &unavailable));
        return Ok(Catalog { defs, description: text });
    }
    text.push_str("\n\nTools (call as `await server.tool(...)`):\n");
    for (d, def) in described.tools.iter().zip(&defs) {
        text.push_str(&d.signature);
        if def.requires_approval {
            text.push_str("  # asks the user first");
        }
        let summary = summary(&def.description);
        if !summary.is_empty() {
            text.push_str("  # ");
            text.push_str(&summary);
        }
        text.push('\n');
    }
    if defs.is_empty() {
        text.push_str("(none)\n");
    }
    if !not_callable.is_empty() {
        text.push_str(&format!("\nNot callable from code: {}\n", not_callable.join(", ")));
    }
    if !unavailable.is_empty() {
        text.push_str(&format!("\nUnavailable now: {}\n", unavailable.join("; ")));
    }
    Ok(Catalog { defs, description: text })
}

/// What execute_code's description says about state kept between calls.
fn state_text(state: &McpState, mode: Mode) -> String {
    let Some(sessions) = &state.sessions else { return String::new() };
    let files = sessions.file_store().is_some();
    match mode {
        Mode::Fresh => String::new(),
        Mode::Persistent => {
            let files = if files {
                " Files it writes in /mnt/data stay for later calls too (within a storage quota)."
            } else {
                ""
            };
            format!("{PERSIST}{files}")
        }
        Mode::Handles => format!(
            " Each call starts afresh unless it names a session: pass session=\"new\" to keep the globals (variables, \
             imports, functions){} for later calls; the result's last line names the session, and passing that id as \
             `session` continues from there. A session ends after {} minutes without a call.",
            if files { " and the files in /mnt/data" } else { "" },
            idle_minutes(sessions)
        ),
    }
}

/// How long a session may sit idle, in whole minutes (as the model is told).
pub(super) fn idle_minutes(sessions: &Sessions) -> u64 {
    sessions.limits().idle_timeout.as_secs().div_ceil(60)
}

const PERSIST: &str = " Globals (variables, imports, functions, classes) persist from one execute_code call to the \
next in this conversation, so load data once and reuse it; a timeout or cancellation starts over (the result says so).";

/// The start of `execute_code`'s description: what the program runs in, what it may reach
/// over the network (the caller's tenant's `policy`: a tenant allowed hosts once read "no
/// network", and its program fetched one anyway), then [`EXECUTE_CODE_TOOLS`].
pub(super) fn intro(runtime: Runtime, policy: Option<&NetworkPolicy>) -> String {
    let network = network_text(runtime, policy);
    let offline = network.is_none();
    let mut text = match runtime {
        Runtime::PythonData => format!(
            "Run a Python 3.15 program in a sandbox with numpy, pandas, matplotlib (save figures with \
             plt.savefig('/mnt/data/NAME.png') where /mnt/data exists: they come back as images), scipy and scikit-learn{}.",
            if offline { " (no network)" } else { "" }
        ),
        _ => format!(
            "Run a Python 3.14 program in a sandbox (standard library only{}).",
            if offline { ", no network" } else { "" }
        ),
    };
    if let Some(network) = network {
        text.push(' ');
        text.push_str(&network);
    }
    format!("{text} {EXECUTE_CODE_TOOLS}")
}

/// Hosts (and secrets) the description names at most; past them it says how many more.
const NAMED_HOSTS: usize = 20;

/// What a program may reach over the network, as a sentence; `None`: nothing.
fn network_text(runtime: Runtime, policy: Option<&NetworkPolicy>) -> Option<String> {
    let policy = policy.filter(|p| !p.allow.is_empty())?;
    let how = match runtime {
        Runtime::PythonData => "urllib.request, http.client and pandas.read_csv(url)",
        _ => "urllib.request and http.client",
    };
    let list = |items: Vec<String>| {
        let more = items.len().saturating_sub(NAMED_HOSTS);
        let mut text = items.into_iter().take(NAMED_HOSTS).collect::<Vec<_>>().join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    };
    let ports: Vec<String> = policy.ports.iter().map(u16::to_string).collect();
    let mut text = format!(
        "Network: {how} reach only {} ({}, port {}, {}); any other host is refused.",
        list(policy.allow.clone()),
        policy.schemes.join(" or "),
        ports.join(" or "),
        policy.methods.join(" or ")
    );
    if !policy.secrets.is_empty() {
        let names = policy.secrets.iter().map(|s| format!("os.environ[{:?}]", s.name)).collect();
        text.push_str(&format!(
            " Secrets a request may send to their hosts, which the program cannot read: {}.",
            list(names)
        ));
    }
    Some(text)
}

const EXECUTE_CODE_TOOLS: &str = "The tools below are async functions grouped by server: `await server.tool(arg=...)`; run independent calls at once with \
`await asyncio.gather(...)`. Results arrive as Python values (dicts, lists, strings); a failing tool raises ToolError, \
which you can catch. Top-level await and `return value` work. Only what the program prints and returns comes back to you, \
so filter and summarise in code. `await llm_query(prompt, system=None, max_tokens=1024)` asks your client's model \
and returns its answer as a string. `describe_tools(names)` gives a tool's full documentation. A tool marked \
\"asks the user first\" waits for the user to approve each call (the program's other calls go on meanwhile): pass \
_reason=\"...\" to tell them why; a denied call raises ToolError.";

/// How many servers a discovery-mode description names, each on a line of its own.
const LISTED_SERVERS: usize = 25;

/// Tool names a discovery-mode description shows in all, at most [`NAMED_TOOLS`] per server:
/// 25 servers of 510 tools (the 102-tool yardstick five times) took 1,066 tokens with four names
/// each, 786 with two (`just discovery`).
const SHOWN_NAMES: usize = 50;
const NAMED_TOOLS: usize = 4;

/// `execute_code`'s list of tools when they are too many to list (more than
/// `McpState::discovery_above`): one line per server with its count and a few of its tools'
/// names, and how a program finds the rest (`search_tools`, `describe_tools`, which every
/// program has). Its size does not grow with the number of tools, only (up to
/// [`LISTED_SERVERS`]) with servers.
fn discovery_text(tools: &[DescribedTool], not_callable: usize, unavailable: &[String]) -> String {
    let mut servers: Vec<(&str, Vec<&str>)> = Vec::new();
    for tool in tools {
        let (server, name) = tool.python_name.split_once('.').unwrap_or(("", &tool.python_name));
        match servers.iter_mut().find(|(s, _)| *s == server) {
            Some((_, names)) => names.push(name),
            None => servers.push((server, vec![name])),
        }
    }
    let mut text = format!(
        "\n\nTools: {} of {} servers, too many to list here. Each server is an object in programs \
         (`await server.tool(...)`); find what you need from inside a program, then call it there or in the next:\n\
         print(search_tools(\"create an issue\"))  # the best-matching tools' signatures\n\
         print(describe_tools([\"server.tool\"]))  # a tool's full documentation\n\
         Servers:\n",
        tools.len(),
        servers.len()
    );
    let listed = servers.len().min(LISTED_SERVERS);
    let per_server = (SHOWN_NAMES / listed.max(1)).clamp(1, NAMED_TOOLS);
    for (server, names) in servers.iter().take(listed) {
        let more = if names.len() > per_server { ", …" } else { "" };
        let shown = names[..names.len().min(per_server)].join(", ");
        text.push_str(&format!("{server} ({} tools: {shown}{more})\n", names.len()));
    }
    if servers.len() > listed {
        text.push_str(&format!("… and {} more servers; search_tools finds their tools too\n", servers.len() - listed));
    }
    if not_callable > 0 {
        text.push_str(&format!("{not_callable} more tools are not callable from code.\n"));
    }
    if !unavailable.is_empty() {
        text.push_str(&format!("\nUnavailable now: {}\n", unavailable.join("; ")));
    }
    text
}

/// The first sentence of a description, at most 100 characters.
fn summary(description: &str) -> String {
    let first = description.trim().lines().next().unwrap_or_default();
    let sentence = match first.find(". ") {
        Some(i) => &first[..=i],
        None => first,
    };
    if sentence.chars().count() > 100 {
        format!("{}…", sentence.chars().take(99).collect::<String>())
    } else {
        sentence.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_says_what_the_network_policy_allows_and_names_at_most_twenty_hosts() {
        assert!(
            intro(Runtime::Python, None)
                .starts_with("Run a Python 3.14 program in a sandbox (standard library only, no network). The tools")
        );
        let empty = NetworkPolicy::default();
        assert!(intro(Runtime::PythonData, Some(&empty)).contains("scikit-learn (no network). The tools"));
        let mut policy = NetworkPolicy::default();
        policy.allow = (0..25).map(|i| format!("h{i}.example.com")).collect();
        let text = intro(Runtime::PythonData, Some(&policy));
        assert!(text.contains("scikit-learn. Network: urllib.request, http.client and pandas.read_csv(url) reach only h0.example.com, "), "{text}");
        assert!(
            text.contains(
                "h19.example.com and 5 more (https, port 443, GET or HEAD); any other host is refused. The tools"
            ),
            "{text}"
        );
        assert!(!text.contains("h20.example.com") && !text.contains("no network"), "{text}");
    }
}
