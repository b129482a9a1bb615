//! The HTTP Code API driven by LibreChat's real client (`@librechat/agents` from npm, its
//! programmatic tool and its code tool, invoked as LibreChat's graph invokes them): for every
//! way a program can fail, what the client shows the model says what happened and what to do,
//! and no failure of the program is a 4xx ("the request was rejected, check the tool input").

use std::io::Write;
use std::process::{Command, Stdio};

use ptc_tests::grpc::{config, data_config, serve};
use serde_json::{Value, json};

/// Runs `cases` through LibreChat's client (`drive.mjs`) against `server`; what the model saw.
async fn drive(server: &ptc_server::RunningServer, key: &str, cases: &Value) -> Vec<Value> {
    let dir = tokio::task::spawn_blocking(|| ptc_tests::node::project("librechat")).await.unwrap();
    let base = format!("http://{}", server.http_addr);
    let (key, cases) = (key.to_string(), cases.to_string());
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("node")
            .arg("drive.mjs")
            .current_dir(&dir)
            .env("BASE_URL", base)
            .env("API_KEY", key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("node");
        child.stdin.take().unwrap().write_all(cases.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "node: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).expect("the driver's JSON")
}

/// (status, content) of the case `name`.
fn seen(results: &[Value], name: &str) -> (String, String) {
    let r = results.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("no result for {name}"));
    (r["status"].as_str().unwrap().to_string(), r["content"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn librechats_client_shows_the_model_what_happened_and_what_to_do() {
    let mut cfg = config(&["librechat:lc-key"]);
    cfg.files.quota_bytes = 100_000;
    let server = serve(cfg).await;
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
        {"name": "js_ok", "tool": "exec", "lang": "js", "code": "const r = [1, 2, 3].map((x) => x * 2);\nconsole.log(r.join(' '))"},
        {"name": "js_error", "tool": "exec", "lang": "js", "code": "const a = 1;\nnull.x"},
        {"name": "js_timeout", "tool": "exec", "lang": "js", "code": "while (true) {}", "timeout": 2000},
        {"name": "js_recursion", "tool": "exec", "lang": "js", "code": "JSON.parse('['.repeat(200000))"},
        {"name": "ts_ok", "tool": "exec", "lang": "ts", "code": "interface P { n: number }\nconst p: P = { n: 21 };\nconsole.log(p.n * 2)"},
        {"name": "ts_enum", "tool": "exec", "lang": "ts", "code": "enum Color { Red }"},
        {"name": "rust", "tool": "exec", "lang": "rs", "code": "fn main() {}"},
    ]);
    let results = drive(&server, "lc-key", &cases).await;
    let seen = |name: &str| seen(&results, name);
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
    expect("round_trips", "error", &["Exceeded maximum round trips (20)", "asyncio.gather", "Promise.all"]);
    expect("recursion", "error", &["RecursionError: maximum recursion depth exceeded"]);
    expect("file_quota", "error", &["File quota exceeded", "Write less to /mnt/data"]);
    expect("exec_ok", "success", &["stdout:\nhello"]);
    // The code tool shows only stdout and stderr, so the reason must be in stderr.
    expect("exec_timeout", "success", &["Execution timeout after 2000 ms"]);
    expect("exec_error", "success", &["ValueError: bad input"]);
    // JavaScript through the same tool (`lang: "js"`), its errors in stderr with the program's line.
    expect("js_ok", "success", &["stdout:\n2 4 6"]);
    expect("js_error", "success", &["TypeError", "program.js:2"]);
    expect("js_timeout", "success", &["Execution timeout after 2000 ms"]);
    expect("js_recursion", "success", &["RangeError: Maximum call stack size exceeded in native code"]);
    // TypeScript (`lang: "ts"`), its types erased; what cannot be erased said with what to do.
    expect("ts_ok", "success", &["stdout:\n42"]);
    expect("ts_enum", "success", &["SyntaxError: TypeScript: ", "object of constants"]);
    // A language nobody runs here is refused (LibreChat's client shows a 400 in its own words).
    let (_, content) = seen("rust");
    assert!(content.contains("The code execution request was rejected"), "{content}");
}

/// A server whose HTTP runs default to the data runtime: LibreChat's code tool saves a
/// matplotlib figure to /mnt/data and the model is told of the file; its programmatic tool
/// runs pandas over gathered tool results.
#[tokio::test]
async fn librechats_client_gets_a_matplotlib_figure_from_the_data_runtime() {
    let mut cfg = data_config(&["librechat:lc-key"]);
    cfg.http_runtime = ptc_engine::Runtime::PythonData;
    let files_dir = cfg.files.dir.clone();
    let server = serve(cfg).await;
    let cases = json!([
        {"name": "figure", "tool": "exec", "code": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 4, 9])\nax.set_title('squares')\nfig.savefig('/mnt/data/squares.png')\nprint('saved')"},
        {"name": "pandas", "tool": "ptc", "code": "import pandas as pd\nr = await asyncio.gather(add(a=1, b=2), add(a=3, b=4))\nprint(pd.Series(r).sum())"},
    ]);
    let results = drive(&server, "lc-key", &cases).await;
    let (status, content) = seen(&results, "figure");
    assert_eq!(status, "success", "{content}");
    assert!(
        content.contains("stdout:\nsaved") && content.contains("including 1 image(s)"),
        "the model is told of the image:\n{content}"
    );
    let (status, content) = seen(&results, "pandas");
    assert_eq!(status, "success", "{content}");
    assert!(content.contains("stdout:\n10"), "{content}");
    let png = find(&files_dir, "squares.png").expect("the figure is among the tenant's files");
    let bytes = std::fs::read(png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 5_000, "{} bytes", bytes.len());

    // A request may still name the default runtime, and an unknown one is refused in words.
    let addr = server.http_addr;
    let body = json!({"code": "import numpy", "runtime": "python", "lang": "py"});
    let r = ptc_tests::http::post(addr, "/exec", Some("lc-key"), &body).await;
    assert!(r.body["stderr"].as_str().unwrap_or_default().contains("No module named 'numpy'"), "{:?}", r.body);
    let body = json!({"code": "pass", "runtime": "R"});
    let r = ptc_tests::http::post(addr, "/exec", Some("lc-key"), &body).await;
    assert_eq!(r.status, 400);
    assert!(r.body.to_string().contains("python-data"), "{:?}", r.body);
}

fn find(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if path.is_dir()
            && let Some(found) = find(&path, name)
        {
            return Some(found);
        }
    }
    None
}
