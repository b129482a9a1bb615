//! Helpers for the end-to-end tests: one shared engine per test binary and a scripted tool
//! client that answers calls the way a real agent platform would.

pub mod attacks;
pub mod binary;
pub mod grpc;
pub mod http;
pub mod node;
pub mod otlp;
pub mod python;
pub mod redis;
pub mod web;

use std::sync::OnceLock;
use std::time::Duration;

use ptc_engine::{
    Completion, Engine, EngineConfig, Event, Execution, ExecutionRequest, Failure, Limits, ToolCall, ToolDef,
    ToolResult,
};
use serde_json::{Value, json};

/// The engine every test in a binary shares (compiled once, then loaded from the disk cache).
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| engine_with(|c| c.fuel = true))
}

/// An engine with the data-science runtime as well (pre-initialised and compiled at the first
/// start on a machine, ~75 s; then loaded from the disk cache).
pub fn data_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        engine_with(|c| {
            c.fuel = true;
            c.python_data = Some(ptc_engine::python_data_artifacts());
        })
    })
}

/// The defaults, with the server's cache of the compiled component (so that an engine loads
/// in milliseconds rather than compiling for seconds).
pub fn engine_config() -> EngineConfig {
    let mut config = EngineConfig::default();
    config.cache_dir = Some(ptc_server::default_cache_dir());
    config
}

/// An engine of its own, configured from [`engine_config`] by `f`.
pub fn engine_with(f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut config = engine_config();
    f(&mut config);
    Engine::new(config).expect("engine")
}

/// A fresh directory for a program's `/mnt/data` (`<root>/data`, empty) beside
/// `<root>/secret.txt` ("do not read"), which no program may reach: `(root, data)`. The test
/// removes `root` at its end.
pub fn data_dir_beside_a_secret(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let root = std::env::temp_dir().join(format!("ptc-{tag}-{}", std::process::id()));
    let dir = root.join("data");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(root.join("secret.txt"), "do not read").unwrap();
    (root, dir)
}

/// How a run ended, with every batch of calls the client saw.
#[derive(Debug)]
pub struct Run {
    pub rounds: Vec<Vec<ToolCall>>,
    pub streamed_stdout: String,
    pub streamed_stderr: String,
    pub end: Result<Completion, Failure>,
}

impl Run {
    pub fn completed(self) -> Completion {
        match self.end {
            Ok(c) => c,
            Err(f) => panic!("expected completion, got {:?}: {}\nstderr: {}", f.kind, f.message, f.stderr),
        }
    }

    pub fn failed(self) -> Failure {
        match self.end {
            Err(f) => f,
            Ok(c) => panic!("expected failure, got completion: stdout {:?}", c.stdout),
        }
    }
}

/// Answers each call with `handler(call) -> Ok(value) | Err(message)`, all calls of a batch at
/// once, and collects events until the execution ends.
pub async fn drive(mut exec: Execution, handler: impl Fn(&ToolCall) -> Result<Value, String>) -> Run {
    let mut run =
        Run { rounds: vec![], streamed_stdout: String::new(), streamed_stderr: String::new(), end: Err(dummy()) };
    while let Some(event) = exec.next_event().await {
        match event {
            Event::ToolCalls { round, calls, approvals } => {
                assert!(approvals.is_empty(), "`drive` answers no approvals: {approvals:?}");
                assert_eq!(round as usize, run.rounds.len() + 1, "rounds are numbered 1, 2, ... in order");
                let results = calls
                    .iter()
                    .map(|c| match handler(c) {
                        Ok(v) => ToolResult::ok(&c.id, &v),
                        Err(m) => ToolResult::error(&c.id, m),
                    })
                    .collect();
                exec.submit(results).expect("submit");
                run.rounds.push(calls);
            }
            Event::Output { stream, data } => {
                let text = String::from_utf8_lossy(&data);
                match stream {
                    ptc_engine::OutputStream::Stdout => run.streamed_stdout.push_str(&text),
                    ptc_engine::OutputStream::Stderr => run.streamed_stderr.push_str(&text),
                }
            }
            Event::Completed(c) => {
                run.end = Ok(c);
                break;
            }
            Event::Failed(f) => {
                run.end = Err(f);
                break;
            }
        }
    }
    run
}

fn dummy() -> Failure {
    Failure {
        kind: ptc_engine::FailureKind::Internal,
        message: "the event stream ended without a final event".into(),
        traceback: String::new(),
        exit_code: None,
        stdout: String::new(),
        stderr: String::new(),
        tool_calls: vec![],
        stats: Default::default(),
    }
}

/// Starts `code` with `tools` and default limits.
pub async fn start(code: &str, tools: Vec<ToolDef>) -> Execution {
    engine().start(ExecutionRequest::new(code).with_tools(tools)).await.expect("start")
}

pub async fn start_with(code: &str, tools: Vec<ToolDef>, limits: Limits) -> Execution {
    engine().start(ExecutionRequest::new(code).with_tools(tools).with_limits(limits)).await.expect("start")
}

/// Runs code without tools.
pub async fn run_code(code: &str) -> Run {
    drive(start(code, vec![]).await, |_| Err("no tools".into())).await
}

/// Echoes its input back: `{"tool": name, "input": input}`.
pub fn echo(call: &ToolCall) -> Result<Value, String> {
    Ok(json!({"tool": call.name, "input": call.input_value()}))
}

/// `add(a, b)` and `get_weather(city)`, with `city="Nowhere"` failing.
pub fn standard_tools() -> Vec<ToolDef> {
    vec![
        ToolDef::new("add").with_description("Adds two numbers.").with_parameters(json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]
        })),
        ToolDef::new("get-weather").with_description("Weather for a city.").with_parameters(json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city"]
        })),
    ]
}

pub fn standard_handler(call: &ToolCall) -> Result<Value, String> {
    let input = call.input_value();
    match call.name.as_str() {
        "add" => Ok(json!(input["a"].as_f64().unwrap() + input["b"].as_f64().unwrap())),
        "get-weather" if input["city"] == "Nowhere" => Err("no such city: Nowhere".into()),
        "get-weather" => Ok(json!({"city": input["city"], "temp": 21})),
        other => Err(format!("unexpected tool {other}")),
    }
}

/// Limits with a short timeout, for tests that expect one.
pub fn limits_with_timeout(timeout: Duration) -> Limits {
    Limits::default().with_timeout(timeout)
}

/// Waits (bounded) until `f` holds, for state that settles asynchronously after an event: at
/// most 10 s, since on two cores shared by the whole suite a removal spawned on the blocking
/// pool once took longer than 2 s.
pub async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}
