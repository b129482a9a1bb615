//! The cluster's shared store at its edges, through real servers and a real `redis-server`:
//! journals are bounded per tenant (an execution past the bound runs on unjournaled); with
//! Redis down, executions answer at once and run unjournaled until it is back; and the first
//! continuation after Redis restarted is replayed, not refused with "broken pipe".

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ptc_server::cluster::Peers;
use ptc_server::{RunningServer, ServerConfig};
use ptc_tests::grpc::{config, serve};
use ptc_tests::http::{Reply, post};
use ptc_tests::{eventually, redis};
use serde_json::{Value, json};

const SECRET: &str = "a-secret-both-nodes-share";
const PATH: &str = "/exec/programmatic";

/// A node of a cluster over the Redis at `port`, with `peers`, its files in `files`.
fn node(id: &str, port: u16, peers: Peers, files: &std::path::Path) -> ServerConfig {
    let mut config = config(&["a:key-a", "b:key-b"]);
    config.node_id = id.into();
    config.peers = peers;
    config.redis_url = Some(format!("redis://127.0.0.1:{port}"));
    config.token_secret = Some(SECRET.into());
    config.files.dir = files.to_path_buf();
    config.engine.warm_instances = 0;
    config
}

fn tools() -> Value {
    json!([{"name": "t", "parameters": {"type": "object"}}])
}

async fn begin(addr: SocketAddr, key: &str, code: &str) -> Reply {
    let reply = post(addr, PATH, Some(key), &json!({"code": code, "tools": tools()})).await;
    assert_eq!(reply.body["status"], "tool_call_required", "{}", reply.text);
    reply
}

async fn answer(addr: SocketAddr, key: &str, paused: &Reply) -> Reply {
    let results: Vec<Value> = paused.body["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"call_id": c["id"], "result": 1}))
        .collect();
    let body = json!({"continuation_token": paused.body["continuation_token"], "tool_results": results});
    post(addr, PATH, Some(key), &body).await
}

/// Bytes the store counts for `tenant`'s journals.
fn journal_bytes(port: u16, tenant: &str) -> u64 {
    let reply = redis::command(port, &["HGET", "ptc:jq:u", &hex(tenant)]);
    reply.lines().nth(1).and_then(|l| l.trim().parse().ok()).unwrap_or(0)
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn journal_headers(port: u16) -> usize {
    redis::command(port, &["KEYS", "ptc:j:*:h"]).matches("ptc:j:").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_journals_are_bounded_and_past_the_bound_executions_run_unjournaled() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-journal-bounds-{}", std::process::id()));
    let mut config = node("n1", port, Peers::None, &files);
    config.journal_limits.tenant_bytes = 150_000;
    let server = serve(config).await;
    let addr = server.http_addr;
    // Each reads the clock 2,000 times before its first call: a journal of about 60 KB.
    let code = "import time\nfor _ in range(2000):\n    time.time()\nprint(await t())";
    let mut paused = vec![];
    for _ in 0..5 {
        paused.push(begin(addr, "key-a", code).await);
    }
    let used = journal_bytes(port, "a");
    assert!(used > 60_000 && used <= 150_000, "tenant a's journals hold {used} bytes");
    assert!(journal_headers(port) < 5, "the executions past the bound were not journaled");
    // Another tenant is not held to a's bound.
    let theirs = begin(addr, "key-b", code).await;
    assert!(journal_bytes(port, "b") > 0);
    // Every execution still completes on its node, journaled or not; ended, none is kept.
    for p in paused.iter().chain([&theirs]) {
        let key = if std::ptr::eq(p, &theirs) { "key-b" } else { "key-a" };
        let end = answer(addr, key, p).await;
        assert_eq!(end.body["status"], "completed", "{}", end.text);
        assert_eq!(end.body["stdout"], "1\n");
    }
    eventually("the journals of ended executions are forgotten", || journal_bytes(port, "a") == 0).await;
    assert_eq!(journal_headers(port), 0);
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_redis_down_executions_answer_at_once_and_run_unjournaled_until_it_is_back() {
    let (redis_process, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-redis-down-{}", std::process::id()));
    let server = serve(node("n1", port, Peers::None, &files)).await;
    let addr = server.http_addr;
    let store = server.http.cluster.store.clone();
    drop(redis_process);
    for _ in 0..3 {
        let started = Instant::now();
        let paused = begin(addr, "key-a", "print(await t())").await;
        let end = answer(addr, "key-a", &paused).await;
        assert_eq!(end.body["stdout"], "1\n", "{}", end.text);
        // The first one waits out one command's timeout (0.5 s); the rest none. Before, 18.9 s.
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
    assert!(!store.available(), "the circuit is open");
    let (_redis, _) = tokio::task::spawn_blocking(move || redis::start(Some(port))).await.unwrap();
    eventually_for("the store answers again", Duration::from_secs(10), || store.available()).await;
    let paused = begin(addr, "key-a", "print(await t())").await;
    assert_eq!(journal_headers(port), 1, "journaled again");
    answer(addr, "key-a", &paused).await;
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_continuation_after_redis_restarted_is_replayed_on_another_node() {
    let (redis_process, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-redis-restart-{}", std::process::id()));
    // Ports first, so that each node names the other's.
    let (p1, p2) = (ptc_tests::binary::free_port(), ptc_tests::binary::free_port());
    let peers = Peers::List(vec![
        ("n1".into(), format!("http://127.0.0.1:{p1}")),
        ("n2".into(), format!("http://127.0.0.1:{p2}")),
    ]);
    let mut c1 = node("n1", port, peers.clone(), &files);
    c1.http_addr = ([127, 0, 0, 1], p1).into();
    let mut c2 = node("n2", port, peers, &files);
    c2.http_addr = ([127, 0, 0, 1], p2).into();
    let (n1, n2) = (serve(c1).await, serve(c2).await);
    // Both nodes have spoken to Redis: their connections are open.
    for server in [&n1, &n2] {
        let paused = begin(server.http_addr, "key-a", "print(await t())").await;
        answer(server.http_addr, "key-a", &paused).await;
    }
    // Redis restarts (empty): every node's connection to it is now broken.
    drop(redis_process);
    let (_redis, _) = tokio::task::spawn_blocking(move || redis::start(Some(port))).await.unwrap();
    let code = "r = await t()\nprint(r + await t())";
    let paused = begin(n1.http_addr, "key-a", code).await;
    assert_eq!(journal_headers(port), 1, "n1 journaled it on a fresh connection");
    stop(n1).await;
    // The continuation reaches n2, which cannot forward it to n1 and replays the journal.
    let next = answer(n2.http_addr, "key-a", &paused).await;
    assert_eq!(next.status, 200, "{}", next.text);
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    let end = answer(n2.http_addr, "key-a", &next).await;
    assert_eq!(end.body["stdout"], "2\n", "{}", end.text);
    stop(n2).await;
    let _ = std::fs::remove_dir_all(files);
}

async fn stop(server: RunningServer) {
    server.shutdown();
    server.wait().await;
}

async fn eventually_for(what: &str, within: Duration, f: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
