//! Tool calls that wait for a person's approval (`ToolDef::requires_approval`), through the
//! real component: the held call waits while the other calls of its `gather` run; approve,
//! deny and approve-with-changed-arguments reach the program; changed arguments are checked
//! against the schema; an approval that never comes ends at the deadline in words; a held
//! call survives hibernation; a replay from the journal asks nobody again and gives the calls
//! the same ids. Then the same through the gRPC and HTTP front ends; over gRPC, changed
//! arguments that do not fit end that call with a `ToolError`, as over MCP.

use std::time::Duration;

use ptc_engine::{
    ApprovalRequest, Decision, Event, Execution, ExecutionRequest, FailureKind, Journal, Limits, ToolCall, ToolDef,
    ToolResult,
};
use ptc_tests::grpc::{self, Msg, Stream, client, completed, config, input, result, serve};
use ptc_tests::http::post;
use ptc_tests::*;
use serde_json::{Value, json};

const PROGRAM: &str = r#"
async def rm(i):
    try:
        return await delete(id=i, _reason=f"note {i} is stale")
    except ToolError as e:
        return f"error: {e}"
a, b, c, d = await asyncio.gather(get(id=1), rm(2), rm(3), rm(4))
print(a, b, c, d)
"#;

fn delete_schema() -> Value {
    json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": false})
}

fn tools() -> Vec<ToolDef> {
    vec![ToolDef::new("get"), ToolDef::new("delete").with_parameters(delete_schema()).with_approval()]
}

/// The next `ToolCalls` event: (round, calls, approvals); `None` once the execution ended.
async fn next_round(exec: &mut Execution) -> Option<(u32, Vec<ToolCall>, Vec<ApprovalRequest>)> {
    while let Some(event) = exec.next_event().await {
        match event {
            Event::ToolCalls { round, calls, approvals } => return Some((round, calls, approvals)),
            Event::Output { .. } => {}
            Event::Completed(_) | Event::Failed(_) => return None,
        }
    }
    None
}

/// The id a call of execution `execution` gets for the `n`th call its program makes.
fn call_id(n: usize, execution: &str) -> String {
    format!("call_{n}_{}", &execution[..16])
}

#[tokio::test]
async fn a_held_call_waits_while_the_rest_of_its_gather_runs_and_each_verdict_reaches_the_program() {
    let mut exec = engine().start(ExecutionRequest::new(PROGRAM).with_tools(tools())).await.unwrap();
    let id = exec.id().to_string();
    let (round, calls, approvals) = next_round(&mut exec).await.unwrap();
    assert_eq!(round, 1);
    // The calls in the program's order, each with the execution's id: stable and unique.
    assert_eq!(calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>(), [call_id(1, &id)]);
    let held: Vec<&str> = approvals.iter().map(|a| a.call.id.as_str()).collect();
    assert_eq!(held, [call_id(2, &id), call_id(3, &id), call_id(4, &id)]);
    // The reason is the person's, not the tool's.
    assert_eq!(approvals[0].reason.as_deref(), Some("note 2 is stale"));
    assert_eq!(approvals[0].call.input_value(), json!({"id": 2}));

    // The call that needs no approval is answered and taken while the others wait.
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!("one"))]).unwrap();
    let err = exec.submit(vec![ToolResult::ok(&approvals[0].call.id, &json!("x"))]).unwrap_err();
    assert!(err.message().contains("waits for the user's approval"), "{err}");
    // Changed arguments are checked against the schema; a refused batch changes nothing.
    let bad =
        vec![Decision::approve(&approvals[0].call.id), Decision::approve_with(&approvals[1].call.id, r#"{"id": "x"}"#)];
    let err = exec.decide(bad).await.unwrap_err();
    assert!(err.message().contains("do not fit the tool") && err.message().contains("integer"), "{err}");
    let err = exec.decide(vec![Decision::approve(&calls[0].id)]).await.unwrap_err();
    assert!(err.message().contains("was already answered"), "{err}");

    exec.decide(vec![
        Decision::approve(&approvals[0].call.id),
        Decision::approve_with(&approvals[1].call.id, r#"{"id": 30}"#),
        Decision::deny(&approvals[2].call.id, "not that one"),
    ])
    .await
    .unwrap();
    // Approved, they come again as calls of their round, with the arguments approved.
    let (round, calls, approvals) = next_round(&mut exec).await.unwrap();
    assert_eq!((round, approvals.len()), (1, 0));
    let inputs: Vec<(String, Value)> = calls.iter().map(|c| (c.id.clone(), c.input_value())).collect();
    assert_eq!(inputs, [(call_id(2, &id), json!({"id": 2})), (call_id(3, &id), json!({"id": 30}))]);
    let results =
        calls.iter().map(|c| ToolResult::ok(&c.id, &json!(format!("deleted {}", c.input_value()["id"])))).collect();
    exec.submit(results).unwrap();
    let done = drive(exec, echo).await.completed();
    assert_eq!(done.stdout, "one deleted 2 deleted 30 error: denied by the user: not that one\n");
    let logged: Vec<&str> = done.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(logged.len(), 4, "{logged:?}");
}

/// A JavaScript program's held calls work as Python's: `_reason` is the person's, the rest
/// of its `Promise.all` runs meanwhile, and a denial rejects with a `ToolError`.
#[tokio::test]
async fn a_javascript_programs_held_calls_wait_for_their_verdicts() {
    let code = r#"
const rm = (id) => delete_({id, _reason: `note ${id} is stale`}).catch((e) => `${e.name}: ${e.message}`);
const [a, b, c] = await Promise.all([get({id: 1}), rm(2), rm(3)]);
console.log(a, b, c);
"#;
    let tools = vec![ToolDef::new("get"), ToolDef::new("delete_").with_parameters(delete_schema()).with_approval()];
    let request = ExecutionRequest::new(code).with_tools(tools).with_runtime(ptc_engine::Runtime::Javascript);
    let mut exec = engine().start(request).await.unwrap();
    let (round, calls, approvals) = next_round(&mut exec).await.unwrap();
    assert_eq!((round, calls.len(), approvals.len()), (1, 1, 2));
    assert_eq!(approvals[0].reason.as_deref(), Some("note 2 is stale"));
    assert_eq!(approvals[0].call.input_value(), json!({"id": 2}), "the reason is not the tool's");
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!("one"))]).unwrap();
    exec.decide(vec![Decision::approve(&approvals[0].call.id), Decision::deny(&approvals[1].call.id, "not that one")])
        .await
        .unwrap();
    let (_, calls, _) = next_round(&mut exec).await.unwrap();
    assert_eq!(calls.iter().map(|c| c.input_value()).collect::<Vec<_>>(), [json!({"id": 2})]);
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!("deleted 2"))]).unwrap();
    let done = drive(exec, echo).await.completed();
    assert_eq!(done.stdout, "one deleted 2 ToolError: denied by the user: not that one\n");
}

#[tokio::test]
async fn an_approval_that_never_comes_ends_at_the_deadline_in_words() {
    let request = ExecutionRequest::new("print(await delete(id=1))")
        .with_tools(tools())
        .with_limits(Limits::default().with_timeout(Duration::from_millis(1500)));
    let mut exec = engine().start(request).await.unwrap();
    let (_, _, approvals) = next_round(&mut exec).await.unwrap();
    assert_eq!(approvals.len(), 1);
    let failed = drive(exec, echo).await.failed();
    assert_eq!(failed.kind, FailureKind::Timeout);
    assert!(
        failed.message.contains("while a call waited for the user's approval, which never came (delete)"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn a_held_call_is_kept_by_hibernation_and_decided_after_the_thaw() {
    let engine = engine_with(|c| c.hibernate_after = Some(Duration::from_millis(50)));
    let mut exec = engine.start(ExecutionRequest::new(PROGRAM).with_tools(tools())).await.unwrap();
    let (_, calls, approvals) = next_round(&mut exec).await.unwrap();
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!(1))]).unwrap();
    eventually("it hibernates with its calls held", || engine.hibernated() == 1).await;
    let decisions = approvals.iter().map(|a| Decision::deny(&a.call.id, "no")).collect::<Vec<_>>();
    let mut first = decisions;
    first[0] = Decision::approve(&approvals[0].call.id);
    exec.decide(first).await.unwrap();
    // The approval thaws it: the call comes with the id it was held under.
    let (_, calls, _) = next_round(&mut exec).await.unwrap();
    assert_eq!(calls.iter().map(|c| &c.id).collect::<Vec<_>>(), [&approvals[0].call.id]);
    exec.submit(vec![ToolResult::ok(&calls[0].id, &json!("gone"))]).unwrap();
    let done = drive(exec, echo).await.completed();
    assert_eq!(done.stdout, "1 gone error: denied by the user: no error: denied by the user: no\n");
}

#[tokio::test]
async fn a_replay_asks_nobody_again_and_gives_the_calls_the_same_ids() {
    let journal = Journal::new();
    let seed = journal.seed;
    let request = ExecutionRequest::new(PROGRAM).with_tools(tools()).with_journal(journal);
    let mut first = engine().start(request).await.unwrap();
    let (_, calls, approvals) = next_round(&mut first).await.unwrap();
    let first_ids: Vec<String> = calls.iter().chain(approvals.iter().map(|a| &a.call)).map(|c| c.id.clone()).collect();
    assert!(first_ids[0].starts_with("call_1_") && first_ids[0].len() == "call_1_".len() + 16, "{first_ids:?}");
    first.submit(vec![ToolResult::ok(&calls[0].id, &json!("one"))]).unwrap();
    first
        .decide(vec![
            Decision::approve_with(&approvals[0].call.id, r#"{"id": 20}"#),
            Decision::deny(&approvals[1].call.id, "no"),
            Decision::deny(&approvals[2].call.id, "no"),
        ])
        .await
        .unwrap();
    let (_, approved, _) = next_round(&mut first).await.unwrap();
    let entries = first.control().take_journal().unwrap().entries;
    drop(first);

    // Elsewhere, from the journal: the approved call comes at once, with its id (a journaled
    // execution's ids come from its journal) and its changed arguments, and nothing is held.
    let request = ExecutionRequest::new(PROGRAM).with_tools(tools()).with_journal(Journal::replay(seed, entries));
    let mut again = engine().start(request).await.unwrap();
    let (_, calls, approvals) = next_round(&mut again).await.unwrap();
    assert!(approvals.is_empty(), "asked again: {approvals:?}");
    assert_eq!(calls, approved);
    assert_eq!(calls[0].id, first_ids[1]);
    assert_eq!(calls[0].input_value(), json!({"id": 20}));
    again.submit(vec![ToolResult::ok(&calls[0].id, &json!("twenty"))]).unwrap();
    let done = drive(again, echo).await.completed();
    assert_eq!(done.stdout, "one twenty error: denied by the user: no error: denied by the user: no\n");
}

fn grpc_tools() -> Vec<ptc_server::proto::Tool> {
    let mut delete = grpc::tool("delete", Some(delete_schema()));
    delete.requires_approval = true;
    vec![grpc::tool("get", None), delete]
}

fn verdict(id: &str, verdict: ptc_server::proto::decision::Verdict) -> ptc_server::proto::Decision {
    ptc_server::proto::Decision { call_id: id.into(), verdict: Some(verdict) }
}

#[tokio::test(flavor = "multi_thread")]
async fn over_grpc_a_client_approves_denies_and_changes_arguments() {
    use ptc_server::proto::decision::Verdict;
    use ptc_server::proto::{Approve, Deny};
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let mut s = Stream::open(&mut client, grpc::start_message(PROGRAM, grpc_tools()), None).await.unwrap();
    let batch = s.until(|m| if let Msg::ToolCalls(b) = m { Some(b) } else { None }).await;
    assert_eq!((batch.calls.len(), batch.approvals.len()), (1, 3));
    let held: Vec<String> = batch.approvals.iter().map(|a| a.call.as_ref().unwrap().id.clone()).collect();
    assert_eq!(batch.approvals[1].reason, "note 3 is stale");
    s.send_results(vec![result(&batch.calls[0].id, Ok(json!("one")))]).await;
    // Changed arguments that do not fit end that call with a ToolError saying why, and the run
    // goes on, as over MCP (a refusal here ended the Python client's whole run).
    let edit = |input: &str| Verdict::Approve(Approve { input_json: Some(input.into()) });
    s.send_decisions(vec![verdict(&held[0], edit(r#"{"id": 1, "extra": true}"#))]).await;
    // A batch with an id that waits for no decision is still refused whole; nothing changes.
    let approve = || Verdict::Approve(Approve { input_json: None });
    s.send_decisions(vec![verdict(&held[1], approve()), verdict("call_9_0000000000000000", approve())]).await;
    let err = s.until(|m| if let Msg::Error(e) = m { Some(e) } else { None }).await;
    assert!(err.message.contains("is not a call of this execution"), "{}", err.message);
    s.send_decisions(vec![
        verdict(&held[1], edit(r#"{"id": 33}"#)),
        verdict(&held[2], Verdict::Deny(Deny { reason: "keep it".into() })),
    ])
    .await;
    let batch = s.until(|m| if let Msg::ToolCalls(b) = m { Some(b) } else { None }).await;
    assert!(batch.approvals.is_empty());
    let ids: Vec<&str> = batch.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [held[1].as_str()]);
    assert_eq!(input(&batch.calls[0]), json!({"id": 33}));
    let results = batch.calls.iter().map(|c| result(&c.id, Ok(json!(format!("deleted {}", input(c)["id"]))))).collect();
    s.send_results(results).await;
    let (end, _) = s.drive(|_| Ok(json!(null))).await;
    let stdout = completed(end).stdout;
    let misfit = format!(
        "one error: the user's answer could not be applied (the changed arguments of call {:?} do not fit the tool: ",
        held[0]
    );
    assert!(stdout.starts_with(&misfit), "{stdout}");
    assert!(stdout.contains("extra"), "the schema's complaint names the field: {stdout}");
    assert!(stdout.ends_with("); the call was not run deleted 33 error: denied by the user: keep it\n"), "{stdout}");
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn over_http_a_pause_lists_approvals_and_the_continuation_decides_them() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let tools = json!([
        {"name": "get"},
        {"name": "delete", "parameters": delete_schema(), "requires_approval": true}
    ]);
    let paused = post(addr, "/exec/programmatic", None, &json!({"code": PROGRAM, "tools": tools})).await;
    assert_eq!(paused.body["status"], "tool_call_required", "{}", paused.text);
    let calls = paused.body["tool_calls"].as_array().unwrap().clone();
    let approvals = paused.body["approvals"].as_array().unwrap().clone();
    assert_eq!((calls.len(), approvals.len()), (1, 3), "{}", paused.text);
    assert_eq!(approvals[0]["reason"], "note 2 is stale");
    let token = paused.body["continuation_token"].clone();
    let results = json!([{"call_id": calls[0]["id"], "result": "one"}]);
    // Every held call must be decided: a continuation without is refused, and changes nothing.
    let body = json!({"continuation_token": token, "tool_results": results});
    let refused = post(addr, "/exec/programmatic", None, &body).await;
    assert_eq!(refused.status, 400);
    assert!(refused.body["error"].as_str().unwrap().starts_with("Missing decisions for: call_2_"), "{}", refused.text);
    let decisions = json!([
        {"call_id": approvals[0]["id"], "approve": true},
        {"call_id": approvals[1]["id"], "approve": true, "input": {"id": 33}},
        {"call_id": approvals[2]["id"], "approve": false, "reason": "no"}
    ]);
    let body = json!({"continuation_token": token, "tool_results": results, "decisions": decisions});
    let next = post(addr, "/exec/programmatic", None, &body).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    assert!(next.body.get("approvals").is_none(), "{}", next.text);
    let calls = next.body["tool_calls"].as_array().unwrap();
    assert_eq!(calls.iter().map(|c| &c["id"]).collect::<Vec<_>>(), [&approvals[0]["id"], &approvals[1]["id"]]);
    assert_eq!(calls[1]["input"], json!({"id": 33}));
    let results: Vec<Value> =
        calls.iter().map(|c| json!({"call_id": c["id"], "result": format!("deleted {}", c["input"]["id"])})).collect();
    let body = json!({"continuation_token": next.body["continuation_token"], "tool_results": results});
    let end = post(addr, "/exec/programmatic", None, &body).await;
    assert_eq!(end.body["stdout"], "one deleted 2 deleted 33 error: denied by the user: no\n", "{}", end.text);
    server.shutdown();
}
