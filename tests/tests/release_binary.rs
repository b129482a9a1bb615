//! The adversarial cases against the release binary, as an operator runs it: `ptc-engine serve`
//! with flags, spoken to over loopback. The attacks are the in-process tests' own
//! (`ptc_tests::attacks`); the binary is built by this test if it is missing or stale.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use ptc_tests::attacks;
use ptc_tests::binary::{Process, free_port};

/// A server process, killed when dropped.
struct Server {
    _process: Process,
    http: SocketAddr,
}

fn start(bin: &Path, files_dir: &Path, flags: &[&str]) -> Server {
    let http = free_port();
    let mut child = Command::new(bin)
        .arg("serve")
        .args(["--grpc-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .arg("--files-dir")
        .arg(files_dir)
        .args(flags)
        .env("PTC_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("the release binary starts");
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("serving") {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "server exited:\n{seen}");
        seen.push_str(&line);
    }
    // Keep reading its log so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    Server { _process: Process(child), http: ([127, 0, 0, 1], http).into() }
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
