//! A minimal HTTP/1.1 client over a TCP socket (one request per connection), enough to drive
//! the Code API the way LibreChat's client does; and [`call`], which hands one request straight
//! to the server's router (`tower::ServiceExt::oneshot`) for tests that need no socket.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::Request;
use ptc_server::RunningServer;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub text: String,
}

/// What one raw exchange brought back.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    /// The status line and headers, as text.
    pub head: String,
    /// The body (de-chunked).
    pub text: String,
}

/// Sends one request with exactly `headers` (and `Content-Length`, `Connection: close`) and
/// reads the whole answer.
pub async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Raw {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    // A server may answer (413) before reading a large body; ignore a write that fails then.
    let _ = s.write_all(body).await;
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw).await;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, mut text) = raw.split_once("\r\n\r\n").map(|(h, b)| (h.to_string(), b.to_string())).unwrap_or_default();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        text = dechunk(&text);
    }
    Raw { status, head, text }
}

/// POSTs raw bytes as JSON, as LibreChat does, with `headers` besides; the reply body is
/// parsed as JSON when it is JSON.
pub async fn post_raw(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let host = addr.to_string();
    let mut all = vec![("Host", host.as_str()), ("Content-Type", "application/json"), ("User-Agent", "LibreChat/1.0")];
    all.extend_from_slice(headers);
    let Raw { status, text, .. } = request(addr, "POST", path, &all, body).await;
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply { status, body, text }
}

/// POSTs `body` to the HTTP API's router without a socket, with `headers`.
pub async fn call(server: &RunningServer, path: &str, headers: &[(&str, &str)], body: impl Into<Body>) -> Reply {
    let mut request = Request::post(path).header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let router = ptc_server::front::http::router(server.http.clone());
    let response = router.oneshot(request.body(body.into()).unwrap()).await.expect("the router answers");
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("the whole body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Reply { status, body: serde_json::from_str(&text).unwrap_or(Value::Null), text }
}

pub async fn post(addr: SocketAddr, path: &str, key: Option<&str>, body: &Value) -> Reply {
    let headers: Vec<(&str, &str)> = key.map(|k| vec![("X-API-Key", k)]).unwrap_or_default();
    post_raw(addr, path, &headers, body.to_string().as_bytes()).await
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}
