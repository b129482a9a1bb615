//! Workloads shared by the benchmarks: the same programs through the library, through gRPC on
//! loopback, and through native CPython (a `python3 -c` subprocess, and `exec` in a warm
//! interpreter, the floor).

pub mod grpc;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use ptc_engine::{Engine, Event, ExecutionRequest, ToolDef, ToolResult};
use ptc_server::proto::sandbox_client::SandboxClient;
use tonic::transport::Channel;

use grpc::Exec;

/// A named program and the native-Python equivalent (tool calls become plain function calls).
pub struct Workload {
    pub name: &'static str,
    pub code: String,
    pub native: String,
}

pub fn workloads() -> Vec<Workload> {
    let seq = |n: usize| Workload {
        name: Box::leak(format!("sequential_{n}").into_boxed_str()),
        code: format!("t = 0\nfor i in range({n}):\n    t = await add(a=t, b=i)\nprint(t)"),
        native: format!("def add(a, b): return a + b\nt = 0\nfor i in range({n}):\n    t = add(a=t, b=i)\nprint(t)"),
    };
    vec![
        Workload { name: "pass", code: "pass".into(), native: "pass".into() },
        Workload { name: "print_hi", code: "print('hi')".into(), native: "print('hi')".into() },
        seq(1),
        seq(10),
        seq(100),
        Workload {
            name: "gather_100",
            code: "r = await asyncio.gather(*[add(a=i, b=1) for i in range(100)])\nprint(sum(r))".into(),
            native: "def add(a, b): return a + b\nprint(sum(add(a=i, b=1) for i in range(100)))".into(),
        },
        Workload {
            name: "sum_squares_1e6",
            code: "print(sum(i * i for i in range(10**6)))".into(),
            native: "print(sum(i * i for i in range(10**6)))".into(),
        },
    ]
}

/// Default limits but room for the 100-round workload.
pub fn limits() -> ptc_engine::Limits {
    ptc_engine::Limits::default().with_max_round_trips(1000)
}

pub fn tools() -> Vec<ToolDef> {
    vec![ToolDef::new("add").with_parameters(serde_json::json!({
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]
    }))]
}

/// `add`'s answer to `input` (`{"a": .., "b": ..}`).
pub fn add(input: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(input).unwrap();
    (v["a"].as_i64().unwrap() + v["b"].as_i64().unwrap()).to_string()
}

/// Runs `code` to completion through the library, answering `add` instantly.
pub async fn run_library(engine: &Engine, code: &str) {
    run_library_in(engine, ptc_engine::Runtime::Python, code).await
}

/// [`run_library`] in the given runtime.
pub async fn run_library_in(engine: &Engine, runtime: ptc_engine::Runtime, code: &str) {
    let request = ExecutionRequest::new(code).with_tools(tools()).with_limits(limits()).with_runtime(runtime);
    finish(engine.start(request).await.unwrap()).await
}

/// Runs `code` to completion in a live session through the library, answering `add` instantly.
pub async fn run_in_session(engine: &Engine, session: &ptc_engine::Session, code: &str) {
    let request = ExecutionRequest::new(code).with_tools(tools()).with_limits(limits());
    finish(engine.execute_in(session, request).await.unwrap()).await
}

/// Answers `add` instantly until the execution completes.
async fn finish(mut exec: ptc_engine::Execution) {
    while let Some(event) = exec.next_event().await {
        match event {
            Event::ToolCalls { calls, .. } => {
                exec.submit(calls.iter().map(|c| ToolResult::ok_json(&c.id, add(&c.input))).collect()).unwrap()
            }
            Event::Completed(_) => return,
            Event::Failed(f) => panic!("{}: {}", f.message, f.stderr),
            Event::Output { .. } => {}
        }
    }
}

/// `n` recorded rounds of `add`, then a live one: the program, and the journal a first run
/// recorded up to that live round (what a node that lost the execution replays).
pub async fn recorded(engine: &Engine, n: usize) -> (String, ptc_engine::Journal) {
    let code = format!("t = 0\nfor i in range({}):\n    t = await add(a=t, b=i)\nprint(t)", n + 1);
    let journal = ptc_engine::Journal::new();
    let seed = journal.seed;
    let request = ExecutionRequest::new(&code).with_tools(tools()).with_limits(limits()).with_journal(journal);
    let mut exec = engine.start(request).await.unwrap();
    let mut rounds = 0;
    while let Some(event) = exec.next_event().await {
        if let Event::ToolCalls { calls, .. } = event {
            rounds += 1;
            if rounds > n {
                break;
            }
            exec.submit(calls.iter().map(|c| ToolResult::ok_json(&c.id, add(&c.input))).collect()).unwrap();
        }
    }
    let entries = exec.control().take_journal().unwrap().entries;
    (code, ptc_engine::Journal::replay(seed, entries))
}

/// From start to round `n + 1`: by replaying `journal` (`Some` with entries), or live,
/// answering each round instantly, recording a journal (`Some` without entries) or not.
pub async fn to_live_round(engine: &Engine, code: &str, journal: Option<ptc_engine::Journal>, n: usize) {
    let mut request = ExecutionRequest::new(code).with_tools(tools()).with_limits(limits());
    request.journal = journal.clone();
    let mut exec = engine.start(request).await.unwrap();
    let mut rounds = 0;
    while let Some(event) = exec.next_event().await {
        match event {
            Event::ToolCalls { calls, .. } => {
                rounds += if journal.as_ref().is_some_and(|j| !j.entries.is_empty()) { n + 1 } else { 1 };
                if rounds > n {
                    return;
                }
                exec.submit(calls.iter().map(|c| ToolResult::ok_json(&c.id, add(&c.input))).collect()).unwrap()
            }
            Event::Failed(f) => panic!("{}: {}", f.message, f.stderr),
            _ => {}
        }
    }
    panic!("ended before its live round");
}

/// Instantiation alone, as the engine times it for one `pass` execution (a fresh instance from
/// the pre-linked component in the pool, before the guest runs).
pub async fn instantiate_once(engine: &Engine) -> std::time::Duration {
    let mut exec = engine.start(ExecutionRequest::new("pass")).await.unwrap();
    while let Some(event) = exec.next_event().await {
        match event {
            Event::Completed(done) => return done.stats.instantiate_time,
            Event::Failed(f) => panic!("{}: {}", f.message, f.stderr),
            _ => {}
        }
    }
    panic!("no completion");
}

/// Runs `code` to completion through a gRPC stream, answering `add` instantly.
pub async fn run_grpc(client: &mut SandboxClient<Channel>, code: &str) {
    run_grpc_in(client, ptc_engine::Runtime::Python, code).await
}

/// [`run_grpc`] in the given runtime (`Start.runtime`).
pub async fn run_grpc_in(client: &mut SandboxClient<Channel>, runtime: ptc_engine::Runtime, code: &str) {
    let start = ptc_server::proto::Start { runtime: runtime.as_str().into(), ..grpc::start(code, &["add"]) };
    let mut exec = Exec::open(client, start, None).await.unwrap();
    while let Some(calls) = exec.next_batch().await.unwrap() {
        let results = calls.iter().map(|c| ToolResult::ok_json(&c.id, add(&c.input_json)).into()).collect();
        exec.send_results(results).await.unwrap();
    }
}

/// `code` in the live session `session_id` over gRPC (open it with `OpenSession` first).
pub async fn run_grpc_in_session(client: &mut SandboxClient<Channel>, session_id: &str, code: &str) {
    let start = ptc_server::proto::Start { session_id: session_id.into(), ..grpc::start(code, &["add"]) };
    let mut exec = Exec::open(client, start, None).await.unwrap();
    while let Some(calls) = exec.next_batch().await.unwrap() {
        let results = calls.iter().map(|c| ToolResult::ok_json(&c.id, add(&c.input_json)).into()).collect();
        exec.send_results(results).await.unwrap();
    }
}

/// An Execute stream refused at its Start (it names a session that does not exist).
pub async fn refused_at_start(client: &mut SandboxClient<Channel>) {
    let start = ptc_server::proto::Start { session_id: "no-such-session".into(), ..grpc::start("pass", &[]) };
    let refused = Exec::open(client, start, None).await;
    assert!(refused.is_err_and(|e| e.contains("NotFound")));
}

/// `python3 -c CODE`, what people do without a sandbox.
pub fn run_subprocess(native: &str) {
    let out = Command::new("python3").arg("-c").arg(native).output().unwrap();
    assert!(out.status.success());
}

/// A warm host CPython that `exec`s each program in a fresh namespace: the floor.
pub struct WarmPython {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

const LOOP: &str = r#"
import io, json, sys, contextlib
for line in sys.stdin:
    code = json.loads(line)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": "__main__"})
    sys.stdout.write("done\n")
    sys.stdout.flush()
"#;

impl WarmPython {
    pub fn start() -> Self {
        let mut child = Command::new("python3")
            .args(["-u", "-c", LOOP])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        WarmPython { child, stdin, stdout }
    }

    pub fn exec(&mut self, native: &str) {
        writeln!(self.stdin, "{}", serde_json::Value::String(native.into())).unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "done\n");
    }
}

impl Drop for WarmPython {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
