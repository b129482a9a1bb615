//! Traces exported over OTLP to a real receiver (the OpenTelemetry protocol's own
//! `TraceService`, served here with tonic): a gRPC client's `traceparent` is continued by the
//! call's span, the execution, its rounds and an `execute_tool` span per nested call (GenAI
//! conventions' attributes, the stable call id, the approval's events, a failed call's
//! status), each call carries its span to the client, and nothing a program handles (a tool's
//! input, result or error text) is in the export.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use ptc_server::execute::ExecuteStream;
use ptc_server::proto::{self, decision, sandbox_client::SandboxClient, tool_result};
use ptc_server::traces::{OtlpConfig, OtlpProtocol};
use ptc_server::{RunningServer, ServerConfig};
use ptc_tests::grpc::{self, Msg, Stream};
use ptc_tests::otlp::{self, Receiver, attribute, hex};
use tonic::transport::Channel;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// A server of tenant `t1` (key `k1`) that exports to a receiver of its own over `protocol`,
/// configured further by `configure`, and a gRPC client of it.
async fn traced(
    protocol: OtlpProtocol,
    configure: impl FnOnce(&mut ServerConfig),
) -> (Receiver, RunningServer, SandboxClient<Channel>) {
    let receiver = Receiver::default();
    let endpoint = match protocol {
        OtlpProtocol::Grpc => receiver.start().await,
        OtlpProtocol::Http => receiver.start_http().await,
    };
    let mut config = grpc::config(&["t1:k1"]);
    config.otlp = Some(otlp::config(&endpoint, protocol));
    configure(&mut config);
    let server = grpc::serve(config).await;
    let client = SandboxClient::connect(format!("http://{}", server.grpc_addr)).await.unwrap();
    (receiver, server, client)
}

/// Runs `start` as `k1`, waits until it hibernates at its one tool call, answers `"found"` and
/// returns its end.
async fn answered_after_hibernating(
    server: &RunningServer,
    client: &mut SandboxClient<Channel>,
    start: proto::Start,
) -> proto::Completed {
    let mut stream = Stream(ExecuteStream::open(client, start, Some("k1")).await.unwrap());
    let round = stream.until(|m| if let Msg::ToolCalls(r) = m { Some(r) } else { None }).await;
    ptc_tests::eventually("the execution hibernates", || server.engine.hibernated() == 1).await;
    let outcome = Some(tool_result::Outcome::ResultJson("\"found\"".into()));
    stream.0.send_results(vec![proto::ToolResult { call_id: round.calls[0].id.clone(), outcome }]).await.unwrap();
    stream.until(|m| if let Msg::Completed(c) = m { Some(c) } else { None }).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_s_calls_are_execute_tool_spans_under_the_client_s_trace_and_the_export_holds_no_input() {
    let (receiver, server, mut client) = traced(OtlpProtocol::Grpc, |_| {}).await;

    let code = r#"
a, b, c = await asyncio.gather(lookup(q="a"), lookup(q="b"), lookup(q="c"))
try:
    await broken(q="secret-input-XYZ")
except ToolError:
    print("broken failed")
await delete(path="/srv/x", _reason="stale")
print(a, b, c)
"#;
    let delete = proto::Tool { requires_approval: true, ..grpc::tool("delete", None) };
    let tools = vec![grpc::tool("lookup", None), grpc::tool("broken", None), delete];
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let stream =
        ExecuteStream::open_traced(&mut client, grpc::start_message(code, tools), Some("k1"), Some(&traceparent))
            .await
            .unwrap();
    let mut stream = Stream(stream);
    // Each call's id and the span it was handed out with (its traceparent).
    let mut handed: HashMap<String, String> = HashMap::new();
    let end = loop {
        match stream.next().await.expect("the stream ended early") {
            Msg::ToolCalls(round) => {
                for approval in &round.approvals {
                    let call = approval.call.as_ref().unwrap();
                    handed.insert(call.id.clone(), call.traceparent.clone());
                    let verdict = decision::Verdict::Approve(proto::Approve { input_json: None });
                    let decision = proto::Decision { call_id: call.id.clone(), verdict: Some(verdict) };
                    stream.0.send_decisions(vec![decision]).await.unwrap();
                }
                let mut results = vec![];
                for call in &round.calls {
                    let before = handed.insert(call.id.clone(), call.traceparent.clone());
                    assert!(before.is_none_or(|b| b == call.traceparent), "an approved call keeps its span");
                    let outcome = match call.name.as_str() {
                        "broken" => tool_result::Outcome::Error("boom: secret-result-ABC".into()),
                        _ => tool_result::Outcome::ResultJson(format!("\"{}-done\"", call.name)),
                    };
                    results.push(proto::ToolResult { call_id: call.id.clone(), outcome: Some(outcome) });
                }
                stream.0.send_results(results).await.unwrap();
            }
            Msg::Completed(done) => break done,
            Msg::Failed(f) => panic!("failed: {f:?}"),
            _ => {}
        }
    };
    assert_eq!(end.stdout, "broken failed\nlookup-done lookup-done lookup-done\n");
    assert_eq!(handed.len(), 5, "{handed:?}");

    // The spans reach the receiver: the call's span ends with its stream, just after the
    // final message.
    let spans = receiver.until(&server, |r| !r.named("ptc.v1.Sandbox/Execute").is_empty()).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    eprintln!("{}", ptc_tests::otlp::tree(&spans));
    assert!(spans.iter().all(|s| hex(&s.trace_id) == TRACE), "one trace, the client's: {names:?}");
    let one = |name: &str| -> &Span {
        let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "{name} in {names:?}");
        found[0]
    };
    let call = one("ptc.v1.Sandbox/Execute");
    assert_eq!(hex(&call.parent_span_id), CLIENT_SPAN, "the call continues the client's span");
    assert_eq!(call.kind, SpanKind::Server as i32);
    assert_eq!(attribute(call, "rpc.method").as_deref(), Some("Execute"));
    let execution = one("ptc.execution");
    assert_eq!(execution.parent_span_id, call.span_id);
    assert_eq!(attribute(execution, "ptc.outcome").as_deref(), Some("completed"));
    assert_eq!(attribute(execution, "ptc.tool_calls").as_deref(), Some("5"));
    assert_eq!(attribute(execution, "ptc.tenant").as_deref(), Some("t1"));
    assert!(attribute(execution, "ptc.peak_memory_bytes").is_some_and(|b| b.parse::<u64>().unwrap() > 0));
    let rounds: Vec<&Span> = spans.iter().filter(|s| s.name == "ptc.round").collect();
    assert!(rounds.len() >= 3, "the gather, the failing call, the approval: {names:?}");
    assert!(rounds.iter().all(|r| r.parent_span_id == execution.span_id));

    let tools: Vec<&Span> =
        spans.iter().filter(|s| attribute(s, "gen_ai.operation.name").as_deref() == Some("execute_tool")).collect();
    assert_eq!(tools.len(), 5, "{names:?}");
    for tool in &tools {
        let name = attribute(tool, "gen_ai.tool.name").unwrap();
        assert_eq!(tool.name, format!("execute_tool {name}"));
        assert!(rounds.iter().any(|r| r.span_id == tool.parent_span_id), "{name} is under a round");
        // The client was handed this very span with the call: the tool's spans nest under it.
        let id = attribute(tool, "gen_ai.tool.call.id").unwrap();
        let parent = &handed[&id];
        assert_eq!(parent, &format!("00-{TRACE}-{}-01", hex(&tool.span_id)), "{id}");
        let status = tool.status.as_ref().map_or(0, |s| s.code);
        match name.as_str() {
            "broken" => assert_eq!(status, StatusCode::Error as i32, "a failed call's status"),
            _ => assert_ne!(status, StatusCode::Error as i32, "{name}"),
        }
        let events: Vec<&str> = tool.events.iter().map(|e| e.name.as_str()).collect();
        if name == "delete" {
            assert_eq!(events, ["gen_ai.tool.approval.requested", "gen_ai.tool.approval.approved"]);
        }
    }
    assert_eq!(tools.iter().filter(|t| attribute(t, "gen_ai.tool.name").as_deref() == Some("lookup")).count(), 3);

    // Nothing the program handled is in what was exported.
    receiver.assert_not_exported(&[
        "secret-input-XYZ",
        "secret-result-ABC",
        "boom",
        "/srv/x",
        "stale",
        "lookup-done",
        "broken failed",
    ]);
}

/// Without `--otlp-endpoint` nothing traces: calls carry no traceparent.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_calls_carry_no_traceparent() {
    let server = grpc::serve(grpc::config(&["t1:k1"])).await;
    let mut client = SandboxClient::connect(format!("http://{}", server.grpc_addr)).await.unwrap();
    let start = grpc::start_message("await lookup(q='a')", vec![grpc::tool("lookup", None)]);
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let stream = ExecuteStream::open_traced(&mut client, start, Some("k1"), Some(&traceparent)).await.unwrap();
    let mut stream = Stream(stream);
    let round = stream.until(|m| if let Msg::ToolCalls(r) = m { Some(r) } else { None }).await;
    assert_eq!(round.calls[0].traceparent, "");
}

/// A collector that is gone costs the program nothing, and says so in a metric.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_is_gone_costs_runs_nothing_and_is_counted() {
    // A port nothing listens on.
    let endpoint = format!("http://127.0.0.1:{}", ptc_tests::binary::free_port());
    let mut config = grpc::config(&["t1:k1"]);
    config.otlp = Some(OtlpConfig { endpoint, protocol: OtlpProtocol::Grpc, batch_delay: Duration::from_millis(50) });
    let server = grpc::serve(config).await;
    let mut client = SandboxClient::connect(format!("http://{}", server.grpc_addr)).await.unwrap();
    for _ in 0..3 {
        let start = grpc::start_message("print('ok')", vec![]);
        let stream = ExecuteStream::open(&mut client, start, Some("k1")).await.unwrap();
        let (end, _) = Stream(stream).drive(|_| Ok(serde_json::json!(null))).await;
        assert_eq!(grpc::completed(end).stdout, "ok\n");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        server.flush_traces();
        let metrics = ptc_server::metrics::handle().render();
        let failed: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("ptc_trace_spans_failed_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if failed > 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no failed export counted:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The HTTP API in a cluster: the first request's span continues its `traceparent` header and
/// the execution's goes under it; each call in `tool_calls` names its span; when the node is
/// gone and another replays the execution from its journal, the replay's execution span is in
/// the same trace, under the same request's span, as is the continuation's own request span
/// (under the header it brought).
#[tokio::test(flavor = "multi_thread")]
async fn an_http_execution_replayed_on_another_node_stays_in_the_caller_s_trace() {
    use ptc_server::cluster::Peers;
    use ptc_tests::http::post_raw;
    use serde_json::{Value, json};

    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let (_redis, port) = tokio::task::spawn_blocking(|| ptc_tests::redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-traces-cluster-{}", std::process::id()));
    let (p1, p2) = (ptc_tests::binary::free_port(), ptc_tests::binary::free_port());
    let peers = Peers::List(vec![
        ("n1".into(), format!("http://127.0.0.1:{p1}")),
        ("n2".into(), format!("http://127.0.0.1:{p2}")),
    ]);
    let node = |id: &str, http: u16| {
        let mut config = grpc::config(&["a:key-a"]);
        config.node_id = id.into();
        config.peers = peers.clone();
        config.redis_url = Some(format!("redis://127.0.0.1:{port}"));
        config.token_secret = Some("a-secret-both-nodes-share".into());
        config.files.dir = files.clone();
        config.http_addr = ([127, 0, 0, 1], http).into();
        config.otlp = Some(otlp::config(&endpoint, OtlpProtocol::Grpc));
        config
    };
    let (n1, n2) = (grpc::serve(node("n1", p1)).await, grpc::serve(node("n2", p2)).await);
    let first_parent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let second_client_span = "1111111111111111";
    let second_parent = format!("00-{TRACE}-{second_client_span}-01");
    let post = |addr, traceparent: String, body: Value| async move {
        let headers = [("X-API-Key", "key-a"), ("traceparent", traceparent.as_str())];
        post_raw(addr, "/exec/programmatic", &headers, body.to_string().as_bytes()).await
    };
    let tools = json!([{"name": "t", "parameters": {"type": "object"}}]);
    let code = "r = await t()\nprint(r + await t())";
    let paused = post(n1.http_addr, first_parent, json!({"code": code, "tools": tools})).await;
    assert_eq!(paused.body["status"], "tool_call_required", "{}", paused.text);
    let handed = paused.body["tool_calls"][0]["traceparent"].as_str().unwrap().to_string();
    assert!(handed.starts_with(&format!("00-{TRACE}-")), "{handed}");
    n1.shutdown();
    n1.wait().await;
    // n2 cannot reach n1, and cannot thaw the image n1 kept at its stop (altered here): it runs
    // the execution again from its journal.
    ptc_tests::redis::alter_an_image(port);
    let results = json!([{"call_id": paused.body["tool_calls"][0]["id"], "result": 1}]);
    let token = paused.body["continuation_token"].clone();
    let next = post(n2.http_addr, second_parent, json!({"continuation_token": token, "tool_results": results})).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    let results = json!([{"call_id": next.body["tool_calls"][0]["id"], "result": 1}]);
    let token = next.body["continuation_token"].clone();
    let end = post(
        n2.http_addr,
        format!("00-{TRACE}-{CLIENT_SPAN}-01"),
        json!({"continuation_token": token, "tool_results": results}),
    )
    .await;
    assert_eq!(end.body["stdout"], "2\n", "{}", end.text);

    // n1's execution and n2's replay, each ended.
    let spans = receiver
        .until(&n2, |r| {
            r.named("ptc.execution").len() >= 2 && r.named("POST /exec").len() >= 3 && !r.named("ptc.replay").is_empty()
        })
        .await;
    eprintln!("{}", ptc_tests::otlp::tree(&spans));
    assert!(spans.iter().all(|s| hex(&s.trace_id) == TRACE), "one trace, the caller's");
    let requests = receiver.named("POST /exec");
    let first = requests.iter().find(|s| hex(&s.parent_span_id) == CLIENT_SPAN && attribute(s, "ptc.tenant").is_some());
    let first = first.expect("the first request's span, under the client's");
    assert!(requests.iter().any(|s| hex(&s.parent_span_id) == second_client_span), "the continuation's own span");
    for execution in receiver.named("ptc.execution") {
        assert_eq!(execution.parent_span_id, first.span_id, "n1's run and n2's replay are under the first request");
    }
    // n2's taking over is a span of its run: the journal's entries (the first round's calls and
    // results at least), replayed to their end without diverging.
    let replays = receiver.named("ptc.replay");
    assert_eq!(replays.len(), 1, "{replays:?}");
    let executions = receiver.named("ptc.execution");
    assert!(executions.iter().any(|e| e.span_id == replays[0].parent_span_id), "the replay under n2's run");
    // n2's thaw of the altered image, refused: an execution that ended as it started.
    let is_error = |s: &Span| s.status.as_ref().is_some_and(|s| s.code == StatusCode::Error as i32);
    let refused: Vec<&Span> = executions.iter().filter(|e| is_error(e)).collect();
    assert_eq!(refused.len(), 1, "{executions:?}");
    assert_eq!(attribute(refused[0], "ptc.start").as_deref(), Some("thaw"));
    let entries: i64 = attribute(&replays[0], "ptc.replay.entries").unwrap().parse().unwrap();
    assert!(entries >= 2, "{entries}");
    assert_ne!(replays[0].status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    // The call n1 handed out is the execute_tool span n1 exported.
    let tools =
        receiver.spans.lock().unwrap().iter().filter(|s| s.name == "execute_tool t").cloned().collect::<Vec<_>>();
    assert!(tools.iter().any(|s| handed == format!("00-{TRACE}-{}-01", hex(&s.span_id))), "{handed}");
    n2.shutdown();
    n2.wait().await;
    let _ = std::fs::remove_dir_all(files);
}

/// OTLP/HTTP (protobuf) reaches a receiver as OTLP/gRPC does.
#[tokio::test(flavor = "multi_thread")]
async fn spans_go_out_over_otlp_http_too() {
    let (receiver, server, mut client) = traced(OtlpProtocol::Http, |_| {}).await;
    let start = grpc::start_message("print(await lookup(q='a'))", vec![grpc::tool("lookup", None)]);
    let stream = ExecuteStream::open(&mut client, start, Some("k1")).await.unwrap();
    let (end, _) = Stream(stream).drive(|_| Ok(serde_json::json!("found"))).await;
    assert_eq!(grpc::completed(end).stdout, "found\n");
    let arrived =
        |r: &Receiver| !r.named("execute_tool lookup").is_empty() && !r.named("ptc.v1.Sandbox/Execute").is_empty();
    receiver.until(&server, arrived).await;
    let execution = &receiver.named("ptc.execution")[0];
    assert_eq!(execution.parent_span_id, receiver.named("ptc.v1.Sandbox/Execute")[0].span_id);
    server.shutdown();
    server.wait().await;
}

/// An execution that waits past `--hibernate-after-ms` is hibernated and thawed: a span each,
/// under its execution, with the image's size.
#[tokio::test(flavor = "multi_thread")]
async fn hibernation_and_thaw_are_spans_of_the_execution() {
    let hibernating = |c: &mut ServerConfig| c.engine.hibernate_after = Some(Duration::from_millis(50));
    let (receiver, server, mut client) = traced(OtlpProtocol::Grpc, hibernating).await;
    let start = grpc::start_message("print(await lookup(q='a'))", vec![grpc::tool("lookup", None)]);
    let done = answered_after_hibernating(&server, &mut client, start).await;
    assert_eq!(done.stdout, "found\n");
    receiver.until(&server, |r| !r.named("ptc.execution").is_empty()).await;
    let execution = &receiver.named("ptc.execution")[0];
    for name in ["ptc.hibernate", "ptc.thaw"] {
        let phase = receiver.named(name);
        assert_eq!(phase.len(), 1, "{name}");
        assert_eq!(phase[0].parent_span_id, execution.span_id, "{name} is the execution's");
        assert!(attribute(&phase[0], "ptc.hibernated.bytes").is_some_and(|b| b.parse::<u64>().unwrap() > 0), "{name}");
        assert!(phase[0].end_time_unix_nano >= phase[0].start_time_unix_nano);
    }
    assert!(
        receiver.named("ptc.hibernate")[0].end_time_unix_nano <= receiver.named("ptc.thaw")[0].start_time_unix_nano
    );
}

/// A program's outbound HTTP requests are client spans of its execution, before and after it
/// hibernates: method, scheme, host, port, status and sizes; a refused one says so. Neither
/// the path, the query, a header (a secret's value), nor a body is in the export.
#[tokio::test(flavor = "multi_thread")]
async fn outbound_requests_are_client_spans_without_their_path_query_headers_or_body() {
    use ptc_engine::SecretSpec;
    let web = ptc_tests::web::Web::start().await;
    let mut policy = web.policy();
    policy.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-77", &["localhost"])];
    let (receiver, server, mut client) = traced(OtlpProtocol::Grpc, |c| {
        c.network = ptc_server::core::network::NetworkPolicies([("t1".to_string(), policy)].into());
        c.engine.hibernate_after = Some(Duration::from_millis(50));
    })
    .await;
    let code = format!(
        r#"
import os, urllib.request
req = urllib.request.Request({echo:?}, headers={{"Authorization": "Bearer " + os.environ["TOKEN"]}})
print(len(urllib.request.urlopen(req).read()) > 0)
try:
    urllib.request.urlopen("http://example.invalid/private-path")
except Exception as e:
    print("refused")
await lookup(q="a")
print(urllib.request.urlopen({hello:?}, data=b"body-text-QRS").read().decode())
"#,
        echo = web.https_url("/echo?q=query-text-XYZ"),
        hello = web.http_url("/hello"),
    );
    let start = grpc::start_message(&code, vec![grpc::tool("lookup", None)]);
    let done = answered_after_hibernating(&server, &mut client, start).await;
    assert_eq!(done.stdout, "True\nrefused\nhello\n");

    let spans =
        receiver.until(&server, |r| !r.named("ptc.execution").is_empty() && !r.named("ptc.thaw").is_empty()).await;
    eprintln!("{}", ptc_tests::otlp::tree(&spans));
    let execution = &receiver.named("ptc.execution")[0];
    let mut outbound: Vec<Span> = spans.iter().filter(|s| s.kind == SpanKind::Client as i32).cloned().collect();
    outbound.sort_by_key(|s| s.start_time_unix_nano);
    let names: Vec<&str> = outbound.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["GET", "GET", "POST"]);
    assert!(outbound.iter().all(|s| s.parent_span_id == execution.span_id), "each under the execution");
    let port = |s: &Span| attribute(s, "server.port").unwrap().parse::<u16>().unwrap();
    let (echo, refused, post) = (&outbound[0], &outbound[1], &outbound[2]);
    assert_eq!(attribute(echo, "server.address").as_deref(), Some("localhost"));
    assert_eq!((attribute(echo, "url.scheme").as_deref(), port(echo)), (Some("https"), web.https.port()));
    assert_eq!(attribute(echo, "http.response.status_code").as_deref(), Some("200"));
    assert!(attribute(echo, "http.response.body.size").unwrap().parse::<u64>().unwrap() > 0);
    assert_eq!(attribute(refused, "server.address").as_deref(), Some("example.invalid"));
    assert_eq!(attribute(refused, "error.type").as_deref(), Some("refused"));
    assert_eq!(refused.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    assert_eq!((attribute(post, "server.address").as_deref(), port(post)), (Some("127.0.0.1"), web.http.port()));
    assert_eq!(attribute(post, "http.request.body.size").as_deref(), Some("13"));
    let thaw = &receiver.named("ptc.thaw")[0];
    assert!(post.start_time_unix_nano >= thaw.end_time_unix_nano, "the last request after the thaw");

    receiver.assert_not_exported(&[
        "s3cr3t-VALUE-77",
        "ptc-secret-TOKEN",
        "query-text-XYZ",
        "/echo",
        "private-path",
        "body-text-QRS",
        "hello",
    ]);
    server.shutdown();
    server.wait().await;
}

/// The session RPCs are spans of their own under the client's, each with its method, and a
/// refused one carries the gRPC code, as a refused `Execute` does.
#[tokio::test(flavor = "multi_thread")]
async fn session_rpcs_are_server_spans_under_the_client_s_and_a_refusal_has_its_code() {
    let (receiver, server, mut client) = traced(OtlpProtocol::Grpc, |_| {}).await;
    fn with_trace<T>(message: T) -> tonic::Request<T> {
        let mut request = grpc::with_key(message, "k1");
        request.metadata_mut().insert("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01").parse().unwrap());
        request
    }
    let opened = client.open_session(with_trace(proto::OpenSessionRequest::default())).await.unwrap().into_inner();
    let snapshot = proto::SnapshotSessionRequest { session_id: opened.session_id.clone(), include_files: false };
    client.snapshot_session(with_trace(snapshot)).await.unwrap();
    let unknown = proto::SnapshotSessionRequest { session_id: "no-such-session".into(), include_files: false };
    let refused = client.snapshot_session(with_trace(unknown)).await.unwrap_err();
    let describe = proto::DescribeToolsRequest { tools: vec![grpc::tool("lookup", None)], ..Default::default() };
    client.describe_tools(with_trace(describe)).await.unwrap();
    client.close_session(with_trace(proto::CloseSessionRequest { session_id: opened.session_id })).await.unwrap();
    // An `Execute` refused at its start (a runtime there is none of).
    let unknown_runtime = proto::Start { runtime: "cobol".into(), ..grpc::start_message("pass", vec![]) };
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let refused_run = ExecuteStream::open_traced(&mut client, unknown_runtime, Some("k1"), Some(&traceparent)).await;
    let refused_run = refused_run.err().expect("an unknown runtime is refused");

    let names = ["OpenSession", "SnapshotSession", "DescribeTools", "CloseSession", "Execute"]
        .map(|m| format!("ptc.v1.Sandbox/{m}"));
    let spans = receiver.until(&server, |r| names.iter().all(|n| !r.named(n).is_empty())).await;
    eprintln!("{}", ptc_tests::otlp::tree(&spans));
    for name in &names {
        for span in receiver.named(name) {
            assert_eq!((hex(&span.trace_id), hex(&span.parent_span_id)), (TRACE.into(), CLIENT_SPAN.into()), "{name}");
            assert_eq!(span.kind, SpanKind::Server as i32);
            assert_eq!(attribute(&span, "ptc.tenant").as_deref(), Some("t1"), "{name}");
            assert_eq!(attribute(&span, "rpc.method").as_deref(), name.strip_prefix("ptc.v1.Sandbox/"));
        }
    }
    let snapshots = receiver.named("ptc.v1.Sandbox/SnapshotSession");
    assert_eq!(snapshots.len(), 2);
    let code = refused.code() as i32;
    let failed: Vec<&Span> =
        snapshots.iter().filter(|s| s.status.as_ref().is_some_and(|s| s.code == StatusCode::Error as i32)).collect();
    assert_eq!(failed.len(), 1, "the refused snapshot, only");
    assert_eq!(attribute(failed[0], "rpc.grpc.status_code"), Some(code.to_string()));
    let execute = &receiver.named("ptc.v1.Sandbox/Execute")[0];
    assert_eq!(execute.status.as_ref().map(|s| s.code), Some(StatusCode::Error as i32));
    assert_eq!(attribute(execute, "rpc.grpc.status_code"), Some((refused_run.code() as i32).to_string()));
    server.shutdown();
    server.wait().await;
}
