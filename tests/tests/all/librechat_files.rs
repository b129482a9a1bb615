//! LibreChat's file endpoints through the real server: the whole flow with the requests
//! LibreChat's backend and `@librechat/agents` make (`tests/librechat/files.mjs`: upload, a
//! program that reads the upload and draws a PNG, the listing, the download of a valid PNG);
//! and their bounds: another key's sessions are unknown, an upload counts against the file
//! quota and the upload limit as it arrives (nothing kept past either), links are never listed.

use std::net::SocketAddr;
use std::process::Command;

use ptc_tests::grpc::{config, serve};
use ptc_tests::http::{post, request};
use serde_json::{Value, json};

#[tokio::test]
async fn librechats_file_flow_uploads_runs_lists_and_downloads_a_png() {
    let server = serve(config(&["librechat:lc-key"])).await;
    let dir = tokio::task::spawn_blocking(|| ptc_tests::node::project("librechat")).await.unwrap();
    let work = std::env::temp_dir().join(format!("ptc-librechat-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let csv = work.join("sales.csv");
    std::fs::write(&csv, "region,units\nnorth,10\nsouth,30\nwest,20\n").unwrap();
    let base = format!("http://{}", server.http_addr);
    let out = work.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("files.mjs")
            .current_dir(&dir)
            .env("BASE_URL", base)
            .env("API_KEY", "lc-key")
            .env("CSV", &csv)
            .env("OUT", &out)
            .output()
            .expect("node")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).expect("the driver's JSON report");

    let older = &report["upload"]["older"];
    assert_eq!(older["files"][0]["filename"], "sales.csv", "{older}");
    assert_eq!(report["upload"]["newer"]["storage_session_id"], report["upload"]["newer"]["session_id"]);
    assert_eq!(report["validIds"], true, "LibreChat's download route takes only 21-character ids: {report}");
    let hours = report["hoursOld"].as_f64().unwrap();
    assert!((0.0..0.1).contains(&hours), "lastModified {} is read as {hours} hours old", report["lastModified"]);
    assert_eq!(report["injected"][0]["name"], "sales.csv", "{}", report["injected"]);
    let content = report["content"].as_str().unwrap();
    assert!(content.contains("3 60"), "the program read the upload: {content}");
    let downloads = report["downloads"].as_array().unwrap();
    assert_eq!(downloads.len(), 1, "only what the program wrote comes back: {downloads:?}");
    let png = &downloads[0];
    assert_eq!(
        (png["name"].as_str(), png["width"].as_u64(), png["height"].as_u64()),
        (Some("chart.png"), Some(24), Some(32))
    );
    assert_eq!(png["inflated"], true, "{png}");
    let saved = std::fs::read(work.join("chart.png")).unwrap();
    assert!(valid_png(&saved), "the saved file is a PNG whose chunks check out");
    let streamed = &report["streamed"];
    assert_eq!(streamed["bytes"].as_u64(), Some(saved.len() as u64));
    assert_eq!(streamed["length"].as_u64(), Some(saved.len() as u64));
    assert_eq!(streamed["type"], "image/png");
    assert_eq!(streamed["disposition"], "attachment; filename=\"chart.png\"");
    server.shutdown();
    server.wait().await;
    let _ = std::fs::remove_dir_all(work);
}

/// A PNG's signature, chunks and their CRCs, ending with IEND.
fn valid_png(bytes: &[u8]) -> bool {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }
    if !bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return false;
    }
    let mut at = 8;
    while at + 12 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let Some(end) = (at + 8 + len + 4 <= bytes.len()).then_some(at + 8 + len) else { return false };
        let crc = u32::from_be_bytes(bytes[end..end + 4].try_into().unwrap());
        if crc32(&bytes[at + 4..end]) != crc {
            return false;
        }
        if &bytes[at + 4..at + 8] == b"IEND" {
            return end + 4 == bytes.len();
        }
        at = end + 4;
    }
    false
}

/// A multipart upload of `files` (name, bytes) to `path` with `key`: (status, body).
async fn upload(addr: SocketAddr, path: &str, key: &str, files: &[(&str, &[u8])]) -> (u16, Value) {
    let boundary = "ptc-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"entity_id\"\r\n\r\nagent_x\r\n").as_bytes(),
    );
    for (name, bytes) in files {
        let part = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        );
        body.extend_from_slice(part.as_bytes());
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    let (host, content_type) = (addr.to_string(), format!("multipart/form-data; boundary={boundary}"));
    let headers = [("Host", host.as_str()), ("X-API-Key", key), ("Content-Type", content_type.as_str())];
    let reply = request(addr, "POST", path, &headers, &body).await;
    (reply.status, serde_json::from_str(&reply.text).unwrap_or(Value::Null))
}

/// `GET path` with `key`: (status, body as text).
async fn get(addr: SocketAddr, path: &str, key: &str) -> (u16, String) {
    let host = addr.to_string();
    let reply = request(addr, "GET", path, &[("Host", host.as_str()), ("X-API-Key", key)], b"").await;
    (reply.status, reply.text)
}

#[tokio::test]
async fn uploads_and_downloads_are_the_tenants_own_and_bounded() {
    let mut cfg = config(&["a:key-a", "b:key-b"]);
    cfg.files.quota_bytes = 100_000;
    cfg.http_limits.max_upload_bytes = 60_000;
    let server = serve(cfg).await;
    let addr = server.http_addr;
    let (status, body) = upload(addr, "/upload", "key-a", &[("notes.txt", b"hello")]).await;
    assert_eq!(status, 200, "{body}");
    let (session, id) = (body["session_id"].as_str().unwrap(), body["files"][0]["fileId"].as_str().unwrap());
    let (status, listed) = get(addr, &format!("/files/{session}?detail=full"), "key-a").await;
    assert_eq!(status, 200, "{listed}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["name"], format!("{session}/{id}"));
    assert_eq!(listed[0]["metadata"]["original-filename"], "notes.txt");
    assert_eq!(get(addr, &format!("/download/{session}/{id}"), "key-a").await, (200, "hello".to_string()));
    // Another key's session and file are unknown to it.
    assert_eq!(get(addr, &format!("/files/{session}"), "key-b").await.0, 404);
    assert_eq!(get(addr, &format!("/download/{session}/{id}"), "key-b").await.0, 404);
    assert_eq!(get(addr, &format!("/download/{session}/nope"), "key-a").await.0, 404);

    // Past the upload limit: 413, and nothing of it is kept.
    let big = vec![b'x'; 70_000];
    let (status, body) = upload(addr, "/upload", "key-a", &[("big.bin", &big)]).await;
    assert_eq!(status, 413, "{body}");
    // Past the quota (60 KB now, 100 KB the quota): 507, nothing kept, the quota as it was.
    let (status, _) = upload(addr, "/upload", "key-a", &[("fill.bin", &vec![b'y'; 55_000])]).await;
    assert_eq!(status, 200);
    let (status, body) = upload(addr, "/upload", "key-a", &[("over.bin", &vec![b'z'; 50_000])]).await;
    assert_eq!(status, 507, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("File quota exceeded"), "{body}");
    let (status, body) = upload(addr, "/upload/batch", "key-a", &[("a.txt", b"1"), ("b.txt", b"22")]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["succeeded"].as_u64(), body["failed"].as_u64()), (Some(2), Some(0)), "{body}");

    // What a program makes besides regular files (a link) is never listed.
    let code = "import os\nopen('/mnt/data/real.txt', 'w').write('r')\nos.symlink('real.txt', '/mnt/data/link.txt')";
    let r = post(addr, "/exec", Some("key-a"), &json!({"code": code, "session_id": "linked"})).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let (_, listed) = get(addr, "/files/linked", "key-a").await;
    let names: Vec<String> = serde_json::from_str::<Vec<Value>>(&listed)
        .unwrap()
        .iter()
        .map(|f| f["metadata"]["original-filename"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["real.txt"]);
    server.shutdown();
    server.wait().await;
}
