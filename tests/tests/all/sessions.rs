//! Live sessions through the library: state that persists between executions, one execution
//! at a time, what ends a session (and frees its instance), snapshot and restore.

use std::time::Duration;

use ptc_engine::{Engine, ErrorKind, ExecutionRequest, FailureKind, Limits, Session, SessionRequest, ToolDef};
use ptc_tests::*;

async fn open(engine: &Engine) -> Session {
    engine.open_session(SessionRequest::new()).await.expect("open session").0
}

async fn exec(engine: &Engine, session: &Session, code: &str, tools: Vec<ToolDef>) -> Run {
    let execution = engine.execute_in(session, ExecutionRequest::new(code).with_tools(tools)).await.expect("execute");
    drive(execution, standard_handler).await
}

#[tokio::test]
async fn globals_imports_functions_and_classes_persist_between_executions() {
    let engine = engine();
    let session = open(engine).await;
    let first = "import statistics as st\nrows = [3, 1, 2]\ndef top(n):\n    return sorted(rows)[-n:]\n\
                 class Acc:\n    total = 0\nacc = Acc()\nacc.total = int(await add(a=40, b=2))";
    exec(engine, &session, first, standard_tools()).await.completed();
    let done =
        exec(engine, &session, "print(st.median(rows), top(2), acc.total)\nreturn len(rows)", vec![]).await.completed();
    assert_eq!(done.stdout, "2 [2, 3] 42\n");
    assert_eq!(done.return_value, "3");
    // Each execution has its own output, call log and counters.
    assert!(done.tool_calls.is_empty());
    assert_eq!(done.stats.tool_calls, 0);
    session.close();
}

#[tokio::test]
async fn tools_may_change_between_executions() {
    let engine = engine();
    let session = open(engine).await;
    let tools = standard_tools();
    let add = tools.iter().find(|t| t.name == "add").unwrap().clone();
    let weather = tools.iter().find(|t| t.name == "get-weather").unwrap().clone();
    exec(engine, &session, "kept = add\nprint(int(await add(a=1, b=2)))", vec![add.clone()]).await.completed();
    let done = exec(engine, &session, "print('add' in globals(), callable(get_weather))", vec![weather.clone()])
        .await
        .completed();
    assert_eq!(done.stdout, "False True\n");
    // A stub kept from an earlier execution whose tool is not given now: the host says so.
    let f = exec(engine, &session, "await kept(a=1, b=2)", vec![weather]).await.failed();
    assert!(f.message.contains("unknown tool \"add\""), "{}", f.message);
    assert_eq!(f.kind, FailureKind::PythonError);
    // The same tool with another input schema: calls are checked against the one given now
    // (the session keeps the last execution's compiled schemas only while the tools match).
    let add_with = |kind: &str| {
        let props = serde_json::json!({"a": {"type": kind}, "b": {"type": kind}});
        add.clone().with_parameters(serde_json::json!({"type": "object", "properties": props, "required": ["a", "b"]}))
    };
    let code = "try:\n    print(int(await add(a=1, b=2)))\nexcept ToolError as e:\n    print('refused:', e)";
    for (kind, expected) in [("integer", "3\n"), ("string", "refused:"), ("integer", "3\n")] {
        let done = exec(engine, &session, code, vec![add_with(kind)]).await.completed();
        assert!(done.stdout.starts_with(expected), "{kind}: {}", done.stdout);
    }
}

/// A session's instance is not sent again the tools it holds (`GuestTools`): what each
/// program sees must still be exactly the tools it was given, with the shapes seen so far.
#[tokio::test]
async fn tools_sent_once_per_session_are_still_the_ones_each_program_is_given() {
    let engine = engine();
    let request = SessionRequest::new().with_tenant("tools-sent-once");
    let session = engine.open_session(request).await.expect("open session").0;
    let tools = standard_tools();
    let (add, weather) = (vec![tools[0].clone()], vec![tools[1].clone()]);
    let seen = "print(sorted(n for n in ('add', 'get_weather') if n in globals()))";
    for (given, expected) in [(&add, "['add']"), (&add, "['add']"), (&weather, "['get_weather']"), (&add, "['add']")] {
        let done = exec(engine, &session, seen, given.clone()).await.completed();
        assert_eq!(done.stdout.trim(), expected);
    }
    // Only the description differs (and no call has shown a result shape yet): the program
    // reads the new one.
    let described = vec![tools[0].clone().with_description("Sums two numbers, newly described.")];
    let doc = exec(engine, &session, "print(add.__doc__)", described).await.completed();
    assert!(doc.stdout.contains("newly described"), "{}", doc.stdout);
    let sum = exec(engine, &session, "print(int(await add(a=2, b=3)))", add.clone()).await.completed();
    assert_eq!(sum.stdout, "5\n");
    // A result shape seen by a call shows in the next program's signatures, same tools or not.
    let lookup = ToolDef::new("lookup").with_parameters(serde_json::json!({"type": "object"}));
    let code = "r = await lookup()\nprint(describe_tools(['lookup']))";
    let first =
        engine.execute_in(&session, ExecutionRequest::new(code).with_tools(vec![lookup.clone()])).await.unwrap();
    let first = drive(first, |_| Ok(serde_json::json!({"id": 1, "name": "x"}))).await.completed();
    assert!(!first.stdout.contains("observed"), "{}", first.stdout);
    let again = exec(engine, &session, "print(describe_tools(['lookup']))", vec![lookup]).await.completed();
    assert!(again.stdout.contains(r#"-> {"id": int, "name": str}:  # result shape observed"#), "{}", again.stdout);
    // Tools refused once are refused again when given again, then others are taken.
    let twice = vec![tools[0].clone(), tools[0].clone()];
    for _ in 0..2 {
        let f = exec(engine, &session, "pass", twice.clone()).await.failed();
        assert_eq!(f.kind, FailureKind::InvalidTools, "{}", f.message);
    }
    exec(engine, &session, "print(int(await add(a=1, b=1)))", add).await.completed();
}

#[tokio::test]
async fn an_exception_keeps_the_session_and_what_ran_before_it() {
    let engine = engine();
    let session = open(engine).await;
    let f = exec(engine, &session, "a = 1\nb = 1 / 0", vec![]).await.failed();
    assert_eq!(f.kind, FailureKind::PythonError);
    assert!(f.traceback.contains("<code #1>"), "{}", f.traceback);
    let done = exec(engine, &session, "print(a, 'b' in globals())", vec![]).await.completed();
    assert_eq!(done.stdout, "1 False\n");
    assert!(!session.is_ended());
}

#[tokio::test]
async fn a_second_execution_while_one_runs_is_refused_and_the_first_carries_on() {
    let engine = engine();
    let session = open(engine).await;
    let running = engine
        .execute_in(&session, ExecutionRequest::new("x = int(await add(a=1, b=1))").with_tools(standard_tools()))
        .await
        .unwrap();
    let err = engine.execute_in(&session, ExecutionRequest::new("pass")).await.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::SessionBusy);
    assert!(err.message().contains("one at a time"), "{}", err.message());
    let err = session.snapshot(1 << 20).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::SessionBusy);
    drive(running, standard_handler).await.completed();
    let done = exec(engine, &session, "print(x)", vec![]).await.completed();
    assert_eq!(done.stdout, "2\n");
}

#[tokio::test]
async fn a_timeout_ends_the_session_and_frees_its_instance() {
    let engine = engine_with(|_| {});
    let session = open(&engine).await;
    assert_eq!(engine.live_instances(), 1);
    let limits = Limits::default().with_timeout(Duration::from_secs(1));
    let execution =
        engine.execute_in(&session, ExecutionRequest::new("while True: pass").with_limits(limits)).await.unwrap();
    let f = drive(execution, standard_handler).await.failed();
    assert_eq!(f.kind, FailureKind::Timeout);
    session.ended().await;
    eventually("the instance is freed", || engine.live_instances() == 0).await;
    let err = engine.execute_in(&session, ExecutionRequest::new("pass")).await.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Finished);
    assert!(err.message().contains("timeout"), "{}", err.message());
    assert!(err.message().contains("open a new session"), "{}", err.message());
}

#[tokio::test]
async fn close_and_idle_expiry_free_the_instance() {
    let engine = engine_with(|_| {});
    let closed = open(&engine).await;
    // Idle for 1 s ends it; executions 300 ms apart keep it (a loaded machine once took over
    // 150 ms between two, against an idle timeout of 300).
    let idle =
        engine.open_session(SessionRequest::new().with_idle_timeout(Duration::from_millis(1000))).await.unwrap().0;
    assert_eq!(engine.live_instances(), 2);
    closed.close();
    eventually("the closed session's instance is freed", || engine.live_instances() == 1).await;
    // Executions keep a session alive; idleness ends it.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        exec(&engine, &idle, "pass", vec![]).await.completed();
    }
    assert!(!idle.is_ended());
    idle.ended().await;
    assert_eq!(idle.ended_reason().unwrap(), "idle for 1 s");
    eventually("the idle session's instance is freed", || engine.live_instances() == 0).await;
    // Dropping every handle ends a session too.
    drop(open(&engine).await);
    eventually("a dropped session's instance is freed", || engine.live_instances() == 0).await;
}

#[tokio::test]
async fn two_sessions_interleaved_never_see_each_others_state() {
    let engine = engine();
    let (a, b) = (open(engine).await, open(engine).await);
    exec(engine, &a, "name = 'a'", vec![]).await.completed();
    exec(engine, &b, "name = 'b'", vec![]).await.completed();
    for _ in 0..3 {
        let ra = exec(engine, &a, "name += 'a'\nprint(name)", vec![]).await.completed();
        let rb = exec(engine, &b, "name += 'b'\nprint(name)", vec![]).await.completed();
        assert!(ra.stdout.trim().chars().all(|c| c == 'a'), "{}", ra.stdout);
        assert!(rb.stdout.trim().chars().all(|c| c == 'b'), "{}", rb.stdout);
    }
    // A fresh execution sees neither.
    assert_eq!(run_code("print('name' in globals())").await.completed().stdout, "False\n");
}

#[tokio::test]
async fn a_snapshot_restores_into_a_new_session_with_what_it_could_keep() {
    let engine = engine();
    let session = open(engine).await;
    let code = "import json as j\nfrom dataclasses import dataclass\n@dataclass\nclass Row:\n    k: str\n    v: int\n\
                rows = [Row('a', 1), Row('b', 2)]\ndef total():\n    return sum(r.v for r in rows)\n\
                gen = (i for i in rows)\nf = open('/dev/null', 'w') if False else None";
    exec(engine, &session, code, vec![]).await.completed();
    let state = session.snapshot(1 << 20).await.unwrap();
    assert_eq!(state.dropped.len(), 1, "{:?}", state.dropped);
    assert_eq!(state.dropped[0].name, "gen");
    assert!(state.dropped[0].reason.contains("cannot be pickled"), "{:?}", state.dropped);
    for name in ["j", "dataclass", "Row", "rows", "total", "f"] {
        assert!(state.kept.iter().any(|k| k == name), "{name} not in {:?}", state.kept);
    }
    assert!(state.modules.contains(&"json".to_string()), "{:?}", state.modules);

    let (restored, report) = engine.open_session(SessionRequest::new().with_restore(state.data.clone())).await.unwrap();
    assert!(report.dropped.is_empty(), "{:?}", report.dropped);
    let done = exec(engine, &restored, "print(total(), rows[1], j.dumps(rows[0].k))", vec![]).await.completed();
    assert_eq!(done.stdout, "3 Row(k='b', v=2) \"a\"\n");

    let f = engine.open_session(SessionRequest::new().with_restore(b"garbage".to_vec())).await.err().unwrap();
    assert_eq!(f.kind(), ErrorKind::InvalidRequest);
    assert!(f.message().contains("could not be restored"), "{}", f.message());
    let too_big = session.snapshot(100).await.unwrap_err();
    assert!(too_big.message().contains("more than 100 bytes"), "{}", too_big.message());
    assert!(!session.is_ended(), "a refused snapshot leaves the session alive");
}
