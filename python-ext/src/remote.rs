//! The Python package's client of a ptc-engine server: the same `ptc.v1.Sandbox` calls the
//! in-process engine answers, made over gRPC (tonic) from a lane of their own, so that a remote
//! `Execute` has the in-process call's face (`Call` in lib.rs: its writer and reader pipes) and
//! its hand-over: a message the Python thread spins or sleeps for is taken without an asyncio
//! future. grpc.aio took ~1 ms of the client's per call on top of the server's (issue 46).
//!
//! One lane (one thread, `lanes.rs`) serves every server this process calls: a client's work
//! is its socket's, and on one thread the channel's connection task and the call's pump never
//! wake another thread.

use std::sync::OnceLock;
use std::time::Duration;

use prost::Message;
use ptc_server::local::{Ends, LocalCall, decode, pipe};
use ptc_server::proto::sandbox_client::SandboxClient;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use crate::lanes::{Lanes, Placed};

/// Snapshots may be as large as the server's `--max-snapshot-bytes` (64 MiB by default).
const MAX_MESSAGE_BYTES: usize = 80 << 20;

/// Keep the connection alive between executions, and notice a dead one.
const KEEPALIVE: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting may take before a call says the server cannot be reached (grpcio's
/// own minimum): without it an address that drops packets waits out TCP's two minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the remote lane spins before it sleeps: not at all. What wakes it is mostly the
/// server's answer on its socket, which spinning only waits for while taking a CPU the server
/// may want: a session's tool round took 0.43-0.76 ms with no spin, 0.89-0.94 ms with the
/// in-process lanes' 200 µs and 0.83-0.89 ms with 1 ms (client and server on one 2-CPU VM,
/// alternating, 2026-11-28).
const SPIN: Duration = Duration::ZERO;

/// The lane every remote call runs on, started at the first client.
fn lanes() -> std::io::Result<&'static Lanes> {
    static LANES: OnceLock<Lanes> = OnceLock::new();
    if let Some(lanes) = LANES.get() {
        return Ok(lanes);
    }
    let lanes = Lanes::start(1, SPIN)?;
    Ok(LANES.get_or_init(|| lanes))
}

/// A server's client: its channel (connected at the first call, and again after a loss) and
/// the API key sent with every call.
pub struct Remote {
    client: SandboxClient<Channel>,
    key: Option<AsciiMetadataValue>,
    lanes: &'static Lanes,
}

/// A client that cannot be made: the URL, the key or the TLS roots are unusable.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("{0:?} is not a server URL (http://host:port or https://host:port): {1}")]
    Url(String, String),
    #[error("the API key holds characters an HTTP header cannot carry")]
    Key,
    #[error("TLS for {0}: {1}")]
    Tls(String, String),
    #[error("the client's thread could not start: {0}")]
    Thread(std::io::Error),
}

impl Remote {
    /// A client of the server at `url` (`http://` or `https://`, whose certificate is checked
    /// against the system's roots, `SSL_CERT_FILE` included), sending `api_key` if given.
    pub fn new(url: &str, api_key: Option<&str>) -> Result<Self, Unusable> {
        let lanes = lanes().map_err(Unusable::Thread)?;
        let key = api_key.map(|k| k.parse::<AsciiMetadataValue>().map_err(|_| Unusable::Key)).transpose()?;
        let unusable = |e: &dyn std::fmt::Display| Unusable::Url(url.to_string(), e.to_string());
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| unusable(&e))?
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        if url.starts_with("https://") {
            let tls = ClientTlsConfig::new().with_native_roots();
            endpoint = endpoint.tls_config(tls).map_err(|e| Unusable::Tls(url.to_string(), e.to_string()))?;
        }
        // The channel's connection task runs on the runtime it is made in: the lane's.
        let lane = lanes.place(None);
        let channel = {
            let _on_lane = lane.handle.enter();
            endpoint.connect_lazy()
        };
        let client = SandboxClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Remote { client, key, lanes })
    }

    /// `message` with the API key, if there is one.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(key) = &self.key {
            request.metadata_mut().insert("x-api-key", key.clone());
        }
        request
    }

    /// The answer of the unary call `method` (`"OpenSession"`, `"CloseSession"`,
    /// `"SnapshotSession"`, `"DescribeTools"`) to `request`, both encoded, from the server.
    pub async fn unary(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, Status> {
        let mut client = self.client.clone();
        Ok(match method {
            "OpenSession" => {
                client.open_session(self.request(decode(request, "request")?)).await?.into_inner().encode_to_vec()
            }
            "CloseSession" => {
                client.close_session(self.request(decode(request, "request")?)).await?.into_inner().encode_to_vec()
            }
            "SnapshotSession" => {
                client.snapshot_session(self.request(decode(request, "request")?)).await?.into_inner().encode_to_vec()
            }
            "DescribeTools" => {
                client.describe_tools(self.request(decode(request, "request")?)).await?.into_inner().encode_to_vec()
            }
            other => return Err(Status::unimplemented(format!("no method {other:?} in ptc.v1.Sandbox"))),
        })
    }

    /// The lane remote calls run on.
    pub fn place(&self) -> Placed {
        self.lanes.place(None)
    }

    /// A new `Execute` call on `lane`: what its writer sends goes to the server as it comes,
    /// what the server sends comes out of its reader; cancelling it drops the stream, which
    /// the server sees as the client's cancellation.
    /// `traceparent` (the caller's span, W3C) goes in the call's metadata.
    pub fn execute(&self, lane: &Placed, traceparent: Option<&str>) -> LocalCall {
        let (call, Ends { inbound, out, cancelled }) = pipe();
        let mut client = self.client.clone();
        let mut request = self.request(ReceiverStream::new(inbound).map_while(Result::ok));
        if let Some(parent) = traceparent.and_then(|t| AsciiMetadataValue::try_from(t).ok()) {
            request.metadata_mut().insert("traceparent", parent);
        }
        lane.handle.spawn(cancelled.run_until_cancelled_owned(async move {
            let mut stream = match client.execute(request).await {
                Ok(response) => response.into_inner(),
                Err(status) => {
                    let _ = out.send(Err(status)).await;
                    return;
                }
            };
            loop {
                let message = match stream.message().await {
                    Ok(Some(message)) => Ok(message),
                    Ok(None) => return,
                    Err(status) => Err(status),
                };
                let ended = message.is_err();
                if out.send(message).await.is_err() || ended {
                    return; // the caller let go, or the call ended with a status
                }
            }
        }));
        call
    }
}
