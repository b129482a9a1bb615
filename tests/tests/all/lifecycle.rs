//! Cancellation, dropping the handle, refused tool results, and many executions at once.
//! Each test here owns its engine so instance counts are not disturbed by other tests.

use std::time::Duration;

use ptc_engine::{Engine, ErrorKind, Event, ExecutionRequest, FailureKind, ToolResult, WhenBusy};
use ptc_tests::*;
use serde_json::json;

fn own_engine(max_concurrent: usize, when_busy: WhenBusy) -> Engine {
    engine_with(|c| {
        c.max_concurrent = max_concurrent;
        c.when_busy = when_busy;
    })
}

async fn paused(engine: &Engine) -> ptc_engine::Execution {
    let mut exec = engine
        .start(ExecutionRequest::new("print('waiting')\nawait add(a=1, b=2)").with_tools(standard_tools()))
        .await
        .unwrap();
    loop {
        if let Event::ToolCalls { .. } = exec.next_event().await.unwrap() {
            return exec;
        }
    }
}

#[tokio::test]
async fn cancel_fails_the_execution_and_frees_the_instance() {
    let engine = own_engine(10, WhenBusy::Queue);
    let mut exec = paused(&engine).await;
    assert_eq!(engine.live_instances(), 1);
    eventually("the execution is paused", || engine.paused_executions() == 1).await;
    exec.cancel();
    let f = loop {
        if let Event::Failed(f) = exec.next_event().await.unwrap() {
            break f;
        }
    };
    assert_eq!(f.kind, FailureKind::Cancelled);
    assert_eq!(f.stdout, "waiting\n");
    eventually("the instance is freed", || engine.live_instances() == 0).await;
    assert_eq!(engine.paused_executions(), 0);
    let err = exec.submit(vec![ToolResult::ok("call_1", &json!(1))]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Finished);
}

#[tokio::test]
async fn dropping_the_handle_frees_a_paused_instance() {
    let engine = own_engine(10, WhenBusy::Queue);
    let exec = paused(&engine).await;
    assert_eq!(engine.live_instances(), 1);
    drop(exec);
    eventually("the instance is freed", || engine.live_instances() == 0).await;
}

#[tokio::test]
async fn dropping_the_handle_stops_a_running_loop() {
    let engine = own_engine(10, WhenBusy::Queue);
    let mut exec = engine.start(ExecutionRequest::new("print('go')\nwhile True: pass")).await.unwrap();
    let _ = exec.next_event().await; // the output: it is running
    drop(exec);
    eventually("the instance is freed", || engine.live_instances() == 0).await;
}

#[tokio::test]
async fn bad_result_ids_are_refused_without_harming_the_execution() {
    let engine = own_engine(10, WhenBusy::Queue);
    let mut exec = engine
        .start(
            ExecutionRequest::new("r = await asyncio.gather(add(a=1, b=1), add(a=2, b=2))\nprint(r)")
                .with_tools(standard_tools()),
        )
        .await
        .unwrap();
    let Some(Event::ToolCalls { calls, .. }) = exec.next_event().await else { panic!() };
    let (a, b) = (&calls[0].id, &calls[1].id);

    let err = exec.submit(vec![ToolResult::ok("call_999", &json!(0))]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidToolResult);
    assert!(err.message().contains("\"call_999\" is not a pending tool call"), "{err}");

    let err = exec.submit(vec![ToolResult::ok(a, &json!(2)), ToolResult::ok(a, &json!(2))]).unwrap_err();
    assert!(err.message().contains("answered twice"), "{err}");

    exec.submit(vec![ToolResult::ok(a, &json!(2))]).unwrap();
    let err = exec.submit(vec![ToolResult::ok(a, &json!(5))]).unwrap_err();
    assert!(err.message().contains("already answered"), "{err}");

    // A refused batch applies nothing: b is still pending and can be answered.
    let err = exec.submit(vec![ToolResult::ok(b, &json!(4)), ToolResult::ok("nope", &json!(0))]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidToolResult);
    exec.submit(vec![ToolResult::ok(b, &json!(4))]).unwrap();
    assert_eq!(drive(exec, |_| unreachable!()).await.completed().stdout, "[2, 4]\n");
}

#[tokio::test]
async fn busy_engine_refuses_or_queues() {
    let refusing = own_engine(1, WhenBusy::Refuse);
    let first = paused(&refusing).await;
    let err = refusing.start(ExecutionRequest::new("pass")).await.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Busy);
    drop(first);
    eventually("the slot is free", || refusing.live_instances() == 0).await;
    let done = drive(refusing.start(ExecutionRequest::new("print(1)")).await.unwrap(), echo).await;
    assert_eq!(done.completed().stdout, "1\n");

    let queueing = own_engine(1, WhenBusy::Queue);
    let first = paused(&queueing).await;
    let second = queueing.start(ExecutionRequest::new("print(2)"));
    let waited = tokio::time::timeout(Duration::from_millis(300), second).await;
    assert!(waited.is_err(), "the second execution must wait for a slot");
    drop(first);
    let exec = tokio::time::timeout(Duration::from_secs(10), queueing.start(ExecutionRequest::new("print(2)"))).await;
    assert_eq!(drive(exec.unwrap().unwrap(), echo).await.completed().stdout, "2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_executions() {
    let engine = own_engine(200, WhenBusy::Queue);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let code = format!("a = await add(a={i}, b=1)\nb = await add(a=a, b=1)\nprint(int(b))");
            let exec = engine.start(ExecutionRequest::new(code).with_tools(standard_tools())).await.unwrap();
            drive(exec, standard_handler).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let run = t.await.unwrap();
        assert_eq!(run.rounds.len(), 2);
        assert_eq!(run.completed().stdout, format!("{}\n", i + 2));
    }
    eventually("all instances are freed", || engine.live_instances() == 0).await;
}

#[tokio::test]
async fn shutdown_fails_paused_executions_and_refuses_new_ones() {
    let engine = own_engine(10, WhenBusy::Queue);
    let mut exec = paused(&engine).await;
    engine.shutdown();
    let f = loop {
        if let Event::Failed(f) = exec.next_event().await.unwrap() {
            break f;
        }
    };
    assert_eq!(f.kind, FailureKind::Shutdown);
    assert!(engine.start(ExecutionRequest::new("pass")).await.is_err());
    eventually("the instance is freed", || engine.live_instances() == 0).await;
}
