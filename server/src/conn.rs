//! HTTP connections with bounds: a connection limit, a header-read timeout (which is also the
//! longest a keep-alive connection may sit idle between requests), a body timeout and size
//! limit, and JSON answers for all of them.
//!
//! axum's own `serve` has none of these: 1,500 half-sent requests once stayed open against it.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Bounds on HTTP connections and request bodies.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpLimits {
    /// Largest request body; larger ones get 413. Default 4 MiB.
    pub max_body_bytes: usize,
    /// How much of an oversized body is read and discarded before answering 413, so that a
    /// client still writing sees the answer instead of a reset connection. Default 16 MiB.
    pub drain_bytes: usize,
    /// Time to send a request's headers, and the longest a keep-alive connection may wait
    /// idle for its next request. Default 10 s.
    pub header_timeout: Duration,
    /// Time to send a whole request body. Default 30 s.
    pub body_timeout: Duration,
    /// Open connections; more are answered 503 and closed. Default 512 (with 4 MiB bodies,
    /// at most 2 GiB of request bodies in memory at once).
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_body_bytes: 4 * 1024 * 1024,
            drain_bytes: 16 * 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 512,
        }
    }
}

fn json_error(status: StatusCode, error: String) -> Response {
    let mut response = (status, Json(json!({"status": "error", "error": error}))).into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads a whole request body within the size limit and the body timeout. Over the limit, up
/// to `drain_bytes` more are read and dropped, then 413 (JSON) closes the connection.
pub(crate) async fn read_body(limits: &HttpLimits, headers: &HeaderMap, mut body: Body) -> Result<Bytes, Response> {
    let max = limits.max_body_bytes;
    let too_large = || {
        json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request body too large: the limit is {max} bytes; send smaller code or tool results"),
        )
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let read = async {
        let mut buf = Vec::new();
        let mut seen = 0usize;
        let over_from_start = declared.is_some_and(|n| n > max as u64);
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Err(json_error(StatusCode::BAD_REQUEST, "the request body could not be read".into()));
            };
            let Ok(data) = frame.into_data() else { continue };
            seen = seen.saturating_add(data.len());
            if over_from_start || seen > max {
                if seen > max.saturating_add(limits.drain_bytes) {
                    break;
                }
                buf = Vec::new();
                continue;
            }
            buf.extend_from_slice(&data);
        }
        if over_from_start || seen > max { Err(too_large()) } else { Ok(Bytes::from(buf)) }
    };
    match tokio::time::timeout(limits.body_timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(json_error(
            StatusCode::REQUEST_TIMEOUT,
            format!("Request body not received within {} s", limits.body_timeout.as_secs()),
        )),
    }
}

/// Serves `app` on `listener` until `stop`, then lets open requests finish.
pub async fn serve(listener: TcpListener, app: axum::Router, limits: HttpLimits, stop: CancellationToken) {
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let tracker = TaskTracker::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, typically: back off instead of spinning.
                    tracing::warn!("accepting an HTTP connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            metrics::counter!("ptc_http_connections_refused_total").increment(1);
            let body = format!(
                "{{\"status\":\"error\",\"error\":\"Too many connections: the server accepts {} at once; retry shortly\"}}",
                limits.max_connections
            );
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.try_write(answer.as_bytes());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let (stop, header_timeout) = (stop.clone(), limits.header_timeout);
        tracker.spawn(async move {
            let _permit = permit;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("HTTP connection: {e}");
                    }
                }
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    tracker.close();
    tracker.wait().await;
}
