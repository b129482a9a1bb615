//! Hibernation's first step: a parked program asked off the native stack
//! (`Control::request_unwind`) unwinds its event loop out of the instance's export, keeping its
//! tasks in memory, and is re-entered (`resume`) where it was; a program running a loop of its
//! own, and the data runtime, decline and stay parked.

use ptc_engine::{Event, Execution, ExecutionRequest, Runtime, SessionRequest, ToolResult};
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
async fn the_data_runtime_declines_and_stays_parked() {
    let code = format!("{}print(r)", gather(2));
    let request = ExecutionRequest::new(code).with_runtime(Runtime::PythonData).with_tools(standard_tools());
    let exec = data_engine().start(request).await.unwrap();
    let done = unwind_mid_gather(exec).await.completed();
    assert_eq!(done.stdout, "got 2.0\ngot 4.0\n[2.0, 4.0]\n", "{}", done.stderr);
}
