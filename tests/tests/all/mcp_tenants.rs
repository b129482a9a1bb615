//! `/mcp` with several tenants, through the real server and the official MCP SDKs (rmcp, the
//! Rust one, for protocol 2025-06-18 sessions; the Python one, `tests/mcp/tenants.py`, for
//! 2026-07-28's parked `llm_query`): an MCP session is its key's alone, ends whole (nothing of
//! it stays), has a share of the server's connections and an idle timeout; parked executions
//! have a per-tenant share and another key's retry leaves them parked; a downstream server can
//! be one process per tenant, so that one tenant's crash is not another's.

use std::process::{Command, Stdio};
use std::time::Duration;

use ptc_engine::{NetworkPolicy, SecretSpec};
use ptc_server::core::network::NetworkPolicies;
use ptc_server::front::mcp::McpConfig;
use ptc_tests::grpc::{config, serve};
use ptc_tests::http::{Reply, post_raw, request};
use ptc_tests::web::Web;
use ptc_tests::{eventually, python};
use rmcp::RoleClient;
use rmcp::service::Peer;
use serde_json::json;

use crate::mcp::{MCP_SDK, execute, older_client, stdout};

fn initialize() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
}

/// A JSON-RPC POST to `/mcp` with `key` and, when given, a session id.
async fn mcp_post(addr: std::net::SocketAddr, key: &str, session: Option<&str>, body: serde_json::Value) -> Reply {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str()), ("Accept", "application/json, text/event-stream")];
    if let Some(id) = session {
        headers.push(("Mcp-Session-Id", id));
    }
    post_raw(addr, "/mcp", &headers, body.to_string().as_bytes()).await
}

/// A new MCP session of `key` (a raw initialize, as any client sends it): its id.
async fn open_session(addr: std::net::SocketAddr, key: &str) -> String {
    let (host, auth) = (addr.to_string(), format!("Bearer {key}"));
    let headers = [
        ("Host", host.as_str()),
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let reply = request(addr, "POST", "/mcp", &headers, initialize().to_string().as_bytes()).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let line =
        reply.head.lines().find(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:")).expect("a session id");
    line.split_once(':').unwrap().1.trim().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_session_is_its_keys_alone_and_nothing_of_it_stays_once_it_ends() {
    let mut config = config(&["alpha:key-alpha", "beta:key-beta"]);
    config.mcp = McpConfig::default();
    let server = serve(config).await;
    let addr = server.http_addr;
    let alpha = older_client(addr, "key-alpha").await;
    assert_eq!(stdout(&execute(&alpha, "secret = 'alpha only'\nprint(1)").await), "1\n");
    let id = server.mcp_sessions.ids("alpha").pop().expect("alpha's session");
    // Beta, with its own key and alpha's session id, finds no such session: it can neither
    // run in it nor end it.
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "execute_code", "arguments": {"code": "print(secret)"}}});
    let r = mcp_post(addr, "key-beta", Some(&id), call).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(r.text.ends_with("Not Found: Session not found"), "{}", r.text);
    let delete = raw_delete(addr, "key-beta", &id).await;
    assert_eq!(delete, 202, "as rmcp answers an id it does not know");
    assert_eq!(stdout(&execute(&alpha, "print(secret)").await), "alpha only\n", "alpha's session lives on");

    // Sessions opened and ended leave nothing behind: their handlers, their listeners for tool
    // changes, their live sessions.
    for _ in 0..20 {
        let client = older_client(addr, "key-beta").await;
        assert_eq!(stdout(&execute(&client, "print(2)").await), "2\n");
        client.cancel().await.unwrap();
    }
    alpha.cancel().await.unwrap();
    let shared = server.mcp.clone();
    eventually("every MCP session's handler and listener are gone", || {
        shared.handlers() == 0 && shared.listeners() == 0
    })
    .await;
    eventually("no MCP session is kept", || server.mcp_sessions.is_empty()).await;
    eventually("no live session is kept", || server.sessions.open_count("beta") == 0).await;
    server.shutdown();
    server.wait().await;
}

async fn raw_delete(addr: std::net::SocketAddr, key: &str, session: &str) -> u16 {
    let (host, auth) = (addr.to_string(), format!("Bearer {key}"));
    let headers = [("Host", host.as_str()), ("Authorization", auth.as_str()), ("Mcp-Session-Id", session)];
    request(addr, "DELETE", "/mcp", &headers, b"").await.status
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_sessions_have_a_share_per_key_and_end_when_idle() {
    let mut config = config(&["alpha:key-alpha", "beta:key-beta"]);
    config.mcp = McpConfig::default();
    config.tenant_limits.max_requests = Some(4);
    config.mcp_limits.max_per_tenant = 3;
    config.mcp_limits.idle = Duration::from_secs(2);
    let server = serve(config).await;
    let addr = server.http_addr;
    // Alpha opens sessions and keeps their notification streams open, as clients do: at most
    // 3 sessions stay (each new one ends the one idle the longest), and the streams fill no
    // more than alpha's 4 places.
    let mut alphas = vec![];
    for _ in 0..6 {
        alphas.push(open_session(addr, "key-alpha").await);
    }
    let mut streams = vec![];
    for id in &alphas {
        streams.push(open_stream(addr, "key-alpha", id).await);
    }
    assert!(server.mcp_sessions.ids("alpha").len() <= 3, "{:?}", server.mcp_sessions.ids("alpha"));
    assert!(server.requests.in_progress("alpha") <= 4);
    // Beta is served meanwhile.
    let beta = older_client(addr, "key-beta").await;
    assert_eq!(stdout(&execute(&beta, "print(3)").await), "3\n");
    beta.cancel().await.unwrap();
    // Past 2 s without a request, alpha's sessions end, and their streams with them.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !server.mcp_sessions.ids("alpha").is_empty() {
        assert!(std::time::Instant::now() < deadline, "alpha's idle sessions did not end");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for stream in streams.iter_mut().flatten() {
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            use tokio::io::AsyncReadExt;
            let mut buf = [0u8; 4096];
            while stream.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
        })
        .await;
        assert!(ended.is_ok(), "a stream outlived its session");
    }
    eventually("alpha's places are free again", || server.requests.in_progress("alpha") == 0).await;
    server.shutdown();
    server.wait().await;
}

/// One key holding MCP streams and keep-alive connections beside them never costs another
/// key's requests: its connections between requests count against its share as its streams
/// do (before, they were nobody's, and a key with 56 streams filled the server while another
/// key's requests were reset now and then). An evicted session's stream ends at once, and a
/// refused client reads why.
#[tokio::test(flavor = "multi_thread")]
async fn one_keys_streams_and_idle_connections_never_cost_another_keys_requests() {
    let mut config = config(&["alpha:key-alpha", "beta:key-beta"]);
    config.mcp = McpConfig::default();
    config.http_limits.max_connections = 24;
    config.tenant_limits.max_requests = Some(6);
    config.mcp_limits.max_per_tenant = 4;
    let server = serve(config).await;
    let addr = server.http_addr;
    // Alpha's 4 sessions with their notification streams, then a fifth: the session idle the
    // longest ends, and its stream's response with it, at once (not at the header timeout).
    let mut ids = vec![];
    let mut streams = vec![];
    for _ in 0..4 {
        ids.push(open_session(addr, "key-alpha").await);
        streams.push(open_stream(addr, "key-alpha", ids.last().unwrap()).await.expect("a stream"));
    }
    ids.push(open_session(addr, "key-alpha").await);
    let mut first = streams.remove(0);
    let ended = tokio::time::timeout(Duration::from_secs(3), read_until(&mut first, b"\r\n0\r\n\r\n")).await;
    assert!(ended.is_ok(), "the evicted session's stream is still open");
    drop(first);
    streams.push(open_stream(addr, "key-alpha", &ids[4]).await.expect("a stream"));
    eventually("alpha's 4 streams hold 4 places", || server.requests.in_progress("alpha") == 4).await;

    // Beside its streams alpha keeps connections open between requests, as a client's pool
    // does, as many as it can.
    let mut idle = vec![];
    let mut answers = vec![];
    for _ in 0..30 {
        let (status, conn, text) = keep_alive_get(addr, "key-alpha").await;
        idle.extend(conn);
        answers.push((status, text));
    }
    // Beta, with the official Rust SDK's client, is served every time.
    for i in 0..3 {
        let beta = older_client(addr, "key-beta").await;
        assert_eq!(stdout(&execute(&beta, &format!("print({i})")).await), format!("{i}\n"));
        beta.cancel().await.unwrap();
    }
    // 2 of alpha's connections fit in its share of 6 beside its 4 streams; every other was
    // refused in words and closed.
    assert_eq!(idle.len(), 2, "{answers:?}");
    for (status, text) in &answers[2..] {
        assert_eq!(*status, 429, "{text}");
        assert!(text.contains("Too many connections for this API key: a key may have 6 at once"), "{text}");
    }
    assert_eq!(server.requests.in_progress("alpha"), 6);

    // Past the server's connections, a client reads the 503 and why, not a reset.
    let mut silent = vec![];
    for _ in 0..24 {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let r = mcp_post(addr, "key-beta", None, initialize()).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.text.contains("Too many connections: the server accepts 24 at once"), "{}", r.text);
    drop((silent, idle, streams));
    eventually("alpha's places are free again", || server.requests.in_progress("alpha") == 0).await;
    server.shutdown();
    server.wait().await;
}

/// A GET of the HTTP API on a connection kept open (keep-alive): its status, the connection
/// if the server keeps it, and the body.
async fn keep_alive_get(addr: std::net::SocketAddr, key: &str) -> (u16, Option<tokio::net::TcpStream>, String) {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET /files/none HTTP/1.1\r\nHost: {addr}\r\nX-API-Key: {key}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let raw = read_until(&mut s, b"\r\n\r\n").await;
    let head = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|n| n.trim().parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; length];
    tokio::io::AsyncReadExt::read_exact(&mut s, &mut body).await.unwrap();
    let kept = !head.contains("connection: close");
    (status, kept.then_some(s), String::from_utf8_lossy(&body).into_owned())
}

/// Reads `s` until what was read ends with `end` (or the stream ends): what was read.
async fn read_until(s: &mut tokio::net::TcpStream, end: &[u8]) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(end) && s.read(&mut byte).await.map(|n| n > 0).unwrap_or(false) {
        seen.push(byte[0]);
    }
    seen
}

/// A GET notification stream of session `id`, kept open; `None` if it was refused.
async fn open_stream(addr: std::net::SocketAddr, key: &str, id: &str) -> Option<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nMcp-Session-Id: {id}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 12];
    s.read_exact(&mut first).await.ok()?;
    (&first == b"HTTP/1.1 200").then_some(s)
}

#[tokio::test(flavor = "multi_thread")]
async fn parked_llm_queries_have_a_share_per_key_and_another_keys_retry_leaves_them_parked() {
    let venv = tokio::task::spawn_blocking(|| python::venv("mcp", &[MCP_SDK])).await.unwrap();
    let mut config = config(&["alpha:key-alpha", "beta:key-beta"]);
    config.mcp = McpConfig::default();
    let server = serve(config).await;
    let url = format!("http://{}/mcp", server.http_addr);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp").join("tenants.py");
    let output = tokio::task::spawn_blocking(move || {
        Command::new(venv.join("bin").join("python"))
            .arg(script)
            .args([&url, "key-alpha", "key-beta"])
            .stderr(Stdio::inherit())
            .output()
            .expect("the MCP client runs")
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && out.contains("ALL OK"), "{out}");
    server.shutdown();
    server.wait().await;
}

/// `execute_code`'s description says what the caller's key's programs may reach: the hosts of
/// its network policy (scheme, port, methods, secrets), or no network for a key without one.
/// Before, every key read "no network", and a program of a key with a policy fetched a host.
#[tokio::test(flavor = "multi_thread")]
async fn execute_codes_description_names_what_the_keys_network_policy_allows() {
    let web = Web::start().await;
    let mut config = config(&["alpha:key-alpha", "beta:key-beta"]);
    config.mcp = McpConfig::default();
    let mut policy = NetworkPolicy::default();
    policy.allow = vec!["localhost".into()];
    policy.ports = vec![web.https.port()];
    policy.allow_addresses = vec!["127.0.0.1/32".into()];
    policy.ca_files = vec![web.ca_file.clone()];
    policy.secrets = vec![SecretSpec::new("NOTES_TOKEN", "s3cr3t", &["localhost"])];
    config.network = NetworkPolicies([("alpha".to_string(), policy)].into());
    let server = serve(config).await;
    let alpha = older_client(server.http_addr, "key-alpha").await;
    let said = description(&alpha).await;
    let port = web.https.port();
    assert!(said.starts_with("Run a Python 3.14 program in a sandbox (standard library only). Network: "), "{said}");
    assert!(
        said.contains(&format!(
            "urllib.request and http.client reach only localhost (https, port {port}, GET or HEAD); any other host is \
             refused. Secrets a request may send to their hosts, which the program cannot read: os.environ[\"NOTES_TOKEN\"]."
        )),
        "{said}"
    );
    assert!(!said.contains("no network"), "{said}");
    // What it says is what the program can do.
    let code =
        format!("import urllib.request\nprint(urllib.request.urlopen({:?}).read().decode())", web.https_url("/hello"));
    assert_eq!(stdout(&execute(&alpha, &code).await), "hello\n");

    let beta = older_client(server.http_addr, "key-beta").await;
    let said = description(&beta).await;
    assert!(said.starts_with("Run a Python 3.14 program in a sandbox (standard library only, no network)."), "{said}");
    assert!(!said.contains("localhost") && !said.contains("NOTES_TOKEN"), "{said}");
    alpha.cancel().await.unwrap();
    beta.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}

/// `execute_code`'s description as `client` lists it.
async fn description(client: &Peer<RoleClient>) -> String {
    let tools = client.list_all_tools().await.unwrap();
    tools.into_iter().find(|t| t.name == "execute_code").and_then(|t| t.description).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_downstream_server_can_be_one_process_per_tenant() {
    let venv = tokio::task::spawn_blocking(|| python::venv("mcp", &[MCP_SDK])).await.unwrap();
    let notes = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp").join("notes_server.py");
    let python = venv.join("bin").join("python");
    let file = std::env::temp_dir().join(format!("ptc-mcp-isolation-{}.json", std::process::id()));
    let servers = json!({"mcpServers": {
        "shared": {"command": python, "args": [notes]},
        "own": {"command": python, "args": [notes], "isolation": "tenant"},
    }});
    std::fs::write(&file, servers.to_string()).unwrap();
    let mut config = config(&["alpha:key-alpha", "beta:key-beta"]);
    config.mcp = McpConfig::load(&file).unwrap();
    config.mcp_stateless = true;
    let server = serve(config).await;
    let (alpha, beta) =
        (older_client(server.http_addr, "key-alpha").await, older_client(server.http_addr, "key-beta").await);
    let pids = "print((await shared.pid())['result'], (await own.pid())['result'])";
    let a: Vec<String> = stdout(&execute(&alpha, pids).await).split_whitespace().map(str::to_owned).collect();
    let b: Vec<String> = stdout(&execute(&beta, pids).await).split_whitespace().map(str::to_owned).collect();
    assert_eq!(a[0], b[0], "one process of the shared server for both");
    assert_ne!(a[1], b[1], "a process of its own for each tenant");
    // Alpha crashes its own process while beta's call to its own is in flight: beta's answers.
    let slow = "print(await own.slow(seconds=1.5))";
    let (crash, waited) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            execute(&alpha, "await own.crash()").await
        },
        execute(&beta, slow),
    );
    assert_eq!(stdout(&waited), "{'result': 'done'}\n", "{waited:?}");
    let text = crash.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
    assert!(text.contains("stopped while handling own.crash; it will be restarted on the next call"), "{text}");
    assert_eq!(server.downstream.instances(), 3);
    alpha.cancel().await.unwrap();
    beta.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_file(file);
}
