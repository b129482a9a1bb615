//! Traces: W3C trace context in from a request and out on each tool call handed to a client,
//! and the OTLP exporter (`--otlp-endpoint`, off by default) the engine's spans go to.
//!
//! The exporter runs on the SDK's batch processor: spans wait in a bounded queue (2048; past
//! it they are dropped and counted) and go out in batches from a thread of its own, so a
//! collector that is slow or gone costs requests nothing. Each export's outcome is counted
//! (`ptc_trace_spans_exported_total`, `ptc_trace_spans_failed_total`) and a failure logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry::global::BoxedSpan;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, SpanKind, TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};

/// Where spans go: an OTLP collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The collector: `http://host:4317` for gRPC, `http://host:4318/v1/traces` for HTTP.
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// How long spans wait to go out in a batch (the SDK's default is 5 s).
    pub batch_delay: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies.
    Http,
}

/// The exporter's provider, flushed and shut down with the server.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// A provider exporting to `config`'s collector, with spans named by this node.
    /// Must run in the server's tokio runtime (the gRPC exporter's channel lives there).
    pub fn start(config: &OtlpConfig, node: &str) -> anyhow::Result<(Self, ptc_engine::Tracer)> {
        let exporter = match config.protocol {
            OtlpProtocol::Grpc => {
                opentelemetry_otlp::SpanExporter::builder().with_tonic().with_endpoint(&config.endpoint).build()?
            }
            OtlpProtocol::Http => {
                opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(&config.endpoint).build()?
            }
        };
        let batch = BatchConfigBuilder::default().with_scheduled_delay(config.batch_delay).build();
        let processor = BatchSpanProcessor::builder(Counted { exporter, unreported: Mutex::default() })
            .with_batch_config(batch)
            .build();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("ptc-engine")
            .with_attribute(KeyValue::new("service.instance.id", node.to_string()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build();
        let tracer = ptc_engine::Tracer::new(provider.tracer("ptc-engine"));
        tracing::info!(endpoint = %config.endpoint, protocol = ?config.protocol, "exporting traces over OTLP");
        Ok((Traces { provider }, tracer))
    }

    /// Sends the spans that ended so far (at shutdown; a test's look).
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!("traces: flushing spans failed: {e}");
        }
    }

    pub fn shutdown(&self) {
        self.flush();
        let _ = self.provider.shutdown();
    }
}

/// An exporter whose outcomes are counted and failures logged, at most once a minute (a
/// collector that is gone would otherwise fill the log at every batch).
#[derive(Debug)]
struct Counted<E> {
    exporter: E,
    /// Spans dropped since the last warning, and when that was.
    unreported: Mutex<(u64, Option<Instant>)>,
}

const WARN_EVERY: Duration = Duration::from_secs(60);

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let count = batch.len() as u64;
        let result = self.exporter.export(batch).await;
        match &result {
            Ok(()) => metrics::counter!("ptc_trace_spans_exported_total").increment(count),
            Err(e) => {
                metrics::counter!("ptc_trace_spans_failed_total").increment(count);
                let mut unreported = self.unreported.lock().unwrap();
                unreported.0 += count;
                if unreported.1.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    let dropped = std::mem::take(&mut unreported.0);
                    *unreported = (0, Some(Instant::now()));
                    tracing::warn!(
                        "traces: {dropped} spans could not be sent to the collector and were dropped \
                         (ptc_trace_spans_failed_total counts them; next warning in a minute at most): {e}"
                    );
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.exporter.set_resource(resource);
    }
}

/// A request's span (kind server) under the caller's `parent`, when the server traces.
pub fn request_span(
    tracer: Option<&ptc_engine::Tracer>,
    name: &'static str,
    parent: Option<&SpanContext>,
    attributes: Vec<KeyValue>,
) -> Option<BoxedSpan> {
    Some(tracer?.span(name, SpanKind::Server, parent, attributes))
}

/// A call this server makes for a program (a downstream MCP tool's), kind client, under the
/// program's call's span, when the server traces.
pub fn client_span(
    tracer: Option<&ptc_engine::Tracer>,
    name: String,
    parent: Option<&SpanContext>,
    attributes: Vec<KeyValue>,
) -> Option<BoxedSpan> {
    Some(tracer?.span(name, SpanKind::Client, parent, attributes))
}

/// The caller's span from an HTTP request's headers (`traceparent`, `tracestate`).
pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<SpanContext> {
    extract(|name| Some(headers.get(name)?.to_str().ok()?.to_string()))
}

/// The span a `traceparent` (as [`traceparent`] writes it) names; `None` for an empty or
/// malformed one.
pub fn from_traceparent(traceparent: &str) -> Option<SpanContext> {
    extract(|name| (name == "traceparent").then(|| traceparent.to_string()))
}

/// The caller's span from W3C trace context (`traceparent`, `tracestate`) as `get` finds its
/// headers; `None` without a valid one.
pub fn extract(get: impl Fn(&str) -> Option<String>) -> Option<SpanContext> {
    let headers: HashMap<String, String> =
        ["traceparent", "tracestate"].into_iter().filter_map(|k| Some((k.to_string(), get(k)?))).collect();
    let context = TraceContextPropagator::new().extract(&headers);
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// `span` as a W3C `traceparent` (empty for none), for a tool call handed to a client.
pub fn traceparent(span: Option<&SpanContext>) -> String {
    let Some(span) = span.filter(|s| s.is_valid()) else { return String::new() };
    let mut headers = HashMap::new();
    TraceContextPropagator::new().inject_context(&Context::new().with_remote_span_context(span.clone()), &mut headers);
    headers.remove("traceparent").unwrap_or_default()
}
