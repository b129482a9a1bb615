//! Hibernation. A parked program asked off the native stack (`Control::request_unwind`)
//! unwinds its event loop out of the instance's export, keeping its tasks in memory, and is
//! re-entered (`resume`) where it was; a program running a loop of its own declines and stays
//! parked. With `EngineConfig::hibernate_after`, a program that
//! waits that long is hibernated: its instance and slot freed, its memory kept as compressed
//! pages, and thawed into another instance when answers arrive or a timer is due.

use std::time::Duration;

use ptc_engine::{Engine, Event, Execution, ExecutionRequest, FailureKind, Runtime, SessionRequest, ToolResult};
use ptc_tests::*;
use serde_json::json;

/// Whether the runtime re-entered the program (its `resume` path is on the stack): what the
/// program reads of itself, before and after its awaits.
const ENTERED_BY: &str = "import sys\n\
def resumed():\n    \
    f = sys._getframe()\n    \
    while f is not None:\n        \
        if f.f_code.co_name == 'resume_program':\n            \
            return True\n        \
        f = f.f_back\n    \
    return False\n";

/// Each of `n` tasks adds and prints `got` with its result as it arrives: the program's
/// half-answered gather.
fn gather(n: usize) -> String {
    let calls: Vec<String> = (1..=n).map(|i| format!("one(a={i}, b={i})")).collect();
    format!(
        "async def one(**kw):\n    v = await add(**kw)\n    print('got', v)\n    return v\n\
         r = await asyncio.gather({})\n",
        calls.join(", ")
    )
}

/// Waits for the first batch of calls and answers the first of them; once the program has
/// printed that it got it (its output goes out as it blocks again), asks it off the stack,
/// then answers the rest and drives it to its end.
async fn unwind_mid_gather(exec: Execution) -> Run {
    let mut exec = exec;
    let answer = |c: &ptc_engine::ToolCall| ToolResult::ok(&c.id, &standard_handler(c).unwrap());
    let calls = loop {
        match exec.next_event().await.expect("an event") {
            Event::ToolCalls { calls, .. } => break calls,
            Event::Output { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    };
    exec.submit(vec![answer(&calls[0])]).unwrap();
    loop {
        match exec.next_event().await.expect("an event") {
            Event::Output { data, .. } if String::from_utf8_lossy(&data).contains("got") => break,
            Event::Output { .. } => {}
            other => panic!("expected the program's output, got {other:?}"),
        }
    }
    // Nothing else has been answered: its next wait (now, or already parked) takes the
    // request and unwinds, whatever arrives after that.
    let control = exec.control();
    control.request_unwind();
    eventually("the program's wait takes the request", || !control.unwind_requested()).await;
    exec.submit(calls[1..].iter().map(answer).collect()).unwrap();
    drive(exec, standard_handler).await
}

#[tokio::test]
async fn a_parked_program_gets_off_the_stack_and_goes_on_where_it_was() {
    let code = format!(
        "{ENTERED_BY}\
import random, time\n\
t0 = time.monotonic()\n\
x = random.random()\n\
async def later():\n    await asyncio.sleep(0.01)\n    return 'slept'\n\
timer = asyncio.ensure_future(later())\n\
print('before', resumed())\n\
{}\
print('after', resumed(), r)\n\
return [r, await timer, time.monotonic() >= t0, 0 <= x < 1, random.random() != x]",
        gather(3)
    );
    let exec = start(&code, standard_tools()).await;
    let done = unwind_mid_gather(exec).await.completed();
    assert_eq!(done.stdout, "before False\ngot 2.0\ngot 4.0\ngot 6.0\nafter True [2.0, 4.0, 6.0]\n", "{}", done.stderr);
    let value: serde_json::Value = serde_json::from_str(&done.return_value).unwrap();
    assert_eq!(value, json!([[2.0, 4.0, 6.0], "slept", true, true, true]));
    assert_eq!(done.tool_calls.len(), 3);
    assert_eq!(done.stats.round_trips, 1, "the calls went out once");
}

#[tokio::test]
async fn a_program_running_its_own_event_loop_declines_and_stays_parked() {
    let body = gather(2).replace('\n', "\n    ");
    let code = format!("{ENTERED_BY}async def main():\n    {body}return r, resumed()\nprint(asyncio.run(main()))");
    let exec = start(&code, standard_tools()).await;
    let done = unwind_mid_gather(exec).await.completed();
    assert_eq!(done.stdout, "got 2.0\ngot 4.0\n([2.0, 4.0], False)\n", "{}", done.stderr);
}

#[tokio::test]
async fn a_sessions_program_goes_on_after_it_and_the_session_keeps_its_globals() {
    let engine = engine();
    let (session, _) = engine.open_session(SessionRequest::new()).await.expect("open session");
    let code = format!("{ENTERED_BY}{}flag = resumed()", gather(2));
    let request = ExecutionRequest::new(code).with_tools(standard_tools());
    let exec = engine.execute_in(&session, request).await.unwrap();
    unwind_mid_gather(exec).await.completed();
    let request = ExecutionRequest::new("print(r[1] * 2, flag)").with_tools(standard_tools());
    let done = drive(engine.execute_in(&session, request).await.unwrap(), standard_handler).await.completed();
    assert_eq!(done.stdout, "8.0 True\n");
    session.close();
}

#[tokio::test]
async fn a_data_program_gets_off_the_stack_and_goes_on_where_it_was() {
    let code = format!("{ENTERED_BY}{}print(r, resumed())", gather(2));
    let request = ExecutionRequest::new(code).with_runtime(Runtime::PythonData).with_tools(standard_tools());
    let exec = data_engine().start(request).await.unwrap();
    let done = unwind_mid_gather(exec).await.completed();
    assert_eq!(done.stdout, "got 2.0\ngot 4.0\n[2.0, 4.0] True\n", "{}", done.stderr);
}

/// An engine that hibernates a program once it has waited 30 ms; `max_concurrent` slots.
fn hibernating(max_concurrent: usize) -> Engine {
    engine_with(|c| {
        c.hibernate_after = Some(Duration::from_millis(30));
        c.max_concurrent = max_concurrent;
    })
}

/// The first batch of calls, the program's output before it included.
async fn first_calls(exec: &mut Execution) -> Vec<ptc_engine::ToolCall> {
    loop {
        match exec.next_event().await.expect("an event") {
            Event::ToolCalls { calls, .. } => return calls,
            Event::Output { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    }
}

async fn until_hibernated(engine: &Engine, n: usize) {
    eventually("the program hibernates", || engine.hibernated() == n).await;
}

#[tokio::test]
async fn a_waiting_program_hibernates_and_thaws_where_it_stopped() {
    let engine = hibernating(64);
    let (root, dir) = data_dir_beside_a_secret("hibernate");
    // Output on both streams and a file written and read back before the first wait; a
    // gather half answered; a timer due while it is hibernated; clocks and random values
    // read before and after, and a generator of its own, all carried in memory.
    let code = format!(
        "{ENTERED_BY}\
import random, sys, time\n\
t0 = time.monotonic()\n\
x = random.random()\n\
squares = (i * i for i in range(10))\n\
first = [next(squares) for _ in range(3)]\n\
print('out before', resumed())\n\
print('err before', file=sys.stderr)\n\
with open('/mnt/data/notes.txt', 'w') as f:\n    f.write('kept')\n\
async def later():\n    await asyncio.sleep(0.3)\n    print('timer fired')\n    return 'slept'\n\
timer = asyncio.ensure_future(later())\n\
{}\
print('after', resumed(), r)\n\
print('err after', file=sys.stderr)\n\
return [r, await timer, time.monotonic() - t0 >= 0.3, 0 <= x < 1, random.random() != x, \
first + list(squares), open('/mnt/data/notes.txt').read()]",
        gather(3)
    );
    let request = ExecutionRequest::new(code).with_tools(standard_tools()).with_data_dir(dir.clone());
    let mut exec = engine.start(request).await.unwrap();
    let calls = first_calls(&mut exec).await;
    let answer = |c: &ptc_engine::ToolCall| ToolResult::ok(&c.id, &standard_handler(c).unwrap());
    exec.submit(vec![answer(&calls[0])]).unwrap();
    until_hibernated(&engine, 1).await;
    // The timer is due 0.3 s in, while it sleeps: it thaws, runs it, waits and hibernates
    // again, this time until the answers come.
    let mut printed = String::new();
    while !printed.contains("timer fired") {
        match exec.next_event().await.expect("an event") {
            Event::Output { data, .. } => printed.push_str(&String::from_utf8_lossy(&data)),
            other => panic!("expected the program's output, got {other:?}"),
        }
    }
    until_hibernated(&engine, 1).await;
    assert_eq!(engine.live_instances(), 0, "the instance is freed");
    assert!(exec.control().is_paused(), "a hibernated program is paused");
    exec.submit(calls[1..].iter().map(answer).collect()).unwrap();
    let done = drive(exec, standard_handler).await.completed();
    assert_eq!(
        done.stdout, "out before False\ngot 2.0\ntimer fired\ngot 4.0\ngot 6.0\nafter True [2.0, 4.0, 6.0]\n",
        "{}",
        done.stderr
    );
    assert_eq!(done.stderr, "err before\nerr after\n");
    let value: serde_json::Value = serde_json::from_str(&done.return_value).unwrap();
    assert_eq!(
        value,
        json!([[2.0, 4.0, 6.0], "slept", true, true, true, [0, 1, 4, 9, 16, 25, 36, 49, 64, 81], "kept"])
    );
    assert_eq!(done.stats.round_trips, 1, "the calls went out once");
    assert_eq!((engine.hibernated(), engine.live_instances()), (0, 0));
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_program_holding_an_open_file_stays_live() {
    let engine = hibernating(64);
    let (root, dir) = data_dir_beside_a_secret("hibernate-open");
    std::fs::write(dir.join("in.txt"), "abc").unwrap();
    let code = "f = open('/mnt/data/in.txt')\nr = await add(a=1, b=2)\nreturn [r, f.read()]";
    let request = ExecutionRequest::new(code).with_tools(standard_tools()).with_data_dir(dir.clone());
    let mut exec = engine.start(request).await.unwrap();
    let calls = first_calls(&mut exec).await;
    // Past hibernate_after, it is still live: asked, it declined.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!((engine.hibernated(), engine.live_instances()), (0, 1));
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    let done = drive(exec, standard_handler).await.completed();
    assert_eq!(done.return_value, r#"[3, "abc"]"#);
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_hibernated_program_gives_its_slot_to_another() {
    let engine = hibernating(1);
    let mut first =
        engine.start(ExecutionRequest::new("return await add(a=1, b=2)").with_tools(standard_tools())).await.unwrap();
    let calls = first_calls(&mut first).await;
    until_hibernated(&engine, 1).await;
    // The only slot is free again: another program runs to its end meanwhile.
    let other = engine.start(ExecutionRequest::new("print('other')")).await.unwrap();
    assert_eq!(drive(other, standard_handler).await.completed().stdout, "other\n");
    first.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    assert_eq!(drive(first, standard_handler).await.completed().return_value, "3");
}

#[tokio::test]
async fn a_hibernated_program_can_be_cancelled_and_times_out() {
    let engine = hibernating(64);
    let code = "print('waiting')\nreturn await add(a=1, b=2)";
    let mut cancelled = engine.start(ExecutionRequest::new(code).with_tools(standard_tools())).await.unwrap();
    first_calls(&mut cancelled).await;
    until_hibernated(&engine, 1).await;
    cancelled.cancel();
    let failed = drive(cancelled, standard_handler).await.failed();
    assert_eq!((failed.kind, failed.stdout.as_str()), (FailureKind::Cancelled, "waiting\n"));
    assert_eq!(engine.hibernated(), 0);

    let request = ExecutionRequest::new(code)
        .with_tools(standard_tools())
        .with_limits(limits_with_timeout(Duration::from_secs(1)));
    let mut late = engine.start(request).await.unwrap();
    first_calls(&mut late).await;
    until_hibernated(&engine, 1).await;
    let failed = drive(late, |_| Err("never answered".into())).await;
    let failed = failed.failed();
    assert_eq!(failed.kind, FailureKind::Timeout);
    assert_eq!((engine.hibernated(), engine.live_instances()), (0, 0));
}

#[tokio::test]
async fn an_idle_session_hibernates_and_its_next_program_finds_everything() {
    let engine = hibernating(64);
    let (root, dir) = data_dir_beside_a_secret("hibernate-session");
    // Hibernated before its first program too: it then holds no handles at all.
    let (session, _) = engine.open_session(SessionRequest::new().with_data_dir(dir.clone())).await.unwrap();
    until_hibernated(&engine, 1).await;
    assert_eq!(engine.live_instances(), 0);
    let run = |code: &str| {
        let request = ExecutionRequest::new(code).with_tools(standard_tools());
        let exec = engine.execute_in(&session, request);
        async move { drive(exec.await.unwrap(), standard_handler).await.completed() }
    };
    let code = "import random, time\nt0 = time.monotonic()\nx = random.random()\n\
                squares = (i * i for i in range(10))\nfirst = next(squares)\n\
                open('/mnt/data/s.txt', 'w').write('kept')\nprint('one')";
    assert_eq!(run(code).await.stdout, "one\n");
    until_hibernated(&engine, 1).await;
    assert_eq!(engine.live_instances(), 0);
    let code = "print('two', first, next(squares), time.monotonic() >= t0, random.random() != x, \
                open('/mnt/data/s.txt').read(), await add(a=1, b=2))";
    assert_eq!(run(code).await.stdout, "two 0 1 True True kept 3.0\n");
    until_hibernated(&engine, 1).await;
    // A snapshot thaws it too.
    let state = session.snapshot(1 << 20).await.unwrap();
    assert!(state.kept.contains(&"x".to_string()), "{:?}", state.kept);
    session.close();
    eventually("the session ends", || engine.hibernated() == 0 && engine.live_instances() == 0).await;
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_start_finding_no_slot_hibernates_the_longest_waiting_first() {
    // Nothing hibernates on its own within the test: only for want of a slot.
    let engine = engine_with(|c| {
        c.hibernate_after = Some(Duration::from_secs(60));
        c.max_concurrent = 2;
        c.when_busy = ptc_engine::WhenBusy::Refuse;
    });
    let mut waiting =
        engine.start(ExecutionRequest::new("return await add(a=1, b=2)").with_tools(standard_tools())).await.unwrap();
    let calls = first_calls(&mut waiting).await;
    let (session, _) = engine.open_session(SessionRequest::new()).await.unwrap();
    let request = ExecutionRequest::new("kept = 5").with_tools(standard_tools());
    drive(engine.execute_in(&session, request).await.unwrap(), standard_handler).await.completed();
    assert_eq!((engine.hibernated(), engine.live_instances()), (0, 2));

    // Both slots are taken: the paused program, which has waited longest, hibernates.
    let mut first =
        engine.start(ExecutionRequest::new("return await add(a=2, b=2)").with_tools(standard_tools())).await.unwrap();
    let first_calls_ = first_calls(&mut first).await;
    assert_eq!(engine.hibernated(), 1);
    // Then the idle session, idle since before `first` paused.
    let second = engine.start(ExecutionRequest::new("print('second')")).await.unwrap();
    assert_eq!(drive(second, standard_handler).await.completed().stdout, "second\n");
    assert_eq!(engine.hibernated(), 2);
    // Each thaws when needed: the session into the slot `second` left; the first program
    // into the slot of `first`, which hibernates for it.
    let request = ExecutionRequest::new("print(kept)").with_tools(standard_tools());
    let done = drive(engine.execute_in(&session, request).await.unwrap(), standard_handler).await.completed();
    assert_eq!(done.stdout, "5\n");
    assert_eq!(engine.hibernated(), 1);
    waiting.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    assert_eq!(drive(waiting, standard_handler).await.completed().return_value, "3");
    assert_eq!(engine.hibernated(), 1, "`first` gave its slot up");
    first.submit(vec![ToolResult::ok(&first_calls_[0].id, &json!(4))]).unwrap();
    assert_eq!(drive(first, standard_handler).await.completed().return_value, "4");
    assert_eq!(engine.hibernated(), 0);
}

#[tokio::test]
async fn grpc_and_the_http_api_thaw_what_hibernated() {
    use ptc_tests::grpc::{Msg, Stream, client, completed, config, result, serve, start_message, tool};
    let mut config = config(&[]);
    config.engine.hibernate_after = Some(Duration::from_millis(30));
    let server = serve(config).await;
    let code = "print('a')\nv = await ten(a=1)\nprint('b', v)";

    let mut grpc = client(&server).await;
    let mut stream = Stream::open(&mut grpc, start_message(code, vec![tool("ten", None)]), None).await.unwrap();
    let calls = stream.until(|m| if let Msg::ToolCalls(c) = m { Some(c) } else { None }).await;
    eventually("the stream's program hibernates", || server.engine.hibernated() == 1).await;
    stream.send_results(vec![result(&calls.calls[0].id, Ok(json!(7)))]).await;
    let done = completed(stream.until(|m| matches!(m, Msg::Completed(_) | Msg::Failed(_)).then_some(m)).await);
    assert_eq!(done.stdout, "a\nb 7\n");

    let tools = json!([{"name": "ten", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]);
    let path = "/exec/programmatic";
    let reply = ptc_tests::http::post(server.http_addr, path, None, &json!({"code": code, "tools": tools})).await;
    assert_eq!(reply.body["status"], "tool_call_required", "{}", reply.text);
    eventually("the HTTP program hibernates", || server.engine.hibernated() == 1).await;
    let call_id = reply.body["tool_calls"][0]["id"].clone();
    let next = json!({
        "continuation_token": reply.body["continuation_token"],
        "tool_results": [{"call_id": call_id, "result": 8, "is_error": false}],
    });
    let reply = ptc_tests::http::post(server.http_addr, path, None, &next).await;
    assert_eq!(
        (reply.body["status"].as_str(), reply.body["stdout"].as_str()),
        (Some("completed"), Some("a\nb 8\n")),
        "{}",
        reply.text
    );
    assert_eq!(server.engine.hibernated(), 0);
}

#[tokio::test]
async fn a_program_whose_memory_grew_thaws_into_memory_grown_as_far() {
    let engine = hibernating(64);
    // 30 MB past the snapshot's 24 MB heap, with bytes of its own spread over it.
    let code = "b = bytearray(range(256)) * 120000\nb[12345] = 7\nb[-1] = 9\nv = await add(a=1, b=2)\n\
                c = bytearray(5_000_000)\n\
                return [len(b), b[12345], b[-1], b[-2], sum(b[:1000]), v, len(c)]";
    let mut exec = engine.start(ExecutionRequest::new(code).with_tools(standard_tools())).await.unwrap();
    let calls = first_calls(&mut exec).await;
    until_hibernated(&engine, 1).await;
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    let done = drive(exec, standard_handler).await.completed();
    assert_eq!(done.return_value, "[30720000, 7, 9, 254, 124716, 3, 5000000]");
}

#[tokio::test]
async fn a_session_that_declines_keeps_its_slot() {
    let engine = engine_with(|c| {
        c.hibernate_after = Some(Duration::from_millis(30));
        c.max_concurrent = 1;
        c.when_busy = ptc_engine::WhenBusy::Refuse;
    });
    let (root, dir) = data_dir_beside_a_secret("hibernate-declines");
    let (session, _) = engine.open_session(SessionRequest::new().with_data_dir(dir.clone())).await.unwrap();
    // It keeps a file open, so it declines, once idle (and again when a start asks it).
    let request = ExecutionRequest::new("f = open('/mnt/data/x.txt', 'w')").with_tools(standard_tools());
    drive(engine.execute_in(&session, request).await.unwrap(), standard_handler).await.completed();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!((engine.hibernated(), engine.live_instances()), (0, 1));
    let refused = engine.start(ExecutionRequest::new("pass")).await.err().expect("the only slot is the session's");
    assert_eq!(refused.kind(), ptc_engine::ErrorKind::Busy);
    session.close();
    std::fs::remove_dir_all(root).unwrap();
}

/// Keeps every sealed image it is given, or refuses them all.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    images: std::sync::Mutex<Vec<ptc_engine::Hibernated>>,
    refuse: bool,
}

impl ptc_engine::Keeper for Kept {
    fn keep(
        &self,
        image: ptc_engine::Hibernated,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
        let kept = if self.refuse {
            Err("the store is down".to_string())
        } else {
            self.images.lock().unwrap().push(image);
            Ok(())
        };
        Box::pin(async move { kept })
    }
}

impl Kept {
    pub(crate) fn count(&self) -> usize {
        self.images.lock().unwrap().len()
    }

    pub(crate) fn last(&self) -> ptc_engine::Hibernated {
        self.images.lock().unwrap().last().cloned().expect("an image")
    }
}

/// Two engines that share a seal key, as two servers of a cluster do; `hibernate_after` for
/// the first.
fn sealing_engine(hibernate_after: Option<Duration>, key: &[u8]) -> Engine {
    engine_with(|c| {
        c.hibernate_after = hibernate_after;
        c.seal_key = Some(key.to_vec());
    })
}

#[tokio::test]
async fn a_sealed_image_thaws_on_another_engine_and_finishes_as_an_uninterrupted_run() {
    let (root, dir) = data_dir_beside_a_secret("hibernate-sealed");
    // Seeded random values, a generator, a file, clocks, both streams and a timer due while
    // it sleeps; a gather half answered when it is carried over.
    let code = format!(
        "import random, sys, time\n\
random.seed(7)\n\
t0 = time.monotonic()\n\
squares = (i * i for i in range(10))\n\
first = [next(squares) for _ in range(3)]\n\
print('before', random.random())\n\
print('err before', file=sys.stderr)\n\
with open('/mnt/data/notes.txt', 'w') as f:\n    f.write('kept')\n\
async def later():\n    await asyncio.sleep(0.3)\n    print('timer fired')\n    return 'slept'\n\
timer = asyncio.ensure_future(later())\n\
{}\
print('after', r, random.random())\n\
print('err after', file=sys.stderr)\n\
return [r, await timer, time.monotonic() - t0 >= 0.3, first + list(squares), open('/mnt/data/notes.txt').read()]",
        gather(3)
    );
    let request = || ExecutionRequest::new(code.clone()).with_tools(standard_tools()).with_data_dir(dir.clone());
    let answer = |c: &ptc_engine::ToolCall| ToolResult::ok(&c.id, &standard_handler(c).unwrap());

    // The run as it goes uninterrupted, answered the same way.
    let mut reference = engine().start(request()).await.unwrap();
    let calls = first_calls(&mut reference).await;
    reference.submit(vec![answer(&calls[0])]).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    reference.submit(calls[1..].iter().map(answer).collect()).unwrap();
    let reference = drive(reference, standard_handler).await.completed();
    assert!(reference.stdout.contains("timer fired\n"), "{}", reference.stdout);

    let first = sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
    let kept = std::sync::Arc::new(Kept::default());
    let mut exec = first.start(request().with_keeper(kept.clone())).await.unwrap();
    let calls = first_calls(&mut exec).await;
    exec.submit(vec![answer(&calls[0])]).unwrap();
    // Hibernated once with one answer taken, thawed for the timer, hibernated again.
    eventually("it hibernates again after its timer", || kept.count() >= 2).await;
    let image = kept.last();
    assert_eq!((image.execution_id.as_str(), image.round, image.tenant.as_deref()), (exec.id(), 1, None));
    let id = exec.id().to_string();
    // Its server is gone.
    drop(exec);
    drop(first);

    let second = sealing_engine(None, b"cluster key");
    let thawed = second.thaw(&id, &image.bytes, request()).await.unwrap();
    assert_eq!(thawed.id(), id);
    assert_eq!(second.hibernated(), 1, "it sleeps until its answers come");
    assert_eq!(thawed.control().pending_through(1).len(), 2);
    // An answer already given, or to a call it never made, is refused as it would have been.
    let refused = thawed.submit(vec![answer(&calls[0])]).unwrap_err();
    assert_eq!(refused.kind(), ptc_engine::ErrorKind::InvalidToolResult);
    thawed.submit(calls[1..].iter().map(answer).collect()).unwrap();
    let done = drive(thawed, standard_handler).await.completed();
    assert_eq!(done.stdout, reference.stdout);
    assert_eq!(done.stderr, reference.stderr);
    assert_eq!(done.return_value, reference.return_value);
    assert_eq!(done.tool_calls.len(), 3);
    assert_eq!(done.tool_calls.iter().filter(|c| c.outcome.is_some()).count(), 3);
    assert_eq!(done.stats.round_trips, 1, "the calls went out once");
    assert!(done.stats.wall_time >= Duration::from_millis(300), "{:?}", done.stats.wall_time);
    assert_eq!((second.hibernated(), second.live_instances()), (0, 0));
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_sealed_image_is_refused_when_altered_foreign_or_too_large() {
    let first = sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
    let kept = std::sync::Arc::new(Kept::default());
    let request = || ExecutionRequest::new("return await add(a=1, b=2)").with_tools(standard_tools());
    let mut exec = first.start(request().with_tenant("acme").with_keeper(kept.clone())).await.unwrap();
    first_calls(&mut exec).await;
    eventually("it hibernates", || kept.count() == 1).await;
    let (id, bytes) = (exec.id().to_string(), kept.last().bytes);

    let second = sealing_engine(None, b"cluster key");
    let refusal = |r: ptc_engine::Result<Execution>| {
        let e = r.err().expect("refused");
        assert_eq!(e.kind(), ptc_engine::ErrorKind::InvalidRequest);
        e.message().to_string()
    };
    let mut altered = bytes.clone();
    altered[bytes.len() / 2] ^= 1;
    assert!(refusal(second.thaw(&id, &altered, request().with_tenant("acme")).await).contains("altered"));
    assert!(refusal(second.thaw(&id, &bytes, request().with_tenant("globex")).await).contains("another tenant"));
    assert!(refusal(second.thaw("other", &bytes, request().with_tenant("acme")).await).contains("another execution"));
    let stranger = sealing_engine(None, b"another cluster");
    assert!(refusal(stranger.thaw(&id, &bytes, request().with_tenant("acme")).await).contains("another key"));
    let small = engine_with(|c| {
        c.seal_key = Some(b"cluster key".to_vec());
        c.ceilings.max_hibernated_bytes = 1000;
    });
    let message = refusal(small.thaw(&id, &bytes, request().with_tenant("acme")).await);
    assert!(message.contains("over this server's bound of 1000"), "{message}");
    assert_eq!((second.hibernated(), second.live_instances()), (0, 0), "a refusal leaves nothing behind");

    // The image itself still thaws, and the program goes on.
    let thawed = second.thaw(&id, &bytes, request().with_tenant("acme")).await.unwrap();
    let pending = thawed.control().pending_through(1);
    thawed.submit(vec![ToolResult::ok(&pending[0], &json!(3))]).unwrap();
    assert_eq!(drive(thawed, standard_handler).await.completed().return_value, "3");
    drop(exec);
}

#[tokio::test]
async fn an_image_that_cannot_be_kept_leaves_the_program_live() {
    let engine = sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
    let kept = std::sync::Arc::new(Kept { refuse: true, ..Kept::default() });
    let request = ExecutionRequest::new("return await add(a=1, b=2)").with_tools(standard_tools()).with_keeper(kept);
    let mut exec = engine.start(request).await.unwrap();
    let calls = first_calls(&mut exec).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!((engine.hibernated(), engine.live_instances()), (0, 1), "the store is down: it stays live");
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    assert_eq!(drive(exec, standard_handler).await.completed().return_value, "3");
}

#[tokio::test]
async fn an_mcp_session_hibernates_between_its_programs() {
    use ptc_server::front::mcp::McpConfig;
    let mut config = ptc_tests::grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::default();
    config.engine.hibernate_after = Some(Duration::from_millis(30));
    let server = ptc_tests::grpc::serve(config).await;
    // Before protocol 2026-07-28 an MCP session's programs share one live session.
    let client = crate::mcp::older_client(server.http_addr, "acme-key").await;
    let first = crate::mcp::execute(&client, "import random\nrandom.seed(5)\nx = random.random()\nprint('set')").await;
    assert_eq!(crate::mcp::stdout(&first), "set\n", "{first:?}");
    eventually("the idle session hibernates", || server.engine.hibernated() == 1).await;
    assert_eq!(server.engine.live_instances(), 0, "its instance is freed");
    let next =
        crate::mcp::execute(&client, "y = random.random()\nrandom.seed(5)\nprint(x == random.random(), y != x)").await;
    assert_eq!(crate::mcp::stdout(&next), "True True\n", "{next:?}");
    assert_eq!(server.engine.hibernated(), 0);
    client.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn a_single_server_keeps_hibernated_executions_on_disk_across_a_restart() {
    let files = std::env::temp_dir().join(format!("ptc-images-restart-{}", std::process::id()));
    let mut config = ptc_tests::grpc::data_config(&["acme:acme-key"]);
    config.token_secret = Some("a secret that outlives the process".into());
    config.files.dir = files.clone();
    config.engine.hibernate_after = Some(Duration::from_millis(30));
    let server = ptc_tests::grpc::serve(config.clone()).await;
    let tools = json!([{"name": "ten", "parameters": {"type": "object"}}]);
    let path = "/exec/programmatic";
    let code = "import random\nrandom.seed(9)\nx = random.random()\n\
                with open('/mnt/data/n.txt', 'a') as f:\n    f.write('+')\n\
                v = await ten()\nw = await ten()\nprint(v, w, x == random.Random(9).random(), open('/mnt/data/n.txt').read())";
    let post =
        |addr, body: serde_json::Value| async move { ptc_tests::http::post(addr, path, Some("acme-key"), &body).await };
    let next = |reply: &ptc_tests::http::Reply, value: i64| {
        let id = reply.body["tool_calls"][0]["id"].clone();
        json!({"continuation_token": reply.body["continuation_token"], "tool_results": [{"call_id": id, "result": value}]})
    };
    let first = post(server.http_addr, json!({"code": code, "tools": tools})).await;
    assert_eq!(first.body["status"], "tool_call_required", "{}", first.text);
    // One of the data runtime, with a DataFrame.
    let data_code = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\n\
                     df['b'] = df.a * await ten()\nprint(df.b.tolist())";
    let data = post(server.http_addr, json!({"code": data_code, "tools": tools, "runtime": "python-data"})).await;
    assert_eq!(data.body["status"], "tool_call_required", "{}", data.text);
    // Another that is cancelled: its image goes with it.
    let reply = ptc_tests::http::post_raw(
        server.http_addr,
        path,
        &[("X-API-Key", "acme-key"), ("x-librechat-code-request-id", "req-1")],
        &serde_json::to_vec(&json!({"code": "print(await ten())", "tools": tools})).unwrap(),
    )
    .await;
    assert_eq!(reply.body["status"], "tool_call_required", "{}", reply.text);
    let kept = || std::fs::read_dir(files.join(".hibernated")).map_or(0, |d| d.count());
    eventually("all three are kept on disk", || kept() == 3).await;
    let cancel = json!({"request_id": "req-1"});
    let cancelled =
        ptc_tests::http::post(server.http_addr, "/exec/programmatic/cancel", Some("acme-key"), &cancel).await;
    assert_eq!(cancelled.body["status"], "cancelled", "{}", cancelled.text);
    eventually("the cancelled one's image is gone", || kept() == 2).await;
    server.shutdown();
    server.wait().await;

    // The server restarts: the continuation finds its image and the program goes on.
    let server = ptc_tests::grpc::serve(config.clone()).await;
    let second = post(server.http_addr, next(&first, 10)).await;
    assert_eq!(second.body["status"], "tool_call_required", "{}", second.text);
    // The used token is refused: a round resumes once.
    let again = post(server.http_addr, next(&first, 10)).await;
    assert_eq!(again.body["error"], "Invalid continuation token", "{}", again.text);
    let end = post(server.http_addr, next(&second, 20)).await;
    assert_eq!(
        (end.body["status"].as_str(), end.body["stdout"].as_str()),
        (Some("completed"), Some("10 20 True +\n")),
        "{}",
        end.text
    );
    let end = post(server.http_addr, next(&data, 10)).await;
    assert_eq!(
        (end.body["status"].as_str(), end.body["stdout"].as_str()),
        (Some("completed"), Some("[10, 20, 30]\n")),
        "{}",
        end.text
    );
    eventually("its image is gone once it ended", || kept() == 0).await;
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test]
async fn a_draining_server_hibernates_what_waits_and_after_its_restart_thaws_it() {
    let files = std::env::temp_dir().join(format!("ptc-images-drain-{}", std::process::id()));
    let mut config = ptc_tests::grpc::config(&["acme:acme-key"]);
    config.token_secret = Some("a secret that outlives the process".into());
    config.files.dir = files.clone();
    // Far longer than the test: only the drain hibernates it, within the grace period (the
    // paused execution holds the drain that long).
    config.engine.hibernate_after = Some(Duration::from_secs(600));
    config.shutdown_grace = Duration::from_secs(2);
    let server = ptc_tests::grpc::serve(config.clone()).await;
    let tools = json!([{"name": "ten", "parameters": {"type": "object"}}]);
    let path = "/exec/programmatic";
    let first = ptc_tests::http::post(
        server.http_addr,
        path,
        Some("acme-key"),
        &json!({"code": "x = 5\nprint(x + await ten())", "tools": tools}),
    )
    .await;
    assert_eq!(first.body["status"], "tool_call_required", "{}", first.text);
    assert_eq!(server.engine.hibernated(), 0);
    server.shutdown();
    server.wait().await;
    assert_eq!(std::fs::read_dir(files.join(".hibernated")).unwrap().count(), 1, "kept at the drain");

    let server = ptc_tests::grpc::serve(config).await;
    let id = first.body["tool_calls"][0]["id"].clone();
    let next = json!({"continuation_token": first.body["continuation_token"], "tool_results": [{"call_id": id, "result": 10}]});
    let end = ptc_tests::http::post(server.http_addr, path, Some("acme-key"), &next).await;
    assert_eq!(
        (end.body["status"].as_str(), end.body["stdout"].as_str()),
        (Some("completed"), Some("15\n")),
        "{}",
        end.text
    );
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_dir_all(files);
}

/// An engine with the data runtime that hibernates after 30 ms and seals with `key` (for
/// executions that have a keeper).
fn data_sealing_engine(hibernate_after: Option<Duration>, key: &[u8]) -> Engine {
    engine_with(|c| {
        c.fuel = true;
        c.python_data = Some(ptc_engine::python_data_artifacts());
        c.hibernate_after = hibernate_after;
        c.seal_key = Some(key.to_vec());
    })
}

#[tokio::test]
async fn a_data_program_hibernates_with_its_dataframe_and_thaws_on_another_engine() {
    let (root, dir) = data_dir_beside_a_secret("hibernate-data");
    // A DataFrame, numpy's and Python's seeded generators, a file, clocks, both streams and a
    // timer due while it sleeps; a gather half answered when it is carried over.
    let code = format!(
        "import random, sys, time\n\
import numpy as np, pandas as pd\n\
random.seed(7)\n\
rng = np.random.default_rng(7)\n\
df = pd.DataFrame({{'n': range(1000), 'x': rng.normal(size=1000)}})\n\
t0 = time.monotonic()\n\
print('before', random.random(), round(float(df.x.sum()), 6))\n\
print('err before', file=sys.stderr)\n\
with open('/mnt/data/notes.txt', 'w') as f:\n    f.write('kept')\n\
async def later():\n    await asyncio.sleep(0.3)\n    print('timer fired')\n    return 'slept'\n\
timer = asyncio.ensure_future(later())\n\
{}\
df['r'] = df.n * r[0]\n\
print('after', r, random.random(), float(rng.normal()), int(df.r.sum()))\n\
print('err after', file=sys.stderr)\n\
return [r, await timer, time.monotonic() - t0 >= 0.3, df.shape[0], open('/mnt/data/notes.txt').read()]",
        gather(3)
    );
    let request = || {
        ExecutionRequest::new(code.clone())
            .with_runtime(Runtime::PythonData)
            .with_tools(standard_tools())
            .with_data_dir(dir.clone())
    };
    let answer = |c: &ptc_engine::ToolCall| ToolResult::ok(&c.id, &standard_handler(c).unwrap());

    // The run as it goes uninterrupted, answered the same way.
    let mut reference = data_engine().start(request()).await.unwrap();
    let calls = first_calls(&mut reference).await;
    reference.submit(vec![answer(&calls[0])]).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    reference.submit(calls[1..].iter().map(answer).collect()).unwrap();
    let reference = drive(reference, standard_handler).await.completed();
    assert!(reference.stdout.contains("timer fired\n"), "{}", reference.stdout);

    let first = data_sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
    let kept = std::sync::Arc::new(Kept::default());
    let mut exec = first.start(request().with_keeper(kept.clone())).await.unwrap();
    let calls = first_calls(&mut exec).await;
    exec.submit(vec![answer(&calls[0])]).unwrap();
    // Hibernated once with one answer taken, thawed in this engine for the timer, hibernated
    // again: the instance is freed each time.
    eventually("it hibernates again after its timer", || kept.count() >= 2).await;
    eventually("its instance is freed", || first.live_instances() == 0 && first.hibernated() == 1).await;
    let image = kept.last();
    eprintln!("a hibernated data program with a DataFrame: {} bytes sealed", image.bytes.len());
    let id = exec.id().to_string();
    drop(exec);
    drop(first);

    // Another engine with the same snapshot (this machine's cache) and key thaws it.
    let second = data_sealing_engine(None, b"cluster key");
    let thawed = second.thaw(&id, &image.bytes, request()).await.unwrap();
    assert_eq!(thawed.control().pending_through(1).len(), 2);
    thawed.submit(calls[1..].iter().map(answer).collect()).unwrap();
    let done = drive(thawed, standard_handler).await.completed();
    assert_eq!(done.stdout, reference.stdout);
    assert_eq!(done.stderr, reference.stderr);
    assert_eq!(done.return_value, reference.return_value);
    assert_eq!(done.stats.round_trips, 1, "the calls went out once");
    assert_eq!((second.hibernated(), second.live_instances()), (0, 0));

    // An image of the data runtime is not one of the component's.
    let refused = second.thaw(&id, &image.bytes, request().with_runtime(Runtime::Python)).await.err().unwrap();
    assert!(refused.message().contains("another version of the runtime"), "{}", refused.message());
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn a_data_program_holding_an_open_file_hibernates_in_its_process_only() {
    let engine = data_sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
    let (root, dir) = data_dir_beside_a_secret("hibernate-data-open");
    std::fs::write(dir.join("in.txt"), "abcdef").unwrap();
    let code = "f = open('/mnt/data/in.txt')\nhead = f.read(3)\nr = await add(a=1, b=2)\nreturn [r, head, f.read()]";
    let request = || {
        ExecutionRequest::new(code)
            .with_runtime(Runtime::PythonData)
            .with_tools(standard_tools())
            .with_data_dir(dir.clone())
    };
    // Its descriptors are the host's, and move with it to the next instance here.
    let mut exec = engine.start(request()).await.unwrap();
    let calls = first_calls(&mut exec).await;
    until_hibernated(&engine, 1).await;
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    assert_eq!(drive(exec, standard_handler).await.completed().return_value, r#"[3, "abc", "def"]"#);
    // An image for elsewhere would lose the file: that one stays live.
    let kept = std::sync::Arc::new(Kept::default());
    let mut exec = engine.start(request().with_keeper(kept.clone())).await.unwrap();
    let calls = first_calls(&mut exec).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((kept.count(), engine.hibernated(), engine.live_instances()), (0, 0, 1));
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    assert_eq!(drive(exec, standard_handler).await.completed().return_value, r#"[3, "abc", "def"]"#);
    std::fs::remove_dir_all(root).unwrap();
}

#[tokio::test]
async fn an_idle_data_session_hibernates_and_keeps_its_dataframe() {
    let engine = data_sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
    let request = SessionRequest::new().with_runtime(Runtime::PythonData);
    let (session, _) = engine.open_session(request).await.expect("open session");
    let first = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nprint(int(df.a.sum()))";
    let run = |code: &str| ExecutionRequest::new(code).with_tools(standard_tools());
    let done = drive(engine.execute_in(&session, run(first)).await.unwrap(), standard_handler).await.completed();
    assert_eq!(done.stdout, "6\n");
    until_hibernated(&engine, 1).await;
    assert_eq!(engine.live_instances(), 0);
    let next = "df['b'] = df.a * await add(a=1, b=1)\nprint(df.b.tolist())";
    let done = drive(engine.execute_in(&session, run(next)).await.unwrap(), standard_handler).await.completed();
    assert_eq!(done.stdout, "[2.0, 4.0, 6.0]\n", "{}", done.stderr);
    session.close();
}

#[tokio::test]
async fn a_sealed_idle_session_thaws_on_another_engine_with_its_globals() {
    for runtime in [Runtime::Python, Runtime::PythonData] {
        let first = data_sealing_engine(Some(Duration::from_millis(30)), b"cluster key");
        let kept = std::sync::Arc::new(Kept::default());
        let request = || SessionRequest::new().with_runtime(runtime).with_tenant("acme");
        let (session, _) = first.open_session(request().with_keeper(kept.clone())).await.unwrap();
        let run = |code: &str| ExecutionRequest::new(code).with_tools(standard_tools());
        let code = "import random, time\nrandom.seed(5)\nfirst = random.random()\nt0 = time.monotonic()\n\
                    squares = (i * i for i in range(5))\nnext(squares)\nseen = [await add(a=1, b=2)]";
        let done = drive(first.execute_in(&session, run(code)).await.unwrap(), standard_handler).await.completed();
        assert_eq!(done.stdout, "", "{}", done.stderr);
        eventually("the idle session hibernates and its image is kept", || kept.count() == 1).await;
        let image = kept.last();
        assert_eq!((image.execution_id.as_str(), image.tenant.as_deref()), (session.id(), Some("acme")));
        let id = session.id().to_string();
        drop(session);
        drop(first);

        let second = data_sealing_engine(None, b"cluster key");
        let thawed = second.thaw_session(&id, &image.bytes, request().with_keeper(kept.clone())).await.unwrap();
        assert_eq!(thawed.id(), id);
        assert_eq!((second.hibernated(), second.live_instances()), (1, 0), "asleep until its next program");
        // The generator goes on from its second draw, as in one process.
        let next = "seen.append(await add(a=2, b=2))\nr = random.Random(5)\n\
                    print(seen, first == r.random(), random.random() == r.random(), list(squares), time.monotonic() >= t0)";
        let done = drive(second.execute_in(&thawed, run(next)).await.unwrap(), standard_handler).await.completed();
        assert_eq!(done.stdout, "[3.0, 4.0] True True [1, 4, 9, 16] True\n", "{runtime:?}: {}", done.stderr);
        // Idle again, it goes back to an image.
        eventually("it hibernates again", || kept.count() == 2).await;
        // Another tenant's, or as another session, it is refused.
        let e = second.thaw_session(&id, &image.bytes, request().with_tenant("globex")).await.err().unwrap();
        assert!(e.message().contains("another tenant"), "{}", e.message());
        let e = second.thaw_session("other", &image.bytes, request()).await.err().unwrap();
        assert!(e.message().contains("another execution"), "{}", e.message());
        thawed.close();
    }
}

/// The bounds on hibernated images (`hibernation/kept.rs`): past the engine's memory bound for
/// them they go to disk, one file each, and come back at the thaw; a tenant's execution whose
/// image would pass the tenant's bound stays live, and the tenant starts nothing new (in
/// words) until one of its paused executions ends, while another tenant goes on.
#[tokio::test]
async fn hibernated_images_go_to_disk_past_their_memory_bound_and_a_tenant_past_its_own_starts_nothing() {
    let dir = std::env::temp_dir().join(format!("ptc-images-{}", std::process::id()));
    let engine = {
        let dir = dir.clone();
        engine_with(move |c| {
            c.hibernate_after = Some(Duration::from_millis(30));
            c.hibernated_memory = 800 << 10;
            c.hibernated_dir = Some(dir);
            c.hibernated_disk = 4 << 20;
            c.tenant_hibernated = Some(1_500 << 10);
        })
    };
    // 300 KB of incompressible bytes: an image of about 350 KB.
    let code =
        "import os\nblob = os.urandom(300_000)\nr = await add(a=1, b=2)\nprint(r, len(blob), blob == bytes(blob))";
    let start = |tenant: &str| {
        engine.start(ExecutionRequest::new(code).with_tools(standard_tools()).with_tenant(tenant.to_string()))
    };
    let mut paused = Vec::new();
    for i in 0..4 {
        let mut exec = start("a").await.unwrap();
        let calls = first_calls(&mut exec).await;
        until_hibernated(&engine, i + 1).await;
        paused.push((exec, calls));
    }
    let (in_memory, on_disk) = engine.hibernated_bytes();
    assert!(in_memory <= 800 << 10 && in_memory > 0, "{in_memory}");
    assert!(on_disk > 0 && in_memory + on_disk == engine.hibernated_bytes_of("a"), "{on_disk}");
    let files = || -> usize {
        std::fs::read_dir(&dir).unwrap().flatten().map(|d| std::fs::read_dir(d.path()).unwrap().count()).sum()
    };
    assert_eq!(files(), 2, "two images past the memory bound, on disk");
    // The fifth would pass the tenant's bound: it stays live.
    let mut fifth = start("a").await.unwrap();
    let fifth_calls = first_calls(&mut fifth).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((engine.hibernated(), engine.live_instances()), (4, 1));
    // The tenant starts nothing more, in words; another tenant does.
    let refused = start("a").await.err().expect("refused");
    assert_eq!(refused.kind(), ptc_engine::ErrorKind::Busy);
    assert!(refused.message().contains("this tenant's paused executions hold "), "{refused}");
    assert!(refused.message().contains("of hibernated state, its limit on this server (1.5 MiB)"), "{refused}");
    assert!(refused.message().contains("answer or cancel some of them"), "{refused}");
    let other = drive(
        engine.start(ExecutionRequest::new("print(1)").with_tenant("b".to_string())).await.unwrap(),
        standard_handler,
    )
    .await;
    assert_eq!(other.completed().stdout, "1\n");
    // Each comes back, from memory or from disk, where it stopped.
    paused.push((fifth, fifth_calls));
    for (i, (exec, calls)) in paused.into_iter().enumerate() {
        exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
        let done = drive(exec, standard_handler).await.completed();
        assert_eq!(done.stdout, "3 300000 True\n", "{i}: {}", done.stderr);
        if i == 0 {
            // One image gone: the tenant may start again.
            drive(start("a").await.unwrap(), standard_handler).await;
        }
    }
    assert_eq!(files(), 0, "read back and removed");
    assert_eq!(engine.hibernated_bytes(), (0, 0));
    let _ = std::fs::remove_dir_all(dir);
}
