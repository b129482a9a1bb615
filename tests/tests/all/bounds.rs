//! Every host-side resource an execution or a client can make the server spend is bounded:
//! memory across executions, host copies of tool inputs and results, gRPC messages, HTTP
//! connections and bodies, run slots per tenant; and cancelling frees everything at once.

use std::time::Duration;

use ptc_engine::{Engine, EngineConfig, Event, ExecutionRequest, FailureKind, Limits, MIB, ToolDef};
use ptc_server::proto::FailureKind as WireKind;
use ptc_tests::grpc::*;
use ptc_tests::http::post;
use ptc_tests::{attacks, drive, engine_with, eventually};
use serde_json::json;

fn small_engine(f: impl FnOnce(&mut EngineConfig)) -> Engine {
    engine_with(|c| {
        c.max_concurrent = 16;
        f(c)
    })
}

/// Allocates `mib` MiB, reports it, and waits for a tool so the memory stays claimed.
fn hold(mib: u32) -> String {
    format!("x = bytearray({mib} << 20)\nprint('holding')\nawait t()\nprint(len(x) >> 20)")
}

#[tokio::test]
async fn the_servers_memory_budget_fails_the_execution_that_grows_past_it() {
    let engine = small_engine(|c| c.memory_budget = 200 * MIB);
    let t = vec![ToolDef::new("t")];
    let mut first = engine.start(ExecutionRequest::new(hold(150)).with_tools(t.clone())).await.unwrap();
    loop {
        if let Event::ToolCalls { .. } = first.next_event().await.unwrap() {
            break;
        }
    }
    assert!(engine.memory_budget_used() >= 150 * MIB, "used {}", engine.memory_budget_used());
    // Its own limit (256 MiB) allows it; the budget left (< 50 MiB) does not.
    let second = engine.start(ExecutionRequest::new(hold(150)).with_tools(t.clone())).await.unwrap();
    let f = drive(second, |_| Ok(json!(null))).await.failed();
    assert_eq!(f.kind, FailureKind::Memory);
    assert!(f.message.contains("the server's memory budget for all executions (200 MiB)"), "{}", f.message);
    drop(first);
    eventually("the first execution's memory is back in the budget", || engine.memory_budget_used() == 0).await;
    let third = engine.start(ExecutionRequest::new(hold(150)).with_tools(t)).await.unwrap();
    assert_eq!(drive(third, |_| Ok(json!(null))).await.completed().stdout, "holding\n150\n");
}

#[tokio::test]
async fn a_tenants_memory_share_bounds_its_executions_together_and_no_other() {
    let engine = small_engine(|c| c.tenant_memory_budget = Some(200 * MIB));
    let t = vec![ToolDef::new("t")];
    let req = |tenant: &str| ExecutionRequest::new(hold(150)).with_tools(t.clone()).with_tenant(tenant);
    let mut first = engine.start(req("a")).await.unwrap();
    while !matches!(first.next_event().await.unwrap(), Event::ToolCalls { .. }) {}
    let f = drive(engine.start(req("a")).await.unwrap(), |_| Ok(json!(null))).await.failed();
    assert_eq!(f.kind, FailureKind::Memory);
    assert!(f.message.contains("memory budget of tenant \"a\" (200 MiB"), "{}", f.message);
    let other = drive(engine.start(req("b")).await.unwrap(), |_| Ok(json!(null))).await;
    assert_eq!(other.completed().stdout, "holding\n150\n", "another tenant is not bounded by a's share");
}

#[tokio::test]
async fn tool_inputs_results_and_the_call_log_are_bounded() {
    let engine = small_engine(|c| {
        c.ceilings.max_tool_input_bytes = 10_000;
        c.ceilings.max_tool_result_bytes = 20_000;
        c.ceilings.max_call_log_bytes = 30_000;
    });
    let code = r#"
try:
    await echo(data='x' * 20_000)
except ToolError as e:
    print('input:', e)
try:
    await big(n=30_000)
except ToolError as e:
    print('result:', e)
for i in range(10):
    r = await echo(data='y' * 5_000)
print(len(r['data']))
"#;
    let run = engine
        .start(ExecutionRequest::new(code).with_tools(vec![ToolDef::new("echo"), ToolDef::new("big")]))
        .await
        .unwrap();
    let done = drive(run, |c| match c.name.as_str() {
        "big" => Ok(json!("z".repeat(c.input_value()["n"].as_u64().unwrap() as usize))),
        _ => Ok(c.input_value()),
    })
    .await
    .completed();
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert!(
        lines[0].starts_with("input: the input of tool \"echo\" is 20012 bytes; the limit is 10000: pass less data"),
        "{}",
        done.stdout
    );
    assert!(
        lines[1].starts_with("result: tool \"big\" returned 30002 bytes; the limit is 20000: ask the tool for less"),
        "{}",
        done.stdout
    );
    assert_eq!(lines[2], "5000");
    // 12 calls with ~5-20 KB each, but the log keeps at most 30,000 bytes, then markers.
    assert_eq!(done.tool_calls.len(), 12);
    let kept: usize = done
        .tool_calls
        .iter()
        .map(|c| c.input.len() + c.outcome.as_ref().map_or(0, |o| o.as_ref().map_or_else(String::len, String::len)))
        .sum();
    assert!(kept <= 30_000 + 12 * 100, "the log kept {kept} bytes");
    let last = done.tool_calls.last().unwrap();
    assert!(last.input.starts_with("\"[not logged: 5012 bytes"), "{}", last.input);
    assert!(serde_json::from_str::<serde_json::Value>(&last.input).is_ok(), "the marker is JSON");
}

#[tokio::test]
async fn an_oversized_grpc_message_ends_the_stream_with_resource_exhausted() {
    let mut cfg = config(&[]);
    cfg.grpc_max_message_bytes = 1 << 20;
    let server = serve(cfg).await;
    let mut client = client(&server).await;
    let mut s =
        Stream::open(&mut client, start_message("print(await t())", vec![tool("t", None)]), None).await.unwrap();
    let batch = s
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    s.send_results(vec![result(&batch.calls[0].id, Ok(json!("x".repeat(2 << 20))))]).await;
    let status = loop {
        match s.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended with OK and no final message"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("limit of 1048576 bytes"), "{}", status.message());
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
}

#[tokio::test]
async fn cancelling_a_paused_http_execution_frees_its_slot_and_request_id_at_once() {
    let mut cfg = config(&[]);
    cfg.tenant_limits.max_concurrent = Some(3);
    let server = serve(cfg).await;
    let addr = server.http_addr;
    attacks::cancel_frees_at_once(addr, None).await;
    assert_eq!(server.http.paused_count(), 0);
    assert_eq!(server.tenants.active("local"), 0);
    eventually("every instance is freed", || server.engine.live_instances() == 0).await;
}

#[tokio::test]
async fn http_connections_are_bounded_and_slow_clients_are_cut_off() {
    let mut cfg = config(&[]);
    let mut limits = ptc_server::front::http::conn::HttpLimits::default();
    limits.max_connections = 4;
    limits.header_timeout = Duration::from_secs(1);
    limits.body_timeout = Duration::from_secs(1);
    cfg.http_limits = limits;
    let server = serve(cfg).await;
    attacks::http_connections(server.http_addr).await;
}

#[tokio::test]
async fn a_tenants_running_executions_are_bounded_by_its_run_slots() {
    let engine = small_engine(|c| c.tenant_max_running = Some(1));
    // Three busy programs of tenant a: one runs, the others wait for its slot in turn, so
    // each gets CPU; they print a counter that must advance in all of them.
    let code =
        "import time\nt0 = time.monotonic()\nn = 0\nwhile time.monotonic() - t0 < 1.5:\n    n += 1\nprint(n > 0)";
    let mut runs = Vec::new();
    for _ in 0..3 {
        let req = ExecutionRequest::new(code)
            .with_tenant("a")
            .with_limits(Limits::default().with_timeout(Duration::from_secs(30)));
        runs.push(tokio::spawn(drive(engine.start(req).await.unwrap(), |_| Ok(json!(null)))));
    }
    // Another tenant is not queued behind them.
    let other =
        drive(engine.start(ExecutionRequest::new("print('b')").with_tenant("b")).await.unwrap(), |_| Ok(json!(null)))
            .await;
    assert_eq!(other.completed().stdout, "b\n");
    for run in runs {
        let done = run.await.unwrap().completed();
        assert_eq!(done.stdout, "True\n");
    }
}

#[tokio::test]
async fn a_c_stack_overflow_is_the_programs_recursion_error() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    // 1,000 levels fit the 1 MiB wasm stack.
    let ok = "import json\nprint(len(json.loads('[' * 1000 + ']' * 1000)))";
    let s = Stream::open(&mut client, start_message(ok, vec![]), None).await.unwrap();
    assert_eq!(completed(s.drive(|_| Ok(json!(null))).await.0).stdout, "1\n");
    for code in ["import json\njson.loads('[' * 100000)", "x = []\nfor _ in range(100000):\n    x = [x]\nrepr(x)"] {
        let s = Stream::open(&mut client, start_message(code, vec![]), None).await.unwrap();
        let f = failed(s.drive(|_| Ok(json!(null))).await.0);
        assert_eq!(f.kind, WireKind::PythonError as i32, "{code}: {} {}", f.message, f.traceback);
        assert!(f.message.starts_with("RecursionError: maximum recursion depth exceeded"), "{}", f.message);
        // It is where a traceback would be: in stderr (after what the program printed) and in
        // `traceback`, so a client that shows those shows it.
        assert_eq!(
            (f.traceback.as_str(), f.stderr.as_str()),
            (f.message.as_str(), format!("{}\n", f.message).as_str())
        );
    }
    eventually("the instances are freed", || server.engine.live_instances() == 0).await;
    // Over HTTP it is a 200, with the error as the model sees it in stderr.
    let r = post(server.http_addr, "/exec", None, &json!({"code": "import json\njson.loads('[' * 100000)"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.body["error"].as_str().unwrap().starts_with("RecursionError"), "{}", r.text);
    assert!(r.body["stderr"].as_str().unwrap().starts_with("RecursionError"), "{}", r.text);
    assert_eq!(r.body["stderr"].as_str().unwrap().matches("RecursionError").count(), 1, "{}", r.text);
}

#[test]
fn defaults_fit_the_machine_and_tenant_caps_are_off() {
    let engine = EngineConfig::default();
    assert_eq!(engine.max_concurrent, ptc_engine::default_max_concurrent(engine.memory_budget));
    assert!(engine.max_concurrent >= 64 && engine.max_concurrent <= 12_000);
    assert_eq!(engine.tenant_max_running, Some(ptc_engine::cores().saturating_sub(1).max(1)));
    let server = ptc_server::ServerConfig::default();
    assert_eq!((server.tenant_limits.max_concurrent, server.tenant_limits.max_paused), (None, None));
}
