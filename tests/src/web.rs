//! Loopback web servers for the network tests: one over HTTP and one over HTTPS, with a
//! certificate for `localhost` (and 127.0.0.1) signed by a test CA made at start, whose PEM the
//! server under test is told to trust. Both serve the same routes and record every request
//! they get, so a test can check what reached them (a secret's value, or nothing at all).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// A request one of the servers got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub struct Web {
    pub http: SocketAddr,
    pub https: SocketAddr,
    /// The test CA's certificate (PEM) in a file, for the policy's `ca_files`.
    pub ca_file: PathBuf,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Web {
    /// Both servers, on ports of 127.0.0.1 the system picks.
    /// A network policy over these servers: `localhost` and 127.0.0.1 (listed as an address
    /// the operator allows, since loopback is refused otherwise), both schemes, their ports,
    /// GET, HEAD and POST, and their CA.
    pub fn policy(&self) -> ptc_engine::NetworkPolicy {
        let mut p = ptc_engine::NetworkPolicy::default();
        p.allow = vec!["localhost".into(), "127.0.0.1".into()];
        p.schemes = vec!["http".into(), "https".into()];
        p.ports = vec![self.http.port(), self.https.port()];
        p.methods = vec!["GET".into(), "HEAD".into(), "POST".into()];
        p.allow_addresses = vec!["127.0.0.1/32".into()];
        p.ca_files = vec![self.ca_file.clone()];
        p
    }

    pub async fn start() -> Web {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = {
            let seen = seen.clone();
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move { route(seen, method, uri, headers, body).await }
            })
        };
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_addr = http.local_addr().unwrap();
        let plain = app.clone();
        tokio::spawn(async move { axum::serve(http, plain).await });

        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "ptc-engine test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut leaf_params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        leaf_params.subject_alt_names.push(rcgen::SanType::IpAddress([127, 0, 0, 1].into()));
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let ca_file = std::env::temp_dir().join(format!("ptc-test-ca-{}-{}.pem", std::process::id(), http_addr.port()));
        std::fs::write(&ca_file, ca.pem()).unwrap();

        let tls = rustls_config(leaf.der().to_vec(), leaf_key.serialize_der());
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let https = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https_addr = https.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = https.accept().await else { return };
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        Web { http: http_addr, https: https_addr, ca_file, seen }
    }

    /// The requests the servers got so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http.port())
    }

    pub fn https_url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.https.port())
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca_file);
    }
}

fn rustls_config(cert: Vec<u8>, key: Vec<u8>) -> tokio_rustls::rustls::ServerConfig {
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![CertificateDer::from(cert)], PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)))
        .unwrap()
}

/// The routes both servers answer:
/// - `/hello`: `hello`;
/// - `/echo`: what the request carried, as JSON (`method`, `headers`, `body`);
/// - `/redirect?to=URL`: 302 to `URL`;
/// - `/slow`: an answer after 10 s; `/sleep?ms=N`: after `N` ms;
/// - `/big?n=N`: `N` bytes;
/// - `/data.csv`: a small CSV;
/// - `/reflect?as=FORM`: the request's `Authorization` header given back in a transform a
///   reflector might use ([`reflect`]).
async fn route(seen: Arc<Mutex<Vec<Seen>>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let header_list: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri.to_string(),
        headers: header_list.clone(),
        body: body.to_vec(),
    });
    let query = |name: &str| {
        uri.query().unwrap_or("").split('&').find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_string))
    };
    match uri.path() {
        "/hello" => "hello".into_response(),
        "/echo" => {
            let body = String::from_utf8_lossy(&body).into_owned();
            let headers: serde_json::Map<String, serde_json::Value> =
                header_list.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
            axum::Json(serde_json::json!({"method": method.as_str(), "headers": headers, "body": body})).into_response()
        }
        "/redirect" => {
            let to = query("to").unwrap_or_default();
            let to = to.replace("%3A", ":").replace("%2F", "/");
            Response::builder().status(StatusCode::FOUND).header("location", to).body(Body::empty()).unwrap()
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "late".into_response()
        }
        "/sleep" => {
            let ms: u64 = query("ms").and_then(|n| n.parse().ok()).unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            "slept".into_response()
        }
        "/big" => {
            let n: usize = query("n").and_then(|n| n.parse().ok()).unwrap_or(1 << 20);
            vec![b'x'; n].into_response()
        }
        "/data.csv" => ([("content-type", "text/csv")], "city,temp\nOslo,4\nCairo,31\n").into_response(),
        "/reflect" => {
            let token = headers.get("authorization").map(|v| v.as_bytes().to_vec()).unwrap_or_default();
            reflect(&query("as").unwrap_or_default(), &token)
        }
        _ => (StatusCode::NOT_FOUND, "no such page").into_response(),
    }
}

/// The forms [`reflect`] knows: each gives the request's `Authorization` header back the way
/// some host that reflects requests might.
pub const REFLECTIONS: &[&str] = &[
    "plain",
    "upper",
    "reversed",
    "hex",
    "HEX",
    "base64",
    "base64url",
    "percent",
    "json",
    "html",
    "mixed",
    "gzip",
    "deflate",
    "zstd",
    "gzip-base64",
    "header-name",
    "header-value-base64",
    "hex-escaped",
];

/// `token` given back as `form` (one of [`REFLECTIONS`], or `br`: bytes claimed to be brotli).
pub fn reflect(form: &str, token: &[u8]) -> Response {
    use std::io::Write;

    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let gzip = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let text = String::from_utf8_lossy(token).into_owned();
    let body = |b: Vec<u8>| b.into_response();
    let encoded = |encoding: &str, b: Vec<u8>| ([("content-encoding", encoding.to_string())], b).into_response();
    match form {
        "plain" => body(token.to_vec()),
        "upper" => body(text.to_uppercase().into_bytes()),
        "reversed" => body(token.iter().rev().copied().collect()),
        "hex" => body(token.iter().map(|b| format!("{b:02x}")).collect::<String>().into_bytes()),
        "HEX" => body(token.iter().map(|b| format!("{b:02X}")).collect::<String>().into_bytes()),
        "base64" => body(b64(token).into_bytes()),
        "base64url" => body(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token).into_bytes()),
        "percent" => body(token.iter().map(|b| format!("%{b:02X}")).collect::<String>().into_bytes()),
        "json" => {
            let escaped: String = text.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
            body(format!("{{\"you_sent\": \"{escaped}\"}}").into_bytes())
        }
        "html" => body(text.chars().map(|c| format!("&#{};", c as u32)).collect::<String>().into_bytes()),
        "mixed" => body(
            text.chars()
                .enumerate()
                .map(|(i, c)| match i % 3 {
                    0 => format!("%{:02x}", c as u32),
                    1 => format!("\\u{:04X}", c as u32),
                    _ => c.to_string(),
                })
                .collect::<String>()
                .into_bytes(),
        ),
        "hex-escaped" => body(
            token
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .chars()
                .map(|c| format!("%{:02X}", c as u32))
                .collect::<String>()
                .into_bytes(),
        ),
        "gzip" => encoded("gzip", gzip(token)),
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(token).unwrap();
            encoded("deflate", e.finish().unwrap())
        }
        "zstd" => encoded("zstd", zstd::encode_all(token, 3).unwrap()),
        "br" => encoded("br", token.to_vec()),
        "gzip-base64" => encoded("gzip", gzip(b64(token).as_bytes())),
        "header-name" => {
            let name = format!("x-leak-{}", text.trim_start_matches("Bearer ").to_ascii_lowercase());
            Response::builder().header(name.as_str(), "1").body(Body::from("see the headers")).unwrap()
        }
        "header-value-base64" => {
            Response::builder().header("x-echo", b64(token)).body(Body::from("see the headers")).unwrap()
        }
        other => (StatusCode::BAD_REQUEST, format!("no form {other:?}")).into_response(),
    }
}
