//! The `ptc.v1.Sandbox` gRPC service: a thin layer over [`ptc_engine::Engine`].
//!
//! Each `Execute` stream gets a task that pumps engine events out and client messages in.
//! The task owns the execution, so a vanished client (stream error, or the response stream
//! dropped by tonic) drops it, which cancels the program and frees its instance at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::auth::{ApiKeys, presented_key};
use super::sessions::{OpenOptions, SessionError, Sessions};
use super::tenants::{Admission, Refusal, Tenants};
use crate::files::{FileStore, FilesError};
use crate::proto::sandbox_server::SandboxServer;
use crate::proto::{self, client_message, sandbox_server, server_message};
use crate::run_files::RunFiles;
use ptc_engine::{Engine, ErrorKind, Event, ExecutionRequest, Runtime};

#[derive(Clone)]
pub struct SandboxService {
    pub engine: Engine,
    pub keys: Arc<ApiKeys>,
    pub tenants: Arc<Tenants>,
    /// The message size limit, named in the status of a stream that broke it.
    pub max_message_bytes: usize,
    /// Every stream's pump (waited for at shutdown, so final events reach their clients).
    pub tasks: TaskTracker,
    pub sessions: Arc<Sessions>,
    /// The most file bytes one execution's `Completed.files` carries (`Start.return_files`).
    pub max_returned_file_bytes: u64,
}

/// The service with two message limits: session snapshots (`SnapshotSession`'s answer,
/// `OpenSession`'s snapshot) carry up to `--max-snapshot-bytes`, every other call
/// `--grpc-max-message-bytes`. One limit for all would either refuse snapshots between 16 and
/// 64 MiB that the server itself took (tonic: `OUT_OF_RANGE`), or let every tool result grow
/// to the snapshot limit.
#[derive(Clone)]
pub struct Limited {
    small: SandboxServer<SandboxService>,
    large: SandboxServer<SandboxService>,
}

/// The calls that carry a whole session's state.
const SNAPSHOT_CALLS: [&str; 2] = ["/ptc.v1.Sandbox/SnapshotSession", "/ptc.v1.Sandbox/OpenSession"];

impl Limited {
    /// `service` with `max_message_bytes` for its calls and `max_snapshot_message_bytes` (at
    /// least as large) for the snapshot calls.
    pub fn new(service: SandboxService, max_message_bytes: usize, max_snapshot_message_bytes: usize) -> Self {
        let large = max_snapshot_message_bytes.max(max_message_bytes);
        let server = |limit| {
            SandboxServer::new(service.clone()).max_decoding_message_size(limit).max_encoding_message_size(limit)
        };
        Limited { small: server(max_message_bytes), large: server(large) }
    }
}

impl tonic::server::NamedService for Limited {
    const NAME: &'static str = <SandboxServer<SandboxService> as tonic::server::NamedService>::NAME;
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for Limited {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        if SNAPSHOT_CALLS.contains(&request.uri().path()) { self.large.call(request) } else { self.small.call(request) }
    }
}

pub fn status_from(err: ptc_engine::Error) -> Status {
    let message = err.message().to_string();
    match err.kind() {
        ErrorKind::InvalidRequest => Status::invalid_argument(message),
        ErrorKind::Busy => Status::resource_exhausted(message),
        ErrorKind::Unavailable => Status::unavailable(message),
        ErrorKind::InvalidToolResult | ErrorKind::Finished => Status::failed_precondition(message),
        ErrorKind::SessionBusy => Status::aborted(message),
        ErrorKind::Limit => Status::resource_exhausted(message),
        _ => Status::internal(message),
    }
}

pub fn session_status(e: SessionError) -> Status {
    let message = e.message().to_string();
    match e {
        SessionError::NotFound(_) => Status::not_found(message),
        SessionError::Invalid(_) => Status::invalid_argument(message),
        SessionError::Exists(_) => Status::already_exists(message),
        SessionError::TooMany(_) => Status::resource_exhausted(message),
        SessionError::Busy(_) => Status::aborted(message),
        SessionError::Unavailable(_) => Status::unavailable(message),
        SessionError::Internal(_) => Status::internal(message),
    }
}

fn dropped(d: Vec<ptc_engine::Dropped>) -> Vec<proto::DroppedGlobal> {
    d.into_iter().map(|d| proto::DroppedGlobal { name: d.name, reason: d.reason }).collect()
}

fn refusal_status(r: Refusal) -> Status {
    match r {
        Refusal::DuplicateRequest(m) => Status::already_exists(m),
        other => Status::resource_exhausted(other.message().to_string()),
    }
}

impl SandboxService {
    fn tenant<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let md = request.metadata();
        let key = presented_key(
            md.get("x-api-key").and_then(|v| v.to_str().ok()),
            md.get("authorization").and_then(|v| v.to_str().ok()),
        );
        self.keys.tenant(key).map_err(|e| Status::unauthenticated(e.message()))
    }
}

fn error_message(code: &str, message: impl Into<String>) -> proto::ServerMessage {
    proto::ServerMessage {
        message: Some(server_message::Message::Error(proto::Error { code: code.into(), message: message.into() })),
    }
}

#[tonic::async_trait]
impl sandbox_server::Sandbox for SandboxService {
    type ExecuteStream = ReceiverStream<Result<proto::ServerMessage, Status>>;

    async fn execute(
        &self,
        request: Request<Streaming<proto::ClientMessage>>,
    ) -> Result<Response<Self::ExecuteStream>, Status> {
        let tenant = self.tenant(&request)?;
        let mut inbound = request.into_inner();
        let start = match inbound.message().await? {
            Some(proto::ClientMessage { message: Some(client_message::Message::Start(start)) }) => start,
            Some(_) => return Err(Status::invalid_argument("the first message must be Start")),
            None => return Err(Status::invalid_argument("the stream closed before Start")),
        };
        let tools = proto::tool_defs(start.tools).map_err(Status::invalid_argument)?;
        let runtime: Runtime = start.runtime.parse().map_err(status_from)?;
        let limits = start.limits.unwrap_or_default().apply(&self.engine.config().default_limits);
        let admission = self.tenants.admit(&tenant, Some(&start.request_id)).map_err(refusal_status)?;
        let session_id = (!start.session_id.is_empty()).then_some(start.session_id);
        let mut request =
            ExecutionRequest::new(start.code).with_tools(tools).with_limits(limits.clone()).with_tenant(tenant.clone());
        request.runtime = runtime;
        request.session_id = session_id.clone();
        let return_files = start.return_files.then_some(self.max_returned_file_bytes);
        let inputs: Vec<(String, Vec<u8>)> = start.files.into_iter().map(|f| (f.name, f.content)).collect();
        let (execution, files) = match &session_id {
            None if return_files.is_some() || !inputs.is_empty() => {
                let store = self.sessions.file_store().ok_or_else(|| {
                    Status::failed_precondition("this server keeps no files: run without return_files and files")
                })?;
                let run = RunFiles::own(store, &tenant, inputs).await.map_err(|e| session_status(e.into()))?;
                request.data_dir = Some(run.session.path.clone());
                (self.engine.start(request).await.map_err(status_from)?, Some((store.clone(), run)))
            }
            None => (self.engine.start(request).await.map_err(status_from)?, None),
            Some(id) => {
                let live = match self.sessions.get(&tenant, id) {
                    Err(SessionError::NotFound(_)) if start.open_session => {
                        let options =
                            OpenOptions { id: Some(id.clone()), limits: Some(limits), runtime, ..Default::default() };
                        self.sessions.open(&tenant, options).await.map_err(session_status)?.live
                    }
                    other => other.map_err(session_status)?,
                };
                if !inputs.is_empty() {
                    let (Some(store), Some(dir)) = (self.sessions.file_store(), &live.files) else {
                        return Err(Status::failed_precondition("this server keeps no files: run without files"));
                    };
                    RunFiles::put(store, dir, inputs).await.map_err(|e| session_status(e.into()))?;
                }
                let files = self.sessions.resume_files(&live).await.map_err(|e| session_status(e.into()))?;
                let execution =
                    self.engine.execute_in(&live.session, request).await.map_err(|e| session_status(e.into()))?;
                (execution, files)
            }
        };
        admission.attach(execution.control());
        if let Some((store, run)) = &files {
            run.watch(store, execution.control(), &self.tasks);
        }

        let span = tracing::info_span!("grpc_execute", execution = %execution.id(), tenant = %tenant,
            session = session_id.as_deref().unwrap_or(""));
        let (tx, rx) = mpsc::channel(64);
        let started = proto::ServerMessage {
            message: Some(server_message::Message::Started(proto::Started {
                execution_id: execution.id().to_string(),
            })),
        };
        tx.send(Ok(started)).await.map_err(|_| Status::cancelled("client went away"))?;
        let files = files.map(|(store, run)| RunOutput { store, run, return_files });
        self.tasks.spawn(pump(execution, inbound, tx, admission, files, self.max_message_bytes).instrument(span));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn open_session(
        &self,
        request: Request<proto::OpenSessionRequest>,
    ) -> Result<Response<proto::OpenSessionResponse>, Status> {
        let tenant = self.tenant(&request)?;
        let r = request.into_inner();
        let defaults = &self.engine.config().default_limits;
        let idle_timeout =
            r.idle_timeout_ms.map(|ms| Duration::from_millis(ms.into())).unwrap_or(self.sessions.limits().idle_timeout);
        let options = OpenOptions {
            id: (!r.session_id.is_empty()).then_some(r.session_id),
            limits: Some(r.limits.unwrap_or_default().apply(defaults)),
            idle_timeout: Some(idle_timeout),
            snapshot: (!r.snapshot.is_empty()).then_some(r.snapshot),
            runtime: r.runtime.parse().map_err(status_from)?,
        };
        let opened = self.sessions.open(&tenant, options).await.map_err(session_status)?;
        tracing::info!(tenant = %tenant, session = %opened.id, restored = opened.restored.kept.len(),
            files = opened.files.len(), "session opened");
        Ok(Response::new(proto::OpenSessionResponse {
            session_id: opened.id,
            restored: opened.restored.kept,
            dropped: dropped(opened.restored.dropped),
            idle_timeout_ms: idle_timeout.as_millis().try_into().unwrap_or(u32::MAX),
            files: opened.files,
        }))
    }

    async fn close_session(
        &self,
        request: Request<proto::CloseSessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        let tenant = self.tenant(&request)?;
        let closed = self.sessions.close(&tenant, &request.into_inner().session_id);
        Ok(Response::new(proto::CloseSessionResponse { closed }))
    }

    async fn snapshot_session(
        &self,
        request: Request<proto::SnapshotSessionRequest>,
    ) -> Result<Response<proto::SessionSnapshot>, Status> {
        let tenant = self.tenant(&request)?;
        let r = request.into_inner();
        let snapshot = self.sessions.snapshot(&tenant, &r.session_id, r.include_files).await.map_err(session_status)?;
        Ok(Response::new(proto::SessionSnapshot {
            snapshot: snapshot.bytes,
            kept: snapshot.state.kept,
            modules: snapshot.state.modules,
            dropped: dropped(snapshot.state.dropped),
            files: snapshot.files,
        }))
    }

    async fn describe_tools(
        &self,
        request: Request<proto::DescribeToolsRequest>,
    ) -> Result<Response<proto::DescribeToolsResponse>, Status> {
        let tenant = self.tenant(&request)?;
        let tools = proto::tool_defs(request.into_inner().tools).map_err(Status::invalid_argument)?;
        // Rendering runs guest code: admitted like an execution of the tenant's.
        let _admission = self.tenants.admit(&tenant, None).map_err(refusal_status)?;
        let d = self.engine.describe_tools(&tools, Some(&tenant)).await.map_err(status_from)?;
        Ok(Response::new(proto::DescribeToolsResponse {
            tools: d
                .tools
                .into_iter()
                .map(|t| proto::DescribedTool { name: t.name, python_name: t.python_name, signature: t.signature })
                .collect(),
            stub: d.stub,
        }))
    }
}

/// An execution's `/mnt/data`: settled at its end, and with `return_files` (the byte budget)
/// what it created or changed goes back in its final message.
struct RunOutput {
    store: Arc<FileStore>,
    run: Arc<RunFiles>,
    return_files: Option<u64>,
}

async fn pump(
    mut execution: ptc_engine::Execution,
    mut inbound: Streaming<proto::ClientMessage>,
    tx: mpsc::Sender<Result<proto::ServerMessage, Status>>,
    _admission: Admission,
    files: Option<RunOutput>,
    max_message_bytes: usize,
) {
    let mut inbound_open = true;
    loop {
        tokio::select! {
            event = execution.next_event() => {
                let Some(event) = event else { break };
                let last = matches!(event, Event::Completed(_) | Event::Failed(_));
                let message = match &files {
                    Some(files) if last => settled(event, files).await,
                    _ => proto::server_message(event),
                };
                if tx.send(Ok(message)).await.is_err() {
                    tracing::info!("client went away; cancelling");
                    break;
                }
                if last {
                    break;
                }
            }
            message = inbound.message(), if inbound_open => match message {
                Ok(Some(message)) => {
                    if let Some(reply) = handle_client_message(&execution, message)
                        && tx.send(Ok(reply)).await.is_err()
                    {
                        break;
                    }
                }
                // Half-closed: the client has nothing more to say but still listens.
                Ok(None) => inbound_open = false,
                Err(status) => {
                    tracing::info!(%status, "client stream failed; cancelling");
                    // The client may still be listening (a message over the limit, say): it
                    // gets a status that says why, never a silent OK.
                    let _ = tx.send(Err(inbound_status(status, max_message_bytes))).await;
                    break;
                }
            },
            _ = tx.closed() => {
                tracing::info!("client went away; cancelling");
                break;
            }
        }
    }
    // Dropping `execution` cancels it if it is still running.
}

/// The final message of an execution with a `/mnt/data`, once its files are settled: with
/// the files it created or changed if they were asked for, or a `FILE_QUOTA` failure if they
/// left the tenant over its quota (what the run wrote is gone).
async fn settled(event: Event, output: &RunOutput) -> proto::ServerMessage {
    let RunOutput { store, run, return_files } = output;
    let settled = run.settle(store).await;
    if let Err(FilesError::Io(e)) = &settled {
        tracing::warn!("settling a session's files: {e}");
    }
    let mut message = proto::server_message(event);
    let Some(quota) = run.quota_breach(&settled) else {
        if let (Some(max_bytes), Ok(changed)) = (return_files, settled) {
            let files = run.read(store, changed, *max_bytes).await.into_iter().map(proto::file).collect();
            match &mut message.message {
                Some(server_message::Message::Completed(c)) => c.files = files,
                Some(server_message::Message::Failed(f)) => f.files = files,
                _ => {}
            }
        }
        return message;
    };
    let (stdout, stderr, tool_calls, stats) = match message.message.take() {
        Some(server_message::Message::Completed(c)) => (c.stdout, c.stderr, c.tool_calls, c.stats),
        Some(server_message::Message::Failed(f)) => (f.stdout, f.stderr, f.tool_calls, f.stats),
        other => {
            message.message = other;
            return message;
        }
    };
    let stopped = if run.over_quota().is_some() {
        " The program was stopped mid-way for it, so the session has ended: open a new one."
    } else {
        ""
    };
    message.message = Some(server_message::Message::Failed(proto::Failed {
        kind: proto::FailureKind::FileQuota as i32,
        message: format!("{quota}{stopped}"),
        traceback: String::new(),
        exit_code: None,
        stdout,
        stderr,
        tool_calls,
        stats,
        files: Vec::new(),
    }));
    message
}

/// The status a stream ends with when reading the client's next message failed.
fn inbound_status(status: Status, max_message_bytes: usize) -> Status {
    match status.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => Status::resource_exhausted(format!(
            "a client message is larger than this server's limit of {max_message_bytes} bytes ({}); the execution was cancelled. \
             Send smaller tool results (the limit for one result is lower still; see the README)",
            status.message()
        )),
        _ => status,
    }
}

fn handle_client_message(
    execution: &ptc_engine::Execution,
    message: proto::ClientMessage,
) -> Option<proto::ServerMessage> {
    match message.message {
        Some(client_message::Message::ToolResults(results)) => {
            match execution.submit(results.results.into_iter().map(Into::into).collect()) {
                Ok(()) => None,
                Err(e) => Some(error_message(e.kind().as_str(), e.message())),
            }
        }
        Some(client_message::Message::Cancel(cancel)) => {
            tracing::info!(reason = %cancel.reason, "cancelled by the client");
            execution.cancel();
            None
        }
        Some(client_message::Message::Start(_)) => {
            Some(error_message("unexpected_message", "Start may only be the first message of a stream"))
        }
        None => Some(error_message("unexpected_message", "empty client message")),
    }
}
