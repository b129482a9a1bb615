//! Traces exported over OTLP to a real receiver (the OpenTelemetry protocol's own
//! `TraceService`, served here with tonic): a gRPC client's `traceparent` is continued by the
//! call's span, the execution, its rounds and an `execute_tool` span per nested call (GenAI
//! conventions' attributes, the stable call id, the approval's events, a failed call's
//! status), each call carries its span to the client, and nothing a program handles (a tool's
//! input, result or error text) is in the export.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind, status::StatusCode};
use prost::Message;
use ptc_server::execute::ExecuteStream;
use ptc_server::proto::{self, decision, sandbox_client::SandboxClient, tool_result};
use ptc_server::traces::{OtlpConfig, OtlpProtocol};
use ptc_tests::grpc::{self, Msg, Stream};

/// What the receiver was sent: every span, and every request's bytes as they came.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
    raw: Arc<Mutex<Vec<u8>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.raw.lock().unwrap().extend(request.encode_to_vec());
        let mut spans = self.spans.lock().unwrap();
        for resource in request.resource_spans {
            spans.extend(resource.scope_spans.into_iter().flat_map(|scope| scope.spans));
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Serves OTLP/gRPC on a free port of 127.0.0.1: its endpoint.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        format!("http://{addr}")
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|a| a.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread")]
async fn a_program_s_calls_are_execute_tool_spans_under_the_client_s_trace_and_the_export_holds_no_input() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let mut config = grpc::config(&["t1:k1"]);
    config.otlp = Some(OtlpConfig { endpoint, protocol: OtlpProtocol::Grpc, batch_delay: Duration::from_millis(100) });
    let server = grpc::serve(config).await;
    let mut client = SandboxClient::connect(format!("http://{}", server.grpc_addr)).await.unwrap();

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
    let deadline = Instant::now() + Duration::from_secs(20);
    let spans = loop {
        server.flush_traces();
        let spans = receiver.spans.lock().unwrap().clone();
        if spans.iter().any(|s| s.name == "ptc.v1.Sandbox/Execute") {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans did not arrive: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
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
    let raw = receiver.raw.lock().unwrap().clone();
    for secret in ["secret-input-XYZ", "secret-result-ABC", "boom", "/srv/x", "stale", "lookup-done", "broken failed"] {
        assert!(!raw.windows(secret.len()).any(|w| w == secret.as_bytes()), "{secret:?} was exported");
    }
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
