//! The door: the guest's one import, `host.call(frame)`, and the JSON frames that cross it.

use serde::Deserialize;
use wasmtime::{Caller, Extern};

use crate::instance::bindings::{self, ptc::sandbox::host as wit};
use crate::instance::host::HostState;

/// The door's answers when it cannot serve a frame (the guest raises `OSError`).
const HOST_FAULT: i32 = -2;
/// The largest frame the door reads from guest memory. A frame carries one batch of tool
/// calls, each input at most `Ceilings::max_tool_input_bytes`; a program writing its own
/// frames to `_host.call` gets `OSError` past this.
pub(super) const MAX_FRAME: usize = 64 * 1024 * 1024;

/// A frame the guest sends through the door.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Frame {
    Job,
    Wait {
        calls: Vec<(String, String, String, String)>,
        timeout_ms: Option<u64>,
    },
    Done {
        outcome: Reported,
    },
    /// A snapshot's or restore's answer.
    Answer {
        answer: serde_json::Value,
    },
    /// An HTTP request of the program's (`ptc_runtime/net.py`); the body as base64.
    Http {
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: String,
        timeout_ms: Option<u64>,
    },
}

/// How a program ended, as `ptc_data.turn` reports it (`ptc_runtime.runner.Outcome`).
#[derive(Deserialize)]
struct Reported {
    ok: bool,
    value: String,
    kind: String,
    message: String,
    traceback: String,
    exit_code: Option<i32>,
}

impl From<Reported> for bindings::Outcome {
    fn from(r: Reported) -> Self {
        if r.kind == "hibernated" {
            return bindings::Outcome::Hibernated;
        }
        if r.ok {
            return bindings::Outcome::Completed(r.value);
        }
        let kind = match r.kind.as_str() {
            "python-error" => bindings::FailureKind::ProgramError,
            "exit" => bindings::FailureKind::Exit,
            "invalid-tools" => bindings::FailureKind::InvalidTools,
            _ => bindings::FailureKind::Internal,
        };
        bindings::Outcome::Failed(bindings::Failure {
            kind,
            message: r.message,
            traceback: r.traceback,
            exit_code: r.exit_code,
        })
    }
}

/// `host.call(ptr, len, out_ptr, out_len) -> i32`: answers one frame. Everything here comes
/// from the guest and is checked: a frame out of bounds, too large or not one of ours gets
/// `HOST_FAULT`, never a trap; only the broker's own limits (calls, rounds) end the instance.
pub(super) async fn door(
    caller: &mut Caller<'_, HostState>,
    ptr: i32,
    len: i32,
    out_ptr: i32,
    out_len: i32,
) -> wasmtime::Result<i32> {
    let Some(memory) = caller.get_export("memory").and_then(Extern::into_memory) else {
        return Ok(HOST_FAULT);
    };
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    let (out_ptr, out_len) = (out_ptr as u32 as usize, out_len as u32 as usize);
    let size = memory.data_size(&*caller);
    let fits = |at: usize, n: usize| at.checked_add(n).is_some_and(|end| end <= size);
    let max_frame = caller.data().turn.max_frame.unwrap_or(MAX_FRAME);
    if len > max_frame || !fits(ptr, len) || !fits(out_ptr, 4) || !fits(out_len, 4) {
        return Ok(HOST_FAULT);
    }
    let frame: Frame = match serde_json::from_slice(&memory.data(&*caller)[ptr..ptr + len]) {
        Ok(frame) => frame,
        Err(_) => return Ok(HOST_FAULT),
    };
    let reply = match frame {
        Frame::Job => match caller.data_mut().turn.job.take() {
            Some(job) => job.into_bytes(),
            None => return Ok(HOST_FAULT),
        },
        Frame::Wait { calls, timeout_ms } => wait(caller, calls, timeout_ms).await?,
        Frame::Done { outcome } => {
            caller.data_mut().turn.outcome = Some(outcome.into());
            b"{}".to_vec()
        }
        Frame::Answer { answer } => {
            caller.data_mut().turn.answer = Some(answer);
            b"{}".to_vec()
        }
        Frame::Http { method, url, headers, body, timeout_ms } => {
            let Some(reply) = http(
                caller,
                crate::net::Request { method, url, headers, body: Vec::new(), timeout: None },
                body,
                timeout_ms,
            )
            .await?
            else {
                return Ok(HOST_FAULT);
            };
            reply
        }
    };
    let Some(alloc) = caller.get_export("host_alloc").and_then(Extern::into_func) else {
        return Ok(HOST_FAULT);
    };
    let alloc = alloc.typed::<i32, i32>(&*caller)?;
    let at = alloc.call_async(&mut *caller, reply.len() as i32).await? as u32 as usize;
    let size = memory.data_size(&*caller);
    if at == 0 || at.checked_add(reply.len()).is_none_or(|end| end > size) {
        return Ok(HOST_FAULT);
    }
    let data = memory.data_mut(&mut *caller);
    data[at..at + reply.len()].copy_from_slice(&reply);
    data[out_ptr..out_ptr + 4].copy_from_slice(&(at as u32).to_le_bytes());
    data[out_len..out_len + 4].copy_from_slice(&(reply.len() as u32).to_le_bytes());
    Ok(0)
}

/// A `Wait` frame: the batch of calls handed to the broker, and its answer as the guest reads
/// it (rows of results, or the word to hibernate).
async fn wait(
    caller: &mut Caller<'_, HostState>,
    calls: Vec<(String, String, String, String)>,
    timeout_ms: Option<u64>,
) -> wasmtime::Result<Vec<u8>> {
    let calls =
        calls.into_iter().map(|(id, name, input, namespace)| wit::ToolCall { id, name, input, namespace }).collect();
    let broker = &mut caller.data_mut().broker;
    Ok(match broker.wait_for_tools(calls, timeout_ms).await? {
        wit::WaitAnswer::Results(results) => {
            let rows: Vec<(String, bool, String)> = results
                .into_iter()
                .map(|r| match r.outcome {
                    wit::ToolOutcome::Ok(json) => (r.id, true, json),
                    wit::ToolOutcome::Error(message) => (r.id, false, message),
                })
                .collect();
            serde_json::to_vec(&rows)?
        }
        // The guest unwinds its loop, and its turn reports `hibernated`.
        wit::WaitAnswer::Hibernate => br#"{"hibernate":true}"#.to_vec(),
    })
}

/// An `Http` frame: the request (its body base64 in the frame) through the host's fetch, and
/// the answer or the refusal as the guest reads it; `None` for a body that is not base64.
async fn http(
    caller: &mut Caller<'_, HostState>,
    mut request: crate::net::Request,
    body: String,
    timeout_ms: Option<u64>,
) -> wasmtime::Result<Option<Vec<u8>>> {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let Ok(body) = b64.decode(body) else { return Ok(None) };
    request.body = body;
    request.timeout = timeout_ms.map(std::time::Duration::from_millis);
    let answer = match caller.data_mut().fetch(request).await {
        Ok(r) => serde_json::json!({
            "status": r.status, "reason": r.reason, "headers": r.headers, "body": b64.encode(&r.body),
        }),
        Err(crate::net::Failure::Refused(m)) => serde_json::json!({"error": "refused", "message": m}),
        Err(crate::net::Failure::Failed(m)) => serde_json::json!({"error": "failed", "message": m}),
        Err(crate::net::Failure::TimedOut(m)) => serde_json::json!({"error": "timed-out", "message": m}),
    };
    Ok(Some(serde_json::to_vec(&answer)?))
}
