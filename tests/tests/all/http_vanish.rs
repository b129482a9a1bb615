//! An HTTP client that disconnects while its program runs: the execution is cancelled and its
//! instance freed, long before the deadline. Alone in its binary so instance counts are its own.

use std::time::{Duration, Instant};

use ptc_tests::eventually;
use ptc_tests::grpc::{config, serve};
use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn a_vanished_http_client_frees_the_running_instance() {
    let server = serve(config(&[])).await;
    let body = serde_json::json!({"code": "while True: pass", "timeout": 60000}).to_string();
    let mut s = tokio::net::TcpStream::connect(server.http_addr).await.unwrap();
    let head = format!(
        "POST /exec/programmatic HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    eventually("the program runs", || server.engine.live_instances() == 1).await;
    let t0 = Instant::now();
    drop(s);
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
    assert!(t0.elapsed() < Duration::from_secs(5));
}
