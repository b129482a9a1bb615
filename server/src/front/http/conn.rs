//! HTTP connections with bounds: a connection limit, a header-read timeout (which is also the
//! longest a keep-alive connection may sit idle between requests), a body timeout and size
//! limit, each tenant's share of the connections (a request in progress, or a connection kept
//! open between requests), and JSON answers for all of them, which a refused client can read;
//! and, in local mode (no API keys), requests only from localhost.
//!
//! axum's own `serve` has none of these: 1,500 half-sent requests once stayed open against it,
//! and 520 MCP streams of one tenant once held every connection while other tenants got 503.
//! A share of requests in progress alone was not enough: a tenant holding 56 MCP streams and
//! its clients' idle keep-alive connections beside them (which were nobody's) filled the
//! server, and another tenant's requests were reset (`BrokenPipe`) now and then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
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

/// Each tenant's share of the server's connections: a request in progress holds a place (a
/// program's run, an MCP stream) until its response has been sent whole, and so does a
/// connection its requests keep open between them (until it closes: at most the header timeout
/// idle), so that neither can crowd out another tenant.
pub struct RequestShares {
    /// `None`: no share (local mode, one tenant).
    limit: Option<usize>,
    keys: Arc<crate::core::auth::ApiKeys>,
    counts: Mutex<HashMap<String, usize>>,
}

/// One place in a tenant's share: a request's, given back when its response is done, or a
/// connection's ([`ConnPlace`]), given back when it closes.
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

    /// `tenant`'s places taken now: its requests in progress, and its connections open
    /// between requests.
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

/// The place a connection holds in its tenant's share from its first request with a key
/// until it closes; a request of another key on it moves it to that key's share.
#[derive(Default)]
struct ConnPlace(Mutex<Option<SharePermit>>);

impl ConnPlace {
    /// The place, if it is `tenant`'s.
    fn take_if(&self, tenant: &str) -> Option<SharePermit> {
        let mut held = self.0.lock().unwrap();
        if held.as_ref().is_some_and(|p| p.tenant == tenant) { held.take() } else { None }
    }
}

/// What a request carries of its connection's place. Weak: rmcp keeps an MCP session's
/// request parts (and so their extensions) for as long as the session, and a place must go
/// with its connection.
#[derive(Clone)]
struct ConnOf(Weak<ConnPlace>);

/// Bytes of a refused request's body read before the refusal is sent, within
/// [`DRAIN_TIME`]: a connection closed with unread bytes is reset, and its client saw
/// `BrokenPipe` instead of the answer.
const DRAIN_BYTES: usize = 1 << 20;

const DRAIN_TIME: Duration = Duration::from_secs(1);

/// Holds a place in the caller's tenant share for as long as the request and its response
/// last, and then for as long as its connection stays open; past the share, 429 and the
/// connection is closed (so that refused requests cannot keep connections either). Requests
/// without a valid key pass to their handler, which answers 401, and their connection is
/// closed after it, so that keyless connections cannot be held between requests.
pub(crate) async fn tenant_share(State(shares): State<Arc<RequestShares>>, request: Request, next: Next) -> Response {
    let Some(limit) = shares.limit else { return next.run(request).await };
    let tenant = {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        shares.keys.tenant(crate::core::auth::presented_key(header("x-api-key"), header("authorization")))
    };
    let Ok(tenant) = tenant else {
        let mut response = next.run(request).await;
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    };
    let place = request.extensions().get::<ConnOf>().and_then(|c| c.0.upgrade());
    let held = place.as_ref().and_then(|p| p.take_if(&tenant));
    let Some(permit) = held.or_else(|| shares.take(&tenant, limit)) else {
        metrics::counter!("ptc_http_tenant_share_refused_total").increment(1);
        drain(request.into_body()).await;
        return json_error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "Too many connections for this API key: a key may have {limit} at once (each request in progress, \
                 MCP streams included, and each connection kept open between requests); wait for some to finish, \
                 close idle MCP sessions, or keep fewer connections open"
            ),
        );
    };
    match place.filter(|_| !closes(&request)) {
        Some(place) => {
            // Another key's place, if it held one, is given back.
            *place.0.lock().unwrap() = Some(permit);
            next.run(request).await
        }
        // The connection ends with this response: its place with it.
        None => next.run(request).await.map(|body| {
            Body::new(body.map_frame(move |frame| {
                let _held = &permit;
                frame
            }))
        }),
    }
}

/// Whether the connection closes after this request (`Connection: close`, or HTTP/1.0 without
/// keep-alive).
fn closes(request: &Request) -> bool {
    let connection = request.headers().get(header::CONNECTION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let has = |token: &str| connection.split(',').any(|t| t.trim().eq_ignore_ascii_case(token));
    has("close") || (request.version() == axum::http::Version::HTTP_10 && !has("keep-alive"))
}

/// Reads and drops up to [`DRAIN_BYTES`] of a body within [`DRAIN_TIME`].
async fn drain(mut body: Body) {
    let read = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen = seen.saturating_add(frame.data_ref().map_or(0, Bytes::len));
            if seen > DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
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
    let refusing = Arc::new(Semaphore::new(REFUSING));
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
            refuse_connection(stream, limits.max_connections, &refusing, &tracker);
            continue;
        };
        let _ = stream.set_nodelay(true);
        // Each request carries its connection's place in its tenant's share (`tenant_share`).
        let place = Arc::new(ConnPlace::default());
        let (app, of) = (TowerToHyperService::new(app.clone()), ConnOf(Arc::downgrade(&place)));
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(of.clone());
            hyper::service::Service::call(&app, request)
        });
        let (stop, header_timeout) = (stop.clone(), limits.header_timeout);
        tracker.spawn(async move {
            let (_permit, _place) = (permit, place);
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

/// Connections past the limit answered at once, each read until its client closes (at most
/// [`DRAIN_TIME`] and [`DRAIN_BYTES`]) so that it reads the 503 rather than a reset; past
/// these, a connection is answered and closed at once.
const REFUSING: usize = 64;

/// Answers a connection past the server's limit with 503 in JSON and closes it.
fn refuse_connection(stream: tokio::net::TcpStream, max: usize, refusing: &Arc<Semaphore>, tracker: &TaskTracker) {
    let body = format!(
        "{{\"status\":\"error\",\"error\":\"Too many connections: the server accepts {max} at once; retry shortly\"}}"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let Ok(turn) = refusing.clone().try_acquire_owned() else {
        let _ = stream.try_write(answer.as_bytes());
        return;
    };
    tracker.spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _turn = turn;
        let mut stream = stream;
        let answered = async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await?;
            let (mut buf, mut seen) = (vec![0u8; 16 * 1024], 0usize);
            while seen <= DRAIN_BYTES {
                match stream.read(&mut buf).await? {
                    0 => break,
                    n => seen += n,
                }
            }
            std::io::Result::Ok(())
        };
        let _ = tokio::time::timeout(DRAIN_TIME, answered).await;
    });
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
