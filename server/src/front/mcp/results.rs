//! A program's end as `execute_code`'s result: the text a model reads (output, return value,
//! the error and what to do), the structured result, the files it wrote and the images among
//! them, and the result's schema.

use std::sync::Arc;
use std::time::Duration;

use ptc_engine::{FailureKind, ToolCallRecord};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{Value, json};

use crate::core::advice::{self, Advice};
use crate::core::files::FileRef;
use crate::core::runs::{Ending, Outcome, Read};

/// How many calls the `tool_calls` of a result lists (a program may make thousands; the
/// model needs a sample and the count, not all of them), and how much of each one's input.
const LISTED_CALLS: usize = 20;

const LISTED_INPUT_CHARS: usize = 200;

/// Which files a result reads: the images among those written, to show the model.
pub(super) const IMAGES: Read = Read { max_bytes: MAX_IMAGE_BYTES, wanted: looks_like_image };

/// The program's end as the tool's result: its output, return value or error, and the files
/// it wrote (with the images among them); if it left the tenant over its file quota, an error
/// of kind `file_quota` in the core's words. `unanswered`: a request for the user's approval
/// was still open when it ended.
pub(super) fn ended_result(
    ending: Ending,
    elapsed: Duration,
    timeout_limit: Duration,
    unanswered: bool,
) -> CallToolResult {
    let Ending { outcome, files, contents } = ending;
    let (message, end) = match outcome {
        Outcome::Completed(c) => (None, Ok(c)),
        Outcome::Failed(f) => (None, Err(f)),
        Outcome::OverQuota { message, end } => (Some(message), end),
    };
    let Some(message) = message else {
        let mut result = finished_result(end, Timing(elapsed, timeout_limit), unanswered);
        if let Ok(changed) = files {
            add_files(&mut result, &changed, contents);
        }
        return result;
    };
    let (stdout, stderr, calls) = match &end {
        Ok(c) => (&c.stdout, &c.stderr, &c.tool_calls),
        Err(f) => (&f.stdout, &f.stderr, &f.tool_calls),
    };
    let error = json!({"kind": "file_quota", "message": message});
    let structured = report(Timing(elapsed, timeout_limit), stdout, stderr, calls, Err(error));
    let mut text = printed(stdout, stderr);
    text.push_str(&format!("{}[error] {message}", newline_if_needed(&text)));
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// The most image bytes one result carries (base64 makes them a third larger on the wire).
const MAX_IMAGE_BYTES: u64 = 2 * 1024 * 1024;

/// Whether a file's name says image: only those are read to be shown.
fn looks_like_image(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".gif", ".webp"].iter().any(|ext| lower.ends_with(ext))
}

/// The image type of a file the program wrote, by its first bytes (never by its name alone).
fn image_type(bytes: &[u8]) -> Option<&'static str> {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => Some("image/png"),
        [0xff, 0xd8, 0xff, ..] => Some("image/jpeg"),
        [b'G', b'I', b'F', b'8', ..] => Some("image/gif"),
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => Some("image/webp"),
        _ => None,
    }
}

/// Names the files a program created or changed in /mnt/data after its output, and adds the
/// images among them (`images`, read within [`MAX_IMAGE_BYTES`]) as images the client can
/// show its model.
fn add_files(result: &mut CallToolResult, changed: &[FileRef], images: Vec<(FileRef, Option<Vec<u8>>)>) {
    if changed.is_empty() {
        return;
    }
    let mut shown = Vec::new();
    let mut too_large = Vec::new();
    for (file, bytes) in images {
        match bytes.as_deref().map(|b| (b, image_type(b))) {
            Some((bytes, Some(mime))) => {
                use base64::Engine as _;
                shown.push(ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(bytes), mime));
            }
            Some((_, None)) => {} // named like an image, but is not one
            None => too_large.push(file.name),
        }
    }
    let listed: Vec<String> = changed.iter().map(|f| format!("/mnt/data/{} ({} bytes)", f.name, f.size)).collect();
    let mut line = format!("[files written] {}", listed.join(", "));
    if !too_large.is_empty() {
        line.push_str(&format!(
            "\n[not shown] {}: the images of one result are limited to {MAX_IMAGE_BYTES} bytes; save smaller ones \
             (a lower dpi or figsize)",
            too_large.join(", ")
        ));
    }
    append_line(result, &line);
    result.content.extend(shown);
}

/// `line` after the result's text, on a line of its own.
fn append_line(result: &mut CallToolResult, line: &str) {
    if let Some(first) = result.content.first_mut()
        && let Some(text) = first.as_text()
    {
        *first = ContentBlock::text(format!("{}{}{line}", text.text, newline_if_needed(&text.text)));
    }
}

/// `notice` before the result's text.
pub(super) fn prefix_text(result: &mut CallToolResult, notice: &str) {
    if let Some(first) = result.content.first_mut()
        && let Some(text) = first.as_text()
    {
        *first = ContentBlock::text(format!("{notice}\n{}", text.text));
    }
}

/// The session a program ran in, as the result's last line and its `session` field.
pub(super) fn add_session(result: &mut CallToolResult, id: &str) {
    append_line(result, &format!("[session] {id} (pass session={id:?} to continue in it)"));
    if let Some(Value::Object(map)) = &mut result.structured_content {
        map.insert("session".into(), Value::String(id.to_string()));
    }
}

fn finished_result(
    end: Result<ptc_engine::Completion, ptc_engine::Failure>,
    timing: Timing,
    unanswered: bool,
) -> CallToolResult {
    match end {
        Ok(done) => {
            let return_value: Value = serde_json::from_str(&done.return_value).unwrap_or(Value::Null);
            let structured = report(timing, &done.stdout, &done.stderr, &done.tool_calls, Ok(&return_value));
            let mut text = printed(&done.stdout, &done.stderr);
            if !return_value.is_null() {
                text.push_str(&format!("{}[return value] {}", newline_if_needed(&text), return_value));
            }
            if text.is_empty() {
                text.push_str("(the program printed nothing)");
            }
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content = Some(structured);
            result
        }
        Err(f) => {
            let Advice { headline: error, mut hint } = advice::advice(&f);
            if unanswered && f.kind == FailureKind::Timeout {
                // Not "ask for a longer timeout": no deadline helps while nobody answers.
                hint = super::approvals::unanswered(&f.message);
            }
            let error_value = json!({"kind": f.kind.as_str(), "message": f.message});
            let structured = report(timing, &f.stdout, &f.stderr, &f.tool_calls, Err(error_value));
            let mut text = printed(&f.stdout, &f.stderr);
            text.push_str(&format!("{}[error] {error}", newline_if_needed(&text)));
            if !hint.is_empty() && hint != error {
                text.push_str(&format!("\n{hint}"));
            }
            let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
            result.structured_content = Some(structured);
            result
        }
    }
}

pub(super) fn tail(text: &str, max_chars: usize) -> String {
    let n = text.chars().count();
    if n <= max_chars {
        text.to_string()
    } else {
        format!("…{}", text.chars().skip(n - max_chars).collect::<String>())
    }
}

/// What the program printed, as the result's text: stdout, then `[stderr]` and stderr.
pub(super) fn printed(stdout: &str, stderr: &str) -> String {
    let mut text = stdout.to_string();
    if !stderr.is_empty() {
        text.push_str(&format!("{}[stderr]\n{stderr}", newline_if_needed(&text)));
    }
    text
}

pub(super) fn newline_if_needed(text: &str) -> &'static str {
    if text.is_empty() || text.ends_with('\n') { "" } else { "\n" }
}

pub(super) fn failed_before_start(message: String) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!("[error] {message}"))]);
    result.structured_content = Some(json!({
        "success": false, "stdout": "", "stderr": "", "return_value": null,
        "error": {"kind": "not_started", "message": message}, "tool_calls": [], "tool_calls_total": 0,
        "execution_time_seconds": 0.0,
    }));
    result
}

/// How long a program ran, and its deadline.
#[derive(Debug, Clone, Copy)]
struct Timing(Duration, Duration);

/// The structured result (reference 001's shape): `outcome` is the return value, or the error.
fn report(
    timing: Timing,
    stdout: &str,
    stderr: &str,
    calls: &[ToolCallRecord],
    outcome: Result<&Value, Value>,
) -> Value {
    let Timing(elapsed, timeout) = timing;
    let (success, return_value, error) = match outcome {
        Ok(value) => (true, value, Value::Null),
        Err(error) => (false, &Value::Null, error),
    };
    let listed: Vec<Value> = calls
        .iter()
        .take(LISTED_CALLS)
        .map(|c| {
            let name = super::convert::label(c.namespace.as_deref(), &c.name);
            let args: Value = serde_json::from_str(&c.input)
                .ok()
                .filter(|_| c.input.chars().count() <= LISTED_INPUT_CHARS)
                .unwrap_or_else(|| Value::String(tail(&c.input, LISTED_INPUT_CHARS)));
            json!({
                "tool_name": name,
                "args": args,
                "tool_call_id": c.id,
                "has_error": !matches!(c.outcome, Some(Ok(_))),
                "duration_ms": c.duration.as_secs_f64() * 1000.0,
            })
        })
        .collect();
    json!({
        "success": success,
        "execution_time_seconds": elapsed.as_secs_f64(),
        "timeout_limit_seconds": timeout.as_secs_f64(),
        "stdout": stdout,
        "stderr": stderr,
        "return_value": return_value,
        "error": error,
        "tool_calls": listed,
        "tool_calls_total": calls.len(),
    })
}

pub(super) fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

pub(super) fn output_schema() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "properties": {
            "success": {"type": "boolean"},
            "execution_time_seconds": {"type": "number"},
            "timeout_limit_seconds": {"type": "number"},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "return_value": {"description": "The program's top-level `return` value (JSON)."},
            "error": {
                "description": "null on success",
                "anyOf": [{"type": "null"}, {"type": "object", "properties": {"kind": {"type": "string"}, "message": {"type": "string"}}}]
            },
            "tool_calls": {
                "type": "array",
                "description": "The first 20 calls the program made.",
                "items": {"type": "object", "properties": {
                    "tool_name": {"type": "string"}, "args": {}, "tool_call_id": {"type": "string"},
                    "has_error": {"type": "boolean"}, "duration_ms": {"type": "number"}
                }}
            },
            "tool_calls_total": {"type": "integer"},
            "session": {"type": "string", "description": "The session the program ran in, when it named one."}
        },
        "required": ["success", "stdout", "stderr", "error", "tool_calls"]
    }))
}
