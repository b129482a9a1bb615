//! A downstream tool's MCP result as the Python value a program receives.
//!
//! `structuredContent` wins; otherwise each content block becomes a value: text that holds a
//! JSON object or array arrives decoded, other text as a string, images, audio and resources
//! as a small dict (`{"type": "image", "mimeType": ..., "data": ...}`). One block is that
//! value, several a list, none `None`. `isError` results become the `ToolError`'s message.

use ptc_engine::ToolDef;
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value, json};

/// A downstream tool as the program's tool: in its server's namespace, with its schemas.
pub fn tool_def(server: &str, tool: &Tool) -> ToolDef {
    let description = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default();
    let def = ToolDef::new(tool.name.to_string())
        .with_namespace(server)
        .with_description(description)
        .with_parameters(Value::Object((*tool.input_schema).clone()));
    match &tool.output_schema {
        Some(schema) => def.with_returns(Value::Object((**schema).clone())),
        None => def,
    }
}

/// `Ok(value)` for the program, or `Err(message)` for its `ToolError`.
pub fn tool_result(result: CallToolResult) -> Result<Value, String> {
    if result.is_error == Some(true) {
        let text: Vec<String> = result
            .content
            .iter()
            .map(|c| match block(serde_json::to_value(c).unwrap_or(Value::Null)) {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
        let message = text.join("\n");
        return Err(if message.trim().is_empty() {
            "the tool reported an error without a message".into()
        } else {
            message
        });
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    let mut values: Vec<Value> =
        result.content.iter().map(|c| block(serde_json::to_value(c).unwrap_or(Value::Null))).collect();
    Ok(match values.len() {
        0 => Value::Null,
        1 => values.pop().unwrap_or_default(),
        _ => Value::Array(values),
    })
}

/// One content block (as its JSON form) to a program's value.
fn block(value: Value) -> Value {
    let Value::Object(mut obj) = value else { return value };
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    match kind.as_str() {
        "text" => {
            let text = match obj.remove("text") {
                Some(Value::String(s)) => s,
                _ => String::new(),
            };
            decoded(text)
        }
        "resource" => {
            let mut out = Map::new();
            out.insert("type".into(), json!("resource"));
            if let Some(Value::Object(resource)) = obj.remove("resource") {
                for key in ["uri", "mimeType", "text", "blob"] {
                    if let Some(v) = resource.get(key) {
                        out.insert(key.into(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        _ => {
            // image, audio, resource_link: their own fields, without annotations or _meta.
            obj.remove("annotations");
            obj.remove("_meta");
            Value::Object(obj)
        }
    }
}

/// Text holding a JSON object or array is decoded; any other text stays a string (so a file
/// whose content is `42` is still the string "42").
fn decoded(text: String) -> Value {
    let t = text.trim_start();
    if (t.starts_with('{') || t.starts_with('['))
        && let Ok(v) = serde_json::from_str::<Value>(&text)
    {
        return v;
    }
    Value::String(text)
}

/// A tool's label as programs call it: `server.tool`, or the bare name outside a namespace.
pub fn label(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}.{name}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ContentBlock, Resource};

    use super::*;

    #[test]
    fn values_a_program_receives() {
        let ok = |content: Vec<ContentBlock>| tool_result(CallToolResult::success(content)).unwrap();
        assert_eq!(ok(vec![ContentBlock::text(r#"{"a": [1, 2]}"#)]), json!({"a": [1, 2]}));
        assert_eq!(ok(vec![ContentBlock::text("[1, 2]")]), json!([1, 2]));
        assert_eq!(ok(vec![ContentBlock::text("42")]), json!("42"), "only objects and arrays are decoded");
        assert_eq!(ok(vec![ContentBlock::text("{not json")]), json!("{not json"));
        assert_eq!(ok(vec![]), Value::Null);
        assert_eq!(ok(vec![ContentBlock::text("a"), ContentBlock::text("b")]), json!(["a", "b"]));
        assert_eq!(
            ok(vec![ContentBlock::image("aGk=", "image/png")]),
            json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})
        );
        let link = ContentBlock::resource_link(Resource::new("file:///x", "x"));
        assert_eq!(ok(vec![link])["uri"], json!("file:///x"));
        let embedded = ContentBlock::embedded_text("file:///notes.txt", "hello");
        assert_eq!(
            ok(vec![embedded]),
            json!({"type": "resource", "uri": "file:///notes.txt", "mimeType": "text/plain", "text": "hello"})
        );
        let mut structured = CallToolResult::success(vec![ContentBlock::text("ignored")]);
        structured.structured_content = Some(json!({"n": 1}));
        assert_eq!(tool_result(structured).unwrap(), json!({"n": 1}));
    }

    #[test]
    fn errors_carry_the_servers_message() {
        let err = tool_result(CallToolResult::error(vec![ContentBlock::text("no such file")])).unwrap_err();
        assert_eq!(err, "no such file");
        let err = tool_result(CallToolResult::error(vec![])).unwrap_err();
        assert!(err.contains("without a message"));
    }
}
