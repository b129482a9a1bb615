//! Cancellation, dropping the handle, refused tool results, and many executions at once.
//! Each test here owns its engine so instance counts are not disturbed by other tests.

use std::time::Duration;

use ptc_engine::{Engine, ErrorKind, Event, ExecutionRequest, FailureKind, ToolResult, WhenBusy};
use ptc_tests::*;
use serde_json::json;

/// An engine of `max_concurrent` slots whose paused programs hold theirs (they do not
/// hibernate: `hibernation.rs` has the programs that give their slot up).
fn own_engine(max_concurrent: usize, when_busy: WhenBusy) -> Engine {
    engine_with(|c| {
        c.max_concurrent = max_concurrent;
        c.when_busy = when_busy;
        c.hibernate_after = None;
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

/// The pages warm instances copy ahead add up over the programs they learn from, each of
/// which ran in an instance that had the pages already known copied ahead: a first `pass` does
/// not leave a program of ten calls faulting on the pages `pass` never wrote for good.
#[tokio::test]
async fn the_pages_copied_ahead_add_up_over_the_programs_learnt_from() {
    let engine = engine_with(|c| c.warm_instances = 1);
    let ended = |exec| drive(exec, standard_handler);
    ended(engine.start(ExecutionRequest::new("pass")).await.unwrap()).await.completed();
    eventually("a warm instance is made", || engine.warm_instances() == 1).await;
    let after_pass = engine.warm_pages_ahead();
    assert!(after_pass > 0, "pass's pages are learnt");

    // The next program is the one in LEARN_EVERY read (the first is `pass`), in the warm
    // instance with `pass`'s pages copied ahead.
    let code = "t = 0\nfor i in range(10):\n    t = await add(a=t, b=i)\nprint(t)";
    let request = ExecutionRequest::new(code).with_tools(standard_tools());
    let done = ended(engine.start(request).await.unwrap()).await.completed();
    assert!(done.stats.instantiate_time.is_zero(), "the warm instance served it");
    assert_eq!(done.stdout, "45.0\n");
    // Learnt once the result is out (`drive`), before the next warm instance is made.
    eventually("the next warm instance is made", || engine.warm_instances() == 1).await;
    let after_calls = engine.warm_pages_ahead();
    assert!(after_calls > after_pass, "{after_pass} pages after pass, {after_calls} after the calls");
}

/// A warm instance (made ahead of demand, in idle time) serves a fresh execution exactly as a
/// new one would: the request's own `/mnt/data`, output, memory limit and tools; it is never
/// counted as live, and it is freed when the engine stops accepting.
#[tokio::test]
async fn a_warm_instance_takes_on_the_requests_files_output_and_limits() {
    let engine = engine_with(|c| c.warm_instances = 1);
    let ended = |exec| drive(exec, standard_handler);

    // Nothing is made before the first execution (no server called warm_up): it instantiates.
    let first = ended(engine.start(ExecutionRequest::new("pass")).await.unwrap()).await.completed();
    assert!(!first.stats.instantiate_time.is_zero());
    eventually("a warm instance is made after the execution", || engine.warm_instances() == 1).await;
    assert_eq!(engine.live_instances(), 0, "a warm instance is not an execution");
    // It copied ahead the pages the first program wrote (`pass`: about 150).
    let ahead = engine.warm_pages_ahead();
    assert!((100..1024).contains(&ahead), "{ahead} pages ahead");

    let (root, dir) = data_dir_beside_a_secret("warm");
    std::fs::write(dir.join("in.txt"), "from the host").unwrap();
    let code = "print(open('/mnt/data/in.txt').read())\nopen('/mnt/data/out.txt', 'w').write('x')\n\
                print(await add(a=1, b=2))";
    let request = ExecutionRequest::new(code).with_tools(standard_tools()).with_data_dir(dir.clone());
    let done = ended(engine.start(request).await.unwrap()).await.completed();
    assert!(done.stats.instantiate_time.is_zero(), "the warm instance served it");
    assert_eq!(done.stdout, "from the host\n3.0\n");
    assert_eq!(std::fs::read_to_string(dir.join("out.txt")).unwrap(), "x");
    std::fs::remove_dir_all(&root).unwrap();

    // A warm instance has no `/mnt/data` of its own to leak into a request without one.
    eventually("the next warm instance is made", || engine.warm_instances() == 1).await;
    let code = "import os\nprint(os.path.exists('/mnt/data'))";
    let done = ended(engine.start(ExecutionRequest::new(code)).await.unwrap()).await.completed();
    assert!(done.stats.instantiate_time.is_zero());
    assert_eq!(done.stdout, "False\n");

    eventually("the next warm instance is made", || engine.warm_instances() == 1).await;
    let limits = ptc_engine::Limits::default().with_max_memory_bytes(64 * ptc_engine::MIB);
    let exec = engine.start(ExecutionRequest::new("b = bytearray(200 * 2**20)").with_limits(limits)).await.unwrap();
    let failed = ended(exec).await.failed();
    assert_eq!(failed.kind, FailureKind::Memory, "{}", failed.message);
    assert!(failed.stats.instantiate_time.is_zero());

    eventually("the next warm instance is made", || engine.warm_instances() == 1).await;
    engine.stop_accepting();
    assert_eq!(engine.warm_instances(), 0);
}
