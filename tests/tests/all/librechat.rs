//! The HTTP Code API driven by LibreChat's real client (`@librechat/agents` from npm, its
//! programmatic tool and its code tool, invoked as LibreChat's graph invokes them): for every
//! way a program can fail, what the client shows the model says what happened and what to do,
//! and no failure of the program is a 4xx ("the request was rejected, check the tool input").

use std::io::Write;
use std::process::{Command, Stdio};

use ptc_tests::grpc::{config, serve};
use serde_json::{Value, json};

#[tokio::test]
async fn librechats_client_shows_the_model_what_happened_and_what_to_do() {
    let mut cfg = config(&["librechat:lc-key"]);
    cfg.files.quota_bytes = 100_000;
    let server = serve(cfg).await;
    let dir = tokio::task::spawn_blocking(|| ptc_tests::node::project("librechat")).await.unwrap();
    let cases = json!([
        {"name": "gather", "tool": "ptc", "code": "r = await asyncio.gather(add(a=1, b=2), add(a=3, b=4))\nprint(r)"},
        {"name": "tool_error", "tool": "ptc", "code": "try:\n    await weather(city='Oslo')\nexcept ToolError as e:\n    print('caught:', e)"},
        {"name": "python_error", "tool": "ptc", "code": "await add(a=1, b=2)\nx = 1 / 0"},
        {"name": "timeout", "tool": "ptc", "code": "await add(a=1, b=2)\nwhile True: pass", "timeout": 2000},
        {"name": "memory", "tool": "ptc", "code": "await add(a=1, b=2)\nx = bytearray(1 << 30)"},
        {"name": "exit", "tool": "ptc", "code": "await add(a=1, b=2)\nimport sys\nsys.exit(3)"},
        {"name": "round_trips", "tool": "ptc", "code": "for i in range(30):\n    await add(a=i, b=0)"},
        {"name": "recursion", "tool": "ptc", "code": "await add(a=1, b=2)\nimport json\njson.loads('[' * 100000)"},
        {"name": "file_quota", "tool": "ptc", "code": "await add(a=1, b=2)\nopen('/mnt/data/big.bin', 'wb').write(b'x' * 200_000)"},
        {"name": "exec_ok", "tool": "exec", "code": "print('hello')"},
        {"name": "exec_timeout", "tool": "exec", "code": "while True: pass", "timeout": 2000},
        {"name": "exec_error", "tool": "exec", "code": "raise ValueError('bad input')"},
    ]);
    let base = format!("http://{}", server.http_addr);
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("node")
            .arg("drive.mjs")
            .current_dir(&dir)
            .env("BASE_URL", base)
            .env("API_KEY", "lc-key")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node");
        child.stdin.take().unwrap().write_all(cases.to_string().as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    let results: Vec<Value> = serde_json::from_str(stdout.trim()).expect("the driver's JSON");
    let seen = |name: &str| -> (String, String) {
        let r = results.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no result for {name}"));
        (r["status"].as_str().unwrap().to_string(), r["content"].as_str().unwrap().to_string())
    };
    let expect = |name: &str, status: &str, parts: &[&str]| {
        let (got_status, content) = seen(name);
        assert_eq!(got_status, status, "{name}: {content}");
        for part in parts {
            assert!(content.contains(part), "{name}: the model should see {part:?} in:\n{content}");
        }
        assert!(
            !content.contains("rejected"),
            "{name}: a program's failure must not read as a rejected request:\n{content}"
        );
    };
    expect("gather", "success", &["stdout:\n[3, 7]"]);
    expect("tool_error", "success", &["caught: the weather service is down"]);
    expect("python_error", "error", &["ZeroDivisionError: division by zero", "line 2"]);
    expect(
        "timeout",
        "error",
        &["Execution exceeded the time limit", "Execution timeout after 2000 ms", "do less per execution"],
    );
    expect(
        "memory",
        "error",
        &["Execution exceeded the memory limit", "memory limit exceeded (256 MiB)", "use less memory"],
    );
    expect("exit", "error", &["Execution exited with code 3", "sys.exit(3)"]);
    expect("round_trips", "error", &["Exceeded maximum round trips (20)", "asyncio.gather"]);
    expect("recursion", "error", &["RecursionError: maximum recursion depth exceeded"]);
    expect("file_quota", "error", &["File quota exceeded", "Write less to /mnt/data"]);
    expect("exec_ok", "success", &["stdout:\nhello"]);
    // The code tool shows only stdout and stderr, so the reason must be in stderr.
    expect("exec_timeout", "success", &["Execution timeout after 2000 ms"]);
    expect("exec_error", "success", &["ValueError: bad input"]);
}
