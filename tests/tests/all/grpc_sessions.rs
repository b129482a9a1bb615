//! Live sessions over gRPC, through the real server: state across executions, tools that
//! change, one execution at a time, tenants, idle expiry and close freeing the instance,
//! snapshots refused when altered or foreign.

use ptc_server::proto::{self, sandbox_client::SandboxClient};
use ptc_tests::eventually;
use ptc_tests::grpc::*;
use serde_json::json;
use tonic::transport::Channel;

async fn open(
    client: &mut SandboxClient<Channel>,
    key: &str,
    r: proto::OpenSessionRequest,
) -> proto::OpenSessionResponse {
    client.open_session(with_key(r, key)).await.expect("open session").into_inner()
}

async fn run_in(
    client: &mut SandboxClient<Channel>,
    key: &str,
    session: &str,
    code: &str,
    tools: Vec<proto::Tool>,
) -> Result<Msg, tonic::Status> {
    let start = proto::Start { session_id: session.into(), ..start_message(code, tools) };
    let stream = Stream::open(client, start, Some(key)).await?;
    Ok(stream.drive(|c| Ok(json!(input(c)["a"].as_i64().unwrap_or(0) * 10))).await.0)
}

#[tokio::test]
async fn a_session_keeps_state_between_executions_and_tools_change() {
    let server = serve(config(&["a:key-a", "b:key-b"])).await;
    let mut client = client(&server).await;
    let id = open(&mut client, "key-a", proto::OpenSessionRequest::default()).await.session_id;
    assert_eq!(id.len(), 32);
    let first = run_in(
        &mut client,
        "key-a",
        &id,
        "x = await ten(a=4)\ndef twice(v):\n    return 2 * v",
        vec![tool("ten", None)],
    );
    completed(first.await.unwrap());
    let second = run_in(
        &mut client,
        "key-a",
        &id,
        "print(twice(x), 'ten' in globals())\nprint(await other(a=1))",
        vec![tool("other", None)],
    );
    let done = completed(second.await.unwrap());
    assert_eq!(done.stdout, "80 False\n10\n");

    // Another tenant's id is as unknown as a made-up one.
    let theirs = run_in(&mut client, "key-b", &id, "print(x)", vec![]).await.unwrap_err();
    let unknown = run_in(&mut client, "key-b", "nope", "print(x)", vec![]).await.unwrap_err();
    assert_eq!(theirs.code(), tonic::Code::NotFound);
    assert_eq!(theirs.message().replace(&id, "ID"), unknown.message().replace("nope", "ID"));
    assert!(theirs.message().contains("open a new session"), "{}", theirs.message());
    let snap = client
        .snapshot_session(with_key(
            proto::SnapshotSessionRequest { session_id: id.clone(), ..Default::default() },
            "key-b",
        ))
        .await;
    assert_eq!(snap.unwrap_err().code(), tonic::Code::NotFound);
    let closed = client.close_session(with_key(proto::CloseSessionRequest { session_id: id.clone() }, "key-b")).await;
    assert!(!closed.unwrap().into_inner().closed);

    // A fresh execution (no session id) sees nothing of it.
    let fresh = run_in(&mut client, "key-a", "", "print('x' in globals())", vec![]).await.unwrap();
    assert_eq!(completed(fresh).stdout, "False\n");

    // The gauge is process-wide (other tests run beside this one): its presence is checked here.
    assert!(metrics_text(&server).await.contains("ptc_sessions_open"));
    let closed = client.close_session(with_key(proto::CloseSessionRequest { session_id: id.clone() }, "key-a")).await;
    assert!(closed.unwrap().into_inner().closed);
    eventually("the closed session's instance is freed", || server.engine.live_instances() == 0).await;
    let gone = run_in(&mut client, "key-a", &id, "pass", vec![]).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn one_execution_at_a_time_and_idle_sessions_end() {
    let server = serve(config(&["a:key-a"])).await;
    let mut client = client(&server).await;
    let request =
        proto::OpenSessionRequest { session_id: "mine".into(), idle_timeout_ms: Some(1500), ..Default::default() };
    let opened = open(&mut client, "key-a", request.clone()).await;
    assert_eq!((opened.session_id.as_str(), opened.idle_timeout_ms), ("mine", 1500));
    let again = client.open_session(with_key(request, "key-a")).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists);

    let start =
        proto::Start { session_id: "mine".into(), ..start_message("v = await ten(a=1)", vec![tool("ten", None)]) };
    let mut first = Stream::open(&mut client, start, Some("key-a")).await.unwrap();
    let calls = first.until(|m| if let Msg::ToolCalls(c) = m { Some(c) } else { None }).await;
    let busy = run_in(&mut client, "key-a", "mine", "pass", vec![]).await.unwrap_err();
    assert_eq!(busy.code(), tonic::Code::Aborted);
    assert!(busy.message().contains("one at a time"), "{}", busy.message());
    first.send_results(vec![result(&calls.calls[0].id, Ok(json!(7)))]).await;
    completed(first.until(|m| matches!(m, Msg::Completed(_) | Msg::Failed(_)).then_some(m)).await);
    let done = completed(run_in(&mut client, "key-a", "mine", "print(v)", vec![]).await.unwrap());
    assert_eq!(done.stdout, "7\n");

    // Hibernated after 1 s idle, it ends at 1.5 s.
    let engine = &server.engine;
    eventually("the idle session ends", || engine.live_instances() == 0 && engine.hibernated() == 0).await;
    let ended = run_in(&mut client, "key-a", "mine", "print(v)", vec![]).await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::NotFound);
    assert!(ended.message().contains("idle"), "{}", ended.message());

    // Start may open the session it names.
    let start = proto::Start { session_id: "auto".into(), open_session: true, ..start_message("n = 1", vec![]) };
    completed(Stream::open(&mut client, start, Some("key-a")).await.unwrap().drive(|_| Ok(json!(0))).await.0);
    let done = completed(run_in(&mut client, "key-a", "auto", "print(n + 1)", vec![]).await.unwrap());
    assert_eq!(done.stdout, "2\n");
    // A timeout ends the session; the next use says why.
    let start = proto::Start {
        session_id: "auto".into(),
        limits: Some(proto::Limits { timeout_ms: Some(1000), ..Default::default() }),
        ..start_message("while True: pass", vec![])
    };
    let f = failed(Stream::open(&mut client, start, Some("key-a")).await.unwrap().drive(|_| Ok(json!(0))).await.0);
    assert_eq!(f.kind, proto::FailureKind::Timeout as i32);
    let ended = run_in(&mut client, "key-a", "auto", "pass", vec![]).await.unwrap_err();
    assert!(ended.message().contains("timeout"), "{}", ended.message());
}

#[tokio::test]
async fn snapshots_restore_and_refuse_altered_or_foreign_bytes() {
    let server = serve(config(&["a:key-a", "b:key-b"])).await;
    let mut client = client(&server).await;
    let id = open(&mut client, "key-a", proto::OpenSessionRequest::default()).await.session_id;
    let code = "import math\nrows = {'a': [1, 2], 'b': [3]}\ndef total():\n    return sum(map(sum, rows.values()))\nit = (i for i in [1])";
    completed(run_in(&mut client, "key-a", &id, code, vec![]).await.unwrap());
    let snap = client
        .snapshot_session(with_key(
            proto::SnapshotSessionRequest { session_id: id.clone(), ..Default::default() },
            "key-a",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(snap.dropped.len(), 1);
    assert_eq!(snap.dropped[0].name, "it");
    assert!(snap.modules.contains(&"math".to_string()));

    let restored =
        open(&mut client, "key-a", proto::OpenSessionRequest { snapshot: snap.snapshot.clone(), ..Default::default() })
            .await;
    assert!(restored.restored.contains(&"total".to_string()), "{:?}", restored.restored);
    let done = completed(
        run_in(&mut client, "key-a", &restored.session_id, "print(total(), math.floor(2.5))", vec![]).await.unwrap(),
    );
    assert_eq!(done.stdout, "6 2\n");

    let refuse = |bytes: Vec<u8>, key: &'static str| {
        let mut client = client.clone();
        async move {
            let r = proto::OpenSessionRequest { snapshot: bytes, ..Default::default() };
            client.open_session(with_key(r, key)).await.unwrap_err()
        }
    };
    let mut altered = snap.snapshot.clone();
    let middle = altered.len() / 2;
    altered[middle] ^= 1;
    let e = refuse(altered, "key-a").await;
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("seal does not match"), "{}", e.message());
    let e = refuse(snap.snapshot.clone(), "key-b").await;
    assert!(e.message().contains("another tenant"), "{}", e.message());
    let e = refuse(b"PTCSNAP1 short".to_vec(), "key-a").await;
    assert!(e.message().contains("not a ptc-engine session snapshot"), "{}", e.message());
}

#[tokio::test]
async fn a_tenants_sessions_are_capped_and_ids_and_timeouts_checked() {
    let mut config = config(&["a:key-a", "b:key-b"]);
    config.sessions.max_per_tenant = 2;
    let server = serve(config).await;
    let mut client = client(&server).await;
    let named = |id: &str| proto::OpenSessionRequest { session_id: id.into(), ..Default::default() };

    for bad in ["../etc", "a b", &"x".repeat(129)] {
        let e = client.open_session(with_key(named(bad), "key-a")).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}");
        assert!(e.message().contains("letters, digits"), "{}", e.message());
    }
    let too_long = proto::OpenSessionRequest { idle_timeout_ms: Some(3_600_001), ..Default::default() };
    let e = client.open_session(with_key(too_long, "key-a")).await.unwrap_err();
    assert!(e.message().contains("idle_timeout_ms must be between 1 and 3600000"), "{}", e.message());

    // At the cap, the tenant's session idle the longest ends for the new one.
    open(&mut client, "key-a", named("first")).await;
    open(&mut client, "key-a", named("second")).await;
    completed(run_in(&mut client, "key-a", "second", "pass", vec![]).await.unwrap());
    open(&mut client, "key-a", named("third")).await;
    let gone = run_in(&mut client, "key-a", "first", "pass", vec![]).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    completed(run_in(&mut client, "key-a", "second", "pass", vec![]).await.unwrap());
    // Another tenant's sessions do not count.
    open(&mut client, "key-b", named("first")).await;

    // With every session running, a new one is refused.
    let busy =
        |id: &str| proto::Start { session_id: id.into(), ..start_message("await ten(a=1)", vec![tool("ten", None)]) };
    let mut running = vec![];
    for id in ["second", "third"] {
        let mut stream = Stream::open(&mut client, busy(id), Some("key-a")).await.unwrap();
        stream.until(|m| matches!(m, Msg::ToolCalls(_)).then_some(())).await;
        running.push(stream);
    }
    let e = client.open_session(with_key(named("fourth"), "key-a")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(e.message().contains("all 2 sessions of this tenant are running"), "{}", e.message());
}

#[tokio::test]
async fn a_sessions_files_persist_count_against_the_quota_and_travel_in_snapshots() {
    let mut config = config(&["a:key-a"]);
    config.files.quota_bytes = 1_000_000;
    let files_dir = config.files.dir.clone();
    let server = serve(config).await;
    let mut client = client(&server).await;
    let id = open(&mut client, "key-a", proto::OpenSessionRequest::default()).await.session_id;
    let other = open(&mut client, "key-a", proto::OpenSessionRequest::default()).await.session_id;
    assert_eq!(live_dirs(&files_dir).len(), 2, "one directory per session");

    // Files stay for the next execution of the session, and only of that session. A link the
    // program makes stays the program's: it is never exported.
    let write = "import os\nos.makedirs('/mnt/data/notes')\nopen('/mnt/data/notes/a.txt', 'w').write('hello')\n\
                 os.symlink('../../..', '/mnt/data/up')\nn = 1";
    completed(run_in(&mut client, "key-a", &id, write, vec![]).await.unwrap());
    let read = "print(open('/mnt/data/notes/a.txt').read(), n)";
    assert_eq!(completed(run_in(&mut client, "key-a", &id, read, vec![]).await.unwrap()).stdout, "hello 1\n");
    let theirs = "import os\nprint(os.listdir('/mnt/data'))";
    assert_eq!(completed(run_in(&mut client, "key-a", &other, theirs, vec![]).await.unwrap()).stdout, "[]\n");

    // A run that leaves the tenant over quota fails in words, and what it wrote is removed;
    // the session, its variables and its earlier files stay.
    let big = "open('/mnt/data/big.bin', 'wb').write(b'x' * 2_000_000)\nn = 2";
    let f = failed(run_in(&mut client, "key-a", &id, big, vec![]).await.unwrap());
    assert_eq!(f.kind, proto::FailureKind::FileQuota as i32);
    assert!(f.message.contains("File quota exceeded") && f.message.contains("delete files"), "{}", f.message);
    let check = "import os\nprint(os.path.exists('/mnt/data/big.bin'), open('/mnt/data/notes/a.txt').read(), n)";
    assert_eq!(completed(run_in(&mut client, "key-a", &id, check, vec![]).await.unwrap()).stdout, "False hello 2\n");

    // Snapshots carry the files only when asked; a restore puts them back.
    let snapshot = |include_files: bool| {
        let mut client = client.clone();
        let request = proto::SnapshotSessionRequest { session_id: id.clone(), include_files };
        async move { client.snapshot_session(with_key(request, "key-a")).await.unwrap().into_inner() }
    };
    assert!(snapshot(false).await.files.is_empty());
    let snap = snapshot(true).await;
    assert_eq!(snap.files, ["notes/a.txt"]);
    let restored =
        open(&mut client, "key-a", proto::OpenSessionRequest { snapshot: snap.snapshot, ..Default::default() }).await;
    assert_eq!(restored.files, ["notes/a.txt"]);
    let both = "import os\nprint(open('/mnt/data/notes/a.txt').read(), n, sorted(os.listdir('/mnt/data')))";
    let done = completed(run_in(&mut client, "key-a", &restored.session_id, both, vec![]).await.unwrap());
    assert_eq!(done.stdout, "hello 2 ['notes']\n");

    // A program that writes without end is stopped by the quota, not its deadline; being
    // stopped mid-program ends its session.
    let flood = "f = open('/mnt/data/flood.bin', 'wb')\nwhile True:\n    f.write(b'x' * 100_000)\n    f.flush()";
    let f = failed(run_in(&mut client, "key-a", &other, flood, vec![]).await.unwrap());
    assert_eq!(f.kind, proto::FailureKind::FileQuota as i32);
    assert!(f.message.contains("session has ended"), "{}", f.message);
    let gone = run_in(&mut client, "key-a", &other, "pass", vec![]).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);

    // Every way a session ends removes its directory.
    for session_id in [&id, &restored.session_id] {
        let request = proto::CloseSessionRequest { session_id: session_id.clone() };
        assert!(client.close_session(with_key(request, "key-a")).await.unwrap().into_inner().closed);
    }
    eventually("the ended sessions' files are removed", || live_dirs(&files_dir).is_empty()).await;
    eventually("their instances are freed", || server.engine.live_instances() == 0).await;
}

/// `Start.return_files`: a fresh execution gets a /mnt/data of its own and its final message
/// carries what it wrote, regular files only, within the server's byte limit; the directory
/// is gone once the execution is, however it ended. In a session, only what that execution
/// created or changed comes back.
#[tokio::test]
async fn return_files_brings_back_what_an_execution_wrote_and_only_that() {
    let mut config = config(&["a:key-a"]);
    config.files.quota_bytes = 100_000;
    config.grpc_max_returned_file_bytes = 1_000;
    let files_dir = config.files.dir.clone();
    let server = serve(config).await;
    let mut client = client(&server).await;
    let run = |code: &str, return_files: bool| {
        let mut client = client.clone();
        let start = proto::Start { return_files, ..start_message(code, vec![]) };
        async move { Stream::open(&mut client, start, Some("key-a")).await.unwrap().drive(|_| Ok(json!(null))).await.0 }
    };
    let names = |files: &[proto::File]| files.iter().map(|f| (f.name.clone(), f.size, f.omitted)).collect::<Vec<_>>();

    // Without it, a fresh execution has no /mnt/data at all.
    let c = completed(run("import os\nprint(os.path.exists('/mnt/data'))", false).await);
    assert_eq!((c.stdout.as_str(), c.files.len()), ("False\n", 0));

    // Regular files in name order, each with its bytes if they fit in what is left of the
    // limit; links (to a file, or out of the directory) and directories are never returned.
    let write = "import os\nos.makedirs('/mnt/data/sub')\nopen('/mnt/data/a.txt', 'w').write('hello')\n\
                 open('/mnt/data/big.txt', 'w').write('x' * 2000)\n\
                 open('/mnt/data/sub/b.bin', 'wb').write(bytes(range(256)))\n\
                 os.symlink('a.txt', '/mnt/data/link.txt')\nos.symlink('../../..', '/mnt/data/up')";
    let c = completed(run(write, true).await);
    assert_eq!(
        names(&c.files),
        [("a.txt".into(), 5, false), ("big.txt".into(), 2000, true), ("sub/b.bin".into(), 256, false)]
    );
    assert_eq!(c.files[0].content, b"hello");
    assert!(c.files[1].content.is_empty());
    assert_eq!(c.files[2].content, (0..=255).collect::<Vec<u8>>());
    eventually("an execution's own /mnt/data is removed", || live_dirs(&files_dir).is_empty()).await;

    // A Python error still returns what was written before it.
    let f = failed(run("open('/mnt/data/partial.csv', 'w').write('a,b')\n1/0", true).await);
    assert_eq!(f.kind, proto::FailureKind::PythonError as i32);
    assert_eq!(names(&f.files), [("partial.csv".into(), 3, false)]);

    // Over the tenant's quota: the quota failure in words, no files, nothing left behind.
    let f = failed(run("open('/mnt/data/huge.bin', 'wb').write(b'x' * 200_000)", true).await);
    assert_eq!(f.kind, proto::FailureKind::FileQuota as i32);
    assert!(f.message.contains("File quota exceeded"), "{}", f.message);
    assert!(f.files.is_empty());
    eventually("failed executions' directories are removed", || live_dirs(&files_dir).is_empty()).await;

    // A client that vanishes while its program is parked: the program is cancelled and its
    // directory, with what it wrote, goes too.
    let parked = "open('/mnt/data/left.txt', 'w').write('x')\nawait hold()";
    let start = proto::Start { return_files: true, ..start_message(parked, vec![tool("hold", None)]) };
    let mut vanishing = Stream::open(&mut client, start, Some("key-a")).await.unwrap();
    vanishing.until(|m| matches!(m, Msg::ToolCalls(_)).then_some(())).await;
    assert_eq!(live_dirs(&files_dir).len(), 1, "the parked execution has its directory");
    drop(vanishing);
    eventually("a vanished client's execution directory is removed", || live_dirs(&files_dir).is_empty()).await;

    // In a session: what this execution created or changed, not what earlier ones left.
    let id = open(&mut client, "key-a", proto::OpenSessionRequest::default()).await.session_id;
    let in_session = |code: &str| {
        let mut client = client.clone();
        let start = proto::Start { session_id: id.clone(), return_files: true, ..start_message(code, vec![]) };
        async move { Stream::open(&mut client, start, Some("key-a")).await.unwrap().drive(|_| Ok(json!(null))).await.0 }
    };
    completed(
        in_session("open('/mnt/data/keep.txt', 'w').write('1')\nopen('/mnt/data/edit.txt', 'w').write('1')").await,
    );
    let c = completed(
        in_session("open('/mnt/data/edit.txt', 'w').write('22')\nopen('/mnt/data/new.txt', 'w').write('3')").await,
    );
    assert_eq!(names(&c.files), [("edit.txt".into(), 2, false), ("new.txt".into(), 1, false)]);
    assert_eq!(c.files[0].content, b"22");
    assert_eq!(live_dirs(&files_dir).len(), 1, "the session's directory stays");
}

#[tokio::test]
async fn a_refused_start_opens_no_session() {
    // The tenant's place is taken before the session `Start` names is opened: a run refused
    // for the tenant's caps leaves no session behind (one would count against the tenant's
    // sessions, and a full set evicts the tenant's longest-idle one).
    let mut config = config(&["a:key-a"]);
    config.tenant_limits.max_concurrent = Some(1);
    let server = serve(config).await;
    let mut client = client(&server).await;
    let mut first =
        Stream::open(&mut client, start_message("v = await ten(a=1)", vec![tool("ten", None)]), Some("key-a"))
            .await
            .unwrap();
    let calls = first.until(|m| if let Msg::ToolCalls(c) = m { Some(c) } else { None }).await;

    let start = proto::Start { session_id: "late".into(), open_session: true, ..start_message("n = 1", vec![]) };
    let refused = Stream::open(&mut client, start, Some("key-a")).await.err().expect("refused");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");

    first.send_results(vec![result(&calls.calls[0].id, Ok(json!(7)))]).await;
    completed(first.until(|m| matches!(m, Msg::Completed(_) | Msg::Failed(_)).then_some(m)).await);
    let close = proto::CloseSessionRequest { session_id: "late".into() };
    let closed = client.close_session(with_key(close, "key-a")).await.unwrap().into_inner();
    assert!(!closed.closed, "the refused Start opened session \"late\"");
}
