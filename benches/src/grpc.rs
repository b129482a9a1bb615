//! One `Execute` stream as the benchmarks and the density harness drive it: start, read tool
//! calls, answer, finish. Every wait has a deadline, so a stuck server is reported as an
//! error instead of hanging the run.

use std::time::Duration;

use ptc_server::proto::{self, client_message, sandbox_client::SandboxClient, server_message::Message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(120);

pub struct Exec {
    tx: mpsc::Sender<proto::ClientMessage>,
    rx: tonic::Streaming<proto::ServerMessage>,
}

/// A `Start` with the named tools (no schema), the longest deadline (an execution may wait
/// while thousands of others are started) and room for the 100-round workload.
pub fn start(code: &str, tools: &[&str]) -> proto::Start {
    let tools = tools
        .iter()
        .map(|name| proto::Tool { name: (*name).into(), description: String::new(), parameters_json: String::new() })
        .collect();
    let limits = proto::Limits { timeout_ms: Some(300_000), max_round_trips: Some(1000), ..Default::default() };
    proto::Start { code: code.into(), tools, limits: Some(limits), ..Default::default() }
}

pub fn ok(call_id: &str, value: &serde_json::Value) -> proto::ToolResult {
    proto::ToolResult {
        call_id: call_id.into(),
        outcome: Some(proto::tool_result::Outcome::ResultJson(value.to_string())),
    }
}

impl Exec {
    pub async fn open(
        client: &mut SandboxClient<Channel>,
        start: proto::Start,
        key: Option<&str>,
    ) -> Result<Exec, String> {
        let (tx, rx) = mpsc::channel(4);
        tx.send(proto::ClientMessage { message: Some(client_message::Message::Start(start)) })
            .await
            .map_err(|e| e.to_string())?;
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(key) = key {
            request.metadata_mut().insert("x-api-key", key.parse().map_err(|_| "API key is not ASCII".to_string())?);
        }
        let response = tokio::time::timeout(WAIT, client.execute(request)).await.map_err(|_| "no response to Start")?;
        let rx = response.map_err(|s| format!("{:?}: {}", s.code(), s.message()))?.into_inner();
        Ok(Exec { tx, rx })
    }

    async fn next(&mut self) -> Result<Message, String> {
        loop {
            let msg = tokio::time::timeout(WAIT, self.rx.message()).await.map_err(|_| "no server message in 120 s")?;
            match msg.map_err(|s| format!("{:?}: {}", s.code(), s.message()))? {
                None => return Err("stream ended".into()),
                Some(proto::ServerMessage { message: Some(Message::Started(_) | Message::Output(_)) }) => continue,
                Some(proto::ServerMessage { message: Some(m) }) => return Ok(m),
                Some(_) => continue,
            }
        }
    }

    /// The next batch of tool calls; a completion or failure instead is an error.
    pub async fn next_calls(&mut self) -> Result<Vec<proto::ToolCall>, String> {
        match self.next().await? {
            Message::ToolCalls(batch) => Ok(batch.calls),
            other => Err(unexpected(other)),
        }
    }

    /// The next batch of tool calls, or `None` once the program completed.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<proto::ToolCall>>, String> {
        match self.next().await? {
            Message::ToolCalls(batch) => Ok(Some(batch.calls)),
            Message::Completed(_) => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    pub async fn completion(&mut self) -> Result<proto::Completed, String> {
        match self.next().await? {
            Message::Completed(done) => Ok(done),
            other => Err(unexpected(other)),
        }
    }

    pub async fn send_results(&self, results: Vec<proto::ToolResult>) -> Result<(), String> {
        let m = client_message::Message::ToolResults(proto::ToolResults { results });
        self.tx.send(proto::ClientMessage { message: Some(m) }).await.map_err(|_| "stream closed".to_string())
    }
}

fn unexpected(m: Message) -> String {
    match m {
        Message::Failed(f) => format!("failed ({:?}): {}", f.kind(), f.message),
        Message::Error(e) => format!("error {}: {}", e.code, e.message),
        Message::Completed(c) => format!("completed early: {:?}", c.stdout),
        other => format!("unexpected message: {other:?}"),
    }
}
