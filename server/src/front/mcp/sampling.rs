//! `llm_query` in a program, answered by the client's model through MCP sampling: a
//! server-to-client request before protocol 2026-07-28; from it on, the execution is parked
//! (an `InputRequiredResult`) until the client retries the call with the answers.

use std::sync::Arc;

use rmcp::model::InputResponses;

use ptc_engine::{ToolDef, ToolResult};
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CreateMessageRequestParams, InputRequests, InputRequiredResult, SamplingMessage};
use serde_json::{Value, json};

use super::program::Program;
use super::results::failed_before_start;
use super::state::McpState;
use crate::core::continuations::registry::Full;
use crate::core::token::random_hex;

pub(super) const LLM_QUERY: &str = "llm_query";

pub(super) const NO_SAMPLING: &str = "llm_query needs an MCP client that supports sampling, and this client does not: \
do that reasoning yourself (print what you need, then answer in your reply)";

pub(super) fn llm_query_def() -> ToolDef {
    ToolDef::new(LLM_QUERY)
        .with_description("Asks the connected client's model: returns its answer to `prompt` as text.")
        .with_parameters(json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string"},
                "system": {"type": "string", "description": "A system prompt."},
                "max_tokens": {"type": "integer", "minimum": 1, "maximum": 16384, "description": "Default 1024."}
            },
            "required": ["prompt"],
            "additionalProperties": false
        }))
}

pub(super) fn sampling_params(input: &Value) -> Result<CreateMessageRequestParams, String> {
    let prompt = input["prompt"].as_str().ok_or("llm_query needs a prompt")?;
    let max_tokens = input["max_tokens"].as_u64().unwrap_or(1024).min(16384) as u32;
    let mut params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text(prompt)], max_tokens);
    if let Some(system) = input["system"].as_str() {
        params = params.with_system_prompt(system);
    }
    Ok(params)
}

/// The program's answer to llm_query call `id` from a `sampling/createMessage` result (whose
/// `content` is one block or a list): its text.
pub(super) fn sampled_answer(id: String, result: Option<Value>) -> ToolResult {
    let content = result.as_ref().map_or(&Value::Null, |r| &r["content"]);
    let blocks = match content {
        Value::Array(items) => items.iter().collect::<Vec<_>>(),
        other => vec![other],
    };
    let text: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    if text.is_empty() {
        ToolResult::error(id, "the client answered llm_query without text")
    } else {
        ToolResult::ok(id, &Value::String(text.join("")))
    }
}

/// The parked program a retried call names by `handle` (another tenant's is as unknown as
/// one that never existed, and stays parked), with the client's sampled answers
/// (`responses`) handed to it.
pub(super) async fn retried(
    state: &McpState,
    handle: &str,
    tenant: &Option<String>,
    mut responses: InputResponses,
) -> Result<Program, McpError> {
    let Some(mut program) = state.parked.take_if(handle, |program| &program.tenant == tenant) else {
        return Err(McpError::invalid_params(
            "this execution is no longer waiting (it ended, timed out, or was already resumed); run the program again",
            None,
        ));
    };
    let answers = program.awaiting.drain(..).map(|id| {
        let answer = responses.remove(&id);
        sampled_answer(id, answer)
    });
    let _ = program.run.execution.submit(answers.collect());
    for id in std::mem::take(&mut program.asked) {
        let answer = responses.remove(&id);
        let decision = super::approvals::decision(id, answer);
        program.progress.decided(&decision);
        super::approvals::decide(&program.run.execution, decision).await;
    }
    Ok(program)
}

/// Keeps the paused execution for the client's retry and asks the client for `asks`.
pub(super) fn park(state: &Arc<McpState>, mut run: Program, asks: InputRequests) -> CallToolResponse {
    let handle = random_hex::<16>();
    let deadline = tokio::time::Instant::from_std(run.started + run.timeout_limit);
    let (mut calls, control) = (std::mem::take(&mut run.calls), run.run.execution.control());
    let ends = run.progress.parked_ends();
    if let Err(full) = state.parked.insert(handle.clone(), run) {
        let (full, run) = match full {
            Full::Tenant(mine, run) => (
                format!(
                    "{mine} executions of this key already wait for their clients to answer llm_query or approve a call \
                     (the limit)"
                ),
                run,
            ),
            Full::Total(all, run) => {
                (format!("{all} executions already wait for their clients to answer llm_query or approve a call"), run)
            }
        };
        run.run.execution.cancel();
        // Its calls in flight end with it.
        drop(calls);
        return failed_before_start(format!(
            "{full}; answer or cancel those first, or try again later (this program was not run to its end)"
        ))
        .into();
    }
    // A client that never comes back: at the deadline the engine has failed the
    // execution; drop it then, with its tenant slot and its calls in flight.
    let (state, key) = (state.clone(), handle.clone());
    tokio::spawn(async move {
        tokio::time::sleep_until(deadline).await;
        state.parked.remove(&key);
    });
    // The program's downstream calls go on meanwhile, and their results reach it as they
    // come: a call waiting for the user holds up only what awaits it.
    tokio::spawn(async move {
        while !calls.is_empty() {
            tokio::select! {
                Some(done) = calls.join_next() => {
                    if let Ok(result) = done {
                        ends.ended(&result);
                        let _ = control.submit(vec![result]);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
    });
    InputRequiredResult::new(Some(asks), Some(handle)).into()
}
