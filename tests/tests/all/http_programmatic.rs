//! The LibreChat-compatible `POST /exec/programmatic` over real HTTP: the client loop from the
//! reference design, multi-round execution on the live instance, and its errors.

use ptc_tests::grpc::{config, serve};
use ptc_tests::http::{Reply, call, post, post_raw};
use serde_json::{Value, json};

const PATH: &str = "/exec/programmatic";

fn weather_tools() -> Value {
    json!([
        {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "get_forecast", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}
    ])
}

/// LibreChat's client loop: answer every call of each round until the status changes.
/// `execute` returns the `result` to send (tools usually return JSON *text*) or an error.
async fn client_loop(
    addr: std::net::SocketAddr,
    key: Option<&str>,
    first: Value,
    execute: impl Fn(&str, &Value) -> Result<Value, String>,
) -> (Reply, Vec<Vec<Value>>) {
    let mut reply = post(addr, PATH, key, &first).await;
    let mut rounds = vec![];
    while reply.body["status"] == "tool_call_required" {
        let calls = reply.body["tool_calls"].as_array().unwrap().clone();
        let results: Vec<Value> = calls
            .iter()
            .map(|c| match execute(c["name"].as_str().unwrap(), &c["input"]) {
                Ok(result) => json!({"call_id": c["id"], "result": result, "is_error": false}),
                Err(e) => json!({"call_id": c["id"], "result": null, "is_error": true, "error_message": e}),
            })
            .collect();
        rounds.push(calls);
        let token = reply.body["continuation_token"].clone();
        reply = post(addr, PATH, key, &json!({"continuation_token": token, "tool_results": results})).await;
    }
    (reply, rounds)
}

fn weather(name: &str, input: &Value) -> Result<Value, String> {
    match name {
        // A JSON object as text, the way LibreChat tools return it.
        "get_weather" => Ok(json!(json!({"city": input["city"], "temp": 18}).to_string())),
        "get_forecast" => Ok(json!([{"day": 1, "temp": 19}, {"day": 2, "temp": 21}])),
        other => Err(format!("Tool not found: {other}")),
    }
}

#[tokio::test]
async fn reference_example_sequential_calls() {
    let server = serve(config(&[])).await;
    let code = "weather = await get_weather(city=\"SF\")\nforecast = await get_forecast(city=\"SF\", days=7)\nprint(f\"Current: {weather['temp']}, 7-day: {len(forecast)} days, type {type(weather).__name__}\")";
    let (reply, rounds) =
        client_loop(server.http_addr, None, json!({"code": code, "tools": weather_tools(), "timeout": 60000}), weather)
            .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["status"], "completed");
    assert_eq!(reply.body["stdout"], "Current: 18, 7-day: 2 days, type dict\n");
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[0][0]["input"], json!({"city": "SF"}), "input is a JSON object");
    assert_eq!(rounds[1][0]["name"], "get_forecast");
    assert!(reply.body["session_id"].as_str().is_some_and(|s| !s.is_empty()));
}

#[tokio::test]
async fn loops_gather_and_conditionals() {
    let server = serve(config(&[])).await;
    let code = r#"
cities = ["Paris", "Oslo", "Rome"]
results = await asyncio.gather(*[get_weather(city=c) for c in cities])
warm = [r["city"] for r in results if r["temp"] > 10]
for c in warm[:2]:
    f = await get_forecast(city=c, days=2)
    if f[1]["temp"] > 20:
        print(c, "warming")
"#;
    let (reply, rounds) = client_loop(
        server.http_addr,
        None,
        json!({"code": code, "tools": weather_tools(), "session_id": "sess-1"}),
        weather,
    )
    .await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.text);
    assert_eq!(reply.body["stdout"], "Paris warming\nOslo warming\n");
    assert_eq!(reply.body["session_id"], "sess-1");
    assert_eq!(rounds.iter().map(Vec::len).collect::<Vec<_>>(), [3, 1, 1], "gather costs one round");
}

#[tokio::test]
async fn librechat_result_shapes_strings_objects_null_and_errors() {
    let server = serve(config(&[])).await;
    let code = r#"
r = await asyncio.gather(t(kind="json_text"), t(kind="plain"), t(kind="object"), t(kind="null"), t(kind="number_text"), return_exceptions=True)
for x in r:
    print(type(x).__name__, x)
try:
    await nope()
except ToolError as e:
    print("error:", e)
"#;
    let tools = json!([{"name": "t", "parameters": {"type": "object", "properties": {"kind": {"type": "string"}}}}, {"name": "nope"}]);
    let (reply, _) = client_loop(server.http_addr, None, json!({"code": code, "tools": tools}), |name, input| {
        match (name, input["kind"].as_str()) {
            ("t", Some("json_text")) => Ok(json!("{\"a\": [1, 2]}")),
            ("t", Some("plain")) => Ok(json!("just text")),
            ("t", Some("object")) => Ok(json!({"b": true})),
            ("t", Some("null")) => Ok(Value::Null),
            ("t", Some("number_text")) => Ok(json!("42")),
            (other, _) => Err(format!("Tool not found: {other}")),
        }
    })
    .await;
    assert_eq!(
        reply.body["stdout"],
        "dict {'a': [1, 2]}\nstr just text\ndict {'b': True}\nNoneType None\nstr 42\nerror: Tool not found: nope\n",
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn twenty_rounds_then_the_twenty_first_is_the_programs_error_not_a_4xx() {
    let server = serve(config(&[])).await;
    let code = "for i in range(25):\n    await t(i=i)\n    print(i)";
    let (reply, rounds) =
        client_loop(server.http_addr, None, json!({"code": code, "tools": [{"name": "t"}]}), |_, _| Ok(json!("ok")))
            .await;
    assert_eq!(rounds.len(), 20);
    // LibreChat's client turns any 4xx into "check the tool input and try again": a program
    // that needs too many rounds must be told so, in stderr, with a 200.
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["error"], "Execution failed or timed out");
    assert_eq!(reply.body["kind"], "round_trips");
    let stderr = reply.body["stderr"].as_str().unwrap();
    assert!(stderr.contains("Exceeded maximum round trips (20)") && stderr.contains("asyncio.gather"), "{stderr}");
    assert!(reply.body["stdout"].as_str().unwrap().ends_with("19\n"));
}

#[tokio::test]
async fn python_errors_are_200_with_the_traceback_in_stderr() {
    let server = serve(config(&[])).await;
    let reply = post(server.http_addr, PATH, None, &json!({"code": "print('before')\nx = 1 / 0", "tools": []})).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["status"], "error");
    assert_eq!(reply.body["error"], "ZeroDivisionError: division by zero");
    assert_eq!(reply.body["stdout"], "before\n");
    assert!(reply.body["stderr"].as_str().unwrap().contains("File \"<code>\", line 2"), "{}", reply.text);
}

#[tokio::test]
async fn timeout_is_200_time_limit_exceeded_with_partial_output() {
    let server = serve(config(&[])).await;
    let reply = post(server.http_addr, PATH, None, &json!({"code": "print('partial')\nimport sys\nprint('oops', file=sys.stderr)\nwhile True: pass", "timeout": 1000})).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["error"], "Time limit exceeded");
    assert_eq!(reply.body["stdout"], "partial\n");
    let stderr = reply.body["stderr"].as_str().unwrap();
    assert!(
        stderr.starts_with("oops\nExecution timeout after 1000 ms: "),
        "the program's stderr, then what to do: {stderr}"
    );
}

#[tokio::test]
async fn malformed_requests_get_a_400_that_says_what_is_wrong() {
    let server = serve(config(&[])).await;
    let error = |r: &Reply| r.body["error"].as_str().unwrap_or_default().to_string();
    let r = call(&server, PATH, &[], "{not json").await;
    assert_eq!(r.status, 400);
    assert!(error(&r).starts_with("Invalid JSON: key must be a string"), "{}", r.text);
    let r = call(&server, PATH, &[], "[1, 2]").await;
    assert_eq!((r.status, error(&r)), (400, "the request body must be a JSON object".into()));
    let r = call(&server, PATH, &[], json!({"tools": []}).to_string()).await;
    assert_eq!((r.status, error(&r)), (400, "code (a string) is required".into()));
    let r = call(&server, PATH, &[], json!({"code": 5}).to_string()).await;
    assert_eq!(r.status, 400);
    assert!(error(&r).starts_with("Invalid request: invalid type: integer `5`, expected a string"), "{}", r.text);
    let r = call(&server, PATH, &[], json!({"code": "pass", "tools": [{"description": "x"}]}).to_string()).await;
    assert!(error(&r).starts_with("Invalid request: missing field `name`"), "{}", r.text);
    let r = call(&server, PATH, &[], json!({"code": "pass", "timeout": 999}).to_string()).await;
    assert_eq!(r.status, 400);
    assert!(error(&r).contains("between 1000 and 300000"), "{}", r.text);
    let r = call(&server, PATH, &[], json!({"code": "pass", "tools": [{"name": "a-b"}, {"name": "a b"}]}).to_string())
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(error(&r).contains("both become the Python name"), "{}", r.text);
    let r = call(&server, PATH, &[], json!({"continuation_token": "x"}).to_string()).await;
    assert_eq!((r.status, error(&r)), (400, "tool_results (an array) is required".into()));
    let r = call(&server, "/exec", &[], json!({"lang": "rs", "code": "1"}).to_string()).await;
    assert_eq!(r.status, 400);
    assert!(error(&r).starts_with("unsupported language \"rs\": send Python (\"py\"), JavaScript"), "{}", r.text);
    let r = call(&server, "/exec", &[], json!({"lang": "js", "runtime": "python", "code": "1"}).to_string()).await;
    assert_eq!(r.status, 400);
    assert!(error(&r).starts_with("lang \"javascript\" and runtime \"python\" disagree"), "{}", r.text);
    let r = call(&server, "/exec/programmatic/cancel", &[], "{}").await;
    assert_eq!((r.status, error(&r)), (400, "request_id is required".into()));
    let r = call(&server, "/exec/programmatic/cancel", &[], json!({"request_id": "nope"}).to_string()).await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = call(&server, "/v1/other", &[], "{}").await;
    assert_eq!(r.status, 404);
    assert!(error(&r).starts_with("Not found: this server answers POST /exec"), "{}", r.text);
    let big = vec![b' '; ptc_server::front::http::conn::HttpLimits::default().max_body_bytes + 1];
    let r = post_raw(server.http_addr, PATH, &[], &big).await;
    assert_eq!(r.status, 413, "{}", r.text);
    assert!(error(&r).starts_with("Request body too large: the limit is 4194304 bytes"), "{}", r.text);
}

#[tokio::test]
async fn requests_without_a_valid_key_are_refused_before_their_body_is_read() {
    let server = serve(config(&["acme:k1"])).await;
    for headers in [&[][..], &[("X-API-Key", "nope")][..]] {
        let r = call(&server, PATH, headers, "{not json").await;
        assert_eq!(r.status, 401, "{}", r.text);
        assert_eq!(r.body["status"], "error", "{}", r.text);
    }
}

#[tokio::test]
async fn exec_runs_tool_free_code_with_top_level_await() {
    let server = serve(config(&[])).await;
    let reply = post(
        server.http_addr,
        "/exec",
        None,
        &json!({"lang": "py", "code": "import asyncio\nawait asyncio.sleep(0.01)\nprint('ok')"}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!((reply.body["status"].as_str(), reply.body["stdout"].as_str()), (Some("completed"), Some("ok\n")));
    // JavaScript and TypeScript by LibreChat's `lang`, with top-level await too.
    for (lang, code) in [
        ("js", "await new Promise((r) => setTimeout(r, 10));\nconsole.log('ok')"),
        ("ts", "const s: string = 'ok';\nconsole.log(s)"),
    ] {
        let reply = post(server.http_addr, "/exec", None, &json!({"lang": lang, "code": code})).await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert_eq!(
            (reply.body["status"].as_str(), reply.body["stdout"].as_str()),
            (Some("completed"), Some("ok\n")),
            "{lang}"
        );
    }
}

#[tokio::test]
async fn api_keys_in_every_librechat_form() {
    let server = serve(config(&["acme:k1"])).await;
    let body = json!({"code": "print(1)"}).to_string();
    for header in [("X-API-Key", "k1"), ("Authorization", "Bearer k1"), ("Authorization", "ApiKey k1")] {
        let r = post_raw(server.http_addr, PATH, &[header], body.as_bytes()).await;
        assert_eq!((r.status, r.body["stdout"].as_str()), (200, Some("1\n")), "{header:?}: {}", r.text);
    }
    assert_eq!(post_raw(server.http_addr, PATH, &[], body.as_bytes()).await.status, 401);
    assert_eq!(post_raw(server.http_addr, PATH, &[("X-API-Key", "nope")], body.as_bytes()).await.status, 401);
}

#[tokio::test]
async fn a_batch_made_while_paused_is_answered_in_a_round_of_its_own() {
    // The program stops waiting for `get_weather` after 50 ms and asks `get_forecast` while the
    // first call is still unanswered. The client answers the calls it was shown, one round at
    // a time: the continuation of round 1 needs only get_weather's result, and round 2 asks
    // for get_forecast.
    let server = serve(config(&[])).await;
    let code = r#"
import asyncio
first = asyncio.ensure_future(get_weather(city="SF"))
try:
    await asyncio.wait_for(asyncio.shield(first), 0.05)
except TimeoutError:
    print("still waiting")
forecast = await get_forecast(city="SF", days=2)
weather = await first
print(weather["temp"], len(forecast))
"#;
    let reply = post(server.http_addr, PATH, None, &json!({"code": code, "tools": weather_tools()})).await;
    assert_eq!(reply.body["status"], "tool_call_required", "{}", reply.text);
    assert_eq!(reply.body["tool_calls"][0]["name"], "get_weather");
    // Long enough for the program to time out its wait and ask for the forecast.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (reply, rounds) = client_loop(
        server.http_addr,
        None,
        json!({"continuation_token": reply.body["continuation_token"], "tool_results": [
            {"call_id": reply.body["tool_calls"][0]["id"], "result": "{\"temp\": 18}"}]}),
        weather,
    )
    .await;
    assert_eq!(reply.body["status"], "completed", "{}", reply.text);
    assert_eq!(reply.body["stdout"], "still waiting\n18 2\n");
    let names: Vec<&Value> = rounds.iter().flatten().map(|c| &c["name"]).collect();
    assert_eq!(names, [&json!("get_forecast")], "round 2 holds only the call made while paused");
}
