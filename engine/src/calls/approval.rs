//! Tools whose calls wait for a person's approval ([`ToolDef::requires_approval`]), and the
//! ids every call gets.
//!
//! A call of such a tool is handed out held: it reaches the client in `ToolCalls.approvals`,
//! and the exchange refuses a result for it until [`crate::run::execution::Control::decide`] has answered it.
//! Approved, it goes out again as an ordinary call (with the input the person approved,
//! checked against the tool's schema again); denied, the program gets a `ToolError` saying
//! so. The program's other calls of the same round go on meanwhile. Decisions are journaled,
//! so that a replay elsewhere asks nobody twice; a hibernated execution keeps its held calls.
//!
//! **Ids.** The guest numbers its calls (`call_1`, `call_2`, ... in the order the program makes
//! them); the host adds 16 hex characters of the execution's own (`call_3_9f86d081884c7d65`): the
//! start of its id, or for a journaled execution a digest of its journal's seed, which a replay
//! shares; a hibernated execution's image keeps them. So an id is unique across executions and
//! the same for the same call of the same execution wherever it runs or is run again: a client
//! can tell a call it has already run. The order is the program's: `asyncio.gather(a(), b())`
//! makes `a`'s call first.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::api::request::ToolDef;

/// The argument every tool that needs approval takes: why the program makes the call, shown
/// to the person asked. It never reaches the tool.
pub(crate) const REASON: &str = "_reason";

/// Characters of the execution's id a call's id carries (64 bits).
const KEY_CHARS: usize = 16;

/// Characters of a reason kept, the mark that says it was cut included: a program cannot make
/// the person read a book.
const MAX_REASON_CHARS: usize = 1000;

/// The suffix an execution's calls' ids get: `_` and the start of its id.
pub(crate) fn id_suffix(execution_id: &str) -> String {
    format!("_{}", &execution_id[..execution_id.len().min(KEY_CHARS)])
}

/// The suffix a journaled execution's calls' ids get, the same in every replay of it: a digest
/// of its journal's seed (never the seed itself, which its random numbers come from).
pub(crate) fn journal_suffix(seed: &[u8; 32]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new().chain_update(b"ptc-engine call ids").chain_update(seed).finalize();
    format!("_{}", &hex::encode(digest)[..KEY_CHARS])
}

/// The tools of a request that need approval, by (namespace or "", name).
#[derive(Debug, Default, Clone)]
pub(crate) struct NeedApproval(HashSet<(String, String)>);

impl NeedApproval {
    pub(crate) fn of(tools: &[ToolDef]) -> Self {
        NeedApproval(
            tools
                .iter()
                .filter(|t| t.requires_approval)
                .map(|t| (t.namespace.clone().unwrap_or_default(), t.name.clone()))
                .collect(),
        )
    }

    pub(crate) fn contains(&self, namespace: &str, name: &str) -> bool {
        !self.0.is_empty() && self.0.contains(&(namespace.to_string(), name.to_string()))
    }
}

/// The description the program (and a model reading the stub) sees.
pub(crate) fn guest_description(tool: &ToolDef) -> String {
    if !tool.requires_approval {
        return tool.description.clone();
    }
    let note = "Each call waits for the user's approval (they may deny it or change its arguments): \
                pass _reason=\"...\" to tell them why.";
    match tool.description.trim() {
        "" => note.to_string(),
        text => format!("{text}\n\n{note}"),
    }
}

/// The input schema the program sees: the tool's, with [`REASON`] among its properties when
/// the tool needs approval (so that the stub takes it, and a model reading it sees it).
pub(crate) fn guest_parameters(tool: &ToolDef) -> Option<std::sync::Arc<Value>> {
    let schema = tool.parameters.as_ref()?;
    if !tool.requires_approval {
        return Some(schema.clone());
    }
    let Value::Object(object) = &**schema else { return Some(schema.clone()) };
    let mut object = object.clone();
    let properties = object.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(properties) = properties
        && !properties.contains_key(REASON)
    {
        properties.insert(
            REASON.into(),
            serde_json::json!({"type": "string", "description": "Why you make this call, for the user who approves it."}),
        );
    }
    Some(std::sync::Arc::new(Value::Object(object)))
}

/// Takes [`REASON`] out of a held call's input (JSON text of an object): the input the tool
/// gets, and the reason, if the program gave one as a string.
pub(crate) fn take_reason(input: &str) -> (String, Option<String>) {
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(input) else {
        return (input.to_string(), None);
    };
    let Some(reason) = object.remove(REASON) else { return (input.to_string(), None) };
    let reason = match reason {
        Value::String(text) => text,
        other => other.to_string(),
    };
    let reason = match reason.chars().count() > MAX_REASON_CHARS {
        // The `…` is one of the 1,000 (it once came on top of them: 1,001).
        true => format!("{}…", reason.chars().take(MAX_REASON_CHARS - 1).collect::<String>()),
        false => reason,
    };
    (Value::Object(object).to_string(), Some(reason).filter(|r| !r.trim().is_empty()))
}

/// What the program's `ToolError` says when a person denied the call.
pub(crate) fn denied(reason: &str) -> String {
    match reason.trim() {
        "" => "denied by the user".to_string(),
        reason => format!("denied by the user: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_taken_out_of_the_input_and_kept_short() {
        let (input, reason) = take_reason(r#"{"id": 3, "_reason": "stale"}"#);
        assert_eq!((input.as_str(), reason.as_deref()), (r#"{"id":3}"#, Some("stale")));
        let (input, reason) = take_reason(r#"{"id": 3}"#);
        assert_eq!((input.as_str(), reason), (r#"{"id": 3}"#, None));
        let long = format!(r#"{{"_reason": "{}"}}"#, "x".repeat(5000));
        let cut = take_reason(&long).1.unwrap();
        assert_eq!(cut.chars().count(), 1000, "the documented bound, the mark included");
        assert!(cut.ends_with("x…"), "{cut}");
        let exact = format!(r#"{{"_reason": "{}"}}"#, "y".repeat(1000));
        assert_eq!(take_reason(&exact).1.unwrap(), "y".repeat(1000), "1,000 characters are kept whole");
        assert_eq!(take_reason(r#"{"_reason": "  "}"#).1, None);
    }

    #[test]
    fn a_tool_that_needs_approval_shows_the_reason_argument() {
        let tool = ToolDef::new("delete")
            .with_parameters(serde_json::json!({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": false}))
            .with_approval();
        let seen = guest_parameters(&tool).unwrap();
        assert!(seen["properties"][REASON].is_object() && seen["properties"]["id"].is_object(), "{seen}");
        assert!(guest_description(&tool).contains("_reason"));
        let plain = ToolDef::new("get").with_parameters(serde_json::json!({"type": "object"}));
        assert_eq!(guest_parameters(&plain), plain.parameters);
        assert_eq!(id_suffix("9f86d081884c7d659a2feaa0c55ad015"), "_9f86d081884c7d65");
    }
}
