//! One `Execute` stream as the benchmarks and the density harness drive it (the server's
//! [`ExecuteStream`]): start, read tool calls, answer, finish. Every wait has a deadline, so a
//! stuck server is reported as an error instead of hanging the run.

use std::time::Duration;

use ptc_server::execute::ExecuteStream;
use ptc_server::proto::{self, sandbox_client::SandboxClient, server_message::Message};
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(120);

/// An [`ExecuteStream`] whose every wait has a deadline and whose errors are strings.
pub struct Exec(ExecuteStream, Option<proto::Stats>);

/// A `Start` with the named tools (no schema), the longest deadline (an execution may wait
/// while thousands of others are started) and room for the 100-round workload.
pub fn start(code: &str, tools: &[&str]) -> proto::Start {
    let tools = tools
        .iter()
        .map(|name| proto::Tool {
            name: (*name).into(),
            description: String::new(),
            parameters_json: String::new(),
            ..Default::default()
        })
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
        let opened = tokio::time::timeout(WAIT, ExecuteStream::open(client, start, key))
            .await
            .map_err(|_| "no response to Start")?;
        opened.map(|stream| Exec(stream, None)).map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    }

    async fn next(&mut self) -> Result<Message, String> {
        loop {
            let msg = tokio::time::timeout(WAIT, self.0.message()).await.map_err(|_| "no server message in 120 s")?;
            match msg.map_err(|s| format!("{:?}: {}", s.code(), s.message()))? {
                None => return Err("stream ended".into()),
                Some(Message::Started(_) | Message::Output(_)) => continue,
                Some(m) => return Ok(m),
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
            Message::Completed(done) => {
                self.1 = done.stats;
                Ok(None)
            }
            other => Err(unexpected(other)),
        }
    }

    /// The server's figures for the execution, once [`Exec::next_batch`] saw it complete.
    pub fn stats(&self) -> Option<proto::Stats> {
        self.1
    }

    pub async fn completion(&mut self) -> Result<proto::Completed, String> {
        match self.next().await? {
            Message::Completed(done) => Ok(done),
            other => Err(unexpected(other)),
        }
    }

    pub async fn send_results(&self, results: Vec<proto::ToolResult>) -> Result<(), String> {
        self.0.send_results(results).await.map_err(|s| s.message().to_string())
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
