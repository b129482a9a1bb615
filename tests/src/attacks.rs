//! Attacks on the host side of a server, as a program and a key holder would make them, shared
//! by the in-process tests and the test of the release binary (`tests/release_binary.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http::{Reply, post, post_raw};

const PATH: &str = "/exec/programmatic";

/// A host file and a host directory next to the files directory, reachable from a session
/// directory as `../../../NAME` if anything followed a link.
struct Sentinels {
    file: PathBuf,
    dir: PathBuf,
    write_target: PathBuf,
}

impl Sentinels {
    fn new(files_dir: &Path) -> Sentinels {
        let parent = files_dir.parent().unwrap();
        let tag = files_dir.file_name().unwrap().to_str().unwrap();
        let s = Sentinels {
            file: parent.join(format!("{tag}-secret.txt")),
            dir: parent.join(format!("{tag}-secretdir")),
            write_target: parent.join(format!("{tag}-written.txt")),
        };
        std::fs::write(&s.file, "HOST SECRET").unwrap();
        std::fs::create_dir_all(&s.dir).unwrap();
        std::fs::write(s.dir.join("f.txt"), "HOST SECRET IN DIR").unwrap();
        std::fs::write(s.dir.join("ok.txt"), "HOST SECRET IN DIR").unwrap();
        s
    }

    /// The link target that reaches `path` from inside a session directory.
    fn rel(path: &Path) -> String {
        format!("../../../{}", path.file_name().unwrap().to_str().unwrap())
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.write_target);
    }
}

async fn run(addr: SocketAddr, key: Option<&str>, session: &str, code: &str, files: Value) -> Reply {
    post(addr, PATH, key, &json!({"code": code, "session_id": session, "files": files})).await
}

fn import(name: &str, session: &str) -> Value {
    json!([{"id": "x", "name": name, "session_id": session}])
}

/// Tenants `a` (`key-a`) and `b` (`key-b`) on a server whose files live in `files_dir`: links
/// of every shape planted by a's programs never let an import, a listing or the quota walk
/// read or write outside the session, nor reach b's files.
pub async fn links(addr: SocketAddr, files_dir: &Path) {
    let sentinels = Sentinels::new(files_dir);
    let (a, b) = (Some("key-a"), Some("key-b"));

    // Tenant b has a file tenant a must never reach.
    let r = run(addr, b, "theirs", "open('/mnt/data/secret.txt', 'w').write('TENANT B SECRET')", json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);

    // Tenant a plants links of every shape, plus a hard link and a real file.
    let plant = format!(
        r#"
import os, hashlib
os.makedirs('/mnt/data/real', exist_ok=True)
open('/mnt/data/real/ok.txt', 'w').write('fine')
open('/mnt/data/ok.txt', 'w').write('fine')
other = '../../' + hashlib.sha256(b'b').hexdigest()[:24] + '/theirs'
links = {{
    'secret': '{file}',           # relative, with ..
    'up': '../../..',              # a directory above the files root
    'updir': '{dir}',              # a host directory
    'other': other,                # another tenant's session
    'abs': '/etc',                 # absolute
    'dangling': 'nope/nowhere',
    'chain': 'secret',             # link to a link
    'inner': 'real',               # a link to a directory inside the session
}}
for name, target in links.items():
    try:
        os.symlink(target, '/mnt/data/' + name)
        print('linked', name)
    except OSError as e:
        print('refused', name)
try:
    os.link('/mnt/data/ok.txt', '/mnt/data/hard.txt')
    print('hard linked')
except OSError:
    print('no hard link')
# Inside the sandbox a link cannot leave the session either.
for name in ['secret', 'updir/f.txt', 'other/secret.txt']:
    try:
        print(name, open('/mnt/data/' + name).read())
    except OSError:
        print(name, 'unreadable')
"#,
        file = Sentinels::rel(&sentinels.file),
        dir = Sentinels::rel(&sentinels.dir),
    );
    let r = run(addr, a, "plant", &plant, json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let out = r.body["stdout"].as_str().unwrap();
    assert!(out.contains("linked secret") && out.contains("linked up") && out.contains("linked other"), "{out}");
    assert!(!out.contains("SECRET"), "the sandbox read through a link: {out}");
    // Listing: only the two regular files; no link, no hard-linked file, nothing behind a link.
    let hard_linked = out.contains("hard linked");
    let names: Vec<&str> = r.body["files"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    let expected: &[&str] = if hard_linked { &["real/ok.txt"] } else { &["ok.txt", "real/ok.txt"] };
    assert_eq!(names, expected, "listed: {}", r.text);

    // Import: every link shape, by its own name and through it as a directory, is refused.
    let mut refused = vec![
        "secret",
        "chain",
        "dangling",
        "abs/passwd",
        "up/etc/passwd",
        "updir/f.txt",
        "other/secret.txt",
        "inner/ok.txt",
        "up/../../../x", // refused by the name check already
    ];
    if hard_linked {
        refused.extend(["hard.txt", "ok.txt"]); // both names of a file with two links
    }
    for name in refused {
        let r =
            run(addr, a, "victim", "import os\nprint(sorted(os.listdir('/mnt/data')))", import(name, "plant")).await;
        assert_eq!(r.status, 400, "importing {name:?}: {}", r.text);
        assert!(!r.text.contains("SECRET"), "{name}: {}", r.text);
    }
    // A real file imports fine.
    let r = run(addr, a, "victim", "print(open('/mnt/data/real/ok.txt').read())", import("real/ok.txt", "plant")).await;
    assert_eq!(r.body["stdout"], "fine\n", "{}", r.text);

    // Tenant b's session is not tenant a's to import from, whatever it is called.
    let r = run(addr, a, "victim", "pass", import("secret.txt", "theirs")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(!r.text.contains("SECRET"));

    // Write through a link at the destination: the victim plants links where imports land.
    let plant_dst = format!(
        "import os\nos.symlink('{w}', '/mnt/data/ok2.txt')\nos.makedirs('/mnt/data/sub', exist_ok=True)\nos.symlink('{d}', '/mnt/data/real2')",
        w = Sentinels::rel(&sentinels.write_target),
        d = Sentinels::rel(&sentinels.dir),
    );
    let r = run(addr, a, "dst", &plant_dst, json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let src = "import os\nopen('/mnt/data/ok2.txt', 'w').write('imported')\nos.makedirs('/mnt/data/real2', exist_ok=True)\nopen('/mnt/data/real2/ok.txt', 'w').write('imported')";
    let r = run(addr, a, "src", src, json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let r = run(
        addr,
        a,
        "dst",
        "import os\nprint(os.path.islink('/mnt/data/ok2.txt'), open('/mnt/data/ok2.txt').read())",
        import("ok2.txt", "src"),
    )
    .await;
    assert_eq!(r.body["stdout"], "False imported\n", "the link was replaced, not written through: {}", r.text);
    assert!(!sentinels.write_target.exists(), "an import wrote a host file through a link");
    let r = run(addr, a, "dst", "pass", import("real2/ok.txt", "src")).await;
    assert_eq!(r.status, 400, "a directory link at the destination is refused: {}", r.text);
    assert_eq!(std::fs::read_to_string(sentinels.dir.join("ok.txt")).unwrap(), "HOST SECRET IN DIR");

    // A directory swapped for a link between two requests.
    let r = run(
        addr,
        a,
        "swap",
        "import os\nos.makedirs('/mnt/data/d', exist_ok=True)\nopen('/mnt/data/d/f.txt', 'w').write('mine')",
        json!(null),
    )
    .await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let swap = format!(
        "import os, shutil\nshutil.rmtree('/mnt/data/d')\nos.symlink('{}', '/mnt/data/d')",
        Sentinels::rel(&sentinels.dir)
    );
    let r = run(addr, a, "swap", &swap, json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let r = run(addr, a, "victim2", "print(open('/mnt/data/d/f.txt').read())", import("d/f.txt", "swap")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(!r.text.contains("SECRET"));

    // The quota walk and retention never counted or touched what the links point at.
    assert_eq!(std::fs::read_to_string(&sentinels.file).unwrap(), "HOST SECRET");
    assert!(sentinels.dir.join("f.txt").exists());
}

async fn listing(addr: SocketAddr, key: Option<&str>, session: &str) -> String {
    let r = run(addr, key, session, "import os\nprint(sorted(os.listdir('/mnt/data')))", json!(null)).await;
    r.body["stdout"].as_str().unwrap_or_default().to_string()
}

/// On a server whose file quota is 10,000 bytes (or less), for the tenant of `key`: a run
/// that writes past it is stopped and what it wrote removed, however it ends.
pub async fn quota_on_every_ending(addr: SocketAddr, key: Option<&str>) {
    let write = "open('/mnt/data/big.bin', 'wb').write(b'x' * 50_000)\nprint('wrote')\n";
    let endings = [
        ("raises", format!("{write}raise ValueError('after writing')"), json!(null)),
        ("exits", format!("{write}import sys\nsys.exit(3)"), json!(null)),
        ("times out", format!("{write}while True: pass"), json!(1000)),
        ("pauses for a tool", format!("{write}await t()"), json!(null)),
    ];
    for (i, (how, code, timeout)) in endings.into_iter().enumerate() {
        let session = format!("end{i}");
        let body = json!({"code": code, "session_id": session, "timeout": timeout, "tools": [{"name": "t"}]});
        let r = post(addr, PATH, key, &body).await;
        assert_eq!((r.status, r.body["kind"].as_str()), (200, Some("file_quota")), "a run that {how}: {}", r.text);
        assert!(r.body["stderr"].as_str().unwrap().contains("File quota exceeded"), "{how}: {}", r.text);
        assert_eq!(listing(addr, key, &session).await, "[]\n", "what the run that {how} wrote was removed");
    }
}

/// On a server whose file quota is 50 entries (or bytes enough for a few MB), for the tenant of
/// `key`: a program writing files, directories or bytes without end is stopped by the quota,
/// not its deadline, and files from before the run stay.
pub async fn quota_while_running(addr: SocketAddr, key: Option<&str>) {
    let r = run(addr, key, "keep", "open('/mnt/data/kept.txt', 'w').write('keep me')", json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    // Thousands of files (once 73,000 made every later run walk them all), and bytes.
    for (session, code) in [
        ("many", "import os\ni = 0\nwhile True:\n    open(f'/mnt/data/f{i}', 'w').write('x')\n    i += 1"),
        ("dirs", "import os\ni = 0\nwhile True:\n    os.makedirs(f'/mnt/data/d{i}/e/f', exist_ok=True)\n    i += 1"),
        ("keep", "while True:\n    open('/mnt/data/grow.bin', 'ab').write(b'x' * 1_000_000)"),
    ] {
        let r = post(addr, PATH, key, &json!({"code": code, "session_id": session, "timeout": 120000})).await;
        assert_eq!((r.status, r.body["kind"].as_str()), (200, Some("file_quota")), "{session}: {}", r.text);
    }
    assert_eq!(listing(addr, key, "many").await, "[]\n");
    assert_eq!(listing(addr, key, "dirs").await, "[]\n");
    assert_eq!(listing(addr, key, "keep").await, "['kept.txt']\n", "files from before the run stay");
}

/// On a server allowing 4 connections, 1 s for headers and for a body, and 4 MiB bodies:
/// half-sent requests are cut off, the 5th connection gets a JSON 503, a body that never
/// arrives a JSON 408, and an oversized body a JSON 413 rather than a broken pipe.
pub async fn http_connections(addr: SocketAddr) {
    // Half-sent requests: each is closed by the header timeout, not kept open.
    let mut half = Vec::new();
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
        half.push(s);
    }
    // Past the limit, a connection is answered 503 with a JSON error and closed.
    let r = post(addr, "/exec", None, &json!({"code": "pass"})).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.body["error"].as_str().unwrap().starts_with("Too many connections"), "{}", r.text);
    for mut s in half {
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
        assert!(read.is_ok(), "a half-sent request was kept open");
    }
    // Connections are free again.
    let r = post(addr, "/exec", None, &json!({"code": "print(1)"})).await;
    assert_eq!(r.body["stdout"], "1\n", "{}", r.text);

    // A body that never arrives: 408 with a JSON error.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"code\":",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("Request body not received within 1 s"), "{text}");

    // An oversized body is read (within bounds) and answered 413 in JSON, not a broken pipe.
    let big = vec![b' '; 6 << 20];
    let r = post_raw(addr, "/exec", &[], &big).await;
    assert_eq!(r.status, 413, "{}", r.text);
    assert!(r.body["error"].as_str().unwrap().contains("the limit is 4194304 bytes"), "{}", r.text);
}

/// On a server whose tenant of `key` may have 3 executions: starting and cancelling paused
/// executions ten times over, with two request ids, never runs into that cap or a taken id.
pub async fn cancel_frees_at_once(addr: SocketAddr, key: Option<&str>) {
    let body = json!({"code": "await t()", "tools": [{"name": "t"}]});
    for i in 0..10 {
        let rid = format!("req-{}", i % 2);
        let mut headers = vec![("X-LibreChat-Code-Request-ID", rid.as_str())];
        headers.extend(key.map(|k| ("X-API-Key", k)));
        let r = post_raw(addr, "/exec/programmatic", &headers, body.to_string().as_bytes()).await;
        assert_eq!(r.body["status"], "tool_call_required", "run {i}: {}", r.text);
        let c = post(addr, "/exec/programmatic/cancel", key, &json!({"request_id": rid})).await;
        assert_eq!(c.body["status"], "cancelled", "{}", c.text);
    }
}

/// Allocates `mib` MiB, says so, and waits for a tool so the memory stays claimed.
pub fn hold(mib: u32) -> String {
    format!("x = bytearray({mib} << 20)\nprint('holding')\nawait t()\nprint(len(x) >> 20)")
}

/// On a server whose memory budget is 200 MiB: a paused execution holding 150 MiB leaves too
/// little for a second one, which fails as the program's `Out of memory`, saying it was the
/// server's budget; the first then completes.
pub async fn memory_budget(addr: SocketAddr, key: Option<&str>) {
    let body = json!({"code": hold(150), "tools": [{"name": "t"}]});
    let first = post(addr, "/exec/programmatic", key, &body).await;
    assert_eq!(first.body["status"], "tool_call_required", "{}", first.text);
    let second = post(addr, "/exec/programmatic", key, &body).await;
    assert_eq!((second.status, second.body["error"].as_str()), (200, Some("Out of memory")), "{}", second.text);
    let stderr = second.body["stderr"].as_str().unwrap();
    assert!(stderr.contains("the server's memory budget for all executions (200 MiB)"), "{stderr}");
    let call = &first.body["tool_calls"][0];
    let results = json!({"continuation_token": first.body["continuation_token"], "tool_results": [{"call_id": call["id"], "result": "ok", "is_error": false}]});
    let done = post(addr, "/exec/programmatic", key, &results).await;
    assert_eq!(done.body["stdout"], "holding\n150\n", "{}", done.text);
}

/// Data nested deeper than the sandbox's stack is the program's RecursionError, a 200.
pub async fn recursion(addr: SocketAddr, key: Option<&str>) {
    let r = post(addr, "/exec", key, &json!({"code": "import json\njson.loads('[' * 100000)"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.body["error"].as_str().unwrap().starts_with("RecursionError"), "{}", r.text);
    assert!(r.body["stderr"].as_str().unwrap().starts_with("RecursionError"), "{}", r.text);
}
