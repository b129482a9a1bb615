//! The `ptc.v1.Sandbox` service in process: the same calls a gRPC client makes, from a caller
//! in this process (the Python package's in-process engine), as protobuf bytes in and out,
//! with no listener, no socket and no other process. A call runs exactly what it runs over
//! gRPC ([`SandboxService`]), so both ways of reaching the engine have one behaviour.

use std::task::Poll;

use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};

use crate::core::token;
use crate::front::grpc::SandboxService;
use crate::proto;
use crate::proto::sandbox_server::Sandbox;
use crate::{ServerConfig, build_cluster, build_core};

/// The service over a core of its own (a single node, its files under `config.files.dir`).
pub struct Local {
    service: SandboxService,
    engine: ptc_engine::Engine,
}

/// One `Execute` call: client messages in through its [`Writer`]s, server messages out of its
/// [`Reader`]; [`Writer::cancel`] ends it (before its end, that cancels the execution).
pub struct LocalCall {
    pub writer: Writer,
    pub reader: Reader,
}

/// Where a call's client messages go (cheap to clone: answers are written concurrently).
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Result<proto::ClientMessage, Status>>,
    cancel: CancellationToken,
}

/// Where a call's server messages come from.
pub struct Reader {
    rx: mpsc::Receiver<Result<proto::ServerMessage, Status>>,
}

impl Local {
    /// Builds the core (the engine compiled or loaded from its cache) and the service over it.
    pub async fn new(config: ServerConfig) -> anyhow::Result<Self> {
        // Its HTTPS clients build on the process's crypto provider (as `start`'s do).
        ptc_engine::install_crypto_provider();
        let signer = token::Signer::new(config.token_secret.as_deref());
        let cluster = build_cluster(&config, &signer).await?;
        let core = build_core(&config, &signer, &cluster).await?;
        let engine = core.engine.clone();
        let service = SandboxService::new(core, config.grpc_max_message_bytes, config.grpc_max_returned_file_bytes);
        Ok(Local { service, engine })
    }

    /// The engine under the service.
    pub fn engine(&self) -> &ptc_engine::Engine {
        &self.engine
    }

    /// The answer of the unary call `method` (`"OpenSession"`, `"CloseSession"`,
    /// `"SnapshotSession"`, `"DescribeTools"`) to `request`, both encoded.
    pub async fn unary(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, Status> {
        fn decoded<T: Message + Default>(bytes: &[u8]) -> Result<Request<T>, Status> {
            decode(bytes, "request").map(Request::new)
        }
        let service = &self.service;
        Ok(match method {
            "OpenSession" => service.open_session(decoded(request)?).await?.into_inner().encode_to_vec(),
            "CloseSession" => service.close_session(decoded(request)?).await?.into_inner().encode_to_vec(),
            "SnapshotSession" => service.snapshot_session(decoded(request)?).await?.into_inner().encode_to_vec(),
            "DescribeTools" => service.describe_tools(decoded(request)?).await?.into_inner().encode_to_vec(),
            other => return Err(Status::unimplemented(format!("no method {other:?} in ptc.v1.Sandbox"))),
        })
    }

    /// A new `Execute` call: its first message must be the run's `Start`. `traceparent` is
    /// the caller's span (W3C), which the run's spans continue when this engine traces.
    pub fn execute(&self, traceparent: Option<&str>) -> LocalCall {
        let (call, Ends { inbound, out, cancelled }) = pipe();
        let service = self.service.clone();
        let parent = traceparent.and_then(crate::traces::from_traceparent);
        tokio::spawn(cancelled.run_until_cancelled_owned(async move {
            let tenant = match service.tenant(&Request::new(())) {
                Ok(tenant) => tenant,
                Err(status) => {
                    let _ = out.send(Err(status)).await;
                    return;
                }
            };
            match service.execute_stream(tenant, Box::pin(ReceiverStream::new(inbound)), parent).await {
                Ok(mut stream) => {
                    while let Some(message) = stream.next().await {
                        if out.send(message).await.is_err() {
                            break; // the caller let go: dropping the stream cancels the run
                        }
                    }
                }
                Err(status) => {
                    let _ = out.send(Err(status)).await;
                }
            }
        }));
        call
    }
}

/// The other ends of a [`LocalCall`]'s pipes, for whatever answers it (the service here, or
/// a server the Python package's native client reaches).
pub struct Ends {
    /// The client messages its writers send.
    pub inbound: mpsc::Receiver<Result<proto::ClientMessage, Status>>,
    /// Where its reader's server messages come from.
    pub out: mpsc::Sender<Result<proto::ServerMessage, Status>>,
    /// Cancelled by [`Writer::cancel`]: the answering task ends the call then.
    pub cancelled: CancellationToken,
}

/// A call's writer and reader, and their other ends. 64 messages each way: a round's answers
/// and a program's output lines queue without waiting.
pub fn pipe() -> (LocalCall, Ends) {
    let (tx, inbound) = mpsc::channel(64);
    let (out, rx) = mpsc::channel(64);
    let cancel = CancellationToken::new();
    let cancelled = cancel.clone();
    (LocalCall { writer: Writer { tx, cancel }, reader: Reader { rx } }, Ends { inbound, out, cancelled })
}

/// `bytes` decoded as a `T`, or the status that says `what` was malformed.
pub fn decode<T: Message + Default>(bytes: &[u8], what: &str) -> Result<T, Status> {
    T::decode(bytes).map_err(|e| Status::invalid_argument(format!("a malformed {what}: {e}")))
}

impl Writer {
    /// Sends the encoded client message `message`.
    pub async fn write(&self, message: &[u8]) -> Result<(), Status> {
        let message = decode(message, "client message")?;
        self.tx.send(Ok(message)).await.map_err(|_| Status::cancelled("the execution has ended"))
    }

    /// Sends the encoded client message `message` if the call has room for it now: `false`
    /// when it has none (then [`Writer::write`] waits for room). A caller that answers on the
    /// thread it reads on takes no task hop for it.
    pub fn try_write(&self, message: &[u8]) -> Result<bool, Status> {
        match self.tx.try_send(Ok(decode(message, "client message")?)) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Status::cancelled("the execution has ended")),
        }
    }

    /// Ends the call now: its stream is dropped, which cancels a run still going, and the
    /// reader sees its end.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

impl Reader {
    /// The next server message, encoded; `None` once the call has ended.
    pub async fn read(&mut self) -> Option<Result<Vec<u8>, Status>> {
        self.rx.recv().await.map(|m| m.map(|m| m.encode_to_vec()))
    }

    /// [`Reader::read`] without waiting: `Pending` when no message has come yet.
    pub fn try_read(&mut self) -> Poll<Option<Result<Vec<u8>, Status>>> {
        match self.rx.try_recv() {
            Ok(m) => Poll::Ready(Some(m.map(|m| m.encode_to_vec()))),
            Err(mpsc::error::TryRecvError::Empty) => Poll::Pending,
            Err(mpsc::error::TryRecvError::Disconnected) => Poll::Ready(None),
        }
    }
}
