//! HTTP connections with bounds: a connection limit, a header-read timeout (which is also the
//! longest a keep-alive connection may sit idle between requests), a body timeout and size
//! limit, each tenant's share of the requests in progress, and JSON answers for all of them;
//! and, in local mode (no API keys), requests only from localhost.
//!
//! axum's own `serve` has none of these: 1,500 half-sent requests once stayed open against it,
//! and 520 MCP streams of one tenant once held every connection while other tenants got 503.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
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
    /// Largest upload (`POST /upload`, the whole multipart body; streamed to disk, never held
    /// in memory); larger ones get 413. Default 100 MiB, the default file quota.
    pub max_upload_bytes: u64,
    /// Time to send a whole upload. Default 300 s.
    pub upload_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_body_bytes: 4 * 1024 * 1024,
            drain_bytes: 16 * 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_upload_bytes: 100 * 1024 * 1024,
            upload_timeout: Duration::from_secs(300),
        }
    }
}

/// Requests in progress per tenant: each holds one of the server's connections (a program's
/// run, an MCP stream) until its response has been sent whole.
pub struct RequestShares {
    /// `None`: no share (local mode, one tenant).
    limit: Option<usize>,
    keys: Arc<crate::core::auth::ApiKeys>,
    counts: Mutex<HashMap<String, usize>>,
}

/// One request's place in its tenant's share, given back when its response is done.
struct SharePermit {
    shares: Arc<RequestShares>,
    tenant: String,
}

impl Drop for SharePermit {
    fn drop(&mut self) {
        let mut counts = self.shares.counts.lock().unwrap();
        if let Some(n) = counts.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.tenant);
            }
        }
    }
}

impl RequestShares {
    pub fn new(limit: Option<usize>, keys: Arc<crate::core::auth::ApiKeys>) -> Arc<Self> {
        Arc::new(RequestShares { limit, keys, counts: Mutex::default() })
    }

    /// `tenant`'s requests in progress now.
    pub fn in_progress(&self, tenant: &str) -> usize {
        self.counts.lock().unwrap().get(tenant).copied().unwrap_or(0)
    }

    fn take(self: &Arc<Self>, tenant: &str, limit: usize) -> Option<SharePermit> {
        let mut counts = self.counts.lock().unwrap();
        let n = counts.entry(tenant.to_string()).or_default();
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(SharePermit { shares: self.clone(), tenant: tenant.to_string() })
    }
}

/// Holds a place in the caller's tenant share for as long as the request and its response
/// last; past the share, 429 and the connection is closed (so that refused requests cannot
/// keep connections either). Requests without a valid key pass to their handler, which
/// answers 401.
pub(crate) async fn tenant_share(State(shares): State<Arc<RequestShares>>, request: Request, next: Next) -> Response {
    let Some(limit) = shares.limit else { return next.run(request).await };
    let tenant = {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        shares.keys.tenant(crate::core::auth::presented_key(header("x-api-key"), header("authorization")))
    };
    let Ok(tenant) = tenant else { return next.run(request).await };
    let Some(permit) = shares.take(&tenant, limit) else {
        metrics::counter!("ptc_http_tenant_share_refused_total").increment(1);
        return json_error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Too many requests in progress for this API key: a key may have {limit} at once (each holds a \
                 connection, MCP streams included); wait for some to finish or close idle MCP sessions"
            ),
        );
    };
    next.run(request).await.map(|body| {
        use http_body_util::BodyExt;
        Body::new(body.map_frame(move |frame| {
            let _held = &permit;
            frame
        }))
    })
}

/// Local mode (no API keys) answers only requests addressed to this machine (`Host`
/// localhost, 127.0.0.1 or [::1]) and, when a browser sends an `Origin`, from a page of this
/// machine. Otherwise any web page could run code here: a cross-site `POST /exec` with
/// `Content-Type: text/plain` once ran, and with DNS rebinding its page could read the answer.
pub(crate) async fn local_only(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host_ok = headers.get(header::HOST).and_then(|v| v.to_str().ok()).is_some_and(local_host);
    let origin_ok = headers.get(header::ORIGIN).is_none_or(|v| v.to_str().ok().is_some_and(local_origin));
    if host_ok && origin_ok {
        return next.run(request).await;
    }
    json_error(
        StatusCode::FORBIDDEN,
        "This server runs without API keys (local mode) and answers only requests to localhost from this machine; \
         start it with --api-keys to serve other hosts or web pages"
            .to_string(),
    )
}

/// `localhost`, `127.0.0.1` or `[::1]`, with or without a port.
fn local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => {
            host.rsplit_once(':').map_or(host, |(name, port)| if port.parse::<u16>().is_ok() { name } else { host })
        }
    };
    matches!(name.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "::1")
}

/// `http(s)://` and a local host (`null`, a file or sandboxed page, is not).
fn local_origin(origin: &str) -> bool {
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| !rest.contains('/') && local_host(rest))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_mode_knows_its_own_hosts_and_origins() {
        for host in ["localhost", "localhost:8080", "127.0.0.1:1", "[::1]:8080", "LOCALHOST"] {
            assert!(local_host(host), "{host}");
        }
        for host in ["evil.com", "evil.com:8080", "127.0.0.1.evil.com", "localhost.evil.com:80", "[::2]:80", ""] {
            assert!(!local_host(host), "{host}");
        }
        assert!(local_origin("http://localhost:3000") && local_origin("https://127.0.0.1"));
        for origin in ["http://evil.com", "null", "http://localhost.evil.com", "file://", "http://localhost/x"] {
            assert!(!local_origin(origin), "{origin}");
        }
    }
}
