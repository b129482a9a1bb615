//! What one tenant can make the host do on its behalf stays bounded, through the real server:
//! checking tool inputs against schemas (costly checks run off the async workers, past a bound
//! they are refused, a schema whose checks multiply is refused when given), rendering tool
//! signatures (bounded, admitted like an execution), results waiting for a busy program
//! (a quarter of its memory at most), HTTP requests in progress (a share per tenant); and a server
//! without API keys answers only localhost. Meanwhile another tenant's `print(1)` stays quick.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ptc_server::proto;
use ptc_tests::grpc::*;
use ptc_tests::http::{post, post_raw};
use serde_json::{Value, json};

/// A tool whose rows each match only the last of 200 `anyOf` branches: jsonschema tries all.
fn rows_tool() -> proto::Tool {
    let branches: Vec<Value> = (0..200).map(|i| json!({"type": "object", "required": [format!("k{i}")]})).collect();
    tool(
        "rows",
        Some(json!({"type": "object", "properties": {"rows": {"type": "array", "items": {"anyOf": branches}}}})),
    )
}

/// 21 `anyOf`s through `$ref`s, each naming the next link twice: 2^21 ways through.
fn chain_schema() -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..21 {
        let next = if i == 20 { json!({"type": "string"}) } else { json!({"$ref": format!("#/$defs/d{}", i + 1)}) };
        defs.insert(format!("d{i}"), json!({"anyOf": [next.clone(), next]}));
    }
    json!({"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "required": ["x"]})
}

/// How long tenant b's `print(1)` takes over HTTP.
async fn quick(addr: SocketAddr) -> Duration {
    let started = Instant::now();
    let r = post(addr, "/exec", Some("key-b"), &json!({"code": "print(1)"})).await;
    assert_eq!(r.body["stdout"], "1\n", "{}", r.text);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn input_checks_are_bounded_and_another_tenant_stays_quick_meanwhile() {
    let server = serve(config(&["a:key-a", "b:key-b"])).await;
    let idle = quick(server.http_addr).await;
    // Two executions of tenant a send inputs far past the check bound (10,000 rows: ~2 million
    // steps) eight times each, then one near it (4,000 rows).
    let code = "big = [{'k199': 1}] * 10_000\nnear = [{'k199': 1}] * 4_000\nrefused = 0\n\
                for _ in range(8):\n    try:\n        await rows(rows=big)\n    except ToolError as e:\n        \
                refused += 1\n        why = str(e)\nprint(refused, why)\nprint(await rows(rows=near))";
    let mut attackers = vec![];
    for _ in 0..2 {
        let mut client = client(&server).await;
        attackers.push(tokio::spawn(async move {
            let stream =
                Stream::open(&mut client, start_message(code, vec![rows_tool()]), Some("key-a")).await.unwrap();
            completed(stream.drive(|c| Ok(json!(input(c)["rows"].as_array().unwrap().len()))).await.0)
        }));
    }
    let mut slowest = Duration::ZERO;
    while !attackers.iter().all(|a| a.is_finished()) {
        slowest = slowest.max(quick(server.http_addr).await);
    }
    for attacker in attackers {
        let done = attacker.await.unwrap();
        assert!(
            done.stdout.starts_with("8 the input of tool \"rows\" is too large to check against its schema"),
            "{}",
            done.stdout
        );
        assert!(done.stdout.ends_with("\n4000\n"), "a costly check within the bound passes: {}", done.stdout);
    }
    // Before, two such executions made a third tenant's print(1) take 41 s.
    assert!(slowest < idle + Duration::from_secs(2), "tenant b's print(1): {slowest:?} (idle {idle:?})");

    // A schema whose checks multiply is refused when the tools are given.
    let mut client = client(&server).await;
    let start = start_message("pass", vec![tool("chain", Some(chain_schema()))]);
    let refused = Stream::open(&mut client, start, Some("key-a")).await.err().expect("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("too costly to check inputs against"), "{}", refused.message());
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn describing_tools_is_bounded_and_admitted_like_an_execution() {
    let mut config = config(&["a:key-a", "b:key-b"]);
    config.tenant_limits.max_concurrent = Some(1);
    let server = serve(config).await;
    let mut client = client(&server).await;
    let describe = |key: &str| {
        let mut request = tonic::Request::new(proto::DescribeToolsRequest {
            tools: vec![tool("chain", Some(chain_schema()))],
            ..Default::default()
        });
        request.metadata_mut().insert("x-api-key", key.parse().unwrap());
        request
    };
    // Rendered (the doubling chain cut short), where it once took 60 s of CPU.
    let described = client.describe_tools(describe("key-a")).await.unwrap().into_inner();
    assert!(described.tools[0].signature.starts_with("chain(x: "), "{:?}", described.tools);
    // While tenant a's one execution runs, its rendering waits its turn like an execution would;
    // tenant b's does not.
    let stream =
        Stream::open(&mut client, start_message("await t()", vec![tool("t", None)]), Some("key-a")).await.unwrap();
    let refused = client.describe_tools(describe("key-a")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(client.describe_tools(describe("key-b")).await.is_ok());
    drop(stream);
    server.shutdown();
    server.wait().await;
}

// Multi-threaded, as a server runs: on one thread the busy program would leave the results
// waiting in the socket rather than on the host.
#[tokio::test(flavor = "multi_thread")]
async fn results_waiting_for_a_busy_program_hold_at_most_a_quarter_of_its_memory() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let code = "import asyncio, time\ntasks = [asyncio.ensure_future(t(i=i)) for i in range(21)]\nawait tasks[0]\n\
                end = time.monotonic() + 4\nwhile time.monotonic() < end:\n    pass\ngot, dropped, why = 0, 0, ''\n\
                for task in tasks[1:]:\n    try:\n        got += len(await task)\n    except ToolError as e:\n        \
                dropped += 1\n        why = str(e)\nprint(got, dropped)\nprint(why)";
    let limits = proto::Limits { max_memory_bytes: Some(128 << 20), ..Default::default() };
    let start = proto::Start { limits: Some(limits), ..start_message(code, vec![tool("t", None)]) };
    let mut stream = Stream::open(&mut client, start, None).await.unwrap();
    let calls = stream.until(|m| if let Msg::ToolCalls(b) = m { Some(b.calls) } else { None }).await;
    assert_eq!(calls.len(), 21);
    // The first answer wakes the program, which then runs for 4 s while 20 results of 4 MB
    // arrive: 80 MB against the 32 MiB that may wait. (Made before, so that they arrive fast.)
    let big = json!("x".repeat(4_000_000));
    let batches: Vec<Vec<proto::ToolResult>> =
        calls[1..].chunks(3).map(|c| c.iter().map(|call| result(&call.id, Ok(big.clone()))).collect()).collect();
    stream.send_results(vec![result(&calls[0].id, Ok(json!(0)))]).await;
    for batch in batches {
        stream.send_results(batch).await;
    }
    let end = completed(stream.until(|m| matches!(m, Msg::Completed(_) | Msg::Failed(_)).then_some(m)).await);
    let mut lines = end.stdout.lines();
    let counts: Vec<u64> = lines.next().unwrap().split(' ').map(|n| n.parse().unwrap()).collect();
    // At most 32 MiB wait; a few results may have been taken before the program got busy.
    assert!(counts[1] >= 8 && counts[0] <= 48_000_000, "{}", end.stdout);
    let why = lines.next().unwrap();
    assert!(why.contains("was dropped") && why.contains("may hold a quarter of its memory limit (128 MiB)"), "{why}");
    ptc_tests::eventually("nothing held stays charged", || server.engine.memory_budget_used() == 0).await;
    server.shutdown();
    server.wait().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_has_a_share_of_the_requests_in_progress() {
    let mut config = config(&["a:key-a", "b:key-b"]);
    config.tenant_limits.max_requests = Some(3);
    let server = serve(config).await;
    let addr = server.http_addr;
    let busy =
        json!({"code": "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 2:\n    pass\nprint('done')"});
    let mut runs = vec![];
    for _ in 0..6 {
        let body = busy.clone();
        runs.push(tokio::spawn(async move { post(addr, "/exec", Some("key-a"), &body).await }));
    }
    ptc_tests::eventually("tenant a holds its share", || server.requests.in_progress("a") == 3).await;
    let b = quick(addr).await;
    assert!(b < Duration::from_secs(2), "tenant b waited {b:?}");
    let mut statuses = vec![];
    for run in runs {
        let r = run.await.unwrap();
        if r.status == 429 {
            assert!(r.body["error"].as_str().unwrap().contains("a key may have 3 at once"), "{}", r.text);
        }
        statuses.push(r.status);
    }
    statuses.sort();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert_eq!(server.requests.in_progress("a"), 0, "each request gave its place back");
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn without_api_keys_only_localhost_and_json_are_answered() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let body = br#"{"code": "print(1)"}"#;
    let local = format!("127.0.0.1:{}", addr.port());
    for (headers, status) in [
        (vec![("Host", "evil.com")], 403),
        (vec![("Host", local.as_str()), ("Origin", "http://evil.com")], 403),
        (vec![("Host", local.as_str()), ("Origin", "null")], 403),
        (vec![("Host", local.as_str()), ("Origin", "http://localhost:3000")], 200),
        (vec![("Host", "localhost")], 200),
    ] {
        let r = raw(addr, "POST", "/exec", &headers, "application/json", body).await;
        assert_eq!(r.0, status, "{headers:?}: {}", r.1);
        if status == 403 {
            assert!(r.1.contains("without API keys (local mode)"), "{}", r.1);
        }
    }
    // A browser may send text/plain across sites without asking: only JSON runs code.
    let r = raw(addr, "POST", "/exec", &[("Host", local.as_str())], "text/plain", body).await;
    assert_eq!(r.0, 415, "{}", r.1);
    for path in ["/files/s1", "/download/s1/f1", "/mcp"] {
        let r = raw(addr, "GET", path, &[("Host", "evil.com")], "application/json", b"").await;
        assert_eq!(r.0, 403, "{path}: {}", r.1);
    }
    let r = post_raw(addr, "/exec", &[], body).await;
    assert_eq!(r.body["stdout"], "1\n", "{}", r.text);
    server.shutdown();
    server.wait().await;
}

/// One request with exactly these headers (no Host unless given): (status, whole answer).
async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    let mut all = vec![("Content-Type", content_type)];
    all.extend_from_slice(headers);
    let reply = ptc_tests::http::request(addr, method, path, &all, body).await;
    (reply.status, format!("{}\r\n\r\n{}", reply.head, reply.text))
}
