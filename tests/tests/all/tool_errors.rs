//! Failed tools raise ToolError; schema-invalid input fails in Python with no round trip.

use ptc_tests::*;

#[tokio::test]
async fn failed_tool_raises_tool_error_with_the_clients_message() {
    let code = r#"
try:
    await get_weather(city="Nowhere")
except ToolError as e:
    print("caught:", e.message, "| tool:", e.tool)
"#;
    let done = drive(start(code, standard_tools()).await, standard_handler).await.completed();
    assert_eq!(done.stdout, "caught: no such city: Nowhere | tool: get-weather\n");
    assert_eq!(done.tool_calls[0].outcome, Some(Err("no such city: Nowhere".into())));
}

#[tokio::test]
async fn uncaught_tool_error_fails_with_a_user_traceback() {
    let code = "x = 1\nw = await get_weather(city='Nowhere')\n";
    let f = drive(start(code, standard_tools()).await, standard_handler).await.failed();
    assert_eq!(f.kind, ptc_engine::FailureKind::PythonError);
    assert_eq!(f.message, "ToolError: no such city: Nowhere");
    assert!(f.traceback.contains("File \"<code>\", line 2, in <module>"), "{}", f.traceback);
    assert!(!f.traceback.contains("ptc_runtime"), "{}", f.traceback);
    assert!(f.stderr.contains("ToolError: no such city"), "{}", f.stderr);
}

#[tokio::test]
async fn schema_invalid_input_fails_in_python_without_a_round_trip() {
    let code = r#"
try:
    await get_weather(city=42)
except ToolError as e:
    print("invalid:", e)
try:
    await get_weather(city="SF", days=0)
except ToolError as e:
    print("invalid:", e)
print((await get_weather(city="SF"))["temp"])
"#;
    let run = drive(start(code, standard_tools()).await, standard_handler).await;
    assert_eq!(run.rounds.len(), 1, "only the valid call leaves the sandbox");
    let done = run.completed();
    let lines: Vec<_> = done.stdout.lines().collect();
    assert!(
        lines[0].starts_with("invalid: invalid input for tool \"get-weather\": /city: 42 is not of type \"string\""),
        "{}",
        done.stdout
    );
    assert!(lines[1].contains("/days") && lines[1].contains("minimum"), "{}", done.stdout);
    assert_eq!(lines[2], "21");
    assert_eq!(done.stats.round_trips, 1);
    assert_eq!(done.tool_calls[0].round, 0);
}

#[tokio::test]
async fn missing_required_argument_is_refused_before_the_program_runs() {
    let run = drive(start("print('first')\nawait add(a=1)", standard_tools()).await, standard_handler).await;
    assert!(run.rounds.is_empty());
    let f = run.failed();
    assert!(f.message.starts_with("ToolCheckError: the program was not run"), "{}", f.message);
    assert!(
        f.message.contains("line 2: add() is missing the required argument 'b': add(a: float, b: float)"),
        "{}",
        f.message
    );
    assert_eq!(f.stdout, "", "nothing ran");
    // Reached some other way, the stub refuses it at the call, before the host.
    let f = drive(start("f = add\nawait f(a=1)", standard_tools()).await, standard_handler).await.failed();
    assert!(f.message.starts_with("TypeError: add(): missing a required argument: 'b'"), "{}", f.message);
}

#[tokio::test]
async fn unknown_tool_name_through_the_runtime_is_refused() {
    // A program can reach the call machinery directly; the host still refuses unknown tools.
    let code = r#"
import asyncio
loop = asyncio.get_running_loop()
try:
    await loop._selector._broker.call("rm_rf", {})
except ToolError as e:
    print(e)
"#;
    let run = drive(start(code, standard_tools()).await, standard_handler).await;
    assert!(run.rounds.is_empty());
    assert_eq!(run.completed().stdout, "unknown tool \"rm_rf\"\n");
}

#[tokio::test]
async fn malformed_json_result_becomes_a_tool_error() {
    let mut exec = start("try:\n    await add(a=1, b=2)\nexcept ToolError as e:\n    print(e)", standard_tools()).await;
    let Some(ptc_engine::Event::ToolCalls { calls, .. }) = exec.next_event().await else { panic!() };
    exec.submit(vec![ptc_engine::ToolResult::ok_json(&calls[0].id, "{not json")]).unwrap();
    let out = drive(exec, |_| unreachable!()).await.completed().stdout;
    assert!(out.starts_with("tool \"add\" returned malformed JSON"), "{out}");
}

#[tokio::test]
async fn invalid_schema_is_refused_at_start() {
    let tools = vec![ptc_engine::ToolDef::new("t").with_parameters(serde_json::json!({"type": "nonsense"}))];
    let err = engine().start(ptc_engine::ExecutionRequest::new("pass").with_tools(tools)).await.err().unwrap();
    assert_eq!(err.kind(), ptc_engine::ErrorKind::InvalidRequest);
    assert!(err.message().contains("invalid JSON Schema"), "{err}");
}

/// The check before a program runs, through the real server: over gRPC the failure's message
/// names the call and the tool's signature; over the HTTP API (LibreChat's client shows a model
/// `stderr`) the same words are in `stderr`; and a valid program with dynamic calls runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_is_checked_against_its_tools_through_the_grpc_and_http_front_ends() {
    use ptc_tests::grpc::{self, Stream};
    use serde_json::json;
    let server = grpc::serve(grpc::config(&[])).await;
    let mut client = grpc::client(&server).await;
    let tools = vec![grpc::tool(
        "get_weather",
        Some(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})),
    )];
    let code = "print('start')\nw = await get_weather(town='Oslo')";
    let s = Stream::open(&mut client, grpc::start_message(code, tools.clone()), None).await.unwrap();
    let (end, rounds) = s.drive(|_| Ok(json!({"temp": 3}))).await;
    let failed = grpc::failed(end);
    assert!(rounds.is_empty());
    assert!(
        failed
            .message
            .contains("line 2: get_weather() is missing the required argument 'city': get_weather(city: str)"),
        "{}",
        failed.message
    );
    assert_eq!(failed.stdout, "");

    let http_tools = json!([{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let body = json!({"code": "print(await get_wether(city='Oslo'))", "tools": http_tools});
    let reply = ptc_tests::http::post(server.http_addr, "/exec/programmatic", None, &body).await;
    assert_eq!(reply.body["status"], "error", "{}", reply.text);
    let stderr = reply.body["stderr"].as_str().unwrap();
    assert!(stderr.contains("get_wether is not defined; did you mean the tool get_weather(city: str)?"), "{stderr}");

    let fine = "f = get_weather\nrows = await asyncio.gather(*[f(city=c) for c in ['a', 'b']])\nprint(len(rows))";
    let s = Stream::open(&mut client, grpc::start_message(fine, tools), None).await.unwrap();
    let (end, _) = s.drive(|_| Ok(json!({"temp": 3}))).await;
    assert_eq!(grpc::completed(end).stdout, "2\n");
    server.shutdown();
}
