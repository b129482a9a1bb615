//! Generated gRPC types for `ptc.v1` and conversions to and from the engine's types.

#![allow(clippy::all, missing_docs)]

use std::time::Duration;

tonic::include_proto!("ptc.v1");

/// Encoded `FileDescriptorSet` of `ptc.v1`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ptc_descriptor.bin"));

impl From<crate::FailureKind> for FailureKind {
    fn from(kind: crate::FailureKind) -> Self {
        use crate::FailureKind as K;
        match kind {
            K::PythonError => FailureKind::PythonError,
            K::Exit => FailureKind::Exit,
            K::InvalidTools => FailureKind::InvalidTools,
            K::Timeout => FailureKind::Timeout,
            K::Memory => FailureKind::Memory,
            K::Fuel => FailureKind::Fuel,
            K::RoundTrips => FailureKind::RoundTrips,
            K::ToolCalls => FailureKind::ToolCalls,
            K::Cancelled => FailureKind::Cancelled,
            K::Shutdown => FailureKind::Shutdown,
            _ => FailureKind::Internal,
        }
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

impl From<crate::Stats> for Stats {
    fn from(s: crate::Stats) -> Self {
        Stats {
            wall_time_us: micros(s.wall_time),
            instantiate_time_us: micros(s.instantiate_time),
            round_trips: s.round_trips,
            tool_calls: s.tool_calls,
            fuel_consumed: s.fuel_consumed,
            peak_memory_bytes: s.peak_memory_bytes,
            stdout_bytes: s.stdout_bytes,
            stderr_bytes: s.stderr_bytes,
            output_truncated: s.output_truncated,
        }
    }
}

impl From<crate::ToolCallRecord> for ToolCallRecord {
    fn from(r: crate::ToolCallRecord) -> Self {
        ToolCallRecord {
            id: r.id,
            name: r.name,
            input_json: r.input,
            outcome: r.outcome.map(|o| match o {
                Ok(json) => tool_call_record::Outcome::ResultJson(json),
                Err(message) => tool_call_record::Outcome::Error(message),
            }),
            round: r.round,
            duration_us: micros(r.duration),
        }
    }
}

impl From<crate::ToolResult> for ToolResult {
    fn from(r: crate::ToolResult) -> Self {
        let outcome = match r.outcome {
            Ok(json) => tool_result::Outcome::ResultJson(json),
            Err(message) => tool_result::Outcome::Error(message),
        };
        ToolResult { call_id: r.id, outcome: Some(outcome) }
    }
}

impl From<ToolResult> for crate::ToolResult {
    fn from(r: ToolResult) -> Self {
        let outcome = match r.outcome {
            Some(tool_result::Outcome::ResultJson(json)) => Ok(json),
            Some(tool_result::Outcome::Error(message)) => Err(message),
            None => Err("the client sent a result with neither result_json nor error".into()),
        };
        crate::ToolResult { id: r.call_id, outcome }
    }
}

impl From<crate::ToolCall> for ToolCall {
    fn from(c: crate::ToolCall) -> Self {
        ToolCall { id: c.id, name: c.name, input_json: c.input }
    }
}

/// The server message for one engine event; `round` numbers ToolCalls batches.
pub fn server_message(event: crate::Event, round: &mut u32) -> ServerMessage {
    use server_message::Message as M;
    let message = match event {
        crate::Event::ToolCalls(calls) => {
            *round += 1;
            M::ToolCalls(ToolCalls { calls: calls.into_iter().map(Into::into).collect(), round: *round })
        }
        crate::Event::Output { stream, data } => M::Output(Output {
            stream: match stream {
                crate::OutputStream::Stdout => OutputStream::Stdout,
                crate::OutputStream::Stderr => OutputStream::Stderr,
            } as i32,
            data,
        }),
        crate::Event::Completed(c) => M::Completed(Completed {
            stdout: c.stdout,
            stderr: c.stderr,
            return_value_json: c.return_value,
            tool_calls: c.tool_calls.into_iter().map(Into::into).collect(),
            stats: Some(c.stats.into()),
        }),
        crate::Event::Failed(f) => M::Failed(Failed {
            kind: FailureKind::from(f.kind) as i32,
            message: f.message,
            traceback: f.traceback,
            exit_code: f.exit_code,
            stdout: f.stdout,
            stderr: f.stderr,
            tool_calls: f.tool_calls.into_iter().map(Into::into).collect(),
            stats: Some(f.stats.into()),
        }),
    };
    ServerMessage { message: Some(message) }
}

/// Tool definitions from the wire; the schema must be JSON text (or empty).
pub fn tool_defs(tools: Vec<Tool>) -> Result<Vec<crate::ToolDef>, String> {
    tools
        .into_iter()
        .map(|t| {
            let parameters = if t.parameters_json.trim().is_empty() {
                None
            } else {
                Some(
                    serde_json::from_str(&t.parameters_json)
                        .map_err(|e| format!("parameters_json of tool {:?} is not valid JSON: {e}", t.name))?,
                )
            };
            Ok(crate::ToolDef { name: t.name, description: t.description, parameters })
        })
        .collect()
}

impl Limits {
    /// The wire limits over `defaults`.
    pub fn apply(&self, defaults: &crate::Limits) -> crate::Limits {
        crate::Limits {
            timeout: self.timeout_ms.map_or(defaults.timeout, |ms| Duration::from_millis(ms.into())),
            max_round_trips: self.max_round_trips.unwrap_or(defaults.max_round_trips),
            max_tool_calls: self.max_tool_calls.unwrap_or(defaults.max_tool_calls),
            max_memory_bytes: self.max_memory_bytes.unwrap_or(defaults.max_memory_bytes),
            max_output_bytes: self.max_output_bytes.unwrap_or(defaults.max_output_bytes),
            fuel: self.fuel.or(defaults.fuel),
        }
    }
}
