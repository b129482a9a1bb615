//! The host side of `/mnt/data`, attacked the way a program (and a key holder) would: links of
//! every shape never let an import, a listing or the quota walk read or write outside the
//! session, nor reach another tenant; the file quota holds however a run ends, and while it
//! runs.

use std::path::{Path, PathBuf};

use ptc_tests::grpc::{config, serve};
use ptc_tests::http::{Reply, post};
use serde_json::{Value, json};

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

async fn run(addr: std::net::SocketAddr, key: Option<&str>, session: &str, code: &str, files: Value) -> Reply {
    post(addr, PATH, key, &json!({"code": code, "session_id": session, "files": files})).await
}

fn import(name: &str, session: &str) -> Value {
    json!([{"id": "x", "name": name, "session_id": session}])
}

#[tokio::test]
async fn links_planted_by_a_program_are_never_followed_by_the_host() {
    let cfg = config(&["a:key-a", "b:key-b"]);
    let sentinels = Sentinels::new(&cfg.files.dir);
    let server = serve(cfg).await;
    let addr = server.http_addr;
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
        let r = run(addr, a, "victim", "import os\nprint(sorted(os.listdir('/mnt/data')))", import(name, "plant")).await;
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
    let r = run(addr, a, "dst", "import os\nprint(os.path.islink('/mnt/data/ok2.txt'), open('/mnt/data/ok2.txt').read())", import("ok2.txt", "src")).await;
    assert_eq!(r.body["stdout"], "False imported\n", "the link was replaced, not written through: {}", r.text);
    assert!(!sentinels.write_target.exists(), "an import wrote a host file through a link");
    let r = run(addr, a, "dst", "pass", import("real2/ok.txt", "src")).await;
    assert_eq!(r.status, 400, "a directory link at the destination is refused: {}", r.text);
    assert_eq!(std::fs::read_to_string(sentinels.dir.join("ok.txt")).unwrap(), "HOST SECRET IN DIR");

    // A directory swapped for a link between two requests.
    let r = run(addr, a, "swap", "import os\nos.makedirs('/mnt/data/d', exist_ok=True)\nopen('/mnt/data/d/f.txt', 'w').write('mine')", json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let swap = format!("import os, shutil\nshutil.rmtree('/mnt/data/d')\nos.symlink('{}', '/mnt/data/d')", Sentinels::rel(&sentinels.dir));
    let r = run(addr, a, "swap", &swap, json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let r = run(addr, a, "victim2", "print(open('/mnt/data/d/f.txt').read())", import("d/f.txt", "swap")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(!r.text.contains("SECRET"));

    // The quota walk and retention never counted or touched what the links point at.
    assert_eq!(std::fs::read_to_string(&sentinels.file).unwrap(), "HOST SECRET");
    assert!(sentinels.dir.join("f.txt").exists());
}

async fn listing(addr: std::net::SocketAddr, session: &str) -> String {
    let r = run(addr, None, session, "import os\nprint(sorted(os.listdir('/mnt/data')))", json!(null)).await;
    r.body["stdout"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn the_quota_holds_however_a_run_ends() {
    let mut cfg = config(&[]);
    cfg.files.quota_bytes = 10_000;
    let server = serve(cfg).await;
    let addr = server.http_addr;
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
        let r = post(addr, PATH, None, &body).await;
        assert_eq!((r.status, r.body["kind"].as_str()), (200, Some("file_quota")), "a run that {how}: {}", r.text);
        assert!(r.body["stderr"].as_str().unwrap().contains("File quota exceeded"), "{how}: {}", r.text);
        assert_eq!(listing(addr, &session).await, "[]\n", "what the run that {how} wrote was removed");
    }
}

#[tokio::test]
async fn a_program_writing_without_end_is_stopped_by_the_quota_not_its_deadline() {
    let mut cfg = config(&[]);
    cfg.files.quota_files = 50;
    let server = serve(cfg).await;
    let addr = server.http_addr;
    let r = run(addr, None, "keep", "open('/mnt/data/kept.txt', 'w').write('keep me')", json!(null)).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    // Thousands of files (once 73,000 made every later run walk them all), and bytes.
    for (session, code) in [
        ("many", "import os\ni = 0\nwhile True:\n    open(f'/mnt/data/f{i}', 'w').write('x')\n    i += 1"),
        ("dirs", "import os\ni = 0\nwhile True:\n    os.makedirs(f'/mnt/data/d{i}/e/f', exist_ok=True)\n    i += 1"),
        ("keep", "while True:\n    open('/mnt/data/grow.bin', 'ab').write(b'x' * 1_000_000)"),
    ] {
        let r = post(addr, PATH, None, &json!({"code": code, "session_id": session, "timeout": 120000})).await;
        assert_eq!((r.status, r.body["kind"].as_str()), (200, Some("file_quota")), "{session}: {}", r.text);
    }
    assert_eq!(listing(addr, "many").await, "[]\n");
    assert_eq!(listing(addr, "dirs").await, "[]\n");
    assert_eq!(listing(addr, "keep").await, "['kept.txt']\n", "files from before the run stay");
}
