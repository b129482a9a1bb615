//! The host side of `/mnt/data`, attacked the way a program (and a key holder) would (the
//! attacks are in `ptc_tests::attacks`, shared with the test of the release binary).

use ptc_tests::attacks;
use ptc_tests::grpc::{config, serve};

#[tokio::test]
async fn links_planted_by_a_program_are_never_followed_by_the_host() {
    let cfg = config(&["a:key-a", "b:key-b"]);
    let files_dir = cfg.files.dir.clone();
    let server = serve(cfg).await;
    attacks::links(server.http_addr, &files_dir).await;
}

#[tokio::test]
async fn the_quota_holds_however_a_run_ends() {
    let mut cfg = config(&[]);
    cfg.files.quota_bytes = 10_000;
    let server = serve(cfg).await;
    attacks::quota_on_every_ending(server.http_addr, None).await;
}

#[tokio::test]
async fn a_program_writing_without_end_is_stopped_by_the_quota_not_its_deadline() {
    let mut cfg = config(&[]);
    cfg.files.quota_files = 50;
    let server = serve(cfg).await;
    attacks::quota_while_running(server.http_addr, None).await;
}
