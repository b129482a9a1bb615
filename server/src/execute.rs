//! One `Execute` stream from the client's side: open it with a `Start`, read server messages,
//! send tool results or a cancel. The `run` command, the tests and the benchmarks all drive
//! executions through this one client.

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::proto::{self, client_message, sandbox_client::SandboxClient, server_message::Message};

/// An open `Execute` stream.
pub struct ExecuteStream {
    tx: mpsc::Sender<proto::ClientMessage>,
    rx: Streaming<proto::ServerMessage>,
}

impl ExecuteStream {
    /// Sends `start` (with `x-api-key` when given) and returns once the server accepted the
    /// stream; a refusal (auth, limits, busy) is the error.
    pub async fn open(
        client: &mut SandboxClient<Channel>,
        start: proto::Start,
        api_key: Option<&str>,
    ) -> Result<Self, Status> {
        Self::open_traced(client, start, api_key, None).await
    }

    /// [`ExecuteStream::open`] as a part of the caller's trace: `traceparent` (W3C) goes in
    /// the call's metadata, and the server's spans continue it.
    pub async fn open_traced(
        client: &mut SandboxClient<Channel>,
        start: proto::Start,
        api_key: Option<&str>,
        traceparent: Option<&str>,
    ) -> Result<Self, Status> {
        let (tx, rx) = mpsc::channel(16);
        let start = proto::ClientMessage { message: Some(client_message::Message::Start(start)) };
        tx.send(start).await.map_err(|_| Status::internal("the request stream closed before Start"))?;
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(key) = api_key {
            let key = key.parse().map_err(|_| Status::invalid_argument("the API key is not valid gRPC metadata"))?;
            request.metadata_mut().insert("x-api-key", key);
        }
        if let Some(parent) = traceparent {
            let parent =
                parent.parse().map_err(|_| Status::invalid_argument("the traceparent is not valid gRPC metadata"))?;
            request.metadata_mut().insert("traceparent", parent);
        }
        let rx = client.execute(request).await?.into_inner();
        Ok(ExecuteStream { tx, rx })
    }

    /// The next server message; `None` when the server ended the stream.
    pub async fn message(&mut self) -> Result<Option<Message>, Status> {
        loop {
            match self.rx.message().await? {
                None => return Ok(None),
                Some(proto::ServerMessage { message: Some(m) }) => return Ok(Some(m)),
                Some(_) => continue, // an empty message carries nothing
            }
        }
    }

    /// Answers some or all of the pending calls.
    pub async fn send_results(&self, results: Vec<proto::ToolResult>) -> Result<(), Status> {
        self.send(client_message::Message::ToolResults(proto::ToolResults { results })).await
    }

    /// A person's decisions on calls held for approval (`ToolCalls.approvals`).
    pub async fn send_decisions(&self, decisions: Vec<proto::Decision>) -> Result<(), Status> {
        self.send(client_message::Message::Decisions(proto::Decisions { decisions })).await
    }

    /// Asks the server to cancel the execution (it answers with `Failed`, kind `cancelled`).
    pub async fn cancel(&self, reason: &str) -> Result<(), Status> {
        self.send(client_message::Message::Cancel(proto::Cancel { reason: reason.into() })).await
    }

    async fn send(&self, message: client_message::Message) -> Result<(), Status> {
        self.tx
            .send(proto::ClientMessage { message: Some(message) })
            .await
            .map_err(|_| Status::unavailable("the stream has ended"))
    }
}
