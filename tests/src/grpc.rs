//! A real server on 127.0.0.1:0 and a tonic client that drives `Execute` streams.

use std::time::Duration;

use ptc_server::execute::ExecuteStream;
use ptc_server::proto::{self, sandbox_client::SandboxClient, server_message};
use ptc_server::{RunningServer, ServerConfig, core::auth::ApiKeys};
use serde_json::Value;
use tonic::transport::Channel;

pub use server_message::Message as Msg;

/// A server with every port on 127.0.0.1:0, fuel enabled, and the given keys.
pub fn config(keys: &[&str]) -> ServerConfig {
    let mut config = ServerConfig::ephemeral();
    config.api_keys = ApiKeys::parse(&keys.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    config.shutdown_grace = Duration::from_millis(300);
    config.engine.max_concurrent = 200;
    config.files.dir = files_dir();
    config
}

/// A files directory of its own for each server, under `<temp>/ptc-test-files/<pid>/`. The
/// first call removes what test processes that have ended left there: a server's files and
/// hibernated images outlive it, and a CI machine's disk is shared.
fn files_dir() -> std::path::PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let root = std::env::temp_dir().join("ptc-test-files");
    SWEEP.call_once(|| {
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !std::path::Path::new("/proc").join(&pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    root.join(std::process::id().to_string()).join(n.to_string())
}

/// [`config`] with the data runtime enabled, in the settings of `data_engine()` (fuel on), so
/// that every test shares one compiled runtime.
pub fn data_config(keys: &[&str]) -> ServerConfig {
    let mut config = config(keys);
    config.engine.python_data = Some(ptc_engine::python_data_artifacts());
    config.engine.fuel = true;
    config
}

pub async fn serve(config: ServerConfig) -> RunningServer {
    ptc_server::start(config).await.expect("server starts")
}

pub async fn client(server: &RunningServer) -> SandboxClient<Channel> {
    SandboxClient::connect(format!("http://{}", server.grpc_addr)).await.expect("connect")
}

pub fn tool(name: &str, schema: Option<Value>) -> proto::Tool {
    proto::Tool {
        name: name.into(),
        description: format!("The {name} tool."),
        parameters_json: schema.map(|s| s.to_string()).unwrap_or_default(),
        ..Default::default()
    }
}

/// `message` as a call presenting the API key `key`.
pub fn with_key<T>(message: T, key: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-api-key", key.parse().unwrap());
    request
}

pub fn start_message(code: &str, tools: Vec<proto::Tool>) -> proto::Start {
    proto::Start { code: code.into(), tools, ..Default::default() }
}

/// One open `Execute` stream ([`ExecuteStream`]) with test-sized waits: every message must
/// come within 30 s, and a broken stream fails the test.
pub struct Stream(pub ExecuteStream);

impl Stream {
    pub async fn open(
        client: &mut SandboxClient<Channel>,
        start: proto::Start,
        key: Option<&str>,
    ) -> Result<Stream, tonic::Status> {
        ExecuteStream::open(client, start, key).await.map(Stream)
    }

    /// The next message or the status that ended the stream, within 30 s.
    pub async fn message(&mut self) -> Result<Option<Msg>, tonic::Status> {
        tokio::time::timeout(Duration::from_secs(30), self.0.message()).await.expect("a server message within 30 s")
    }

    pub async fn next(&mut self) -> Option<Msg> {
        self.message().await.expect("stream ok")
    }

    /// Skips Started/Output until a message `pick` accepts.
    pub async fn until<T>(&mut self, mut pick: impl FnMut(Msg) -> Option<T>) -> T {
        loop {
            let m = self.next().await.expect("stream ended early");
            if let Some(t) = pick(m) {
                return t;
            }
        }
    }

    pub async fn send_results(&self, results: Vec<proto::ToolResult>) {
        self.0.send_results(results).await.expect("the stream is open");
    }

    pub async fn cancel(&self) {
        self.0.cancel("test").await.expect("the stream is open");
    }

    pub async fn send_decisions(&self, decisions: Vec<proto::Decision>) {
        self.0.send_decisions(decisions).await.expect("the stream is open");
    }

    /// Answers every call with `handler` until the end; returns the final message and the
    /// batches seen.
    pub async fn drive(
        mut self,
        handler: impl Fn(&proto::ToolCall) -> Result<Value, String>,
    ) -> (Msg, Vec<proto::ToolCalls>) {
        let mut rounds = vec![];
        loop {
            match self.next().await.expect("stream ended before the final message") {
                Msg::ToolCalls(batch) => {
                    let results = batch.calls.iter().map(|c| result(&c.id, handler(c))).collect();
                    self.send_results(results).await;
                    rounds.push(batch);
                }
                m @ (Msg::Completed(_) | Msg::Failed(_)) => return (m, rounds),
                _ => {}
            }
        }
    }
}

pub fn result(id: &str, r: Result<Value, String>) -> proto::ToolResult {
    ptc_engine::ToolResult { id: id.into(), outcome: r.map(|v| v.to_string()) }.into()
}

pub fn input(call: &proto::ToolCall) -> Value {
    serde_json::from_str(&call.input_json).unwrap()
}

pub fn completed(m: Msg) -> proto::Completed {
    match m {
        Msg::Completed(c) => c,
        other => panic!("expected Completed, got {other:?}"),
    }
}

pub fn failed(m: Msg) -> proto::Failed {
    match m {
        Msg::Failed(f) => f,
        other => panic!("expected Failed, got {other:?}"),
    }
}

/// GET the metrics page.
pub async fn metrics_text(server: &RunningServer) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(server.metrics_addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body
}

/// Every `live_*` directory under a server's files directory (one per live session, and one
/// per running execution with `return_files`).
pub fn live_dirs(files_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for tenant in std::fs::read_dir(files_dir).into_iter().flatten().flatten() {
        for dir in std::fs::read_dir(tenant.path()).into_iter().flatten().flatten() {
            if dir.file_name().to_string_lossy().starts_with("live_") {
                out.push(dir.path());
            }
        }
    }
    out
}
