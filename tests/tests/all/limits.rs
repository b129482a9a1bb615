//! Deadlines, memory, output, fuel, round trips and request-size limits, each with its own kind.

use std::time::{Duration, Instant};

use ptc_engine::{ErrorKind, ExecutionRequest, FailureKind, Limits, ToolDef};
use ptc_tests::*;

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_deadline_keeping_partial_output() {
    let t0 = Instant::now();
    let exec = start_with(
        "print('working', end='')\nwhile True:\n    pass",
        vec![],
        limits_with_timeout(Duration::from_secs(1)),
    )
    .await;
    let f = drive(exec, echo).await.failed();
    assert_eq!(f.kind, FailureKind::Timeout);
    assert_eq!(f.stdout, "working");
    assert!(t0.elapsed() < Duration::from_secs(10), "stopped after {:?}", t0.elapsed());
}

#[tokio::test]
async fn deadline_expires_while_suspended() {
    let exec = start_with(
        "print('asked')\nawait add(a=1, b=2)\nprint('never')",
        standard_tools(),
        limits_with_timeout(Duration::from_secs(1)),
    )
    .await;
    let mut exec = exec;
    let mut saw_calls = false;
    let f = loop {
        match exec.next_event().await.unwrap() {
            ptc_engine::Event::ToolCalls { .. } => saw_calls = true, // never answered
            ptc_engine::Event::Failed(f) => break f,
            _ => {}
        }
    };
    assert!(saw_calls);
    assert_eq!(f.kind, FailureKind::Timeout);
    assert_eq!(f.stdout, "asked\n");
    assert!(f.stats.wall_time >= Duration::from_secs(1));
}

#[tokio::test]
async fn memory_bomb_fails_with_kind_memory() {
    let limits = Limits::default().with_max_memory_bytes(64 * ptc_engine::MIB);
    let exec =
        start_with("print('start')\nx = []\nwhile True:\n    x.append(bytearray(1 << 20))", vec![], limits).await;
    let f = drive(exec, echo).await.failed();
    assert_eq!(f.kind, FailureKind::Memory, "{}", f.message);
    assert_eq!(f.stdout, "start\n");
    let exec =
        start_with("s = 'a' * (1 << 30)", vec![], Limits::default().with_max_memory_bytes(64 * ptc_engine::MIB)).await;
    assert_eq!(drive(exec, echo).await.failed().kind, FailureKind::Memory);
}

#[tokio::test]
async fn output_flood_is_truncated_and_flagged() {
    let limits = Limits::default().with_max_output_bytes(10_000);
    let exec = start_with("for i in range(100000):\n    print('line', i)\nreturn 'done'", vec![], limits).await;
    let run = drive(exec, echo).await;
    assert_eq!(run.streamed_stdout.len(), 10_000);
    let done = run.completed();
    assert_eq!(done.return_value, "\"done\"");
    assert_eq!(done.stdout.len(), 10_000);
    assert!(done.stdout.starts_with("line 0\nline 1\n"));
    assert!(done.stats.output_truncated);
}

#[tokio::test]
async fn printing_forever_ends_at_the_deadline_with_bounded_output() {
    let limits = Limits::default().with_max_output_bytes(1000).with_timeout(Duration::from_secs(1));
    let exec = start_with("while True:\n    print('spam')", vec![], limits).await;
    let f = drive(exec, echo).await.failed();
    assert_eq!(f.kind, FailureKind::Timeout);
    assert_eq!(f.stdout.len(), 1000);
    assert!(f.stats.output_truncated);
}

#[tokio::test]
async fn fuel_budget_runs_out() {
    let limits = Limits::default().with_fuel(Some(50_000_000));
    let exec = start_with("n = 0\nwhile True:\n    n += 1", vec![], limits).await;
    let f = drive(exec, echo).await.failed();
    assert_eq!(f.kind, FailureKind::Fuel);
    assert!(f.stats.fuel_consumed.unwrap() >= 50_000_000 - 1_000_000);
}

#[tokio::test]
async fn round_trip_limit() {
    let limits = Limits::default().with_max_round_trips(3);
    let exec = start_with("for i in range(10):\n    print(await add(a=i, b=0))", standard_tools(), limits).await;
    let run = drive(exec, standard_handler).await;
    assert_eq!(run.rounds.len(), 3);
    let f = run.failed();
    assert_eq!(f.kind, FailureKind::RoundTrips);
    assert_eq!(f.message, "Exceeded maximum round trips (3)");
    assert_eq!(f.stdout, "0.0\n1.0\n2.0\n");
}

#[tokio::test]
async fn tool_call_limit() {
    let limits = Limits::default().with_max_tool_calls(5);
    let exec = start_with("await asyncio.gather(*[add(a=i, b=0) for i in range(6)])", standard_tools(), limits).await;
    let f = drive(exec, standard_handler).await.failed();
    assert_eq!(f.kind, FailureKind::ToolCalls);
    assert_eq!(f.message, "Exceeded maximum tool calls (5)");
}

#[tokio::test]
async fn request_limits_are_checked_at_start() {
    let e = engine();
    let bad_timeout = Limits::default().with_timeout(Duration::from_millis(500));
    let err = e.start(ExecutionRequest::new("pass").with_limits(bad_timeout)).await.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert!(err.message().contains("timeout must be between 1000 and 300000 ms"), "{err}");
    let too_long = Limits::default().with_timeout(Duration::from_secs(301));
    assert!(e.start(ExecutionRequest::new("pass").with_limits(too_long)).await.is_err());

    let huge = "x = 1\n".repeat(300_000);
    let err = e.start(ExecutionRequest::new(huge)).await.err().unwrap();
    assert!(err.message().starts_with("code is 1800000 bytes; the limit is"), "{err}");

    let many: Vec<_> = (0..300).map(|i| ToolDef::new(format!("t{i}"))).collect();
    let err = e.start(ExecutionRequest::new("pass").with_tools(many)).await.err().unwrap();
    assert!(err.message().contains("300 tools given"), "{err}");
}
