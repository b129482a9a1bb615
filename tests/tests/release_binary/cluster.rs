//! A cluster on one machine: three `ptc-engine serve` processes (the release binary) over one
//! real `redis-server` and one files directory (the shared volume), spoken to as LibreChat's
//! client speaks to a plain load balancer: every request goes to a random node. Nodes are
//! killed with SIGKILL and restarted one after another while executions are paused; every
//! execution still completes, with exactly the output it would have had: thawed elsewhere
//! from its sealed image when it had hibernated, replayed from its journal when it had not.
//! A live session (gRPC) that had hibernated is taken over by another node; one that had run a
//! program since is lost, in words. A python-data execution is thawed elsewhere too.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use ptc_tests::binary::{Process, free_port, serving};
use ptc_tests::http::{post, post_raw};
use serde_json::{Value, json};

const KEY: &str = "key-a";
const SECRET: &str = "a-secret-every-node-shares";

/// Opens live session `id` on the node whose gRPC port is `port`.
async fn open_session(port: u16, id: &str) {
    let mut client = ptc_server::proto::sandbox_client::SandboxClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("connect");
    let mut request =
        tonic::Request::new(ptc_server::proto::OpenSessionRequest { session_id: id.into(), ..Default::default() });
    request.metadata_mut().insert("x-api-key", KEY.parse().unwrap());
    client.open_session(request).await.expect("open session");
}

/// Runs `code` (no tools) in live session `id` through the node whose gRPC port is `port`:
/// its stdout, or the status that refused it.
async fn in_session(port: u16, id: &str, code: &str) -> Result<String, tonic::Status> {
    let mut client = ptc_server::proto::sandbox_client::SandboxClient::connect(format!("http://127.0.0.1:{port}"))
        .await
        .expect("connect");
    let start = ptc_server::proto::Start { session_id: id.into(), ..ptc_tests::grpc::start_message(code, vec![]) };
    let stream = ptc_tests::grpc::Stream::open(&mut client, start, Some(KEY)).await?;
    let (end, _) = stream.drive(|_| Err("no tools".into())).await;
    Ok(ptc_tests::grpc::completed(end).stdout)
}

/// The reply to `GET url` (plain HTTP/1.1 on loopback), head and body; empty if refused.
fn http_get(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let Ok(mut s) = TcpStream::connect(host) else { return String::new() };
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
}

/// The status of `GET url`.
fn http_get_status(url: &str) -> u16 {
    http_get(url).split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// `HGET key field` on the Redis at `port`, spoken in RESP by hand.
fn hget(port: u16, key: &str, field: &str) -> Option<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let command = format!("*3\r\n$4\r\nHGET\r\n${}\r\n{key}\r\n${}\r\n{field}\r\n", key.len(), field.len());
    s.write_all(command.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut head = String::new();
    reader.read_line(&mut head).unwrap();
    if head.starts_with("$-1") {
        return None;
    }
    let mut value = String::new();
    reader.read_line(&mut value).unwrap();
    Some(value.trim().parse().unwrap())
}

/// Tenant `a`'s usage counter `name` across the cluster.
fn usage(port: u16, name: &str) -> u64 {
    hget(port, &format!("ptc:u:{}", "a".bytes().map(|b| format!("{b:02x}")).collect::<String>()), name).unwrap_or(0)
}

/// One node: its id, its ports (kept across restarts, as a StatefulSet keeps its names), and
/// its process while it runs.
struct Node {
    id: String,
    http: u16,
    grpc: u16,
    metrics: u16,
    process: Option<Process>,
}

struct Cluster {
    bin: PathBuf,
    files: PathBuf,
    redis: u16,
    nodes: Vec<Node>,
    rng: u64,
    /// `--hibernate-after-ms` of the nodes started next.
    hibernate_after_ms: u64,
}

/// How long the nodes let an execution wait before they hibernate it (`serve` takes 1 s by
/// default): short, so that the test knows when it has.
const HIBERNATE_AFTER_MS: u64 = 200;

impl Cluster {
    fn new(bin: PathBuf, files: PathBuf, redis: u16) -> Self {
        let nodes = (1..=3)
            .map(|i| Node {
                id: format!("n{i}"),
                http: free_port(),
                grpc: free_port(),
                metrics: free_port(),
                process: None,
            })
            .collect();
        let mut cluster =
            Cluster { bin, files, redis, nodes, rng: 0x9e37_79b9_7f4a_7c15, hibernate_after_ms: HIBERNATE_AFTER_MS };
        for i in 0..3 {
            cluster.start(i);
        }
        cluster
    }

    fn peers(&self) -> String {
        self.nodes.iter().map(|n| format!("{}=http://127.0.0.1:{}", n.id, n.http)).collect::<Vec<_>>().join(",")
    }

    fn start(&mut self, i: usize) {
        let peers = self.peers();
        let node = &self.nodes[i];
        let process = serving(
            Command::new(&self.bin)
                .arg("serve")
                .args(["--node-id", &node.id, "--peers", &peers])
                .args(["--redis-url", &format!("redis://127.0.0.1:{}", self.redis)])
                .args(["--token-secret", SECRET, "--api-keys", &format!("a:{KEY}")])
                .args(["--http-addr", &format!("127.0.0.1:{}", node.http)])
                .args(["--grpc-addr", &format!("127.0.0.1:{}", node.grpc)])
                .args(["--metrics-addr", &format!("127.0.0.1:{}", node.metrics)])
                .args(["--shutdown-grace-secs", "2", "--warm-instances", "0"])
                .args(["--hibernate-after-ms", &self.hibernate_after_ms.to_string()])
                .arg("--python-data")
                .arg("--files-dir")
                .arg(&self.files),
        );
        self.nodes[i].process = Some(process);
    }

    /// SIGKILL: the node is gone at once, with every instance it held.
    fn kill(&mut self, i: usize) {
        drop(self.nodes[i].process.take());
    }

    /// SIGTERM, then waits for the node to finish draining and exit.
    fn stop(&mut self, i: usize) {
        self.signal(i);
        self.wait_exit(i);
    }

    /// SIGTERM: the node starts draining.
    fn signal(&self, i: usize) {
        let pid = self.nodes[i].process.as_ref().expect("running").0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    }

    fn wait_exit(&mut self, i: usize) {
        let mut process = self.nodes[i].process.take().expect("running");
        let status = process.0.wait().unwrap();
        assert!(status.success(), "node {} exited with {status}", self.nodes[i].id);
    }

    /// Executions node `i` holds hibernated (its `ptc_hibernated` gauge).
    fn hibernated(&self, i: usize) -> u64 {
        let metrics = http_get(&format!("http://127.0.0.1:{}/metrics", self.nodes[i].metrics));
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("ptc_hibernated "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }

    fn addr(&self, i: usize) -> SocketAddr {
        ([127, 0, 0, 1], self.nodes[i].http).into()
    }

    /// A running node's address, at random.
    fn random(&mut self) -> SocketAddr {
        let i = self.any();
        self.addr(i)
    }

    /// A running node, at random.
    fn any(&mut self) -> usize {
        loop {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let i = (self.rng % 3) as usize;
            if self.nodes[i].process.is_some() {
                return i;
            }
        }
    }
}

/// Draws a random number, a uuid and the time, and sends all three through its first call:
/// the client sees what the first run drew, and checks the end prints exactly that.
fn program(n: u32) -> String {
    format!(
        r#"
import random, uuid, time
r = random.random()
u = str(uuid.uuid4())
t = time.time()
a = await double(x={n}, r=r, u=u, t=t)
b = await double(x=a)
c = await double(x=b)
print({n}, a, b, c, r, u, t)
"#
    )
}

fn tools() -> Value {
    json!([{"name": "double", "description": "twice x", "parameters": {"type": "object"}}])
}

/// One execution as the client sees it.
struct Client {
    n: u32,
    token: String,
    calls: Vec<Value>,
    /// (r, u, t) of the first call.
    drawn: Option<(f64, String, f64)>,
}

fn answers(calls: &[Value]) -> Value {
    let results: Vec<Value> =
        calls.iter().map(|c| json!({"call_id": c["id"], "result": c["input"]["x"].as_i64().unwrap() * 2})).collect();
    json!(results)
}

async fn begin(addr: SocketAddr, n: u32, code: &str) -> Client {
    let reply = post(addr, "/exec/programmatic", Some(KEY), &json!({"code": code, "tools": tools()})).await;
    assert_eq!(reply.body["status"], "tool_call_required", "{}", reply.text);
    let calls = reply.body["tool_calls"].as_array().unwrap().clone();
    let input = &calls[0]["input"];
    let drawn = input
        .get("r")
        .map(|r| (r.as_f64().unwrap(), input["u"].as_str().unwrap().into(), input["t"].as_f64().unwrap()));
    Client { n, token: reply.body["continuation_token"].as_str().unwrap().into(), calls, drawn }
}

/// Answers the pending calls at `addr`: `Some` reply body when it ended.
async fn step(addr: SocketAddr, client: &mut Client) -> Option<Value> {
    let body = json!({"continuation_token": client.token, "tool_results": answers(&client.calls)});
    let reply = post(addr, "/exec/programmatic", Some(KEY), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    match reply.body["status"].as_str() {
        Some("tool_call_required") => {
            client.token = reply.body["continuation_token"].as_str().unwrap().into();
            client.calls = reply.body["tool_calls"].as_array().unwrap().clone();
            None
        }
        _ => Some(reply.body),
    }
}

/// Answers every round, each at a random node, to the end: the final reply body.
async fn finish(cluster: &mut Cluster, client: &mut Client) -> Value {
    loop {
        if let Some(end) = step(cluster.random(), client).await {
            return end;
        }
    }
}

/// The end as the client must see it: the numbers it was sent, doubled, and what the first
/// run drew (the same random number, uuid and time, whichever node ran which part).
fn check_end(client: &Client, end: &Value) {
    assert_eq!(end["status"], "completed", "{end}");
    let stdout = end["stdout"].as_str().unwrap();
    let words: Vec<&str> = stdout.split_whitespace().collect();
    let n = i64::from(client.n);
    assert_eq!(words[..4], [n.to_string(), (2 * n).to_string(), (4 * n).to_string(), (8 * n).to_string()], "{stdout}");
    let (r, u, t) = client.drawn.clone().unwrap();
    assert_eq!(words[4].parse::<f64>().unwrap(), r, "{stdout}");
    assert_eq!(words[5], u, "{stdout}");
    assert_eq!(words[6].parse::<f64>().unwrap(), t, "{stdout}");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_and_redis_lose_no_execution() {
    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    let base = std::env::temp_dir().join(format!("ptc-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (_redis, redis_port) = ptc_tests::redis::start(None);
    let mut cluster = Cluster::new(bin, base.join("files"), redis_port);

    // 1. 200 paused executions, every request to a random node.
    let mut clients = Vec::new();
    for n in 0..200 {
        let at = cluster.any();
        clients.push(begin(cluster.addr(at), n, &program(n)).await);
    }
    for client in &mut clients {
        let end = finish(&mut cluster, client).await;
        check_end(client, &end);
    }
    // Each continuation was forwarded to the node holding its execution: none was replayed
    // or thawed elsewhere (those that hibernated were thawed by their own node).
    assert_eq!((usage(redis_port, "replays"), usage(redis_port, "thaws")), (0, 0));
    assert_eq!(usage(redis_port, "executions"), 200);

    // 2. 50 executions on node 1, each paused at its second round, have hibernated (their
    // images are in Redis); node 1 is killed; their continuations reach the other nodes,
    // which thaw them.
    let mut held = Vec::new();
    for n in 1000..1050 {
        let mut client = begin(cluster.addr(0), n, &program(n)).await;
        assert!(step(cluster.addr(0), &mut client).await.is_none());
        held.push(client);
    }
    let clock = "import time\nt1 = time.time()\na = await double(x=1, t=t1)\nt2 = time.time()\nb = await double(x=a, t=t2)\nprint(t1, t2, t2 >= t1)";
    let mut clocked = begin(cluster.addr(0), 1, clock).await;
    let t1 = clocked.calls[0]["input"]["t"].as_f64().unwrap();
    assert!(step(cluster.addr(0), &mut clocked).await.is_none());
    let t2 = clocked.calls[0]["input"]["t"].as_f64().unwrap();
    let appends = "with open('/mnt/data/log.txt', 'a') as f:\n    f.write('x')\na = await double(x=1)\nprint(open('/mnt/data/log.txt').read())";
    let mut appending = begin(cluster.addr(0), 1, appends).await;

    // The same kind of round, live, for comparison.
    let mut live_rounds = Vec::new();
    for n in 2000..2020 {
        let at = 1 + (n as usize % 2);
        let mut client = begin(cluster.addr(at), n, &program(n)).await;
        assert!(step(cluster.addr(at), &mut client).await.is_none());
        let t0 = Instant::now();
        assert!(step(cluster.addr(at), &mut client).await.is_none());
        live_rounds.push(t0.elapsed());
    }

    // Two live sessions on node 1 (gRPC): "kept" idles, hibernated, its image in Redis;
    // "used" runs a program just before the kill, so its last image is behind it.
    let node1 = cluster.nodes[0].grpc;
    for (session, code) in [("kept", "x = 21\ndef twice(v):\n    return 2 * v"), ("used", "y = 1")] {
        open_session(node1, session).await;
        assert_eq!(in_session(node1, session, code).await.unwrap(), "");
    }

    // A python-data execution with a DataFrame: not journaled (it could not be run again),
    // its image kept at once.
    let frame =
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\na = await double(x=1)\nprint((df.a * a).tolist())";
    let body = json!({"code": frame, "tools": tools(), "runtime": "python-data"});
    let data = post(cluster.addr(0), "/exec/programmatic", Some(KEY), &body).await;
    assert_eq!(data.body["status"], "tool_call_required", "{}", data.text);

    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.hibernated(0) < 55 {
        assert!(
            Instant::now() < deadline,
            "node 1 holds {} hibernated executions and sessions, not 55",
            cluster.hibernated(0)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(in_session(node1, "used", "y += 1").await.unwrap(), "");
    cluster.kill(0);
    let results = answers(&[json!({"id": data.body["tool_calls"][0]["id"], "input": {"x": 1}})]);
    let next = json!({"continuation_token": data.body["continuation_token"], "tool_results": results});
    let end = post(cluster.addr(1), "/exec/programmatic", Some(KEY), &next).await;
    assert_eq!(
        (end.body["status"].as_str(), end.body["stdout"].as_str()),
        (Some("completed"), Some("[2, 4, 6]\n")),
        "{}",
        end.text
    );
    // Another node takes "kept" over where it was; "used" is lost, and the client is told so.
    assert_eq!(in_session(cluster.nodes[1].grpc, "kept", "print(twice(x))").await.unwrap(), "42\n");
    let lost = in_session(cluster.nodes[2].grpc, "used", "print(y)").await.unwrap_err();
    assert_eq!(lost.code(), tonic::Code::NotFound, "{lost:?}");
    assert!(lost.message().contains("was lost with its server"), "{}", lost.message());
    let mut thaws = Vec::new();
    for client in &mut held {
        let at = cluster.any();
        let t0 = Instant::now();
        assert!(step(cluster.addr(at), client).await.is_none(), "thawed, and paused at round 3");
        thaws.push(t0.elapsed());
        let end = step(cluster.random(), client).await.expect("the end");
        check_end(client, &end);
    }
    // The clock reads as it did in the first run: nothing ran again.
    let end = step(cluster.random(), &mut clocked).await.expect("the end");
    assert_eq!(end["status"], "completed", "{end}");
    let words: Vec<f64> =
        end["stdout"].as_str().unwrap().split_whitespace().take(2).map(|w| w.parse().unwrap()).collect();
    assert_eq!(words, [t1, t2], "{end}");
    // What the first run wrote to /mnt/data is there once.
    let end = step(cluster.random(), &mut appending).await.expect("the end");
    assert_eq!(end["stdout"], "x\n", "{end}");
    assert_eq!((usage(redis_port, "thaws"), usage(redis_port, "replays")), (53, 0));

    // 2b. Executions paused on a node that does not hibernate: killed, it is their journals
    // that carry them on, replayed elsewhere.
    cluster.hibernate_after_ms = 0;
    cluster.start(0);
    let mut replayed = Vec::new();
    for n in 1100..1110 {
        let mut client = begin(cluster.addr(0), n, &program(n)).await;
        assert!(step(cluster.addr(0), &mut client).await.is_none());
        replayed.push(client);
    }
    cluster.kill(0);
    let mut replays = Vec::new();
    for client in &mut replayed {
        let at = cluster.any();
        let t0 = Instant::now();
        assert!(step(cluster.addr(at), client).await.is_none(), "resumed by replay at round 3");
        replays.push(t0.elapsed());
        let end = step(cluster.random(), client).await.expect("the end");
        check_end(client, &end);
    }
    eprintln!(
        "cluster: a round resumed elsewhere by thaw took {:?} (median of {}), by replay (two rounds recorded) {:?} \
         (median of {}), a live round {:?} (median of {})",
        median(thaws.clone()),
        thaws.len(),
        median(replays.clone()),
        replays.len(),
        median(live_rounds.clone()),
        live_rounds.len()
    );
    assert_eq!((usage(redis_port, "thaws"), usage(redis_port, "replays")), (53, 10));
    cluster.hibernate_after_ms = HIBERNATE_AFTER_MS;
    cluster.start(0);

    // 3. A draining node turns unready, refuses new executions, and still answers the
    // continuations of the executions it holds (live, not replayed).
    let mut draining = begin(cluster.addr(0), 9, &program(9)).await;
    cluster.signal(0);
    let readyz = format!("http://127.0.0.1:{}/readyz", cluster.nodes[0].metrics);
    let mut status = 0;
    for _ in 0..100 {
        status = http_get_status(&readyz);
        if status == 503 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(status, 503, "readyz while draining");
    let refused = post(cluster.addr(0), "/exec/programmatic", Some(KEY), &json!({"code": "pass"})).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    let end = loop {
        if let Some(end) = step(cluster.addr(0), &mut draining).await {
            break end;
        }
    };
    check_end(&draining, &end);
    assert_eq!((usage(redis_port, "thaws"), usage(redis_port, "replays")), (53, 10));
    cluster.wait_exit(0);
    cluster.start(0);

    // 4. 100 paused executions; all three nodes restart one after another.
    let mut paused = Vec::new();
    for n in 3000..3100 {
        let at = cluster.any();
        paused.push(begin(cluster.addr(at), n, &program(n)).await);
    }
    for i in 0..3 {
        cluster.stop(i);
        cluster.start(i);
    }
    for client in &mut paused {
        let end = finish(&mut cluster, client).await;
        check_end(client, &end);
    }
    // Every node restarted, so each of them was resumed elsewhere: thawed if it had
    // hibernated before its node stopped (most had), else replayed.
    assert_eq!(usage(redis_port, "thaws") + usage(redis_port, "replays"), 53 + 10 + 100);

    // 5. A token resumes once, whichever node it reaches; a cancel reaches the owner.
    let mut once = begin(cluster.addr(1), 7, &program(7)).await;
    let token = once.token.clone();
    assert!(step(cluster.addr(2), &mut once).await.is_none());
    let again =
        json!({"continuation_token": token, "tool_results": answers(&[json!({"id": "call_1", "input": {"x": 7}})])});
    let reply = post(cluster.addr(0), "/exec/programmatic", Some(KEY), &again).await;
    assert_eq!(reply.status, 400, "{}", reply.text);
    assert_eq!(reply.body["error"], "Invalid continuation token", "{}", reply.text);

    // A cancel reaches the node that holds the execution, through any node.
    let request = serde_json::to_vec(&json!({"code": program(8), "tools": tools()})).unwrap();
    let headers = [("X-API-Key", KEY), ("x-librechat-code-request-id", "req-8")];
    let reply = post_raw(cluster.addr(1), "/exec/programmatic", &headers, &request).await;
    assert_eq!(reply.body["status"], "tool_call_required", "{}", reply.text);
    let token = reply.body["continuation_token"].as_str().unwrap().to_string();
    let reply = post(cluster.addr(2), "/exec/programmatic/cancel", Some(KEY), &json!({"request_id": "req-8"})).await;
    assert_eq!((reply.status, &reply.body["status"]), (200, &json!("cancelled")), "{}", reply.text);
    let again = json!({"continuation_token": token, "tool_results": [{"call_id": "call_1", "result": 16}]});
    let reply = post(cluster.addr(0), "/exec/programmatic", Some(KEY), &again).await;
    assert_eq!((reply.status, &reply.body["error"]), (400, &json!("Execution expired")), "{}", reply.text);

    let mut counts: HashMap<&str, usize> = HashMap::new();
    for client in clients.iter().chain(&held).chain(&replayed).chain(&paused) {
        *counts.entry(if client.drawn.is_some() { "checked" } else { "unchecked" }).or_default() += 1;
    }
    assert_eq!(counts.get("checked"), Some(&360));
    let _ = std::fs::remove_dir_all(&base);
}
