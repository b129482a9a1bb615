//! A downstream tool call that waits for the user's approval (`config::Approve`), asked
//! through MCP elicitation: a form showing the tool, its arguments and the program's reason,
//! answered approve / deny (with a reason) / approve with changed arguments. Before protocol
//! 2026-07-28 the server asks with an `elicitation/create` request while the program waits;
//! from it on, the execution is parked and the question goes back in an
//! `InputRequiredResult`, as `llm_query`'s sampling does (`sampling.rs`).

use ptc_engine::{ApprovalRequest, Decision, Execution};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema};
use serde_json::{Value, json};

/// The most characters of a call's arguments a form shows (the rest is cut, and says so).
const MAX_SHOWN_CHARS: usize = 4000;

/// What the program is told when its client cannot ask the user.
pub(super) fn cannot_ask(label: &str) -> String {
    format!(
        "{label} needs the user's approval, and this MCP client cannot ask for it (it does not support elicitation), so \
         it was not run: tell the user what you would do with it and let them do it, or leave it out"
    )
}

/// What the model is told when its program's deadline passed while the user was asked to
/// approve a call and did not answer (`message`, the engine's, names the calls).
pub(super) fn unanswered(message: &str) -> String {
    format!(
        "{message}. The user did not answer the request for approval in time: ask them in your reply whether they \
         approve, then run the program again when they are there to answer."
    )
}

/// The tool's label as programs call it (`server.tool`).
pub(super) fn label(request: &ApprovalRequest) -> String {
    super::convert::label(request.call.namespace.as_deref(), &request.call.name)
}

/// The form asking the user about `request`.
pub(super) fn form(request: &ApprovalRequest) -> ElicitRequestParams {
    let mut arguments = serde_json::to_string_pretty(&request.call.input_value()).unwrap_or_default();
    if arguments.chars().count() > MAX_SHOWN_CHARS {
        arguments = format!("{}… (cut short)", arguments.chars().take(MAX_SHOWN_CHARS).collect::<String>());
    }
    let reason = match &request.reason {
        Some(reason) => format!("\nIts reason: {reason}"),
        None => String::new(),
    };
    let message = format!(
        "A program wants to call {} with these arguments:\n{arguments}{reason}\nRun it? You may change the arguments.",
        label(request)
    );
    ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema() }
}

fn schema() -> ElicitationSchema {
    serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Run this call", "description": "Yes to run it, no to refuse it."},
            "arguments": {
                "type": "string",
                "title": "Changed arguments",
                "description": "The arguments to run it with instead, as a JSON object; empty runs it as shown."
            },
            "reason": {"type": "string", "title": "Why not", "description": "If you refuse it: told to the program."}
        },
        "required": ["approve"]
    }))
    .expect("a valid elicitation schema")
}

/// The user's answer (an `ElicitResult`, as JSON) as the decision on call `id`.
pub(super) fn decision(id: String, answer: Option<Value>) -> Decision {
    let Some(result) = answer.and_then(|v| serde_json::from_value::<ElicitResult>(v).ok()) else {
        return Decision::unasked(
            id,
            "the client gave no answer to the request for the user's approval; it was not run",
        );
    };
    let content = result.content.unwrap_or(Value::Null);
    match result.action {
        ElicitationAction::Accept if content["approve"] == Value::Bool(true) => {
            match content["arguments"].as_str().map(str::trim).filter(|a| !a.is_empty()) {
                Some(arguments) => Decision::approve_with(id, arguments),
                None => Decision::approve(id),
            }
        }
        ElicitationAction::Accept => Decision::deny(id, content["reason"].as_str().unwrap_or_default()),
        ElicitationAction::Decline => Decision::deny(id, "they declined"),
        _ => Decision::deny(id, "they cancelled the request"),
    }
}

/// Hands `decision` to the execution; changed arguments that do not fit the tool (or any
/// other refusal) end the call with a `ToolError` saying so, rather than leave it waiting.
pub(super) async fn decide(execution: &Execution, decision: Decision) {
    let id = decision.id.clone();
    if let Err(e) = execution.decide(vec![decision]).await {
        let message = format!("the user's answer could not be applied ({}); the call was not run", e.message());
        let _ = execution.decide(vec![Decision::unasked(id, message)]).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_decisions() {
        let id = || "c1".to_string();
        let accept = |content: Value| Some(json!({"action": "accept", "content": content}));
        assert_eq!(decision(id(), accept(json!({"approve": true}))), Decision::approve("c1"));
        assert_eq!(
            decision(id(), accept(json!({"approve": true, "arguments": " {\"id\": 4} "}))),
            Decision::approve_with("c1", "{\"id\": 4}")
        );
        assert_eq!(decision(id(), accept(json!({"approve": false, "reason": "no"}))), Decision::deny("c1", "no"));
        assert_eq!(decision(id(), Some(json!({"action": "decline"}))), Decision::deny("c1", "they declined"));
        assert!(matches!(decision(id(), None).verdict, ptc_engine::Verdict::Unasked { .. }));
        // The form is one the SDK accepts.
        let call = ptc_engine::ToolCall {
            id: id(),
            name: "rm".into(),
            namespace: Some("fs".into()),
            input: "{}".into(),
            trace: None,
        };
        let ElicitRequestParams::FormElicitationParams { message, .. } =
            form(&ApprovalRequest { call, reason: Some("cleanup".into()) })
        else {
            panic!("a form")
        };
        assert!(message.contains("fs.rm") && message.contains("cleanup"), "{message}");
    }
}
