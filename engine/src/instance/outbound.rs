//! The span of one outbound HTTP request of a program's ([`super::host::HostState::fetch`]),
//! a client span under its execution's in the OpenTelemetry HTTP conventions' terms: method,
//! scheme, host, port, status and the bodies' sizes. Never the path, the query, a header or a
//! body: a program puts what it handles there, and a secret's placeholder is substituted into
//! them (`net/secrets.rs`). A request the policy refused or that failed says which
//! (`error.type`), not the words the program got.

use opentelemetry::KeyValue;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span, SpanKind, Status};

use crate::api::trace::Parent;
use crate::net;

/// The methods the conventions name; any other is `_OTHER` (the method is the program's text).
const METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"];

/// The longest host name DNS allows: a longer one (the program's text) is cut there.
const MAX_HOST: usize = 253;

/// An outbound request's open span.
pub(crate) struct Outbound(BoxedSpan);

impl Outbound {
    /// Starts `request`'s span under `parent`; `replayed`: answered from a journal, not made.
    pub(crate) fn start(parent: &Parent, request: &net::Request, replayed: bool) -> Self {
        let method = METHODS.iter().copied().find(|m| *m == request.method).unwrap_or("_OTHER");
        let mut attributes = vec![
            KeyValue::new("http.request.method", method),
            KeyValue::new("http.request.body.size", request.body.len() as i64),
        ];
        if let Ok(url) = reqwest::Url::parse(&request.url) {
            attributes.push(KeyValue::new("url.scheme", url.scheme().to_string()));
            if let Some(host) = url.host_str() {
                attributes.push(KeyValue::new("server.address", host.chars().take(MAX_HOST).collect::<String>()));
            }
            if let Some(port) = url.port_or_known_default() {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
        }
        if replayed {
            attributes.push(KeyValue::new("ptc.replayed", true));
        }
        let name = if method == "_OTHER" { "HTTP" } else { method };
        Outbound(parent.span(name, SpanKind::Client, attributes))
    }

    /// Ends the span with what the request got.
    pub(crate) fn end(mut self, outcome: &Result<net::Response, net::Failure>) {
        let span = &mut self.0;
        match outcome {
            Ok(response) => {
                span.set_attribute(KeyValue::new("http.response.status_code", i64::from(response.status)));
                span.set_attribute(KeyValue::new("http.response.body.size", response.body.len() as i64));
                // The conventions' client spans: a 4xx or 5xx is an error.
                if response.status >= 400 {
                    let status = response.status.to_string();
                    span.set_attribute(KeyValue::new("error.type", status.clone()));
                    span.set_status(Status::error(status));
                }
            }
            Err(failure) => {
                let kind = match failure {
                    net::Failure::Refused(_) => "refused",
                    net::Failure::Failed(_) => "failed",
                    net::Failure::TimedOut(_) => "timeout",
                };
                span.set_attribute(KeyValue::new("error.type", kind));
                span.set_status(Status::error(kind));
            }
        }
        span.end();
    }
}
