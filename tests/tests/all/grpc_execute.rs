//! The gRPC Execute stream end to end over real TCP: the core behaviours through the stream.

use ptc_server::proto::{self, FailureKind};
use ptc_tests::grpc::*;
use serde_json::json;

fn add_tool() -> proto::Tool {
    tool(
        "add",
        Some(
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        ),
    )
}

fn add(call: &proto::ToolCall) -> Result<serde_json::Value, String> {
    let i = input(call);
    Ok(json!(i["a"].as_i64().unwrap() + i["b"].as_i64().unwrap()))
}

#[tokio::test]
async fn execute_streams_started_calls_output_and_completed() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let code = "print('hi')\nx = await add(a=1, b=2)\ny = await add(a=x, b=3)\nprint(x, y)\nreturn y";
    let mut s = Stream::open(&mut client, start_message(code, vec![add_tool()]), None).await.unwrap();
    let Some(Msg::Started(started)) = s.next().await else { panic!("Started must come first") };
    assert_eq!(started.execution_id.len(), 32);
    // Output is coalesced by time, so "hi\n" may come in pieces; all of it precedes the call.
    let mut printed = Vec::new();
    let first_batch = loop {
        match s.next().await.unwrap() {
            Msg::Output(o) => {
                assert_eq!(o.stream, proto::OutputStream::Stdout as i32);
                printed.extend(o.data);
            }
            Msg::ToolCalls(batch) => break batch,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(printed, b"hi\n");
    s.send_results(first_batch.calls.iter().map(|c| result(&c.id, add(c))).collect()).await;
    let (end, mut rounds) = s.drive(add).await;
    rounds.insert(0, first_batch);
    let c = completed(end);
    assert_eq!(rounds.iter().map(|r| r.round).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(c.stdout, "hi\n3 6\n");
    assert_eq!(c.return_value_json, "6");
    let stats = c.stats.unwrap();
    assert_eq!((stats.round_trips, stats.tool_calls), (2, 2));
    assert_eq!(c.tool_calls.len(), 2);
    // Instantiation is 0 when one of the server's warm instances was ready (made 2 ms after it
    // started, if the machine let the test take longer than that to get here).
    assert!(stats.wall_time_us >= stats.instantiate_time_us && stats.wall_time_us > 0);
}

#[tokio::test]
async fn gather_is_one_batch_and_partial_answers_work() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let code = "r = await asyncio.gather(*[add(a=i, b=0) for i in range(10)])\nprint(r)";
    let mut s = Stream::open(&mut client, start_message(code, vec![add_tool()]), None).await.unwrap();
    let batch = s
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    assert_eq!(batch.calls.len(), 10);
    // Answer in two halves, in reverse order.
    let answers: Vec<_> = batch.calls.iter().rev().map(|c| result(&c.id, add(c))).collect();
    s.send_results(answers[..5].to_vec()).await;
    s.send_results(answers[5..].to_vec()).await;
    let (end, rounds) = s.drive(add).await;
    assert!(rounds.is_empty());
    assert_eq!(completed(end).stdout, "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n");
}

/// A fresh run makes stubs only for the tools its program names (`stubs.py`, `bind_tools`); a
/// program that reaches one through its globals without writing its name gets them all.
#[tokio::test]
async fn a_fresh_program_reaches_a_tool_it_does_not_name_through_its_globals() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let code = "f = globals()['a' + 'dd']\ng = eval('a' + 'dd')\nreturn [await f(a=1, b=2), await g(a=3, b=4)]";
    let tools = vec![add_tool(), tool("mul", None)];
    let s = Stream::open(&mut client, start_message(code, tools), None).await.unwrap();
    let (end, rounds) = s.drive(add).await;
    assert_eq!(completed(end).return_value_json, "[3, 7]");
    assert_eq!(rounds.len(), 2);
}

#[tokio::test]
async fn errors_come_back_as_failed_with_kinds() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let s = Stream::open(&mut client, start_message("x = 1\nraise ValueError('bad')", vec![]), None).await.unwrap();
    let f = failed(s.drive(add).await.0);
    assert_eq!(f.kind, FailureKind::PythonError as i32);
    assert_eq!(f.message, "ValueError: bad");
    assert!(f.traceback.contains("line 2"), "{}", f.traceback);

    let mut start = start_message("while True: pass", vec![]);
    start.limits = Some(proto::Limits { timeout_ms: Some(1000), ..Default::default() });
    let s = Stream::open(&mut client, start, None).await.unwrap();
    assert_eq!(failed(s.drive(add).await.0).kind, FailureKind::Timeout as i32);

    let mut start = start_message("for i in range(5):\n    await add(a=i, b=0)", vec![add_tool()]);
    start.limits = Some(proto::Limits { max_round_trips: Some(2), ..Default::default() });
    let s = Stream::open(&mut client, start, None).await.unwrap();
    let f = failed(s.drive(add).await.0);
    assert_eq!((f.kind, f.message.as_str()), (FailureKind::RoundTrips as i32, "Exceeded maximum round trips (2)"));
}

#[tokio::test]
async fn tool_errors_schema_errors_and_malformed_results_reach_python() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let code = r#"
for args in [dict(a=1, b=2), dict(a="x", b=2), dict(a=5, b=5)]:
    try:
        print(await add(**args))
    except ToolError as e:
        print("ToolError:", e)
"#;
    let mut s = Stream::open(&mut client, start_message(code, vec![add_tool()]), None).await.unwrap();
    let first = s
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    s.send_results(vec![result(&first.calls[0].id, Err("adder is down".into()))]).await;
    let second = s
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    use proto::tool_result::Outcome;
    s.send_results(vec![proto::ToolResult {
        call_id: second.calls[0].id.clone(),
        outcome: Some(Outcome::ResultJson("{oops".into())),
    }])
    .await;
    let c = completed(s.drive(add).await.0);
    let lines: Vec<_> = c.stdout.lines().collect();
    assert_eq!(lines[0], "ToolError: adder is down");
    assert!(
        lines[1].starts_with("ToolError: invalid input for tool \"add\": /a: \"x\" is not of type \"number\""),
        "{}",
        c.stdout
    );
    assert!(lines[2].starts_with("ToolError: tool \"add\" returned malformed JSON"), "{}", c.stdout);
}

#[tokio::test]
async fn unknown_and_repeated_result_ids_get_an_error_message_not_a_crash() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let mut s =
        Stream::open(&mut client, start_message("print(await add(a=1, b=1))", vec![add_tool()]), None).await.unwrap();
    let batch = s
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    s.send_results(vec![result("call_404", Ok(json!(1)))]).await;
    let err = s
        .until(|m| match m {
            Msg::Error(e) => Some(e),
            _ => None,
        })
        .await;
    assert_eq!(err.code, "invalid_tool_result");
    assert!(err.message.contains("call_404"), "{}", err.message);
    s.send_results(vec![result(&batch.calls[0].id, Ok(json!(2)))]).await;
    assert_eq!(completed(s.drive(add).await.0).stdout, "2\n");
}

#[tokio::test]
async fn cancel_message_ends_the_execution() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let mut s = Stream::open(&mut client, start_message("await add(a=1, b=1)", vec![add_tool()]), None).await.unwrap();
    s.until(|m| match m {
        Msg::ToolCalls(b) => Some(b),
        _ => None,
    })
    .await;
    s.cancel().await;
    let f = failed(
        s.until(|m| match m {
            m @ Msg::Failed(_) => Some(m),
            _ => None,
        })
        .await,
    );
    assert_eq!(f.kind, FailureKind::Cancelled as i32);
    ptc_tests::eventually("the instance is freed", || server.engine.live_instances() == 0).await;
}

#[tokio::test]
async fn bad_requests_are_invalid_argument() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let bad_schema = proto::Tool {
        name: "t".into(),
        description: String::new(),
        parameters_json: "{not json".into(),
        ..Default::default()
    };
    let err = Stream::open(&mut client, start_message("pass", vec![bad_schema]), None).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("parameters_json of tool \"t\" is not valid JSON"), "{}", err.message());
    let mut start = start_message("pass", vec![]);
    start.limits = Some(proto::Limits { timeout_ms: Some(999_999), ..Default::default() });
    let err = Stream::open(&mut client, start, None).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // First message is not Start.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(proto::ClientMessage { message: Some(proto::client_message::Message::Cancel(proto::Cancel::default())) })
        .await
        .unwrap();
    let err = client.execute(tokio_stream::wrappers::ReceiverStream::new(rx)).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_concurrent_streams() {
    let server = serve(config(&[])).await;
    let mut tasks = vec![];
    for i in 0..20 {
        let mut client = client(&server).await;
        tasks.push(tokio::spawn(async move {
            let code = format!("a = await add(a={i}, b=1)\nb = await add(a=a, b=1)\nprint(b)");
            let s = Stream::open(&mut client, start_message(&code, vec![add_tool()]), None).await.unwrap();
            completed(s.drive(add).await.0).stdout
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), format!("{}\n", i + 2));
    }
}

#[tokio::test]
async fn describe_tools_over_grpc() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let tools = vec![tool(
        "get-weather",
        Some(
            json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}),
        ),
    )];
    let d =
        client.describe_tools(proto::DescribeToolsRequest { tools, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(d.tools[0].python_name, "get_weather");
    assert_eq!(d.tools[0].signature, "get_weather(city: str, days?: int)");
    assert!(d.stub.contains("async def get_weather("), "{}", d.stub);
}

/// `Start.runtime = "python-data"` over the real server: the issue's pandas program with a
/// gather, a figure returned as PNG bytes, a data session whose DataFrame outlives one
/// execution and travels in a snapshot, cancellation of a parked data program (its instance freed), and a server
/// without the runtime saying so.
#[tokio::test]
async fn the_data_runtime_runs_pandas_with_tools_in_fresh_executions_and_sessions() {
    let mut cfg = data_config(&[]);
    // Shared with the server without the runtime below, which then accepts the seal.
    cfg.token_secret = Some("data-runtime-test".into());
    let server = serve(cfg).await;
    let mut client = client(&server).await;
    let data = |code: &str| proto::Start { runtime: "python-data".into(), ..start_message(code, vec![add_tool()]) };

    let code = "import numpy as np, pandas as pd\nr = await asyncio.gather(add(a=1, b=2), add(a=3, b=4))\n\
                print(pd.DataFrame(np.arange(6).reshape(2,3)).sum().sum(), sum(r))";
    let s = Stream::open(&mut client, data(code), None).await.unwrap();
    let (end, rounds) = s.drive(add).await;
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0].calls.len(), 2);
    assert_eq!(completed(end).stdout, "15 10\n");

    // The figure LibreChat's users get over HTTP comes back over gRPC as bytes.
    let plot = "import matplotlib.pyplot as plt\nys = await asyncio.gather(add(a=1, b=1), add(a=2, b=2))\n\
                plt.plot([1, 2], ys)\nplt.savefig('/mnt/data/plot.png')";
    let s = Stream::open(&mut client, proto::Start { return_files: true, ..data(plot) }, None).await.unwrap();
    let files = completed(s.drive(add).await.0).files;
    assert_eq!(files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["plot.png"]);
    assert!(files[0].content.starts_with(b"\x89PNG\r\n\x1a\n") && files[0].content.len() > 5_000, "{}", files[0].size);

    let open = proto::OpenSessionRequest { runtime: "python-data".into(), ..Default::default() };
    let id = client.open_session(open).await.unwrap().into_inner().session_id;
    let in_session = |code: &str| proto::Start { session_id: id.clone(), ..start_message(code, vec![add_tool()]) };
    let s = Stream::open(
        &mut client,
        in_session("import pandas as pd\ndf = pd.DataFrame({'v': [await add(a=2, b=3)]})"),
        None,
    )
    .await
    .unwrap();
    completed(s.drive(add).await.0);
    let s = Stream::open(&mut client, in_session("print(df['v'].iloc[0] * 2)"), None).await.unwrap();
    assert_eq!(completed(s.drive(add).await.0).stdout, "10\n");

    // A snapshot of the data session (with its files) opens again in the data runtime, with
    // the DataFrame and the file back, though the request names no runtime.
    let s = Stream::open(&mut client, in_session("df.to_csv('/mnt/data/df.csv', index=False)"), None).await.unwrap();
    completed(s.drive(add).await.0);
    let request = proto::SnapshotSessionRequest { session_id: id.clone(), include_files: true };
    let snap = client.snapshot_session(request).await.unwrap().into_inner();
    assert!(snap.kept.contains(&"df".to_string()) && snap.modules.contains(&"pandas".to_string()), "{snap:?}");
    assert_eq!(snap.files, ["df.csv"]);
    let open = proto::OpenSessionRequest { snapshot: snap.snapshot.clone(), ..Default::default() };
    let restored = client.open_session(open).await.unwrap().into_inner();
    assert!(restored.restored.contains(&"df".to_string()), "{restored:?}");
    let start = proto::Start {
        session_id: restored.session_id,
        ..start_message(
            "import sys\nprint(sys.version_info[:2], int(df['v'].sum()), open('/mnt/data/df.csv').read().split())",
            vec![],
        )
    };
    let s = Stream::open(&mut client, start, None).await.unwrap();
    assert_eq!(completed(s.drive(add).await.0).stdout, "(3, 15) 5 ['v', '5']\n");

    let live_before = server.engine.live_instances();
    let mut s =
        Stream::open(&mut client, data("import numpy\nawait add(a=1, b=1)\nprint('never')"), None).await.unwrap();
    s.until(|m| matches!(m, Msg::ToolCalls(_)).then_some(())).await;
    s.cancel().await;
    let f = failed(s.until(|m| matches!(m, Msg::Failed(_)).then_some(m)).await);
    assert_eq!(f.kind, FailureKind::Cancelled as i32);
    ptc_tests::eventually("the cancelled data instance is freed", || server.engine.live_instances() <= live_before)
        .await;

    let mut cfg = config(&[]);
    cfg.token_secret = Some("data-runtime-test".into());
    let plain = serve(cfg).await;
    let mut client = ptc_tests::grpc::client(&plain).await;
    let status = Stream::open(&mut client, data("import numpy"), None).await.err().expect("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("no python-data runtime"), "{}", status.message());
    // A server without the runtime refuses the data session's snapshot in words.
    let open = proto::OpenSessionRequest { snapshot: snap.snapshot, ..Default::default() };
    let status = client.open_session(open).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("python-data runtime, which this server does not enable"),
        "{}",
        status.message()
    );
}

/// Every limit ends a data program over the real server with its own failure kind: the
/// deadline (running, and parked on a call nobody answers), memory, fuel, output (kept to the
/// limit and flagged), round trips and tool calls (a gather past it).
#[tokio::test]
async fn each_limit_ends_a_data_program_with_its_own_kind() {
    let server = serve(data_config(&[])).await;
    let client = client(&server).await;
    let run = |code: &str, limits: proto::Limits| {
        let mut client = client.clone();
        let start = proto::Start {
            runtime: "python-data".into(),
            limits: Some(limits),
            ..start_message(code, vec![add_tool()])
        };
        async move { Stream::open(&mut client, start, None).await.unwrap().drive(add).await.0 }
    };
    let kind = |m: Msg| {
        let f = failed(m);
        (FailureKind::try_from(f.kind).unwrap(), f.stdout)
    };
    let second = proto::Limits { timeout_ms: Some(1000), ..Default::default() };
    let running = run("print('working', end='')\nwhile True:\n    pass", second).await;
    assert_eq!(kind(running), (FailureKind::Timeout, "working".into()));
    let start = proto::Start {
        runtime: "python-data".into(),
        limits: Some(second),
        ..start_message("await add(a=1, b=2)", vec![add_tool()])
    };
    let mut client_for_parked = client.clone();
    let mut parked = Stream::open(&mut client_for_parked, start, None).await.unwrap();
    let end = parked.until(|m| matches!(m, Msg::Failed(_)).then_some(m)).await;
    assert_eq!(kind(end).0, FailureKind::Timeout, "a parked data program ends at its deadline");

    let grow = "import numpy as np\nprint('start')\nx = []\nwhile True:\n    x.append(np.ones(1 << 24))";
    assert_eq!(kind(run(grow, proto::Limits::default()).await), (FailureKind::Memory, "start\n".into()));
    let fuel = proto::Limits { fuel: Some(200_000_000), ..Default::default() };
    assert_eq!(kind(run("n = 0\nwhile True:\n    n += 1", fuel).await).0, FailureKind::Fuel);

    let output = proto::Limits { max_output_bytes: Some(10_000), ..Default::default() };
    let done = completed(run("import numpy as np\nfor i in range(100000):\n    print(np.int64(i))", output).await);
    assert_eq!(done.stdout.len(), 10_000);
    assert!(done.stats.unwrap().output_truncated);

    let rounds = proto::Limits { max_round_trips: Some(3), ..Default::default() };
    let f = run("for i in range(10):\n    print(await add(a=i, b=0))", rounds).await;
    assert_eq!(kind(f), (FailureKind::RoundTrips, "0\n1\n2\n".into()));
    let calls = proto::Limits { max_tool_calls: Some(5), ..Default::default() };
    let f = run("await asyncio.gather(*[add(a=i, b=0) for i in range(6)])", calls).await;
    assert_eq!(kind(f).0, FailureKind::ToolCalls);
}
