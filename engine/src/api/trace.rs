//! Where an engine's spans go ([`Tracer`], in [`crate::api::config::EngineConfig::tracer`]) and
//! what a client's span a run continues ([`crate::api::request::ExecutionRequest::trace_parent`]).
//! The spans themselves are made in `run/trace.rs`.

use std::borrow::Cow;
use std::sync::Arc;

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{SpanBuilder, SpanContext, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

/// An OpenTelemetry tracer the engine makes its spans with: an execution's, and one
/// `execute_tool` span per nested tool call. Each engine has its own (the server's exporter),
/// not the process's global one, so that two servers in one process trace apart.
#[derive(Clone)]
pub struct Tracer(pub(crate) Arc<BoxedTracer>);

impl Tracer {
    /// Any OpenTelemetry tracer, e.g. an SDK provider's `tracer("ptc-engine")`.
    pub fn new<T, S>(tracer: T) -> Self
    where
        T: opentelemetry::trace::Tracer<Span = S> + Send + Sync + 'static,
        S: opentelemetry::trace::Span + Send + Sync + 'static,
    {
        Tracer(Arc::new(BoxedTracer::new(Box::new(tracer))))
    }

    /// A span started now, under `parent` (another process's span, or one of this one's
    /// passed by its context) or as a trace of its own.
    pub fn span(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Option<&SpanContext>,
        attributes: Vec<KeyValue>,
    ) -> BoxedSpan {
        self.start(self.0.span_builder(name).with_kind(kind).with_attributes(attributes), parent)
    }

    /// An internal span under `parent` that started at `start` (a phase timed before it is
    /// known to be one).
    pub(crate) fn span_since(
        &self,
        name: &'static str,
        parent: &SpanContext,
        start: std::time::SystemTime,
        attributes: Vec<KeyValue>,
    ) -> BoxedSpan {
        let builder = self.0.span_builder(name).with_kind(SpanKind::Internal).with_start_time(start);
        self.start(builder.with_attributes(attributes), Some(parent))
    }

    /// `builder`'s span, under `parent` or as a trace of its own.
    fn start(&self, builder: SpanBuilder, parent: Option<&SpanContext>) -> BoxedSpan {
        let parent = match parent {
            Some(span) => Context::new().with_remote_span_context(span.clone()),
            None => Context::new(),
        };
        builder.start_with_context(&*self.0, &parent)
    }
}

/// An execution's span as the work done for it below the run floor finds it (an outbound HTTP
/// request's span, `instance/outbound.rs`; a journal's replay): the tracer and the span's
/// context, so that a span made there is the execution's child.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    pub(crate) tracer: Tracer,
    pub(crate) context: SpanContext,
}

impl Parent {
    /// A span under the execution's, started now.
    pub(crate) fn span(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
    ) -> BoxedSpan {
        self.tracer.span(name, kind, Some(&self.context), attributes)
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tracer")
    }
}
