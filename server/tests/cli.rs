//! The `ptc-engine` binary: `run` (local and against a server) and `serve` (env vars, SIGTERM).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ptc-engine");

const HANDLER: &str = r#"python3 -c 'import json,sys; c=json.load(sys.stdin); i=c["input"]; print(json.dumps(i["a"]+i["b"])) if c["name"]=="add" else sys.exit("no such tool: "+c["name"])'"#;

struct Files(std::path::PathBuf);

impl Files {
    fn new(tag: &str, code: &str) -> Files {
        let dir = std::env::temp_dir().join(format!("ptc-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("prog.py"), code).unwrap();
        let tools = r#"[{"name": "add", "description": "Adds.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}, {"name": "broken"}]"#;
        std::fs::write(dir.join("tools.json"), tools).unwrap();
        Files(dir)
    }
    fn arg(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).env("PTC_LOG", "warn").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn run_local_answers_tools_with_the_handler() {
    let code = "r = await asyncio.gather(add(a=1, b=2), add(a=3, b=4))\nprint(r)\ntry:\n    await broken()\nexcept ToolError as e:\n    print('broken:', e)\nreturn sum(r)";
    let f = Files::new("local", code);
    let (status, stdout, stderr) =
        run(&["run", &f.arg("prog.py"), "--tools", &f.arg("tools.json"), "--tool-handler", HANDLER, "--local"]);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(stdout, "[3, 7]\nbroken: no such tool: broken\n10\n");
}

#[test]
fn run_reports_failures_with_exit_codes() {
    let f = Files::new("fail", "print('partial')\nraise ValueError('nope')");
    let (status, stdout, stderr) = run(&["run", &f.arg("prog.py"), "--local"]);
    assert_eq!(status, 1);
    assert_eq!(stdout, "partial\n");
    assert!(stderr.contains("ValueError: nope"), "{stderr}");
    let f = Files::new("exit", "import sys\nsys.exit(3)");
    assert_eq!(run(&["run", &f.arg("prog.py"), "--local"]).0, 3);
    let f = Files::new("timeout", "while True: pass");
    let (status, _, stderr) = run(&["run", &f.arg("prog.py"), "--local", "--timeout-ms", "1000"]);
    assert_eq!(status, 1);
    assert!(stderr.contains("Execution timeout after 1000 ms (FAILURE_KIND_TIMEOUT)"), "{stderr}");
}

/// Kills the server if an assertion fails before it is stopped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn serve_takes_env_vars_serves_run_and_stops_on_sigterm() {
    let (grpc, metrics, http) = (free_port(), free_port(), free_port());
    let mut child = KillOnDrop(
        Command::new(BIN)
            .arg("serve")
            .env("PTC_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
            .env("PTC_METRICS_ADDR", format!("127.0.0.1:{metrics}"))
            .env("PTC_HTTP_ADDR", format!("127.0.0.1:{http}"))
            .env("PTC_API_KEYS", "acme:s3cret")
            .env("PTC_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let t0 = Instant::now();
    let mut seen = String::new();
    while !seen.contains("serving") {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "server exited:\n{seen}");
        seen.push_str(&line);
        assert!(t0.elapsed() < Duration::from_secs(120), "server did not start:\n{seen}");
    }
    assert!(seen.contains("API keys loaded"), "{seen}");

    let f = Files::new("remote", "print(await add(a=20, b=22))");
    let server = format!("http://127.0.0.1:{grpc}");
    let args =
        ["run", &f.arg("prog.py"), "--tools", &f.arg("tools.json"), "--tool-handler", HANDLER, "--server", &server];
    let (status, stdout, stderr) = run(&[&args[..], &["--api-key", "s3cret"]].concat());
    assert_eq!((status, stdout.as_str()), (0, "42\n"), "{stderr}");
    let (status, _, stderr) = run(&[&args[..], &["--api-key", "wrong"]].concat());
    assert_ne!(status, 0);
    assert!(stderr.contains("invalid API key"), "{stderr}");

    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "serve did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut log, &mut rest);
    assert!(rest.contains("SIGTERM received") && rest.contains("stopped"), "{rest}");
    let _ = std::io::stderr().flush();
}

/// Root runs the server as `nobody` (setpriv, util-linux); anyone else already is unprivileged.
fn unprivileged(cmd: &Path) -> Command {
    let uid = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if uid.ok().as_deref() == Some("0") {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(cmd);
        c
    } else {
        Command::new(cmd)
    }
}

#[test]
fn serve_runs_as_an_unprivileged_user_that_owns_only_its_files_dir() {
    // Everything the server may touch lives in one directory that user owns; the binary is
    // copied there because a root-owned checkout may not be readable to it.
    let home = std::env::temp_dir().join(format!("ptc-unprivileged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let cache = home.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let bin = home.join("ptc-engine");
    std::fs::copy(BIN, &bin).unwrap();
    // The compiled Python component from this user's cache, so the other user need not compile
    // it: only that one (48 MB), since a cache that also holds the data runtime's (630 MB per
    // build) would take time and disk on a small CI machine for nothing.
    let own_cache = std::env::var_os("PTC_CACHE_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| {
        std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache").join("ptc-engine")
    });
    for entry in std::fs::read_dir(&own_cache).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("sandbox-") && name.ends_with(".cwasm")) {
            continue;
        }
        let _ = std::fs::copy(entry.path(), cache.join(entry.file_name()));
    }
    let chown = Command::new("chown").args(["-R", "65534:65534"]).arg(&home).status();
    let _ = chown; // not root: the files are this (unprivileged) user's already
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (grpc, metrics, http) = (free_port(), free_port(), free_port());
    let mut child = KillOnDrop(
        unprivileged(&bin)
            .arg("serve")
            .env("HOME", &home)
            .env("PTC_CACHE_DIR", &cache)
            .env("PTC_FILES_DIR", home.join("files"))
            .env("PTC_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
            .env("PTC_METRICS_ADDR", format!("127.0.0.1:{metrics}"))
            .env("PTC_HTTP_ADDR", format!("127.0.0.1:{http}"))
            .env("PTC_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut log = BufReader::new(child.0.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("serving") {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "server exited:\n{seen}");
        seen.push_str(&line);
    }
    let body = r#"{"code": "open('/mnt/data/out.txt', 'w').write('hi')\nprint('wrote')", "session_id": "s1"}"#;
    let request = format!(
        "POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", http)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut stream, &mut reply).unwrap();
    // The server's log goes on being read, so that a failure shows why (a host error is logged,
    // never sent); the pipe is drained once the server has stopped.
    let mut server_log = || {
        child.0.kill().ok();
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut log, &mut rest);
        format!("{seen}{rest}")
    };
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}\nthe server's log:\n{}", server_log());
    assert!(reply.contains(r#""stdout":"wrote\n""#) && reply.contains(r#""name":"out.txt""#), "{reply}");
    let written = home.join("files");
    assert!(std::fs::read_dir(&written).unwrap().next().is_some(), "the session's files are in the files dir");
    drop(child);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn help_lists_every_serve_option_with_its_env_var() {
    let (status, stdout, _) = run(&["serve", "--help"]);
    assert_eq!(status, 0);
    for var in [
        "PTC_GRPC_ADDR",
        "PTC_HTTP_ADDR",
        "PTC_METRICS_ADDR",
        "PTC_API_KEYS",
        "PTC_MAX_CONCURRENT",
        "PTC_TENANT_MAX_PAUSED",
        "PTC_TIMEOUT_MS",
        "PTC_MAX_MEMORY_MIB",
    ] {
        assert!(stdout.contains(var), "{var} missing from --help");
    }
}
