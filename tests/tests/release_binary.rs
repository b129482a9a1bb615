//! The adversarial cases against the release binary, as an operator runs it: `ptc-engine serve`
//! with flags, spoken to over loopback. The attacks are the in-process tests' own
//! (`ptc_tests::attacks`); the binary is built by this test if it is missing or stale.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

#[path = "release_binary/cluster.rs"]
mod cluster;

use ptc_tests::attacks;
use ptc_tests::binary::{Process, free_port, serving};

/// A server process, killed when dropped.
struct Server {
    process: Process,
    http: SocketAddr,
    grpc: SocketAddr,
    metrics: SocketAddr,
}

fn start(bin: &Path, files_dir: &Path, flags: &[&str]) -> Server {
    start_on(bin, files_dir, flags, [free_port(), free_port(), free_port()])
}

/// [`start`] on these ports (HTTP, gRPC, metrics).
fn start_on(bin: &Path, files_dir: &Path, flags: &[&str], [http, grpc, metrics]: [u16; 3]) -> Server {
    let process = serving(
        Command::new(bin)
            .arg("serve")
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .arg("--files-dir")
            .arg(files_dir)
            .args(flags),
    );
    let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    Server { process, http: addr(http), grpc: addr(grpc), metrics: addr(metrics) }
}

impl Server {
    fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// Descriptors the server process holds now.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap().count()
    }

    /// A gauge's value from its metrics page.
    async fn gauge(&self, name: &str) -> f64 {
        let page = ptc_tests::http::request(self.metrics, "GET", "/metrics", &[("Host", "m")], b"").await.text;
        page.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
    }
}

/// LibreChat's shape of a paused execution: every HTTP execution has a `/mnt/data` of its
/// own. Once hibernated, 300 of them hold no descriptor of the server's (a held-out run saw 3
/// each: at 20,000 paused the server held 12,149, so with a limit of 20,000 it stopped near
/// 6,600); each goes on where it stopped, its file still there.
#[tokio::test]
async fn hibernated_http_executions_hold_no_descriptor_of_the_server() {
    use ptc_tests::http::post;
    use serde_json::json;
    const N: usize = 300;
    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    let base = std::env::temp_dir().join(format!("ptc-release-fds-{}", std::process::id()));
    let server = start(&bin, &base.join("files"), &["--hibernate-after-ms", "50"]);
    let tools = json!([{"name": "t", "parameters": {"type": "object"}}]);
    let code =
        "open('/mnt/data/note.txt', 'w').write('kept')\nr = await t()\nprint(r, open('/mnt/data/note.txt').read())";
    let run = json!({"code": code, "tools": tools});
    // Warm: one run to its end, so that what every run shares is open before counting.
    let first = post(server.http, "/exec/programmatic", None, &run).await;
    let token = &first.body["continuation_token"];
    let results = json!([{"call_id": first.body["tool_calls"][0]["id"], "result": 1}]);
    post(server.http, "/exec/programmatic", None, &json!({"continuation_token": token, "tool_results": results})).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let before = server.fds();
    let mut paused = Vec::new();
    for chunk in 0..N / 20 {
        let mut posts = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (addr, run) = (server.http, run.clone());
            posts.spawn(async move { post(addr, "/exec/programmatic", None, &run).await });
        }
        for reply in posts.join_all().await {
            assert_eq!(reply.body["status"], "tool_call_required", "chunk {chunk}: {}", reply.text);
            paused.push(reply);
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while server.gauge("ptc_hibernated").await < N as f64 {
        assert!(std::time::Instant::now() < deadline, "not all hibernated: {}", server.gauge("ptc_hibernated").await);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let at_n = server.fds();
    assert!(at_n < before + 20, "{N} hibernated executions took the server from {before} to {at_n} descriptors");
    for reply in paused {
        let results = json!([{"call_id": reply.body["tool_calls"][0]["id"], "result": 2}]);
        let body = json!({"continuation_token": reply.body["continuation_token"], "tool_results": results});
        let end = post(server.http, "/exec/programmatic", None, &body).await;
        assert_eq!(end.body["stdout"], "2 kept\n", "{}", end.text);
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&base);
}

/// A server stopped just after its metrics were read starts again at once on the same ports
/// (a held-out run saw `Address already in use` for a minute, naming no address); and a port
/// that is taken is named in the error.
#[tokio::test]
async fn a_server_restarted_at_once_binds_its_ports_again_and_a_taken_one_is_named() {
    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    let base = std::env::temp_dir().join(format!("ptc-release-rebind-{}", std::process::id()));
    let ports = [free_port(), free_port(), free_port()];
    for round in 0..2 {
        let server = start_on(&bin, &base.join("files"), &[], ports);
        for path in ["/metrics", "/readyz"] {
            let page = ptc_tests::http::request(server.metrics, "GET", path, &[("Host", "m")], b"").await;
            assert_eq!(page.status, 200, "round {round}: {path}: {}", page.text);
        }
        let pid = server.pid();
        // SIGTERM: the server shuts down as an operator's restart does.
        Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
        let mut process = server.process;
        let _ = process.0.wait();
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = Command::new(&bin)
        .arg("serve")
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .arg("--files-dir")
        .arg(base.join("files"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("cannot listen for metrics on 127.0.0.1:{port} (--metrics-addr)")), "{stderr}");
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test]
async fn the_release_binary_holds_against_every_attack() {
    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    let base = std::env::temp_dir().join(format!("ptc-release-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);

    // Files: links, and the quota on every ending and while running.
    let files_dir = base.join("files");
    let keys = "a:key-a,b:key-b,c:key-c,d:key-d";
    let server =
        start(&bin, &files_dir, &["--api-keys", keys, "--files-quota-bytes", "10000", "--files-quota-files", "50"]);
    attacks::links(server.http, &files_dir).await;
    attacks::quota_on_every_ending(server.http, Some("key-c")).await;
    attacks::quota_while_running(server.http, Some("key-d")).await;
    attacks::recursion(server.http, Some("key-a")).await;
    drop(server);

    // Connections, bodies, the memory budget, and cancelling.
    let flags = [
        "--http-max-connections",
        "4",
        "--http-header-timeout-secs",
        "1",
        "--http-body-timeout-secs",
        "1",
        "--memory-budget-mib",
        "200",
        "--tenant-max-concurrent",
        "3",
    ];
    let server = start(&bin, &base.join("files2"), &flags);
    attacks::memory_budget(server.http, None).await;
    attacks::cancel_frees_at_once(server.http, None).await;
    attacks::http_connections(server.http).await;
    drop(server);
    let _ = std::fs::remove_dir_all(&base);
}

/// A session's snapshot taken on one server (in-process) restores on another server process
/// (the release binary) that shares the token secret: the same globals, functions and classes.
#[tokio::test]
async fn a_session_snapshot_restores_on_another_server_process() {
    use ptc_server::proto::{self, sandbox_client::SandboxClient};
    use ptc_tests::grpc;
    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    fn keyed<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert("x-api-key", "key-a".parse().unwrap());
        request
    }
    let run = |client: SandboxClient<tonic::transport::Channel>, session: String, code: &'static str| async move {
        let mut client = client;
        let start = proto::Start { session_id: session, ..grpc::start_message(code, vec![]) };
        let stream = grpc::Stream::open(&mut client, start, Some("key-a")).await.unwrap();
        grpc::completed(stream.drive(|_| Ok(serde_json::json!(null))).await.0)
    };

    let mut config = grpc::config(&["a:key-a"]);
    config.token_secret = Some("shared-secret".into());
    let first = grpc::serve(config).await;
    let mut client = grpc::client(&first).await;
    let id = client.open_session(keyed(proto::OpenSessionRequest::default())).await.unwrap().into_inner().session_id;
    let code = "import fractions\nclass Ledger:\n    def __init__(self):\n        self.items = []\n    \
                def total(self):\n        return sum(self.items)\nledger = Ledger()\n\
                ledger.items += [fractions.Fraction(1, 3), fractions.Fraction(1, 6)]\nlabel = 'books'";
    run(client.clone(), id.clone(), code).await;
    let snapshot = client
        .snapshot_session(keyed(proto::SnapshotSessionRequest { session_id: id, ..Default::default() }))
        .await
        .unwrap()
        .into_inner();
    assert!(snapshot.dropped.is_empty(), "{:?}", snapshot.dropped);

    let base = std::env::temp_dir().join(format!("ptc-release-sessions-{}", std::process::id()));
    let second = start(&bin, &base.join("files"), &["--api-keys", "a:key-a", "--token-secret", "shared-secret"]);
    let mut other = SandboxClient::connect(format!("http://{}", second.grpc)).await.unwrap();
    let request = proto::OpenSessionRequest { snapshot: snapshot.snapshot.clone(), ..Default::default() };
    let opened = other.open_session(keyed(request)).await.unwrap().into_inner();
    for name in ["fractions", "Ledger", "ledger", "label"] {
        assert!(opened.restored.iter().any(|n| n == name), "{name} not in {:?}", opened.restored);
    }
    let done = run(other.clone(), opened.session_id, "print(label, ledger.total(), type(ledger).__name__)").await;
    assert_eq!(done.stdout, "books 1/2 Ledger\n");

    // A server with another secret refuses it, saying why.
    drop(second);
    let third = start(&bin, &base.join("files3"), &["--api-keys", "a:key-a", "--token-secret", "other"]);
    let mut other = SandboxClient::connect(format!("http://{}", third.grpc)).await.unwrap();
    let request = proto::OpenSessionRequest { snapshot: snapshot.snapshot, ..Default::default() };
    let refused = other.open_session(keyed(request)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("another token secret"), "{}", refused.message());
    first.shutdown();
    let _ = std::fs::remove_dir_all(&base);
}

/// `ptc-engine run --local`: a tool answered by a shell command, the program's output, and a
/// failure that printed nothing itself (a C-stack overflow) shown on stderr with the exit code;
/// a `.js` file run as JavaScript, a `.ts` file as TypeScript.
#[tokio::test]
async fn the_run_command_answers_tools_and_says_why_a_program_failed() {
    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    let dir = std::env::temp_dir().join(format!("ptc-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tools = dir.join("tools.json");
    std::fs::write(
        &tools,
        r#"[{"name": "echo", "description": "Returns the call.", "parameters": {"type": "object"}}]"#,
    )
    .unwrap();
    let run = |file: &str, code: &str| {
        let program = dir.join(file);
        std::fs::write(&program, code).unwrap();
        // The handler gets {"id", "name", "input"} on stdin; `cat` answers with the call itself.
        let out = Command::new(&bin)
            .args(["run", "--local", "--tool-handler", "cat", "--tools"])
            .arg(&tools)
            .arg(&program)
            .output()
            .expect("ptc-engine run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run("program.py", "r = await echo(x=41)\nprint(r['name'], r['input']['x'] + 1)\n");
    assert_eq!((code, stdout.as_str()), (Some(0), "echo 42\n"), "{stderr}");
    let (code, stdout, stderr) = run("program.py", "print('before')\nimport json\njson.loads('[' * 100000)\n");
    assert_eq!((code, stdout.as_str()), (Some(1), "before\n"), "{stderr}");
    assert!(stderr.contains("RecursionError: maximum recursion depth exceeded"), "{stderr}");
    // A `.js` file runs as JavaScript.
    let js = "const r = await echo({x: 41});\nconsole.log(r.name, r.input.x + 1);\n";
    let (code, stdout, stderr) = run("program.js", js);
    assert_eq!((code, stdout.as_str()), (Some(0), "echo 42\n"), "{stderr}");
    let (code, _, stderr) = run("program.js", "console.log('before');\nundefinedThing.x;\n");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("ReferenceError") && stderr.contains("program.js:2"), "{stderr}");
    // A `.ts` file runs as TypeScript.
    let ts = "const r: { name: string } = await echo({x: 41});\nconsole.log(r.name as string);\n";
    let (code, stdout, stderr) = run("program.ts", ts);
    assert_eq!((code, stdout.as_str()), (Some(0), "echo\n"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
