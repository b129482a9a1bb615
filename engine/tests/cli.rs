//! The `ptc-engine` binary: `run` (local and against a server) and `serve` (env vars, SIGTERM).

use std::io::{BufRead, BufReader, Write};
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
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn run_local_answers_tools_with_the_handler() {
    let code = "r = await asyncio.gather(add(a=1, b=2), add(a=3, b=4))\nprint(r)\ntry:\n    await broken()\nexcept ToolError as e:\n    print('broken:', e)\nreturn sum(r)";
    let f = Files::new("local", code);
    let (status, stdout, stderr) = run(&["run", &f.arg("prog.py"), "--tools", &f.arg("tools.json"), "--tool-handler", HANDLER, "--local"]);
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
    let mut child = KillOnDrop(Command::new(BIN)
        .arg("serve")
        .env("PTC_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
        .env("PTC_METRICS_ADDR", format!("127.0.0.1:{metrics}"))
        .env("PTC_HTTP_ADDR", format!("127.0.0.1:{http}"))
        .env("PTC_API_KEYS", "acme:s3cret")
        .env("PTC_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
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
    let args = ["run", &f.arg("prog.py"), "--tools", &f.arg("tools.json"), "--tool-handler", HANDLER, "--server", &server];
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

#[test]
fn help_lists_every_serve_option_with_its_env_var() {
    let (status, stdout, _) = run(&["serve", "--help"]);
    assert_eq!(status, 0);
    for var in ["PTC_GRPC_ADDR", "PTC_HTTP_ADDR", "PTC_METRICS_ADDR", "PTC_API_KEYS", "PTC_MAX_CONCURRENT", "PTC_TENANT_MAX_PAUSED", "PTC_TIMEOUT_MS", "PTC_MAX_MEMORY_MIB"] {
        assert!(stdout.contains(var), "{var} missing from --help");
    }
}
