//! `/mnt/data` over the HTTP API: files written are returned, files of earlier sessions can be
//! brought in, nothing escapes the session directory, and the per-tenant quota holds.

use ptc_tests::grpc::{config, serve};
use ptc_tests::http::post;
use serde_json::json;

const PATH: &str = "/exec/programmatic";

#[tokio::test]
async fn files_written_are_returned_and_can_be_used_by_a_later_session() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let code = "import csv\nwith open('/mnt/data/report.csv', 'w', newline='') as f:\n    csv.writer(f).writerows([['city', 'temp'], ['Paris', 18]])\nprint('saved')";
    let first = post(addr, PATH, None, &json!({"code": code, "session_id": "sess-a"})).await;
    assert_eq!(first.body["status"], "completed", "{}", first.text);
    let files = first.body["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!((files[0]["name"].as_str(), files[0]["session_id"].as_str()), (Some("report.csv"), Some("sess-a")));

    // A new session names the file from the earlier one; it runs across a tool round trip.
    let code = "rows = open('/mnt/data/report.csv').read().split()\nextra = await t()\nopen('/mnt/data/summary.txt', 'w').write(f'{len(rows)} rows, {extra}')\nprint(rows[1])";
    let body = json!({"code": code, "tools": [{"name": "t"}], "session_id": "sess-b", "files": [files[0]]});
    let paused = post(addr, PATH, None, &body).await.body;
    assert_eq!(paused["status"], "tool_call_required", "{paused}");
    let call = &paused["tool_calls"][0];
    let done = post(addr, PATH, None, &json!({"continuation_token": paused["continuation_token"], "tool_results": [{"call_id": call["id"], "result": "ok", "is_error": false}]})).await;
    assert_eq!(done.body["stdout"], "Paris,18\n", "{}", done.text);
    let names: Vec<_> =
        done.body["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["summary.txt"], "only what the program wrote is returned, not the imported file");
}

#[tokio::test]
async fn path_traversal_is_refused() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let r = post(addr, PATH, None, &json!({"code": "pass", "session_id": "../../etc"})).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = post(
        addr,
        PATH,
        None,
        &json!({"code": "pass", "files": [{"id": "x", "name": "../../secret", "session_id": "s1"}]}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"].as_str().unwrap().contains("invalid file name"), "{}", r.text);
    let r = post(
        addr,
        PATH,
        None,
        &json!({"code": "pass", "files": [{"id": "x", "name": "f.txt", "session_id": "never-existed"}]}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"].as_str().unwrap().contains("not found"), "{}", r.text);
    // Another tenant's session is invisible (tenants have separate roots).
    let code = r#"
import os
for p in ["/mnt/data/../../..", "/mnt/data/../other", "/"]:
    try:
        print(p, sorted(os.listdir(p)))
    except OSError as e:
        print(p, "refused")
"#;
    let r = post(addr, PATH, None, &json!({"code": code, "session_id": "s2"})).await;
    let out = r.body["stdout"].as_str().unwrap();
    assert_eq!(out.matches("refused").count(), 3, "{out}");
}

#[tokio::test]
async fn tenant_quota_removes_the_files_of_a_run_that_exceeds_it() {
    let mut cfg = config(&[]);
    cfg.files.quota_bytes = 10_000;
    let server = serve(cfg).await;
    let addr = server.http_addr;
    let ok = post(
        addr,
        PATH,
        None,
        &json!({"code": "open('/mnt/data/small.bin', 'wb').write(b'x' * 5000)", "session_id": "q1"}),
    )
    .await;
    assert_eq!(ok.body["status"], "completed", "{}", ok.text);
    let over = post(
        addr,
        PATH,
        None,
        &json!({"code": "open('/mnt/data/big.bin', 'wb').write(b'x' * 6000)\nprint('wrote')", "session_id": "q2"}),
    )
    .await;
    assert_eq!(over.status, 200, "{}", over.text);
    assert_eq!(
        (over.body["error"].as_str(), over.body["kind"].as_str()),
        (Some("Execution failed or timed out"), Some("file_quota"))
    );
    assert!(over.body["stderr"].as_str().unwrap().starts_with("File quota exceeded"), "{}", over.text);
    assert_eq!(over.body["stdout"], "wrote\n");
    let check =
        post(addr, PATH, None, &json!({"code": "import os\nprint(os.listdir('/mnt/data'))", "session_id": "q2"})).await;
    assert_eq!(check.body["stdout"], "[]\n", "the over-quota file was removed");
}
