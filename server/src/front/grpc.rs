//! The `ptc.v1.Sandbox` gRPC service: a thin layer over [`ptc_engine::Engine`].
//!
//! Each `Execute` stream gets a task that pumps engine events out and client messages in.
//! The task owns the execution, so a vanished client (stream error, or the response stream
//! dropped by tonic) drops it, which cancels the program and frees its instance at once.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::core::auth::presented_key;
use crate::core::runs::{DataDir, Ending, Outcome, Read, Run, Start};
use crate::core::sessions::OpenOptions;
use crate::core::{Core, Error, ErrorKind};
use crate::proto::sandbox_server::SandboxServer;
use crate::proto::{self, client_message, sandbox_server, server_message};
use opentelemetry::KeyValue;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span as _, SpanContext};
use ptc_engine::{Event, ExecutionRequest, Runtime};

/// A client's messages on one `Execute` stream: tonic's, or an in-process caller's
/// ([`crate::local`]).
pub type Inbound = Pin<Box<dyn Stream<Item = Result<proto::ClientMessage, Status>> + Send>>;

/// The server's messages on one `Execute` stream.
pub type Outbound = ReceiverStream<Result<proto::ServerMessage, Status>>;

#[derive(Clone)]
pub struct SandboxService {
    core: Core,
    /// The message size limit, named in the status of a stream that broke it.
    max_message_bytes: usize,
    /// The most file bytes one execution's `Completed.files` carries (`Start.return_files`).
    max_returned_file_bytes: u64,
}

impl SandboxService {
    /// The service over `core`; every stream's pump runs on the core's request tasks.
    pub fn new(core: Core, max_message_bytes: usize, max_returned_file_bytes: u64) -> Self {
        SandboxService { core, max_message_bytes, max_returned_file_bytes }
    }

    /// One `Execute` stream of `tenant`'s: its `Start` read from `inbound`, the run started,
    /// and its pump spawned; the server's messages come out of the returned stream.
    /// `parent` is the client's span (W3C trace context in the call's metadata), which the
    /// call's span continues when the server traces.
    pub async fn execute_stream(
        &self,
        tenant: String,
        mut inbound: Inbound,
        parent: Option<SpanContext>,
    ) -> Result<Outbound, Status> {
        let start = match inbound.next().await.transpose()? {
            Some(proto::ClientMessage { message: Some(client_message::Message::Start(start)) }) => start,
            Some(_) => return Err(Status::invalid_argument("the first message must be Start")),
            None => return Err(Status::invalid_argument("the stream closed before Start")),
        };
        let return_files = start.return_files.then_some(self.max_returned_file_bytes);
        let session_id = (!start.session_id.is_empty()).then(|| start.session_id.clone());
        let tracer = self.core.engine.config().tracer.as_ref();
        let rpc = call_span(tracer, "ptc.v1.Sandbox/Execute", parent.as_ref(), Some(&tenant));
        let traced = rpc.as_ref().map(|span| span.span_context().clone());
        let run = match self.start_run(&tenant, start, traced).await {
            Ok(run) => run,
            // Its span ends here, with the code, as a refused unary call's does.
            Err(refused) => return ended(rpc, Err(refused)),
        };
        let span = tracing::info_span!("grpc_execute", execution = %run.execution.id(), tenant = %tenant,
            session = session_id.as_deref().unwrap_or(""));
        let (tx, rx) = mpsc::channel(64);
        let started = proto::ServerMessage {
            message: Some(server_message::Message::Started(proto::Started {
                execution_id: run.execution.id().to_string(),
            })),
        };
        tx.send(Ok(started)).await.map_err(|_| Status::cancelled("client went away"))?;
        let pump = Pump { run, inbound, tx, return_files, max_message_bytes: self.max_message_bytes, _span: rpc };
        self.core.tasks.spawn(pump.run().instrument(span));
        Ok(ReceiverStream::new(rx))
    }
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

/// The status a refused request ends with.
pub fn status(e: Error) -> Status {
    let message = e.message().to_string();
    match e.kind() {
        ErrorKind::Invalid => Status::invalid_argument(message),
        ErrorKind::Precondition => Status::failed_precondition(message),
        ErrorKind::NotFound => Status::not_found(message),
        ErrorKind::Exists => Status::already_exists(message),
        ErrorKind::Busy | ErrorKind::Quota => Status::resource_exhausted(message),
        ErrorKind::SessionBusy => Status::aborted(message),
        ErrorKind::Unavailable => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

fn engine_status(e: ptc_engine::Error) -> Status {
    status(e.into())
}

fn dropped(d: Vec<ptc_engine::Dropped>) -> Vec<proto::DroppedGlobal> {
    d.into_iter().map(|d| proto::DroppedGlobal { name: d.name, reason: d.reason }).collect()
}

impl SandboxService {
    /// Starts `start`'s run: fresh (with a `/mnt/data` of its own when it brings files or
    /// wants them back), or in the live session it names (opened first with `open_session`).
    async fn start_run(&self, tenant: &str, start: proto::Start, parent: Option<SpanContext>) -> Result<Run, Status> {
        let core = &self.core;
        let tools = proto::tool_defs(core.engine.schemas(), tenant, start.tools).map_err(Status::invalid_argument)?;
        let runtime: Runtime = start.runtime.parse().map_err(engine_status)?;
        let session_id = (!start.session_id.is_empty()).then_some(start.session_id);
        let mut request = ExecutionRequest::new(start.code).with_tools(tools).with_runtime(runtime);
        request.session_id = session_id.clone();
        request.trace_parent = parent;
        let prepared = core
            .prepare(Start {
                tenant: Some(tenant),
                request_id: Some(&start.request_id),
                limits: start.limits.unwrap_or_default().apply(&core.engine.config().default_limits),
                timeout_ms: None,
                network_allow: &start.network_allow,
                request,
            })
            .map_err(status)?;
        let limits = prepared.request.limits.clone().expect("prepared with limits");
        let inputs: Vec<(String, Vec<u8>)> = start.files.into_iter().map(|f| (f.name, f.content)).collect();
        let dir = match session_id {
            None if start.return_files || !inputs.is_empty() => DataDir::Own(inputs),
            None => DataDir::None,
            Some(id) => {
                let live = match core.sessions.find(tenant, &id).await {
                    Err(e) if e.kind() == ErrorKind::NotFound && start.open_session => {
                        let options = OpenOptions {
                            id: Some(id),
                            limits: Some(limits),
                            runtime,
                            durable: true,
                            ..Default::default()
                        };
                        core.sessions.open(tenant, options).await.map_err(status)?.live
                    }
                    other => other.map_err(status)?,
                };
                DataDir::Live(live, inputs)
            }
        };
        core.start(prepared, dir, None).await.map_err(status)
    }

    /// Answers the unary call `name` with `answer` (given the caller's tenant and the message),
    /// within the call's span under the client's (W3C trace context in its metadata) when the
    /// server traces, [`ended`] with the call's status. An unknown key is refused here.
    async fn unary<T, R, F>(
        &self,
        name: &'static str,
        request: Request<T>,
        answer: impl FnOnce(String, T) -> F,
    ) -> Result<Response<R>, Status>
    where
        F: Future<Output = Result<R, Status>>,
    {
        let tenant = self.tenant(&request);
        let tracer = self.core.engine.config().tracer.as_ref();
        let span =
            tracer.and_then(|t| call_span(Some(t), name, caller_span(&request).as_ref(), tenant.as_deref().ok()));
        let result = match tenant {
            Ok(tenant) => answer(tenant, request.into_inner()).await.map(Response::new),
            Err(refused) => Err(refused),
        };
        ended(span, result)
    }

    /// The caller of `request`, by the API key it presents (none: the local tenant, when the
    /// server has no keys).
    pub(crate) fn tenant<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let md = request.metadata();
        let key = presented_key(
            md.get("x-api-key").and_then(|v| v.to_str().ok()),
            md.get("authorization").and_then(|v| v.to_str().ok()),
        );
        self.core.keys.tenant(key).map_err(|e| Status::unauthenticated(e.message()))
    }
}

/// A call's span (kind server) named `ptc.v1.Sandbox/{method}`, under the client's `parent`,
/// when the server traces: the conventions' `rpc.*` attributes and the caller's tenant.
fn call_span(
    tracer: Option<&ptc_engine::Tracer>,
    name: &'static str,
    parent: Option<&SpanContext>,
    tenant: Option<&str>,
) -> Option<BoxedSpan> {
    let mut attributes = vec![
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", "ptc.v1.Sandbox"),
        KeyValue::new("rpc.method", name.trim_start_matches("ptc.v1.Sandbox/")),
    ];
    if let Some(tenant) = tenant {
        attributes.push(KeyValue::new("ptc.tenant", tenant.to_string()));
    }
    crate::traces::request_span(tracer, name, parent, attributes)
}

/// The client's span: W3C trace context in a call's metadata.
fn caller_span<T>(request: &Request<T>) -> Option<SpanContext> {
    crate::traces::extract(|name| Some(request.metadata().get(name)?.to_str().ok()?.to_string()))
}

/// Ends a unary call's span with its outcome: an error status names the gRPC code.
fn ended<T>(span: Option<BoxedSpan>, result: Result<T, Status>) -> Result<T, Status> {
    if let Some(mut span) = span {
        if let Err(refused) = &result {
            span.set_attribute(KeyValue::new("rpc.grpc.status_code", refused.code() as i64));
            span.set_status(opentelemetry::trace::Status::error(refused.code().description()));
        }
        span.end();
    }
    result
}

fn error_message(code: &str, message: impl Into<String>) -> proto::ServerMessage {
    proto::ServerMessage {
        message: Some(server_message::Message::Error(proto::Error { code: code.into(), message: message.into() })),
    }
}

#[tonic::async_trait]
impl sandbox_server::Sandbox for SandboxService {
    type ExecuteStream = Outbound;

    async fn execute(
        &self,
        request: Request<Streaming<proto::ClientMessage>>,
    ) -> Result<Response<Self::ExecuteStream>, Status> {
        let tenant = match self.tenant(&request) {
            Ok(tenant) => tenant,
            Err(refused) => {
                // Ended while the client is still sending its Start, the call reaches a grpcio
                // client as "Internal error from Core", not as this status (3 attempts in a
                // row once, under a full test run on 2 cores): the Start is taken first.
                let mut inbound = request.into_inner();
                let _ = tokio::time::timeout(Duration::from_secs(1), inbound.message()).await;
                return Err(refused);
            }
        };
        let parent = caller_span(&request);
        Ok(Response::new(self.execute_stream(tenant, Box::pin(request.into_inner()), parent).await?))
    }
    async fn open_session(
        &self,
        request: Request<proto::OpenSessionRequest>,
    ) -> Result<Response<proto::OpenSessionResponse>, Status> {
        self.unary("ptc.v1.Sandbox/OpenSession", request, |tenant, r| async move {
            let defaults = &self.core.engine.config().default_limits;
            let idle_timeout = r
                .idle_timeout_ms
                .map(|ms| Duration::from_millis(ms.into()))
                .unwrap_or(self.core.sessions.limits().idle_timeout);
            let options = OpenOptions {
                id: (!r.session_id.is_empty()).then_some(r.session_id),
                limits: Some(r.limits.unwrap_or_default().apply(defaults)),
                idle_timeout: Some(idle_timeout),
                snapshot: (!r.snapshot.is_empty()).then_some(r.snapshot),
                runtime: r.runtime.parse().map_err(engine_status)?,
                durable: true,
            };
            let opened = self.core.sessions.open(&tenant, options).await.map_err(status)?;
            tracing::info!(tenant = %tenant, session = %opened.id, restored = opened.restored.kept.len(),
                files = opened.files.len(), "session opened");
            Ok(proto::OpenSessionResponse {
                session_id: opened.id,
                restored: opened.restored.kept,
                dropped: dropped(opened.restored.dropped),
                idle_timeout_ms: idle_timeout.as_millis().try_into().unwrap_or(u32::MAX),
                files: opened.files,
            })
        })
        .await
    }

    async fn close_session(
        &self,
        request: Request<proto::CloseSessionRequest>,
    ) -> Result<Response<proto::CloseSessionResponse>, Status> {
        self.unary("ptc.v1.Sandbox/CloseSession", request, |tenant, r| async move {
            Ok(proto::CloseSessionResponse { closed: self.core.sessions.close(&tenant, &r.session_id) })
        })
        .await
    }

    async fn snapshot_session(
        &self,
        request: Request<proto::SnapshotSessionRequest>,
    ) -> Result<Response<proto::SessionSnapshot>, Status> {
        self.unary("ptc.v1.Sandbox/SnapshotSession", request, |tenant, r| async move {
            let snapshot =
                self.core.sessions.snapshot(&tenant, &r.session_id, r.include_files).await.map_err(status)?;
            Ok(proto::SessionSnapshot {
                snapshot: snapshot.bytes,
                kept: snapshot.state.kept,
                modules: snapshot.state.modules,
                dropped: dropped(snapshot.state.dropped),
                files: snapshot.files,
            })
        })
        .await
    }

    async fn describe_tools(
        &self,
        request: Request<proto::DescribeToolsRequest>,
    ) -> Result<Response<proto::DescribeToolsResponse>, Status> {
        self.unary("ptc.v1.Sandbox/DescribeTools", request, |tenant, r| async move {
            let tools =
                proto::tool_defs(self.core.engine.schemas(), &tenant, r.tools).map_err(Status::invalid_argument)?;
            // Rendering runs guest code: admitted like an execution of the tenant's.
            let _admission = self
                .core
                .tenants
                .admit(&tenant, None, self.core.engine.paused_executions_of(&tenant))
                .map_err(|r| status(r.into()))?;
            let runtime: Runtime = r.runtime.parse().map_err(engine_status)?;
            let d = self.core.engine.describe_tools_in(runtime, &tools, Some(&tenant)).await.map_err(engine_status)?;
            Ok(proto::DescribeToolsResponse {
                tools: d
                    .tools
                    .into_iter()
                    .map(|t| proto::DescribedTool { name: t.name, python_name: t.python_name, signature: t.signature })
                    .collect(),
                stub: d.stub,
            })
        })
        .await
    }
}

/// One `Execute` stream's pump: engine events out, client messages in, until the run ends.
/// It owns the run, so a vanished client drops it, which cancels the program.
struct Pump {
    run: Run,
    inbound: Inbound,
    tx: mpsc::Sender<Result<proto::ServerMessage, Status>>,
    /// `Start.return_files`: the byte budget of the files the final message carries.
    return_files: Option<u64>,
    max_message_bytes: usize,
    /// The call's span, ended with the stream.
    _span: Option<BoxedSpan>,
}

impl Pump {
    async fn run(mut self) {
        let mut inbound_open = true;
        loop {
            tokio::select! {
                event = self.run.execution.next_event() => {
                    let Some(event) = event else { break };
                    let message = match event {
                        Event::Completed(c) => final_message(&self.run, self.return_files, Ok(c)).await,
                        Event::Failed(f) => final_message(&self.run, self.return_files, Err(f)).await,
                        other => proto::server_message(other),
                    };
                    let last = matches!(message.message,
                        Some(server_message::Message::Completed(_) | server_message::Message::Failed(_)));
                    if self.tx.send(Ok(message)).await.is_err() {
                        tracing::info!("client went away; cancelling");
                        break;
                    }
                    if last {
                        break;
                    }
                }
                message = self.inbound.next(), if inbound_open => match message.transpose() {
                    Ok(Some(message)) => {
                        if let Some(reply) = handle_client_message(&self.run.execution, message).await
                            && self.tx.send(Ok(reply)).await.is_err()
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
                        let _ = self.tx.send(Err(inbound_status(status, self.max_message_bytes))).await;
                        break;
                    }
                },
                _ = self.tx.closed() => {
                    tracing::info!("client went away; cancelling");
                    break;
                }
            }
        }
        // Dropping the run cancels it if it is still running.
    }
}

/// The final message of `run`, once its files are settled: with the files it created or
/// changed if they were asked for (`return_files`: their byte budget), or a `FILE_QUOTA`
/// failure if they left the tenant over its quota (what the run wrote is gone).
async fn final_message(
    run: &Run,
    return_files: Option<u64>,
    end: Result<ptc_engine::Completion, ptc_engine::Failure>,
) -> proto::ServerMessage {
    let read = return_files.map(|max_bytes| Read { max_bytes, wanted: |_| true });
    let Ending { outcome, contents, .. } = run.end(end, read).await;
    let files: Vec<proto::File> = contents.into_iter().map(proto::file).collect();
    let message = match outcome {
        Outcome::Completed(c) => server_message::Message::Completed(proto::Completed { files, ..c.into() }),
        Outcome::Failed(f) => server_message::Message::Failed(proto::Failed { files, ..f.into() }),
        Outcome::OverQuota { message, end } => {
            let failed: proto::Failed = match end {
                Ok(c) => proto::Completed::from(c).into(),
                Err(f) => f.into(),
            };
            server_message::Message::Failed(proto::Failed {
                kind: proto::FailureKind::FileQuota as i32,
                message,
                traceback: String::new(),
                exit_code: None,
                files: Vec::new(),
                ..failed
            })
        }
    };
    proto::ServerMessage { message: Some(message) }
}

/// The status a stream ends with when reading the client's next message failed.
fn inbound_status(status: Status, max_message_bytes: usize) -> Status {
    match status.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => Status::resource_exhausted(format!(
            "a client message is larger than this server's limit of {max_message_bytes} bytes ({}); the execution was cancelled. \
             Send smaller tool results (the limit for one result is lower still; see docs/limits.md)",
            status.message()
        )),
        _ => status,
    }
}

async fn handle_client_message(
    execution: &ptc_engine::Execution,
    message: proto::ClientMessage,
) -> Option<proto::ServerMessage> {
    match message.message {
        Some(client_message::Message::Decisions(decisions)) => {
            let decisions: Result<Vec<_>, String> = decisions.decisions.into_iter().map(proto::decision).collect();
            let decided = match decisions {
                Ok(decisions) => decide(execution, decisions).await,
                Err(why) => return Some(error_message("invalid_decision", why)),
            };
            decided.err().map(|e| error_message(e.kind().as_str(), e.message()))
        }
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

/// A person's decisions, their changed arguments checked one decision at a time: arguments that
/// do not fit the tool's schema (or are not an object) end that call with the program's
/// `ToolError` saying why, as over MCP (`front/mcp/approvals.rs`), and the run goes on; the
/// Python client ends a run at any `Error` message, so a refused edit from its `on_approval`
/// used to end the whole run. Anything else (an id not held, decided twice, the execution
/// over) still refuses the whole batch in an `Error` message, and nothing changes.
async fn decide(execution: &ptc_engine::Execution, decisions: Vec<ptc_engine::Decision>) -> ptc_engine::Result<()> {
    let control = execution.control();
    let mut checked = Vec::with_capacity(decisions.len());
    for decision in decisions {
        let id = decision.id.clone();
        match control.check_decisions(vec![decision]).await {
            Ok(mut one) => checked.append(&mut one),
            Err(e) if e.kind() == ptc_engine::ErrorKind::InvalidToolResult => {
                let message = format!("the user's answer could not be applied ({}); the call was not run", e.message());
                checked.push(ptc_engine::Decision::unasked(id, message));
            }
            Err(e) => return Err(e),
        }
    }
    control.apply_decisions(&checked)
}
