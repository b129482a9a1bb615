//! Live sessions at their edges, through the real server over gRPC: snapshots between 16 and
//! 64 MiB travel both ways; a state over the snapshot limit, or too large for the session's
//! memory to pickle, is refused in words and the session keeps its variables; snapshot and
//! restore run under the session's fuel; a session ended to make room says so.

use ptc_server::proto::{self, sandbox_client::SandboxClient};
use ptc_tests::grpc::*;
use serde_json::json;
use tonic::transport::Channel;

async fn open(client: &mut SandboxClient<Channel>, r: proto::OpenSessionRequest) -> Result<String, tonic::Status> {
    Ok(client.open_session(with_key(r, "key-a")).await?.into_inner().session_id)
}

async fn run_in(client: &mut SandboxClient<Channel>, session: &str, code: &str) -> Result<Msg, tonic::Status> {
    let start = proto::Start { session_id: session.into(), ..start_message(code, vec![]) };
    let stream = Stream::open(client, start, Some("key-a")).await?;
    Ok(stream.drive(|_| Ok(json!(null))).await.0)
}

async fn snapshot(client: &mut SandboxClient<Channel>, session: &str) -> Result<proto::SessionSnapshot, tonic::Status> {
    let request = proto::SnapshotSessionRequest { session_id: session.into(), ..Default::default() };
    Ok(client.snapshot_session(with_key(request, "key-a")).await?.into_inner())
}

/// A client that sends and takes messages as large as a snapshot may be.
async fn large_client(server: &ptc_server::RunningServer) -> SandboxClient<Channel> {
    client(server).await.max_decoding_message_size(80 << 20).max_encoding_message_size(80 << 20)
}

#[tokio::test]
async fn snapshots_up_to_the_snapshot_limit_travel_both_ways() {
    let server = serve(config(&["a:key-a"])).await;
    let mut client = large_client(&server).await;
    let id = open(&mut client, proto::OpenSessionRequest::default()).await.unwrap();
    completed(run_in(&mut client, &id, "blob = bytes(range(256)) * (120 * 1024)\nprint(len(blob))").await.unwrap());
    // 30 MiB: past the 16 MiB of other messages, within the 64 MiB snapshots may hold.
    let taken = snapshot(&mut client, &id).await.expect("a 30 MiB snapshot is answered");
    assert!(taken.snapshot.len() > 30 << 20, "{} bytes", taken.snapshot.len());
    let restored = client
        .open_session(with_key(proto::OpenSessionRequest { snapshot: taken.snapshot, ..Default::default() }, "key-a"))
        .await
        .expect("a 30 MiB snapshot is taken back")
        .into_inner();
    let done = completed(run_in(&mut client, &restored.session_id, "print(len(blob), blob[:3])").await.unwrap());
    assert_eq!(done.stdout, "31457280 b'\\x00\\x01\\x02'\n");
    // Other calls keep the usual limit.
    let mut stream =
        Stream::open(&mut client, start_message("await t()", vec![tool("t", None)]), Some("key-a")).await.unwrap();
    let calls = stream.until(|m| if let Msg::ToolCalls(b) = m { Some(b.calls) } else { None }).await;
    stream.send_results(vec![result(&calls[0].id, Ok(json!("x".repeat(20 << 20))))]).await;
    let status = loop {
        match stream.message().await {
            Err(status) => break status,
            Ok(None) => panic!("the stream ended without a status"),
            Ok(Some(_)) => {}
        }
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn a_state_too_large_is_refused_in_words_and_the_session_keeps_its_variables() {
    let mut cfg = config(&["a:key-a"]);
    cfg.sessions.max_snapshot_bytes = 8 << 20;
    let server = serve(cfg).await;
    let mut client = large_client(&server).await;
    let id = open(&mut client, proto::OpenSessionRequest::default()).await.unwrap();
    completed(run_in(&mut client, &id, "big = b'x' * (20 << 20)\nsmall = 1").await.unwrap());
    let refused = snapshot(&mut client, &id).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    let message = refused.message();
    assert!(message.contains("more than 8388608 bytes") && message.contains("big ("), "{message}");
    let done = completed(run_in(&mut client, &id, "print(len(big), small)").await.unwrap());
    assert_eq!(done.stdout, "20971520 1\n");
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn a_state_the_sessions_memory_cannot_pickle_is_refused_in_words_and_the_session_lives_on() {
    let server = serve(config(&["a:key-a"])).await;
    let mut client = large_client(&server).await;
    // Within the snapshot limit, but more than the session's memory can pickle: refused in
    // the runtime's words, where it once trapped in sbrk and ended the session.
    let limits = proto::Limits { max_memory_bytes: Some(64 << 20), ..Default::default() };
    let tight =
        open(&mut client, proto::OpenSessionRequest { limits: Some(limits), ..Default::default() }).await.unwrap();
    completed(run_in(&mut client, &tight, "parts = [bytes([i]) * (1 << 20) for i in range(24)]").await.unwrap());
    let refused = snapshot(&mut client, &tight).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("not enough memory left in this session"), "{}", refused.message());
    let done = completed(run_in(&mut client, &tight, "print(len(parts))").await.unwrap());
    assert_eq!(done.stdout, "24\n");
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn snapshot_and_restore_run_under_the_sessions_fuel() {
    let mut cfg = config(&["a:key-a"]);
    cfg.engine.fuel = true;
    let server = serve(cfg).await;
    let mut client = client(&server).await;
    let limits = proto::Limits { fuel: Some(200_000_000), ..Default::default() };
    let id = open(&mut client, proto::OpenSessionRequest { limits: Some(limits), ..Default::default() }).await.unwrap();
    // A value whose pickling never ends.
    let code = "class Spin:\n    def __reduce__(self):\n        while True:\n            pass\nspin = Spin()";
    completed(run_in(&mut client, &id, code).await.unwrap());
    let started = std::time::Instant::now();
    let refused = snapshot(&mut client, &id).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("ran out of the session's fuel"), "{}", refused.message());
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let ended = run_in(&mut client, &id, "pass").await.unwrap_err();
    assert!(ended.message().contains("taking its snapshot stopped it"), "{}", ended.message());

    // A snapshot whose restoring never ends (its state runs code when unpickled).
    let id = open(&mut client, proto::OpenSessionRequest { limits: Some(limits), ..Default::default() }).await.unwrap();
    let code = "class Later:\n    def __reduce__(self):\n        return (exec, ('while True: pass',))\nlater = Later()";
    completed(run_in(&mut client, &id, code).await.unwrap());
    let taken = snapshot(&mut client, &id).await.unwrap();
    let refused = client
        .open_session(with_key(
            proto::OpenSessionRequest { snapshot: taken.snapshot, limits: Some(limits), ..Default::default() },
            "key-a",
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("ran out of the session's fuel"), "{}", refused.message());
    server.shutdown();
    server.wait().await;
}

#[tokio::test]
async fn a_session_ended_to_make_room_says_so() {
    let mut cfg = config(&["a:key-a"]);
    cfg.sessions.max_per_tenant = 1;
    let server = serve(cfg).await;
    let mut client = client(&server).await;
    let first = open(&mut client, proto::OpenSessionRequest::default()).await.unwrap();
    open(&mut client, proto::OpenSessionRequest::default()).await.unwrap();
    let gone = run_in(&mut client, &first, "pass").await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone:?}");
    assert!(
        gone.message().contains("this API key opened more than 1 sessions, and it was the one idle the longest"),
        "{}",
        gone.message()
    );
    server.shutdown();
    server.wait().await;
}
