//! Generated gRPC types for `ptc.v1` and conversions to and from the engine's types.

#![allow(clippy::all, missing_docs)]

use std::time::Duration;

tonic::include_proto!("ptc.v1");

/// Encoded `FileDescriptorSet` of `ptc.v1`, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ptc_descriptor.bin"));

impl From<ptc_engine::FailureKind> for FailureKind {
    fn from(kind: ptc_engine::FailureKind) -> Self {
        use ptc_engine::FailureKind as K;
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

/// A file returned on `Completed`/`Failed`, with its bytes if they fit.
pub(crate) fn file((file, content): (crate::core::files::FileRef, Option<Vec<u8>>)) -> File {
    File { name: file.name, size: file.size, omitted: content.is_none(), content: content.unwrap_or_default() }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

impl From<ptc_engine::Stats> for Stats {
    fn from(s: ptc_engine::Stats) -> Self {
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

impl From<ptc_engine::ToolCallRecord> for ToolCallRecord {
    fn from(r: ptc_engine::ToolCallRecord) -> Self {
        ToolCallRecord {
            id: r.id,
            name: r.name,
            namespace: r.namespace.unwrap_or_default(),
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

impl From<ptc_engine::ToolResult> for ToolResult {
    fn from(r: ptc_engine::ToolResult) -> Self {
        let outcome = match r.outcome {
            Ok(json) => tool_result::Outcome::ResultJson(json),
            Err(message) => tool_result::Outcome::Error(message),
        };
        ToolResult { call_id: r.id, outcome: Some(outcome) }
    }
}

impl From<ToolResult> for ptc_engine::ToolResult {
    fn from(r: ToolResult) -> Self {
        let outcome = match r.outcome {
            Some(tool_result::Outcome::ResultJson(json)) => Ok(json),
            Some(tool_result::Outcome::Error(message)) => Err(message),
            None => Err("the client sent a result with neither result_json nor error".into()),
        };
        ptc_engine::ToolResult { id: r.call_id, outcome }
    }
}

impl From<ptc_engine::ToolCall> for ToolCall {
    fn from(c: ptc_engine::ToolCall) -> Self {
        let traceparent = crate::traces::traceparent(c.trace.as_ref());
        ToolCall {
            id: c.id,
            name: c.name,
            input_json: c.input,
            namespace: c.namespace.unwrap_or_default(),
            traceparent,
        }
    }
}

impl From<ptc_engine::Completion> for Completed {
    fn from(c: ptc_engine::Completion) -> Self {
        Completed {
            stdout: c.stdout,
            stderr: c.stderr,
            return_value_json: c.return_value,
            tool_calls: c.tool_calls.into_iter().map(Into::into).collect(),
            stats: Some(c.stats.into()),
            files: Vec::new(),
        }
    }
}

impl From<ptc_engine::Failure> for Failed {
    fn from(f: ptc_engine::Failure) -> Self {
        Failed {
            kind: FailureKind::from(f.kind) as i32,
            message: f.message,
            traceback: f.traceback,
            exit_code: f.exit_code,
            stdout: f.stdout,
            stderr: f.stderr,
            tool_calls: f.tool_calls.into_iter().map(Into::into).collect(),
            stats: Some(f.stats.into()),
            files: Vec::new(),
        }
    }
}

/// A completed run's output, calls and stats as a failure's (whose kind and message the
/// caller sets: a run that completed but broke the file quota).
impl From<Completed> for Failed {
    fn from(c: Completed) -> Self {
        Failed {
            stdout: c.stdout,
            stderr: c.stderr,
            tool_calls: c.tool_calls,
            stats: c.stats,
            files: c.files,
            ..Failed::default()
        }
    }
}

/// The server message for one engine event.
pub fn server_message(event: ptc_engine::Event) -> ServerMessage {
    use server_message::Message as M;
    let message = match event {
        ptc_engine::Event::ToolCalls { round, calls, approvals } => M::ToolCalls(ToolCalls {
            calls: calls.into_iter().map(Into::into).collect(),
            round,
            approvals: approvals
                .into_iter()
                .map(|a| ApprovalRequest { call: Some(a.call.into()), reason: a.reason.unwrap_or_default() })
                .collect(),
        }),
        ptc_engine::Event::Output { stream, data } => M::Output(Output {
            stream: match stream {
                ptc_engine::OutputStream::Stdout => OutputStream::Stdout,
                ptc_engine::OutputStream::Stderr => OutputStream::Stderr,
            } as i32,
            data,
        }),
        ptc_engine::Event::Completed(c) => M::Completed(c.into()),
        ptc_engine::Event::Failed(f) => M::Failed(f.into()),
    };
    ServerMessage { message: Some(message) }
}

/// A person's decision from the wire; one without a verdict is refused.
pub fn decision(d: Decision) -> Result<ptc_engine::Decision, String> {
    match d.verdict {
        Some(decision::Verdict::Approve(Approve { input_json: None })) => Ok(ptc_engine::Decision::approve(d.call_id)),
        Some(decision::Verdict::Approve(Approve { input_json: Some(input) })) => {
            Ok(ptc_engine::Decision::approve_with(d.call_id, input))
        }
        Some(decision::Verdict::Deny(Deny { reason })) => Ok(ptc_engine::Decision::deny(d.call_id, reason)),
        None => Err(format!("the decision for call {:?} has neither approve nor deny", d.call_id)),
    }
}

/// Tool definitions from the wire; the schema must be JSON text (or empty).
/// Their schemas' texts are parsed through `schemas`, as `tenant`'s.
pub fn tool_defs(
    schemas: &ptc_engine::SchemaCache,
    tenant: &str,
    tools: Vec<Tool>,
) -> Result<Vec<ptc_engine::ToolDef>, String> {
    tools
        .into_iter()
        .map(|t| {
            let parameters = if t.parameters_json.trim().is_empty() {
                None
            } else {
                Some(
                    schemas
                        .parse(tenant, &t.parameters_json)
                        .map_err(|e| format!("parameters_json of tool {:?} is not valid JSON: {e}", t.name))?,
                )
            };
            let mut def = ptc_engine::ToolDef::new(t.name).with_description(t.description);
            def.parameters = parameters;
            if !t.namespace.is_empty() {
                def = def.with_namespace(t.namespace);
            }
            if t.requires_approval {
                def = def.with_approval();
            }
            if !t.returns_json.trim().is_empty() {
                let returns = schemas
                    .parse(tenant, &t.returns_json)
                    .map_err(|e| format!("returns_json of tool {:?} is not valid JSON: {e}", def.name))?;
                def.returns = Some(returns);
            }
            Ok(def)
        })
        .collect()
}

impl Limits {
    /// The wire limits over `defaults`.
    pub fn apply(&self, defaults: &ptc_engine::Limits) -> ptc_engine::Limits {
        defaults
            .clone()
            .with_timeout(self.timeout_ms.map_or(defaults.timeout, |ms| Duration::from_millis(ms.into())))
            .with_max_round_trips(self.max_round_trips.unwrap_or(defaults.max_round_trips))
            .with_max_tool_calls(self.max_tool_calls.unwrap_or(defaults.max_tool_calls))
            .with_max_memory_bytes(self.max_memory_bytes.unwrap_or(defaults.max_memory_bytes))
            .with_max_output_bytes(self.max_output_bytes.unwrap_or(defaults.max_output_bytes))
            .with_fuel(self.fuel.or(defaults.fuel))
    }
}
