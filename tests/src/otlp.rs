//! A real OTLP/gRPC receiver for the trace tests: the collector's `TraceService` from the
//! OpenTelemetry protocol's own crate, served with tonic, keeping what it is sent.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use ptc_server::RunningServer;
use ptc_server::traces::{OtlpConfig, OtlpProtocol};

/// A server's exporter to `endpoint` over `protocol`, sending every 100 ms (tests wait for
/// spans, and flush besides).
pub fn config(endpoint: &str, protocol: OtlpProtocol) -> OtlpConfig {
    OtlpConfig { endpoint: endpoint.to_string(), protocol, batch_delay: Duration::from_millis(100) }
}

/// What the receiver was sent: every span, and every request's bytes as they came.
#[derive(Clone, Default)]
pub struct Receiver {
    pub spans: Arc<Mutex<Vec<Span>>>,
    pub raw: Arc<Mutex<Vec<u8>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Fails naming each of `texts` found anywhere in the raw bytes the receiver was sent.
    pub fn assert_not_exported(&self, texts: &[&str]) {
        let raw = self.raw.lock().unwrap();
        for text in texts {
            assert!(!raw.windows(text.len()).any(|w| w == text.as_bytes()), "{text:?} was exported");
        }
    }

    fn keep(&self, request: ExportTraceServiceRequest) {
        self.raw.lock().unwrap().extend(request.encode_to_vec());
        let mut spans = self.spans.lock().unwrap();
        for resource in request.resource_spans {
            spans.extend(resource.scope_spans.into_iter().flat_map(|scope| scope.spans));
        }
    }

    /// Serves OTLP/HTTP (protobuf bodies, `POST /v1/traces`) on a free port of 127.0.0.1: its
    /// endpoint.
    pub async fn start_http(&self) -> String {
        use axum::body::Bytes;
        use axum::extract::State;
        use axum::http::{StatusCode, header};
        async fn traces(
            State(receiver): State<Receiver>,
            body: Bytes,
        ) -> Result<impl axum::response::IntoResponse, StatusCode> {
            let request = ExportTraceServiceRequest::decode(body).map_err(|_| StatusCode::BAD_REQUEST)?;
            receiver.keep(request);
            Ok((
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                ExportTraceServiceResponse::default().encode_to_vec(),
            ))
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(traces)).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/v1/traces")
    }

    /// Flushes `server`'s spans until `arrived` says what came is enough (within 20 s); what
    /// came then.
    pub async fn until(&self, server: &RunningServer, arrived: impl Fn(&Receiver) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            server.flush_traces();
            if arrived(self) {
                return self.spans.lock().unwrap().clone();
            }
            let names: Vec<String> = self.spans.lock().unwrap().iter().map(|s| s.name.clone()).collect();
            assert!(Instant::now() < deadline, "the spans did not arrive; these did: {names:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The spans named `name` so far.
    pub fn named(&self, name: &str) -> Vec<Span> {
        self.spans.lock().unwrap().iter().filter(|s| s.name == name).cloned().collect()
    }

    /// Serves OTLP/gRPC on a free port of 127.0.0.1: its endpoint.
    pub async fn start(&self) -> String {
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

pub fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|a| a.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `spans` as an indented tree, each with its duration and its events, children in the order
/// they started (for a test's output and docs/observability.md).
pub fn tree(spans: &[Span]) -> String {
    fn walk(spans: &[Span], parent: &[u8], depth: usize, out: &mut String) {
        let mut children: Vec<&Span> = spans.iter().filter(|s| s.parent_span_id == parent).collect();
        children.sort_by_key(|s| s.start_time_unix_nano);
        for span in children {
            let ms = span.end_time_unix_nano.saturating_sub(span.start_time_unix_nano) as f64 / 1e6;
            let status = match span.status.as_ref().map(|s| s.code) {
                Some(2) => " ERROR",
                _ => "",
            };
            let events: Vec<&str> = span.events.iter().map(|e| e.name.as_str()).collect();
            let events = if events.is_empty() { String::new() } else { format!(" [{}]", events.join(", ")) };
            out.push_str(&format!("{}{} ({ms:.2} ms){status}{events}\n", "  ".repeat(depth), span.name));
            walk(spans, &span.span_id, depth + 1, out);
        }
    }
    let ids: Vec<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
    let mut out = String::new();
    let mut roots: Vec<&[u8]> =
        spans.iter().map(|s| s.parent_span_id.as_slice()).filter(|p| !ids.contains(p)).collect();
    roots.sort();
    roots.dedup();
    for root in roots {
        out.push_str(&format!("(the client's span {})\n", hex(root)));
        walk(spans, root, 1, &mut out);
    }
    out
}
