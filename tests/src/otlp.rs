//! A real OTLP/gRPC receiver for the trace tests: the collector's `TraceService` from the
//! OpenTelemetry protocol's own crate, served with tonic, keeping what it is sent.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

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
