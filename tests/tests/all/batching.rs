//! The event loop batches: gather of N calls is one round; partial answers resume the right tasks.

use ptc_engine::{Event, ToolResult};
use ptc_tests::*;
use serde_json::json;

async fn gather(n: usize) {
    let code = format!("r = await asyncio.gather(*[add(a=i, b=1) for i in range({n})])\nprint(sum(r))");
    let run = drive(start(&code, standard_tools()).await, standard_handler).await;
    assert_eq!(run.rounds.len(), 1, "gather of {n} must be one round");
    assert_eq!(run.rounds[0].len(), n);
    let done = run.completed();
    let expected: usize = (0..n).sum::<usize>() + n;
    assert_eq!(done.stdout, format!("{expected}.0\n"));
    assert_eq!(done.stats.round_trips, 1);
    assert_eq!(done.stats.tool_calls, n as u32);
}

#[tokio::test]
async fn gather_of_10_is_one_round() {
    gather(10).await;
}

#[tokio::test]
async fn gather_of_100_is_one_round() {
    gather(100).await;
}

#[tokio::test]
async fn partial_results_resume_the_tasks_whose_results_came() {
    let code = r#"
done = []
async def job(i):
    r = await add(a=i, b=0)
    done.append(int(r))
    print("finished", int(r), flush=True)
    return r
await asyncio.gather(job(0), job(1), job(2))
print(done)
"#;
    let mut exec = start(code, standard_tools()).await;
    let Some(Event::ToolCalls { calls, .. }) = exec.next_event().await else { panic!("expected calls") };
    assert_eq!(calls.len(), 3);
    let arg = |i: usize| calls[i].input_value()["a"].as_i64().unwrap();
    // Answer only the last call: only its task may run on.
    exec.submit(vec![ToolResult::ok(&calls[2].id, &json!(arg(2)))]).unwrap();
    let mut printed = String::new();
    while !printed.ends_with('\n') {
        match exec.next_event().await {
            Some(Event::Output { data, .. }) => printed.push_str(&String::from_utf8_lossy(&data)),
            other => panic!("expected output, got {other:?}"),
        }
    }
    assert_eq!(printed, "finished 2\n");
    // The remaining calls are still pending and are not sent again.
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(arg(0)))]).unwrap();
    exec.submit(vec![ToolResult::ok(&calls[1].id, &json!(arg(1)))]).unwrap();
    let run = drive(exec, |_| panic!("no new calls expected")).await;
    assert!(run.rounds.is_empty());
    let out = run.completed().stdout;
    assert!(out.starts_with("finished 2\n"), "{out}");
    assert!(out.ends_with("[2, 0, 1]\n") || out.ends_with("[2, 1, 0]\n"), "{out}");
}

#[tokio::test]
async fn sleep_create_task_and_wait_for_work_between_tool_calls() {
    let code = r#"
t = asyncio.create_task(add(a=1, b=2))
await asyncio.sleep(0.05)
try:
    await asyncio.wait_for(asyncio.sleep(10), timeout=0.05)
except TimeoutError:
    print("timed out")
try:
    await asyncio.wait_for(get_weather(city="slow"), timeout=0.2)
except TimeoutError:
    print("tool timed out")
print(await t)
"#;
    let mut exec = start(code, standard_tools()).await;
    let mut first = None;
    let mut out = String::new();
    while let Some(ev) = exec.next_event().await {
        match ev {
            Event::ToolCalls { calls, .. } => {
                for c in calls {
                    if c.name == "add" {
                        exec.submit(vec![ToolResult::ok(&c.id, &json!(3))]).unwrap();
                    } else {
                        first = Some(c.id); // never answered: the program's own timeout fires
                    }
                }
            }
            Event::Output { data, .. } => out.push_str(&String::from_utf8_lossy(&data)),
            Event::Completed(_) => break,
            Event::Failed(f) => panic!("{}: {}", f.message, f.stderr),
        }
    }
    assert!(first.is_some());
    assert_eq!(out, "timed out\ntool timed out\n3\n");
}

#[tokio::test]
async fn asyncio_run_in_user_code_batches_too() {
    let code =
        "async def main():\n    return await asyncio.gather(add(a=1, b=1), add(a=2, b=2))\nprint(asyncio.run(main()))";
    let run = drive(start(code, standard_tools()).await, standard_handler).await;
    assert_eq!(run.rounds.len(), 1);
    assert_eq!(run.completed().stdout, "[2.0, 4.0]\n");
}

#[tokio::test]
async fn a_result_that_arrives_while_the_program_computes_is_not_lost() {
    // The host's wait times out (a timer is due) before the client answers; the answer then
    // arrives while the program is busy, and must be waiting for it at the next block.
    let code = r#"
import time
t = asyncio.create_task(add(a=20, b=22))
await asyncio.sleep(0.1)
end = time.time() + 0.6
while time.time() < end:
    pass
print(await t)
"#;
    let mut exec = start(code, standard_tools()).await;
    let Some(Event::ToolCalls { calls, .. }) = exec.next_event().await else { panic!("expected the call") };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(42))]).unwrap();
    let run = drive(exec, |_| panic!("no more calls")).await;
    assert_eq!(run.completed().stdout, "42\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instant_answers_racing_the_guest_never_lose_a_call() {
    // Clients that answer while the host is between draining results and checking what is
    // outstanding once made the execution fail; many fast rounds on two threads exercise it.
    let limits = ptc_engine::Limits::default().with_max_round_trips(1000);
    let mut runs = Vec::new();
    for _ in 0..8 {
        let limits = limits.clone();
        runs.push(tokio::spawn(async move {
            let code = "t = 0\nfor i in range(400):\n    t = await add(a=t, b=1)\nprint(int(t))";
            let exec = start_with(code, standard_tools(), limits).await;
            drive(exec, standard_handler).await.completed().stdout
        }));
    }
    for r in runs {
        assert_eq!(r.await.unwrap(), "400\n");
    }
}
