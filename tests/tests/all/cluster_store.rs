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
    let store = server.cluster.store.clone();
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

/// The node found Redis gone (its circuit is open); Redis comes back; the very next execution
/// is journaled, though the background check (every second) has not come round: the request
/// checked the store itself. Before, executions in that second ran unjournaled, and their
/// continuations after their node died found nothing ("Execution expired").
#[tokio::test(flavor = "multi_thread")]
async fn the_first_execution_after_redis_is_back_is_journaled_without_waiting_for_the_background_check() {
    let (redis_process, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-redis-back-{}", std::process::id()));
    let server = serve(node("n1", port, Peers::None, &files)).await;
    let addr = server.http_addr;
    let store = server.cluster.store.clone();
    drop(redis_process);
    let paused = begin(addr, "key-a", "print(await t())").await;
    answer(addr, "key-a", &paused).await;
    assert!(!store.available(), "the circuit is open");
    for round in 0..3 {
        // Redis answers again; the background check runs once a second. A request within 100 ms
        // of the last check does not ping again (so a down store costs each request nothing):
        // past that, the next execution checks on its own path, long before the background.
        let (_redis, _) = tokio::task::spawn_blocking(move || redis::start(Some(port))).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let paused = begin(addr, "key-a", "print(await t())").await;
        assert_eq!(journal_headers(port), 1, "round {round}: journaled at once");
        answer(addr, "key-a", &paused).await;
        drop(_redis);
        // Down again, and found down by the next execution, which runs unjournaled.
        let paused = begin(addr, "key-a", "print(await t())").await;
        answer(addr, "key-a", &paused).await;
        assert!(!store.available(), "round {round}: the circuit is open again");
    }
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_dir_all(files);
}

/// Two nodes over the Redis at `port`, each naming the other as its peer (its ports chosen
/// first), their files in `files`.
async fn peered_nodes(port: u16, files: &std::path::Path) -> (RunningServer, RunningServer) {
    let (p1, p2) = (ptc_tests::binary::free_port(), ptc_tests::binary::free_port());
    let peers = Peers::List(vec![
        ("n1".into(), format!("http://127.0.0.1:{p1}")),
        ("n2".into(), format!("http://127.0.0.1:{p2}")),
    ]);
    let mut c1 = node("n1", port, peers.clone(), files);
    c1.http_addr = ([127, 0, 0, 1], p1).into();
    let mut c2 = node("n2", port, peers, files);
    c2.http_addr = ([127, 0, 0, 1], p2).into();
    (serve(c1).await, serve(c2).await)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_continuation_after_redis_restarted_is_replayed_on_another_node() {
    let (redis_process, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-redis-restart-{}", std::process::id()));
    let (n1, n2) = peered_nodes(port, &files).await;
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

/// A JavaScript run is journaled as a Python one is: its continuation on another node, once its
/// own is gone and its image cannot be used, replays it with the random numbers it drew.
#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_run_is_replayed_on_another_node_with_its_random_numbers() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-js-replay-{}", std::process::id()));
    let (n1, n2) = peered_nodes(port, &files).await;
    let code = "const r = Math.random();\nconst a = await t({r});\nconst b = await t({});\nconsole.log(r, a + b)";
    let paused =
        post(n1.http_addr, PATH, Some("key-a"), &json!({"code": code, "tools": tools(), "runtime": "javascript"}))
            .await;
    assert_eq!(paused.body["status"], "tool_call_required", "{}", paused.text);
    let r = paused.body["tool_calls"][0]["input"]["r"].as_f64().expect("the random number it drew");
    assert_eq!(journal_headers(port), 1, "journaled");
    stop(n1).await;
    // The image n1 kept as it stopped is refused: n2 replays the journal instead.
    eventually("its image is in the store", || images(port) == 1).await;
    redis::alter_an_image(port);
    let next = answer(n2.http_addr, "key-a", &paused).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    let end = answer(n2.http_addr, "key-a", &next).await;
    assert_eq!(end.body["stdout"], format!("{r} 2\n"), "{}", end.text);
    let usage = n2.cluster.store.usage("a").await.unwrap();
    assert_eq!(usage.get("replays"), Some(&1), "{usage:?}");
    stop(n2).await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_pending_across_a_replay_keeps_its_call_id_and_is_asked_once() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-approval-replay-{}", std::process::id()));
    let (p1, p2, p3) = (ptc_tests::binary::free_port(), ptc_tests::binary::free_port(), ptc_tests::binary::free_port());
    let peers = Peers::List(vec![
        ("n1".into(), format!("http://127.0.0.1:{p1}")),
        ("n2".into(), format!("http://127.0.0.1:{p2}")),
        ("n3".into(), format!("http://127.0.0.1:{p3}")),
    ]);
    let configs: Vec<ServerConfig> = [("n1", p1), ("n2", p2), ("n3", p3)]
        .into_iter()
        .map(|(id, p)| {
            let mut c = node(id, port, peers.clone(), &files);
            c.http_addr = ([127, 0, 0, 1], p).into();
            // Replayed from the journal, never thawed.
            c.engine.hibernate_after = None;
            c
        })
        .collect();
    let tools = json!([
        {"name": "t", "parameters": {"type": "object"}},
        {"name": "rm", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}, "requires_approval": true}
    ]);
    let code = "import random\nr = random.random()\na, b = await asyncio.gather(t(x=1), rm(id=3, _reason='stale'))\nprint(a, b, r)";
    let n1 = serve(configs[0].clone()).await;
    let paused = post(n1.http_addr, PATH, Some("key-a"), &json!({"code": code, "tools": tools})).await;
    assert_eq!(paused.body["status"], "tool_call_required", "{}", paused.text);
    let (call, asked) = (paused.body["tool_calls"][0].clone(), paused.body["approvals"][0].clone());
    assert_eq!(asked["reason"], "stale", "{}", paused.text);
    stop(n1).await;

    // n1 is gone: n2 replays its journal to the pause the token names, and takes the answer
    // and the decision (the person asked once, before).
    let n2 = serve(configs[1].clone()).await;
    let decisions = json!([{"call_id": asked["id"], "approve": true, "input": {"id": 4}}]);
    let body = json!({
        "continuation_token": paused.body["continuation_token"],
        "tool_results": [{"call_id": call["id"], "result": 1}],
        "decisions": decisions,
    });
    let next = post(n2.http_addr, PATH, Some("key-a"), &body).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    assert!(next.body.get("approvals").is_none(), "{}", next.text);
    let approved = next.body["tool_calls"][0].clone();
    assert_eq!((&approved["id"], &approved["input"]), (&asked["id"], &json!({"id": 4})), "{}", next.text);
    stop(n2).await;

    // n2 is gone too: n3 replays again, the decision from the journal; nobody is asked, and the
    // call keeps its id.
    let n3 = serve(configs[2].clone()).await;
    let body = json!({
        "continuation_token": next.body["continuation_token"],
        "tool_results": [{"call_id": approved["id"], "result": "removed"}],
    });
    let end = post(n3.http_addr, PATH, Some("key-a"), &body).await;
    assert_eq!(end.body["status"], "completed", "{}", end.text);
    let stdout = end.body["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("1 removed 0."), "{stdout}");
    let usage = n3.cluster.store.usage("a").await.unwrap();
    assert_eq!(usage.get("replays"), Some(&2), "{usage:?}");
    stop(n3).await;
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

/// The journals' hashes of segments that hold a sealed image.
fn images(port: u16) -> usize {
    let keys = redis::command(port, &["KEYS", "ptc:j:*:s"]);
    keys.lines()
        .filter(|l| l.starts_with("ptc:j:"))
        .filter(|key| redis::command(port, &["HEXISTS", key, "image"]).starts_with(":1"))
        .count()
}

/// Two nodes over the Redis at `port` that hibernate what waits 50 ms; files in `files`.
async fn two_hibernating_nodes(port: u16, files: &std::path::Path) -> (RunningServer, RunningServer) {
    let [c1, c2] = hibernating_configs(port, files);
    (serve(c1).await, serve(c2).await)
}

/// The configurations of [`two_hibernating_nodes`].
fn hibernating_configs(port: u16, files: &std::path::Path) -> [ServerConfig; 2] {
    let [c1, c2, ..] = &hibernating_nodes(port, files, 2)[..] else { unreachable!() };
    [c1.clone(), c2.clone()]
}

/// `n` nodes (`n1`, `n2`, ...) over the Redis at `port`, each naming the others, that
/// hibernate what waits 50 ms; files in `files`.
fn hibernating_nodes(port: u16, files: &std::path::Path, n: usize) -> Vec<ServerConfig> {
    let ports: Vec<u16> = (0..n).map(|_| ptc_tests::binary::free_port()).collect();
    let peers = Peers::List(
        ports.iter().enumerate().map(|(i, p)| (format!("n{}", i + 1), format!("http://127.0.0.1:{p}"))).collect(),
    );
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut config = node(&format!("n{}", i + 1), port, peers.clone(), files);
            config.http_addr = ([127, 0, 0, 1], *p).into();
            config.engine.hibernate_after = Some(Duration::from_millis(50));
            config
        })
        .collect()
}

/// The owner is gone, and the same continuation reaches two other nodes: at once (two
/// balancers, or a client's retry racing its first try) and one after the other (a balancer
/// retrying). One answers, the other refuses the token; and the one that refused holds no copy,
/// names itself owner of nothing, and forwards the next round's token to the one that answered.
/// Before, both thawed it: the loser kept a copy and answered every later token of the execution
/// "Invalid continuation token", and thaws were counted twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_continuation_sent_to_two_survivors_is_taken_over_by_one_and_the_other_keeps_nothing() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-retried-{}", std::process::id()));
    let configs = hibernating_nodes(port, &files, 3);
    let mut nodes = Vec::new();
    for config in configs {
        nodes.push(serve(config).await);
    }
    let n1 = nodes.remove(0);
    let (n2, n3) = (nodes.remove(0), nodes.remove(0));
    let code = "a = await t()\nb = await t()\nc = await t()\nprint(a + b + c)";
    let (at_once, one_then_other) =
        (begin(n1.http_addr, "key-a", code).await, begin(n1.http_addr, "key-a", code).await);
    eventually("both images are in the store", || images(port) == 2).await;
    stop(n1).await;
    let is_invalid = |r: &Reply| r.status == 400 && r.text.contains("Invalid continuation token");
    let (x, y) = tokio::join!(answer(n2.http_addr, "key-a", &at_once), answer(n3.http_addr, "key-a", &at_once));
    let (won, lost) = match (x.body["status"] == "tool_call_required", y.body["status"] == "tool_call_required") {
        (true, false) => ((&n2, x), (&n3, y)),
        (false, true) => ((&n3, y), (&n2, x)),
        _ => panic!("exactly one node takes it over:\n{}\n{}", x.text, y.text),
    };
    assert!(is_invalid(&lost.1), "{}", lost.1.text);
    let second = answer(n2.http_addr, "key-a", &one_then_other).await;
    assert_eq!(second.body["status"], "tool_call_required", "{}", second.text);
    let again = answer(n3.http_addr, "key-a", &one_then_other).await;
    assert!(is_invalid(&again), "{}", again.text);
    // The losers keep no copy: each execution is paused on its winner alone.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let held = (n2.http.paused_count(), n3.http.paused_count());
    assert_eq!(held.0 + held.1, 2, "each execution is held by its winner alone (n2, n3): {held:?}");
    // The next round's tokens, sent to the node that lost each, reach the winners.
    let next = answer(lost.0.http_addr, "key-a", &won.1).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    let end = answer(n3.http_addr, "key-a", &answer(n3.http_addr, "key-a", &second).await).await;
    assert_eq!(end.body["stdout"], "3\n", "{}", end.text);
    let end = answer(lost.0.http_addr, "key-a", &next).await;
    assert_eq!(end.body["stdout"], "3\n", "{}", end.text);
    let usage = n2.cluster.store.usage("a").await.unwrap();
    assert_eq!(usage.get("thaws"), Some(&2), "one thaw per execution: {usage:?}");
    stop(n2).await;
    stop(n3).await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hibernated_execution_is_thawed_on_another_node_when_its_owner_is_gone() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-thaw-elsewhere-{}", std::process::id()));
    let [c1, c2] = hibernating_configs(port, &files);
    let (n1, n2) = (serve(c1.clone()).await, serve(c2).await);
    // It changes a file it started with before its first call, so running it again could not
    // repeat it (a replay is refused): only a thaw can carry it on. Random values, a
    // generator and the clock are carried in memory.
    let code = "import random, time\n\
with open('/mnt/data/count.txt', 'a') as f:\n    f.write('+')\n\
random.seed(3)\nfirst = random.random()\nsquares = (i * i for i in range(5))\nnext(squares)\n\
t0 = time.monotonic()\nprint('before', first)\n\
r = await t()\n\
print('middle', r, random.random(), next(squares))\n\
s = await t()\n\
print('after', s, random.random(), list(squares), time.monotonic() >= t0, open('/mnt/data/count.txt').read())";
    let prepare = json!({"code": "open('/mnt/data/count.txt', 'w').write('0')", "tools": tools()});
    let start = |addr, key: &'static str| {
        let prepare = prepare.clone();
        async move {
            let reply = post(addr, PATH, Some(key), &prepare).await;
            let request = json!({"code": code, "tools": tools(), "session_id": reply.body["session_id"]});
            let paused = post(addr, PATH, Some(key), &request).await;
            assert_eq!(paused.body["status"], "tool_call_required", "{}", paused.text);
            paused
        }
    };
    // The run as it goes uninterrupted on one node.
    let reference = {
        let paused = start(n2.http_addr, "key-b").await;
        let next = answer(n2.http_addr, "key-b", &paused).await;
        answer(n2.http_addr, "key-b", &next).await.body["stdout"].as_str().unwrap().to_string()
    };
    eventually("the reference run is forgotten", || images(port) == 0).await;

    let paused = start(n1.http_addr, "key-a").await;
    eventually("its image is in the store", || images(port) == 1).await;
    // Counted once its image is kept and its instance freed, a moment after the store has it.
    eventually("n1 holds it hibernated", || n1.engine.hibernated() == 1).await;
    stop(n1).await;
    // Thawed on n2, which hibernates it again as soon as it waits (it has no journal there).
    let next = answer(n2.http_addr, "key-a", &paused).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    eventually("n2 hibernates it at once", || n2.engine.hibernated() == 1).await;
    stop(n2).await;
    // And thawed again on n1, back up.
    let n1 = serve(c1).await;
    let end = answer(n1.http_addr, "key-a", &next).await;
    assert_eq!(end.body["status"], "completed", "{}", end.text);
    let stdout = end.body["stdout"].as_str().unwrap();
    assert_eq!(stdout, reference);
    // The file was appended to once: nothing ran twice.
    assert!(stdout.starts_with("before ") && stdout.ends_with(" [4, 9, 16] True 0+\n"), "{stdout}");
    let usage = n1.cluster.store.usage("a").await.unwrap();
    assert_eq!((usage.get("thaws"), usage.get("replays")), (Some(&2), None), "{usage:?}");
    eventually("the ended execution's journal and image are forgotten", || images(port) == 0).await;
    assert_eq!(journal_headers(port), 0);
    stop(n1).await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_lost_before_it_kept_a_thawed_execution_again_is_answered_in_words() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-thaw-behind-{}", std::process::id()));
    let [c1, mut c2] = hibernating_configs(port, &files);
    // n2 cannot keep its image (past its bound): what the execution does there is not kept.
    c2.journal_limits.tenant_bytes = 1024;
    let (n1, n2) = (serve(c1).await, serve(c2).await);
    let paused = begin(n1.http_addr, "key-a", "r = await t()\ns = await t()\nprint(r, s)").await;
    eventually("its image is in the store", || images(port) == 1).await;
    stop(n1).await;
    let next = answer(n2.http_addr, "key-a", &paused).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(n2.engine.hibernated(), 0, "its image could not be kept, so it stays live");
    stop(n2).await;
    let n3 = serve(hibernating_configs(port, &files)[0].clone()).await;
    let lost = answer(n3.http_addr, "key-a", &next).await;
    assert_eq!(lost.body["status"], "error", "{}", lost.text);
    let stderr = lost.body["stderr"].as_str().unwrap();
    assert!(stderr.contains("lost right after its last pause") && stderr.contains("Run the program again"), "{stderr}");
    assert_eq!(journal_headers(port), 0, "forgotten");
    stop(n3).await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_execution_is_thawed_on_another_node_and_one_whose_image_is_refused_is_lost_in_words() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-thaw-data-{}", std::process::id()));
    let [mut c1, mut c2] = hibernating_configs(port, &files);
    // The data runtime in the settings of the other tests' (one compiled runtime), and so
    // one snapshot on both nodes.
    for config in [&mut c1, &mut c2] {
        config.engine.python_data = Some(ptc_engine::python_data_artifacts());
        config.engine.fuel = true;
    }
    let (n1, n2) = (serve(c1).await, serve(c2).await);
    let code = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nr = await t()\n\
                df['b'] = df.a + r\ns = await t()\nprint(df.b.tolist(), s)";
    let request = json!({"code": code, "tools": tools(), "runtime": "python-data"});
    let start = || async {
        let paused = post(n1.http_addr, PATH, Some("key-a"), &request).await;
        assert_eq!(paused.body["status"], "tool_call_required", "{}", paused.text);
        paused
    };
    // Not journaled (it could not be run again elsewhere): its image is kept at once.
    let refused = start().await;
    eventually("its image is in the store", || images(port) == 1).await;
    redis::alter_an_image(port);
    let kept = start().await;
    eventually("both images are in the store", || images(port) == 2).await;
    stop(n1).await;

    let lost = answer(n2.http_addr, "key-a", &refused).await;
    assert_eq!(lost.body["status"], "error", "{}", lost.text);
    let stderr = lost.body["stderr"].as_str().unwrap();
    assert!(stderr.contains("python-data") && stderr.contains("Run the program again"), "{stderr}");
    let next = answer(n2.http_addr, "key-a", &kept).await;
    assert_eq!(next.body["status"], "tool_call_required", "{}", next.text);
    let end = answer(n2.http_addr, "key-a", &next).await;
    assert_eq!(
        (end.body["status"].as_str(), end.body["stdout"].as_str()),
        (Some("completed"), Some("[2, 3, 4] 1\n")),
        "{}",
        end.text
    );
    let usage = n2.cluster.store.usage("a").await.unwrap();
    assert_eq!((usage.get("thaws"), usage.get("replays")), (Some(&1), None), "{usage:?}");
    eventually("both are forgotten", || images(port) == 0 && journal_headers(port) == 0).await;
    stop(n2).await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_altered_image_is_refused_and_the_journal_replayed_instead() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-thaw-altered-{}", std::process::id()));
    let (n1, n2) = two_hibernating_nodes(port, &files).await;
    let paused = begin(n1.http_addr, "key-a", "import random\nx = random.random()\nprint(await t(), x > 0)").await;
    eventually("its image is in the store", || images(port) == 1).await;
    redis::alter_an_image(port);
    stop(n1).await;
    let end = answer(n2.http_addr, "key-a", &paused).await;
    assert_eq!(
        (end.body["status"].as_str(), end.body["stdout"].as_str()),
        (Some("completed"), Some("1 True\n")),
        "{}",
        end.text
    );
    let usage = n2.cluster.store.usage("a").await.unwrap();
    assert_eq!((usage.get("thaws"), usage.get("replays")), (None, Some(&1)), "{usage:?}");
    stop(n2).await;
    let _ = std::fs::remove_dir_all(files);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_its_store_down_a_waiting_execution_is_not_hibernated_and_stays_live() {
    let (redis_process, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-thaw-store-down-{}", std::process::id()));
    let mut config = node("n1", port, Peers::None, &files);
    config.engine.hibernate_after = Some(Duration::from_millis(50));
    let server = serve(config).await;
    // Journaled while Redis answered; Redis goes before it has waited long enough.
    let paused = begin(server.http_addr, "key-a", "print(await t())").await;
    drop(redis_process);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!((server.engine.hibernated(), server.engine.live_instances()), (0, 1), "its image could not be kept");
    let end = answer(server.http_addr, "key-a", &paused).await;
    assert_eq!(end.body["stdout"], "1\n", "{}", end.text);
    stop(server).await;
    let _ = std::fs::remove_dir_all(files);
}

/// Runs `code` in `tenant`'s (`key`'s) session `session` on `server`, answering each call with
/// its `a` times 10; the final message, or the status the stream ended with.
async fn run_in_session(
    server: &RunningServer,
    key: &str,
    session: &str,
    code: &str,
) -> Result<ptc_tests::grpc::Msg, tonic::Status> {
    let mut client = ptc_tests::grpc::client(server).await;
    let tools = vec![ptc_tests::grpc::tool("ten", None)];
    let start = ptc_server::proto::Start { session_id: session.into(), ..ptc_tests::grpc::start_message(code, tools) };
    let stream = ptc_tests::grpc::Stream::open(&mut client, start, Some(key)).await?;
    Ok(stream.drive(|c| Ok(json!(ptc_tests::grpc::input(c)["a"].as_i64().unwrap_or(0) * 10))).await.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_session_is_taken_over_by_another_node_once_its_owner_is_gone() {
    let (_redis, port) = tokio::task::spawn_blocking(|| redis::start(None)).await.unwrap();
    let files = std::env::temp_dir().join(format!("ptc-session-takeover-{}", std::process::id()));
    let (n1, n2) = two_hibernating_nodes(port, &files).await;
    let mut client = ptc_tests::grpc::client(&n1).await;
    let mut open = tonic::Request::new(ptc_server::proto::OpenSessionRequest {
        session_id: "notebook".into(),
        ..Default::default()
    });
    open.metadata_mut().insert("x-api-key", "key-a".parse().unwrap());
    client.open_session(open).await.expect("open session");
    let first = "import random\nrandom.seed(11)\nfirst = random.random()\nx = await ten(a=4)\n\
                 open('/mnt/data/notes.txt', 'w').write('kept')\ndef twice(v):\n    return 2 * v";
    let done = ptc_tests::grpc::completed(run_in_session(&n1, "key-a", "notebook", first).await.unwrap());
    assert_eq!(done.stdout, "");
    eventually("the idle session's image is in the store", || images(port) == 1).await;
    // Its owner is up: another node says where it is.
    let elsewhere = run_in_session(&n2, "key-a", "notebook", "print(x)").await.unwrap_err();
    assert_eq!(elsewhere.code(), tonic::Code::FailedPrecondition, "{elsewhere:?}");
    assert!(elsewhere.message().contains("open on server n1"), "{}", elsewhere.message());
    // Another tenant does not see it.
    let foreign = run_in_session(&n2, "key-b", "notebook", "print(x)").await.unwrap_err();
    assert_eq!(foreign.code(), tonic::Code::NotFound, "{foreign:?}");
    stop(n1).await;

    // n2 takes it over, with its globals, functions, random state and files.
    let next = "r = random.Random(11)\n\
                print(twice(x), first == r.random(), random.random() == r.random(), open('/mnt/data/notes.txt').read())";
    let done = ptc_tests::grpc::completed(run_in_session(&n2, "key-a", "notebook", next).await.unwrap());
    assert_eq!(done.stdout, "80 True True kept\n", "{}", done.stderr);
    let done = ptc_tests::grpc::completed(run_in_session(&n2, "key-a", "notebook", "print(twice(3))").await.unwrap());
    assert_eq!(done.stdout, "6\n");
    let metrics = ptc_tests::grpc::metrics_text(&n2).await;
    assert!(metrics.contains("ptc_sessions_taken_over_total 1"), "{metrics}");
    // Closed, it is forgotten everywhere.
    let mut client = ptc_tests::grpc::client(&n2).await;
    let mut close = tonic::Request::new(ptc_server::proto::CloseSessionRequest { session_id: "notebook".into() });
    close.metadata_mut().insert("x-api-key", "key-a".parse().unwrap());
    client.close_session(close).await.expect("close");
    eventually("its record is gone", || journal_headers(port) == 0).await;
    stop(n2).await;
    let _ = std::fs::remove_dir_all(files);
}
