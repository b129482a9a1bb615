//! Sequential calls, loops, return values and the call log, through the real component.

use ptc_engine::ToolDef;
use ptc_tests::*;
use serde_json::json;

#[tokio::test]
async fn sequential_calls_and_return_value() {
    let code = r#"
w = await get_weather(city="SF")
s = await add(a=w["temp"], b=1)
print(f"{w['city']}: {s}")
return {"sum": s}
"#;
    let run = drive(start(code, standard_tools()).await, standard_handler).await;
    assert_eq!(run.rounds.len(), 2);
    assert_eq!(run.rounds[0][0].name, "get-weather");
    assert_eq!(run.rounds[0][0].input_value(), json!({"city": "SF"}));
    let done = run.completed();
    assert_eq!(done.stdout, "SF: 22.0\n");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&done.return_value).unwrap(), json!({"sum": 22.0}));
    assert_eq!(done.stats.round_trips, 2);
    assert_eq!(done.stats.tool_calls, 2);
    assert_eq!(done.tool_calls.len(), 2);
    assert_eq!(done.tool_calls[1].round, 2);
    assert_eq!(done.tool_calls[1].outcome, Some(Ok("22.0".into())));
}

#[tokio::test]
async fn loop_of_calls_one_round_each() {
    let code = "total = 0\nfor i in range(5):\n    total = await add(a=total, b=i)\nprint(total)";
    let run = drive(start(code, standard_tools()).await, standard_handler).await;
    assert_eq!(run.rounds.len(), 5);
    assert!(run.rounds.iter().all(|r| r.len() == 1));
    assert_eq!(run.completed().stdout, "10.0\n");
}

#[tokio::test]
async fn conditional_calls_depend_on_results() {
    let code = r#"
for city in ["SF", "Nowhere", "Paris"]:
    try:
        w = await get_weather(city=city)
        if w["temp"] > 20:
            print(city, "warm")
    except ToolError as e:
        print(city, "error:", e)
"#;
    let done = drive(start(code, standard_tools()).await, standard_handler).await.completed();
    assert_eq!(done.stdout, "SF warm\nNowhere error: no such city: Nowhere\nParis warm\n");
}

#[tokio::test]
async fn results_arrive_as_python_values() {
    let code = r#"
r = await echo_tool(x=1)
print(type(r).__name__, type(r["input"]).__name__, r["input"]["x"] + 1)
big = await big_int()
print(big, type(big).__name__)
print(await text(), await nothing(), await numbers())
"#;
    let tools = ["echo_tool", "big_int", "text", "nothing", "numbers"].map(ptc_engine::ToolDef::new).to_vec();
    let run = drive(start(code, tools).await, |c| match c.name.as_str() {
        "echo_tool" => echo(c),
        "big_int" => Ok(serde_json::from_str("123456789012345678901234567890").unwrap_or(json!(0))),
        "text" => Ok(json!("plain")),
        "nothing" => Ok(json!(null)),
        _ => Ok(json!([1, 2.5])),
    })
    .await;
    let out = run.completed().stdout;
    assert!(out.starts_with("dict dict 2\n"), "{out}");
    assert!(out.ends_with("plain None [1, 2.5]\n"), "{out}");
}

#[tokio::test]
async fn large_integers_in_results_are_lossless() {
    let mut exec = start("v = await big()\nprint(v + 1)", vec![ptc_engine::ToolDef::new("big")]).await;
    let ptc_engine::Event::ToolCalls { calls, .. } = exec.next_event().await.unwrap() else { panic!() };
    exec.submit(vec![ptc_engine::ToolResult::ok_json(&calls[0].id, "123456789012345678901234567890")]).unwrap();
    let run = drive(exec, |_| unreachable!()).await;
    assert_eq!(run.completed().stdout, "123456789012345678901234567891\n");
}

#[tokio::test]
async fn output_is_streamed_as_it_is_produced() {
    let code = "print('before')\nawait add(a=1, b=2)\nprint('after')\nimport sys\nprint('oops', file=sys.stderr)";
    let mut exec = start(code, standard_tools()).await;
    let mut seen = String::new();
    loop {
        match exec.next_event().await.unwrap() {
            ptc_engine::Event::Output { data, .. } => seen.push_str(&String::from_utf8_lossy(&data)),
            ptc_engine::Event::ToolCalls { calls, .. } => {
                // Output printed before the first tool call is already here.
                assert_eq!(seen, "before\n");
                exec.submit(vec![ptc_engine::ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let run = drive(exec, |_| unreachable!()).await;
    assert_eq!(run.streamed_stdout, "after\n");
    assert_eq!(run.streamed_stderr, "oops\n");
    let done = run.completed();
    assert_eq!((done.stdout.as_str(), done.stderr.as_str()), ("before\nafter\n", "oops\n"));
}

#[tokio::test]
async fn describe_tools_gives_names_signatures_and_stub() {
    let mut tools = standard_tools();
    tools.push(ptc_engine::ToolDef::new("for"));
    // A tenant of its own: the shared engine's other tests' results have shapes (observed.rs).
    let d = engine().describe_tools(&tools, Some("describing")).await.unwrap();
    let sigs: Vec<_> = d.tools.iter().map(|t| (t.python_name.as_str(), t.signature.as_str())).collect();
    assert_eq!(
        sigs,
        [
            ("add", "add(a: float, b: float)"),
            ("get_weather", "get_weather(city: str, days?: int)"),
            ("for_tool", "for_tool()"),
        ]
    );
    assert!(d.stub.contains("async def get_weather(city: str, days: int = ...):"), "{}", d.stub);
    let err = engine()
        .describe_tools(&[ptc_engine::ToolDef::new("a-b"), ptc_engine::ToolDef::new("a b")], None)
        .await
        .unwrap_err();
    assert!(err.message().contains("both become the Python name 'a_b'"), "{err}");
}

#[tokio::test]
async fn output_streams_while_the_program_is_still_computing() {
    let code = "import time\nprint('tick')\nt = time.time()\nwhile time.time() - t < 2:\n    pass\nprint('done')";
    let mut exec = start(code, vec![]).await;
    let t0 = std::time::Instant::now();
    let mut printed = Vec::new();
    while !printed.ends_with(b"\n") {
        match exec.next_event().await.unwrap() {
            ptc_engine::Event::Output { data, .. } => printed.extend(data),
            other => panic!("expected output first, got {other:?}"),
        }
    }
    assert_eq!(printed, b"tick\n");
    assert!(t0.elapsed() < std::time::Duration::from_millis(1500), "output came only after {:?}", t0.elapsed());
    assert_eq!(drive(exec, echo).await.completed().stdout, "tick\ndone\n");
}

#[tokio::test]
async fn a_component_can_be_loaded_from_a_file() {
    let dir = std::env::temp_dir().join(format!("ptc-component-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sandbox.wasm");
    std::fs::write(&path, ptc_runtime_python_wasm::component()).unwrap();
    let engine = engine_with(|c| {
        c.component = ptc_engine::ComponentSource::File(path.clone());
        c.max_concurrent = 4;
    });
    let exec = engine.start(ptc_engine::ExecutionRequest::new("print(6 * 7)")).await.unwrap();
    assert_eq!(drive(exec, echo).await.completed().stdout, "42\n");
    let mut missing = engine_config();
    missing.component = ptc_engine::ComponentSource::File(dir.join("missing.wasm"));
    let err = ptc_engine::Engine::new(missing).err().unwrap();
    assert!(err.message().contains("missing.wasm"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The components compiled ahead (`ptc-engine compile`, which the Python wheel ships) are what
/// an engine whose cache is empty loads, and keeps in its cache, the JavaScript one at its
/// first program; an engine with other settings (no fuel metering: other code) cannot load them
/// and compiles the components instead.
#[tokio::test]
async fn an_empty_cache_takes_the_component_compiled_ahead_when_it_fits() {
    let root = std::env::temp_dir().join(format!("ptc-ahead-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let ahead = root.join("ahead");
    std::fs::create_dir_all(&ahead).unwrap();
    std::fs::write(ahead.join("sandbox-000000000000000000000000.cwasm.zst"), b"another component's").unwrap();
    let mut settings = engine_config();
    settings.fuel = true;
    let written = ptc_engine::compile_ahead(&settings, &ahead, true).unwrap();
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    };
    let mut written: Vec<String> =
        written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    written.sort();
    assert_eq!(names(&ahead), written, "another component's file is removed");
    assert!(written[0].starts_with("javascript-") && written[1].starts_with("sandbox-"), "{written:?}");

    for (fuel, from_ahead) in [(true, true), (false, false)] {
        let cache = root.join(format!("cache-fuel-{fuel}"));
        let engine = engine_with(|c| {
            c.fuel = fuel;
            c.cache_dir = Some(cache.clone());
            c.ahead_dir = Some(ahead.clone());
            c.max_concurrent = 4;
        });
        let exec = engine.start(ptc_engine::ExecutionRequest::new("print(6 * 7)")).await.unwrap();
        assert_eq!(drive(exec, echo).await.completed().stdout, "42\n");
        // The JavaScript component waits for its first program.
        let cached = names(&cache);
        assert!(cached.len() == 1 && cached[0].starts_with("sandbox-"), "before a JavaScript program: {cached:?}");
        let request =
            ptc_engine::ExecutionRequest::new("console.log(6 * 7)").with_runtime(ptc_engine::Runtime::Javascript);
        assert_eq!(drive(engine.start(request).await.unwrap(), echo).await.completed().stdout, "42\n");
        // Both components, each from its file compiled ahead when it fits.
        let cached = names(&cache);
        assert_eq!(cached.len(), 2, "{cached:?}");
        assert!(cached[0].starts_with("javascript-") && cached[1].starts_with("sandbox-"), "{cached:?}");
        for name in &cached {
            assert!(name.ends_with(".cwasm") && name.contains("-ahead-") == from_ahead, "fuel {fuel}: {cached:?}");
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn help_describes_tools_and_objects_in_the_sandbox() {
    // Python's own `help` needs `pydoc`, which the component does not have: a program asking
    // it got `ModuleNotFoundError`. Every program has the runtime's instead.
    let code = "help(get_weather)\nhelp(len)\nhelp()\nhelp(json.loads)";
    let done = drive(start(code, standard_tools()).await, standard_handler).await.completed();
    let out = &done.stdout;
    assert!(out.starts_with("# await get_weather(...) returns the tool's result"), "{out}");
    // Its result's shape follows the parameters once earlier calls (other tests') showed one.
    assert!(out.contains("\nasync def get_weather(city: str, days: int = ...)"), "{out}");
    assert!(out.contains("\n    \"\"\"Weather for a city."), "{out}");
    assert!(out.contains("\nlen(obj, /)\n\n    Return the number of items in a container."), "{out}");
    assert!(out.contains("\nhelp(obj) prints what obj is"), "{out}");
    assert!(out.contains("\nloads(s, *, cls=None"), "{out}");
    assert_eq!(done.stats.tool_calls, 0);

    // The same through the real server, as a client's program gets it.
    let server = ptc_tests::grpc::serve(ptc_tests::grpc::config(&[])).await;
    let r = ptc_tests::http::post(server.http_addr, "/exec", None, &json!({"code": "help(len)\nhelp()"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = r.body["stdout"].as_str().unwrap();
    assert!(out.starts_with("len(obj, /)\n\n    Return the number of items in a container."), "{out}");
    assert!(out.contains("\nhelp(obj) prints what obj is"), "{out}");
}

#[tokio::test]
async fn namespaces_keep_same_named_tools_apart() {
    let schema =
        |field: &str| json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]});
    let tools = vec![
        ToolDef::new("search").with_namespace("web-search").with_parameters(schema("query")),
        ToolDef::new("search").with_namespace("files").with_parameters(schema("pattern")),
        ToolDef::new("open").with_namespace("files"),
    ];
    let code = r#"
r = await asyncio.gather(web_search.search(query="rust"), files.search(pattern="*.rs"), files.open())
print(r)
try:
    await files.search(pattern=5)
except ToolError as e:
    print("refused:", e)
find = search
"#;
    let answer = |c: &ptc_engine::ToolCall| Ok(json!(format!("{}:{}", c.namespace.as_deref().unwrap_or(""), c.name)));
    // Awaited, the bare name is refused before the run, saying where the tool is.
    let refused = drive(start("await search(query='x')", tools.clone()).await, answer).await;
    assert!(refused.rounds.is_empty());
    let refused = refused.end.unwrap_err();
    assert!(refused.message.contains("search is not defined"), "{}", refused.message);
    assert!(refused.message.contains("web_search.search"), "{}", refused.message);
    // Not called, it is a NameError at run time with the same hint.
    let run = drive(start(code, tools).await, answer).await;
    assert_eq!(run.rounds.len(), 1, "calls to several namespaces are one batch");
    let seen: Vec<_> = run.rounds[0].iter().map(|c| (c.namespace.clone().unwrap(), c.name.clone())).collect();
    assert_eq!(
        seen,
        [("web-search".into(), "search".into()), ("files".into(), "search".into()), ("files".into(), "open".into())]
    );
    let failed = run.end.unwrap_err();
    assert_eq!(failed.stdout.lines().next().unwrap(), "['web-search:search', 'files:search', 'files:open']");
    assert!(failed.stdout.contains("refused: invalid input for tool \"files.search\""), "{}", failed.stdout);
    assert!(
        failed.message.contains("it is a tool in a namespace: call it as `await web_search.search(...)`"),
        "{}",
        failed.message
    );
    assert_eq!(failed.tool_calls[3].namespace.as_deref(), Some("files"));
    assert_eq!(failed.tool_calls[3].round, 0, "schema refusals never leave the sandbox");
}
