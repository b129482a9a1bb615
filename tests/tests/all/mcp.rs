//! The MCP front end end to end: the official MCP Python SDK's client (PyPI `mcp`) drives
//! `ptc-engine mcp` over stdio and `/mcp` over Streamable HTTP, against real downstream
//! servers: one written with the same SDK (over stdio and over HTTP) and the official
//! filesystem server from npm. The scenarios are `tests/mcp/drive.py`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ptc_server::front::mcp::McpConfig;
use ptc_tests::binary::{self, Process, free_port};
use ptc_tests::{eventually, grpc, http, node, python};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    NumberOrString, ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestParamsMeta,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

pub(crate) const MCP_SDK: &str = "mcp==2.3.0";

/// Everything the scenarios need: the SDK, the npm servers, a files root, the notes server
/// over HTTP, and the config naming all three downstream servers.
pub(crate) struct Downstream {
    venv: PathBuf,
    project: PathBuf,
    fs_root: PathBuf,
    pub(crate) config: PathBuf,
    _web: Process,
}

pub(crate) fn downstream(tag: &str) -> Downstream {
    let venv = python::venv("mcp", &[MCP_SDK]);
    let project = node::project("mcp");
    let python = venv.join("bin").join("python");
    let fs_root = std::env::temp_dir().join(format!("ptc-mcp-fs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&fs_root).unwrap();
    std::fs::write(fs_root.join("hello.txt"), "hello from the filesystem\n").unwrap();
    let fs_root = fs_root.canonicalize().unwrap();

    let port = free_port();
    let web = Process(
        Command::new(&python)
            .arg(project.join("notes_server.py"))
            .args(["--http", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the notes server starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the notes server never listened on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let config = json!({"mcpServers": {
        "notes": {"command": python, "args": [project.join("notes_server.py")], "timeoutMs": 2000},
        "web": {
            "type": "http", "url": format!("http://127.0.0.1:{port}/mcp"),
            "allow": ["search_notes", "pid"], "approve": ["delete_note"]
        },
        "fs": {
            "command": "node",
            "args": [project.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"), &fs_root],
        },
    }});
    let path = fs_root.with_extension("json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    Downstream { venv, project, fs_root, config: path, _web: web }
}

/// Its files root and config go with it: each run left eight of each in the temporary
/// directory (the files test of the JavaScript runtime had the same leak).
impl Drop for Downstream {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.fs_root);
        let _ = std::fs::remove_file(&self.config);
    }
}

impl Downstream {
    fn drive(&self, pause: bool, mode: &[&str]) -> Child {
        let mut cmd = Command::new(self.venv.join("bin").join("python"));
        cmd.arg(self.project.join("drive.py")).arg("--fs-root").arg(&self.fs_root);
        if pause {
            cmd.arg("--pause");
        }
        cmd.args(mode).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the MCP client starts")
    }
}

/// Reads the client's lines until it exits; `on_mark` runs at `MARK ...` lines.
fn finish(mut child: Child, mut on_mark: impl FnMut(&str)) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut seen = String::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        eprintln!("client: {line}");
        if let Some(mark) = line.strip_prefix("MARK ") {
            on_mark(mark);
            writeln!(stdin, "go").unwrap();
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "the MCP client's scenarios failed ({status}):\n{seen}");
    assert!(seen.contains("ALL OK"), "{seen}");
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_with_a_real_client_and_real_servers() {
    let bin = tokio::task::spawn_blocking(binary::release).await.unwrap();
    let setup = tokio::task::spawn_blocking(|| downstream("stdio")).await.unwrap();
    let config = setup.config.display().to_string();
    let bin = bin.display().to_string();
    tokio::task::spawn_blocking(move || {
        let child = setup.drive(false, &["stdio", &bin, "mcp", "--config", &config]);
        finish(child, |_| {});
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn streamable_http_behind_api_keys() {
    let setup = tokio::task::spawn_blocking(|| downstream("http")).await.unwrap();
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    config.files.quota_bytes = 2 << 20;
    let server = grpc::serve(config).await;
    let url = format!("http://{}/mcp", server.http_addr);
    let (engine, tenants, sessions) = (server.engine.clone(), server.tenants.clone(), server.sessions.clone());
    // The sessions programs named stay open (each holds an instance) until they idle out.
    let executions = move || engine.live_instances().saturating_sub(sessions.open_count("acme"));
    tokio::task::spawn_blocking(move || {
        let child = setup.drive(true, &["http", &url, "acme-key"]);
        finish(child, |mark| {
            let deadline = Instant::now() + Duration::from_secs(5);
            match mark {
                // The client gave up on `await asyncio.sleep(60)`: its instance is gone while
                // the MCP session is still open.
                "cancelled" => {
                    while executions() > 0 {
                        assert!(Instant::now() < deadline, "a cancelled execution kept its instance");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                // A client asked to sample never came back: past the 1.5 s deadline the
                // parked execution no longer holds an instance or the tenant's slot.
                "parked" => {
                    assert_eq!(tenants.active("acme"), 1, "the parked execution holds its slot meanwhile");
                    while executions() > 0 || tenants.active("acme") > 0 {
                        assert!(Instant::now() < deadline, "an abandoned parked execution kept its slot");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                other => panic!("unexpected mark {other:?}"),
            }
        });
    })
    .await
    .unwrap();
    server.shutdown();
    server.wait().await;
}

/// A client of protocol 2025-06-18 that can ask its user (elicitation): the "user" approves
/// deleting note 1 and refuses the rest, saying why.
#[derive(Clone, Default)]
struct AskingClient {
    /// The progress notifications' messages, as they came.
    progress: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl AskingClient {
    fn said(&self) -> String {
        self.progress.lock().unwrap().join("\n")
    }
}

impl rmcp::ClientHandler for AskingClient {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.protocol_version = ProtocolVersion::V_2025_06_18;
        info.capabilities.elicitation = Some(Default::default());
        info
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _: rmcp::service::NotificationContext<RoleClient>) {
        self.progress.lock().unwrap().push(params.message.unwrap_or_default());
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Err(rmcp::ErrorData::invalid_params("a form was expected", None));
        };
        // The program waits for this answer, and its client was told so: the user is asked
        // only once progress has said which call waits (it would wait here forever otherwise,
        // and the test fail at its deadline).
        let waiting = "[call] notes.delete_note is waiting for the user's approval";
        while !self.said().contains(waiting) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let approve = message.contains("\"id\": 1") && message.contains("Its reason: tidy");
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"approve": approve, "reason": "not that one"})))
    }
}

/// Before protocol 2026-07-28 a write tool's call is asked about with an `elicitation/create`
/// request while the program waits, and its other calls go on.
#[tokio::test(flavor = "multi_thread")]
async fn before_protocol_2026_07_28_a_write_tool_waits_for_an_elicitation() {
    let setup = tokio::task::spawn_blocking(|| downstream("elicit")).await.unwrap();
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    let server = grpc::serve(config).await;
    let transport = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", server.http_addr))
        .auth_header("acme-key");
    let asking = AskingClient::default();
    let client = asking.clone().serve(StreamableHttpClientTransport::from_config(transport)).await.unwrap();
    let code = "async def rm(i):\n    try:\n        return (await notes.delete_note(id=i, _reason='tidy'))['deleted']\n    \
                except ToolError as e:\n        return str(e)\n\
                print(await asyncio.gather(notes.get_body(id=2), rm(1), rm(3)))";
    let args = json!({"code": code}).as_object().unwrap().clone();
    let mut params = CallToolRequestParams::new("execute_code").with_arguments(args);
    params.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    let r = tokio::time::timeout(Duration::from_secs(60), client.call_tool(params)).await.expect("answered").unwrap();
    assert_eq!(stdout(&r), "['gather independent awaits', 1, 'denied by the user: not that one']\n", "{r:?}");
    // Progress said each call, and the user's answers, while the program ran (the user was
    // asked only after it said which call waits); never a call's arguments.
    let lines = [
        "[call] notes.get_body started",
        "[call] notes.get_body finished in",
        "[call] notes.delete_note approved by the user",
        "[call] notes.delete_note denied by the user",
    ];
    // rmcp hands each notification to a task of its own: the last may be handled after the
    // result they were sent before (5 of 30 runs on 2 busy cores).
    eventually("progress said each call", || lines.iter().all(|l| asking.said().contains(l))).await;
    assert!(!asking.said().contains("tidy"), "{}", asking.said());
    client.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}

/// With `--otlp-endpoint`, an `execute_code` call continues the client's `_meta.traceparent`:
/// its span (`tools/call execute_code`) is under the client's, the program's execution under
/// it, and each downstream call carries its own `execute_tool` span in its `_meta`, so that
/// the downstream server's spans nest under the program's call.
#[tokio::test(flavor = "multi_thread")]
async fn an_execute_code_call_continues_the_client_s_trace_down_to_each_downstream_call() {
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
    use ptc_server::traces::OtlpProtocol;
    use ptc_tests::otlp::{self, Receiver, hex};
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let setup = tokio::task::spawn_blocking(|| downstream("trace")).await.unwrap();
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    config.otlp = Some(otlp::config(&endpoint, OtlpProtocol::Grpc));
    let server = grpc::serve(config).await;
    let transport = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", server.http_addr))
        .auth_header("acme-key");
    let asking = AskingClient::default();
    let client = asking.clone().serve(StreamableHttpClientTransport::from_config(transport)).await.unwrap();
    let (trace, client_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let code = "r = await notes.delete_note(id=1, _reason='tidy')\nprint(r['trace'])\n\
                try:\n    await notes.fail(message='secret-message-QRS')\nexcept ToolError:\n    pass";
    let args = json!({"code": code}).as_object().unwrap().clone();
    let mut params = CallToolRequestParams::new("execute_code").with_arguments(args);
    params.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    let meta = &mut params.meta.as_mut().unwrap().0.0;
    meta.insert("traceparent".into(), json!(format!("00-{trace}-{client_span}-01")));
    let r = tokio::time::timeout(Duration::from_secs(60), client.call_tool(params)).await.expect("answered").unwrap();
    let downstream_saw = stdout(&r).trim().to_string();
    assert!(downstream_saw.starts_with(&format!("00-{trace}-")), "{r:?}");
    let arrived = |r: &Receiver| {
        ["tools/call execute_code", "tools/call delete_note", "tools/call fail"].iter().all(|n| !r.named(n).is_empty())
    };
    receiver.until(&server, arrived).await;
    let call = &receiver.named("tools/call execute_code")[0];
    assert_eq!((hex(&call.trace_id), hex(&call.parent_span_id)), (trace.to_string(), client_span.to_string()));
    let execution = &receiver.named("ptc.execution")[0];
    assert_eq!(execution.parent_span_id, call.span_id, "the program under the call");
    let tool = &receiver.named("execute_tool delete_note")[0];
    // The downstream call is a client span of its own under the program's call, and the
    // downstream server's spans go under it (its _meta).
    let downstream = &receiver.named("tools/call delete_note")[0];
    assert_eq!(downstream.parent_span_id, tool.span_id, "the downstream call under the program's call");
    assert_eq!(downstream.kind, opentelemetry_proto::tonic::trace::v1::span::SpanKind::Client as i32);
    assert_eq!(otlp::attribute(downstream, "ptc.mcp.server").as_deref(), Some("notes"));
    assert_eq!(downstream_saw, format!("00-{trace}-{}-01", hex(&downstream.span_id)), "the downstream call's _meta");
    // A downstream tool's error is the client span's status, without its text.
    let failed = &receiver.named("tools/call fail")[0];
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    assert_eq!(otlp::attribute(failed, "error.type").as_deref(), Some("tool_error"));
    receiver.assert_not_exported(&["secret-message-QRS"]);
    client.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}

/// A client that can ask its user, whose user never answers.
#[derive(Clone)]
struct AbsentUser;

impl rmcp::ClientHandler for AbsentUser {
    fn get_info(&self) -> ClientConfig {
        AskingClient::default().get_info()
    }

    async fn create_elicitation(
        &self,
        _: ElicitRequestParams,
        _: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        std::future::pending().await
    }
}

/// The deadline passes while the user is asked and nobody answers: the model is told so, and
/// to ask the user and run the program again when they are there, not to ask for a longer
/// timeout (which does not help while nobody answers).
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_nobody_answers_ends_at_the_deadline_saying_what_to_do() {
    let setup = tokio::task::spawn_blocking(|| downstream("absent")).await.unwrap();
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    let server = grpc::serve(config).await;
    let transport = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", server.http_addr))
        .auth_header("acme-key");
    let client = AbsentUser.serve(StreamableHttpClientTransport::from_config(transport)).await.unwrap();
    let args = json!({"code": "await notes.delete_note(id=1, _reason='tidy')", "timeout_ms": 2000});
    let params = CallToolRequestParams::new("execute_code").with_arguments(args.as_object().unwrap().clone());
    let r = client.call_tool(params).await.unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = r.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
    assert!(text.starts_with("[error] Time limit exceeded\n"), "{text}");
    assert!(text.contains("waited for the user's approval, which never came (notes.delete_note)"), "{text}");
    assert!(
        text.ends_with(
            "The user did not answer the request for approval in time: ask them in your reply whether they approve, \
             then run the program again when they are there to answer."
        ),
        "{text}"
    );
    assert!(!text.contains("longer timeout"), "{text}");
    // Without a question to the user, a timeout still says what it says.
    let args = json!({"code": "while True: pass", "timeout_ms": 1500});
    let params = CallToolRequestParams::new("execute_code").with_arguments(args.as_object().unwrap().clone());
    let r = client.call_tool(params).await.unwrap();
    let text = r.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
    assert!(text.ends_with("[error] Time limit exceeded\nExecution timeout after 1500 ms: the program (tool waits included) ran out of time; do less per execution or ask for a longer timeout."), "{text}");
    client.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn the_http_endpoint_refuses_unknown_keys_in_words_a_client_can_act_on() {
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::default();
    let server = grpc::serve(config).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    for key in [None, Some("wrong")] {
        let reply = http::post(server.http_addr, "/mcp", key, &body).await;
        assert_eq!(reply.status, 401, "{}", reply.text);
        assert!(reply.body["error"].as_str().unwrap().contains("Authorization: Bearer KEY"), "{}", reply.text);
    }
    server.shutdown();
    server.wait().await;
}

/// rmcp (the official Rust SDK) as a client of protocol 2025-06-18 over Streamable HTTP.
pub(crate) async fn older_client(addr: std::net::SocketAddr, key: &str) -> RunningService<RoleClient, ClientConfig> {
    let mut info = ClientConfig::default();
    info.protocol_version = ProtocolVersion::V_2025_06_18;
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp")).auth_header(key);
    info.serve(StreamableHttpClientTransport::from_config(config)).await.expect("the MCP handshake")
}

pub(crate) async fn execute(client: &RunningService<RoleClient, ClientConfig>, code: &str) -> CallToolResult {
    let args = json!({"code": code}).as_object().unwrap().clone();
    client.call_tool(CallToolRequestParams::new("execute_code").with_arguments(args)).await.expect("execute_code")
}

pub(crate) fn stdout(result: &CallToolResult) -> String {
    result.structured_content.as_ref().and_then(|s| s["stdout"].as_str()).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn before_protocol_2026_07_28_an_mcp_sessions_programs_share_globals_and_files() {
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::default();
    config.files.quota_bytes = 1 << 20;
    let server = grpc::serve(config).await;
    let client = older_client(server.http_addr, "acme-key").await;
    let tools = client.list_all_tools().await.unwrap();
    let execute_code = tools.iter().find(|t| t.name == "execute_code").unwrap();
    let description = execute_code.description.as_deref().unwrap_or_default();
    assert!(description.contains("persist from one execute_code call"), "{description}");
    assert!(description.contains("/mnt/data stay for later calls"), "{description}");
    assert!(execute_code.input_schema.get("properties").unwrap().get("session").is_none());

    let r = execute(&client, "rows = [1, 2]\nopen('/mnt/data/a.txt', 'w').write('hi')").await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let r = execute(&client, "print(rows, open('/mnt/data/a.txt').read())").await;
    assert_eq!(stdout(&r), "[1, 2] hi\n", "{r:?}");
    // Past the tenant's file quota: kind file_quota, the write removed, the session kept.
    let r = execute(&client, "open('/mnt/data/big.bin', 'wb').write(b'x' * (2 << 20))").await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(r.structured_content.as_ref().unwrap()["error"]["kind"], "file_quota", "{r:?}");
    let r = execute(&client, "import os\nprint(sorted(os.listdir('/mnt/data')), rows)").await;
    assert_eq!(stdout(&r), "['a.txt'] [1, 2]\n", "{r:?}");

    // Bad arguments are tool errors the model sees, and change nothing.
    for (args, says) in [
        (json!({"cde": "print(1)"}), "needs \"code\""),
        (json!({"code": "rows = None", "timeout_ms": -5}), "\"timeout_ms\" must be a positive integer"),
    ] {
        let params = CallToolRequestParams::new("execute_code").with_arguments(args.as_object().unwrap().clone());
        let r = client.call_tool(params).await.expect("a tool result, not a protocol error");
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let text = r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
        assert!(text.contains(says), "{text}");
    }
    assert_eq!(stdout(&execute(&client, "print(rows)").await), "[1, 2]\n");

    // Another MCP session has its own.
    let other = older_client(server.http_addr, "acme-key").await;
    let r = execute(&other, "import os\nprint('rows' in globals(), os.listdir('/mnt/data'))").await;
    assert_eq!(stdout(&r), "False []\n", "{r:?}");
    assert_eq!(server.sessions.open_count("acme"), 2);

    // Ending an MCP session ends its live session and frees its instance.
    other.cancel().await.unwrap();
    eventually("the ended MCP session's live session is closed", || server.sessions.open_count("acme") == 1).await;
    client.cancel().await.unwrap();
    eventually("every live session is closed", || server.sessions.open_count("acme") == 0).await;
    eventually("every instance is freed", || server.engine.live_instances() == 0).await;
    server.shutdown();
    server.wait().await;
}

/// `--mcp-runtime python-data` through the real server and rmcp's client: the description
/// names the packages; a program gathers downstream calls into a DataFrame and saves a figure,
/// which comes back as a PNG image block beside the text; the DataFrame stays for the next call.
#[tokio::test(flavor = "multi_thread")]
async fn the_data_runtime_over_mcp_returns_figures_as_images() {
    let setup = tokio::task::spawn_blocking(|| downstream("data")).await.unwrap();
    let mut config = grpc::data_config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    config.mcp_runtime = ptc_engine::Runtime::PythonData;
    let server = grpc::serve(config).await;
    let client = older_client(server.http_addr, "acme-key").await;
    let tools = client.list_all_tools().await.unwrap();
    let description = tools.iter().find(|t| t.name == "execute_code").and_then(|t| t.description.clone()).unwrap();
    assert!(description.contains("Python 3.15") && description.contains("numpy, pandas, matplotlib"), "{description}");

    let code = "import pandas as pd, matplotlib.pyplot as plt\n\
                found = await asyncio.gather(notes.search_notes(query='rust'), notes.search_notes(query='python'))\n\
                df = pd.DataFrame([n for page in found for n in page['result']])\nprint(len(df))\n\
                plt.bar(df['id'], df['id'])\nplt.savefig('/mnt/data/ids.png')\nplt.close()";
    let r = execute(&client, code).await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(stdout(&r), "3\n");
    let text = r.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
    assert!(text.contains("[files written] /mnt/data/ids.png ("), "{text}");
    let image = r.content.iter().find_map(|c| c.as_image()).expect("the figure as an image block");
    assert_eq!(image.mime_type, "image/png");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD.decode(&image.data).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000, "{} bytes", png.len());

    // The DataFrame lives on in the MCP session's data session; a CSV is named, not shown, and
    // an image past the 2 MiB a result carries is named as not shown, with what to do.
    let code = "print(int(df['id'].sum()))\ndf.to_csv('/mnt/data/ids.csv')\n\
                open('/mnt/data/huge.png', 'wb').write(b'\\x89PNG' + bytes(3 << 20))";
    let r = execute(&client, code).await;
    assert_eq!(stdout(&r), "6\n", "{r:?}");
    assert!(r.content.iter().all(|c| c.as_image().is_none()), "{r:?}");
    let text = r.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
    assert!(text.contains("/mnt/data/ids.csv (") && text.contains("/mnt/data/huge.png (3145732 bytes)"), "{text}");
    assert!(text.contains("[not shown] huge.png: the images of one result are limited to 2097152 bytes"), "{text}");
    client.cancel().await.unwrap();
    eventually("every instance is freed", || server.engine.live_instances() == 0).await;
    server.shutdown();
    server.wait().await;
}

/// Past `mcp_discovery_above` tools, `execute_code`'s description names the servers and how to
/// search instead of every signature, and a program finds, reads and calls a tool with
/// `search_tools` and `describe_tools` (rmcp's client, the real server and downstream servers).
#[tokio::test(flavor = "multi_thread")]
async fn past_the_discovery_threshold_programs_find_their_tools_by_searching() {
    let setup = tokio::task::spawn_blocking(|| downstream("discover")).await.unwrap();
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    config.mcp_discovery_above = 5;
    let server = grpc::serve(config).await;
    let client = older_client(server.http_addr, "acme-key").await;
    let tools = client.list_all_tools().await.unwrap();
    let description = tools.iter().find(|t| t.name == "execute_code").and_then(|t| t.description.clone()).unwrap();
    assert!(description.contains("too many to list here"), "{description}");
    assert!(description.contains("print(search_tools(\"create an issue\"))"), "{description}");
    assert!(
        description.contains("\nfs (") && description.contains("tools: read_file, read_text_file,"),
        "{description}"
    );
    assert!(!description.contains("read_text_file(path: str"), "no signatures: {description}");

    let r = execute(&client, "print(search_tools('read a text file', limit=1))").await;
    assert!(stdout(&r).starts_with("fs.read_text_file(path: str"), "{r:?}");
    let r = execute(&client, "print(describe_tools(['notes.get_body', 'notes.get_bdy']))").await;
    let text = stdout(&r);
    assert!(text.starts_with("# no tool 'notes.get_bdy'; did you mean 'notes.get_body'?"), "{text}");
    assert!(text.contains("class notes:") && text.contains("async def get_body(id: int"), "{text}");
    let r = execute(&client, "print(await notes.get_body(id=2))").await;
    assert_eq!(stdout(&r), "gather independent awaits\n", "{r:?}");
    // A JavaScript program searches the same way, and reads TypeScript.
    let js = |code: &str| {
        let args = json!({"code": code, "language": "javascript"}).as_object().unwrap().clone();
        client.call_tool(CallToolRequestParams::new("execute_code").with_arguments(args))
    };
    let r = js("console.log(search_tools('read a text file', 1))").await.unwrap();
    assert!(stdout(&r).starts_with("fs.read_text_file(args: { path: string"), "{r:?}");
    let r = js("console.log(describe_tools(['notes.get_body']))").await.unwrap();
    assert!(
        stdout(&r).contains("declare namespace notes {") && stdout(&r).contains("function get_body(args: { id: number"),
        "{r:?}"
    );
    client.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}
