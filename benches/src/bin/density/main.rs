//! The density harness: how many paused executions one machine holds, and what each costs.
//!
//! It starts the server in a child process (this binary again, in `__serve` mode), so the memory
//! read from `/proc/PID/smaps_rollup` is the server's alone, then steps N up: N gRPC `Execute`
//! streams, each paused at a tool call; memory is read while all N wait; then every execution
//! is resumed, answered at once, and its output checked. A throughput phase follows, then an
//! idle-session phase: N live sessions, each left idle after one program that defined a
//! variable, memory read while all N are open, then every variable read back. Results go
//! to stdout as a table and to a JSON file. `just density` runs it; `--help` lists the knobs.

mod procfs;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use ptc_server::proto::sandbox_client::SandboxClient;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Semaphore;
use tonic::transport::Channel;

use procfs::Memory;
use ptc_benches::grpc::{self, Exec};
use report::{Step, Throughput, percentile};

/// The server's own allocator, for the server this binary starts as its child (itself again,
/// in `__serve` mode).
#[global_allocator]
static ALLOCATOR: ptc_server::Allocator = ptc_server::Allocator;

#[derive(Parser, Debug)]
#[command(name = "density", about = "How many paused executions one machine holds, and what each costs")]
struct Args {
    /// Paused executions per step, in order; stepping stops early at the memory or time bound.
    #[arg(long, value_delimiter = ',', default_value = "100,500,1000,2000,5000")]
    counts: Vec<usize>,
    /// Do not start a step that would leave less than this much memory available (MiB).
    #[arg(long, default_value_t = 2048)]
    min_available_mib: u64,
    /// What one paused execution is guessed to take (KiB) for the memory bound, until a step
    /// measures it (default: 1 MiB when the server hibernates, 4 MiB when not).
    #[arg(long)]
    estimate_kib: Option<u64>,
    /// Do not start a new step after this many seconds.
    #[arg(long, default_value_t = 900)]
    time_budget_secs: u64,
    /// Starts (and resumes) in flight at once. 1 measures latency without self-inflicted
    /// queueing; the throughput phase is where the server is saturated.
    #[arg(long, default_value_t = 1)]
    launch_concurrency: usize,
    /// gRPC streams per HTTP/2 connection.
    #[arg(long, default_value_t = 250)]
    streams_per_connection: usize,
    /// Seconds of back-to-back trivial executions for the throughput phase (0 skips it).
    #[arg(long, default_value_t = 10)]
    throughput_secs: u64,
    /// Clients running trivial executions at once in the throughput phase.
    #[arg(long, default_value_t = 8)]
    throughput_clients: usize,
    /// Live sessions for the idle-session phase (0 skips it), on a fresh server.
    #[arg(long, default_value_t = 500)]
    idle_sessions: usize,
    /// Where the JSON report goes.
    #[arg(long, default_value = "target/density.json")]
    json: PathBuf,
    /// Measure a server that is already running at this URL (needs --pid) instead of starting
    /// one. Its tenant limits must allow the largest count.
    #[arg(long, requires = "pid")]
    connect: Option<String>,
    /// Process id of the --connect server, whose /proc entries are read.
    #[arg(long)]
    pid: Option<u32>,
    /// Metrics address of the --connect server (host:port), to check its gauges.
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Keep each step's N executions paused this long before resuming them (to inspect the
    /// server meanwhile, e.g. its /proc/PID/smaps).
    #[arg(long, default_value_t = 0)]
    hold_secs: u64,
    /// Run every step on the same server (by default each step starts a fresh one, since
    /// memory freed by one step is reused by the next and would hide part of its cost).
    #[arg(long)]
    reuse_server: bool,
    /// API key for the server.
    #[arg(long, env = "PTC_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Deadline of each paused execution, in ms: past 300,000 (the default ceiling) the server
    /// needs `--max-timeout-ms` as high. At 100,000 executions the launch alone takes longer.
    #[arg(long, default_value_t = 300_000)]
    timeout_ms: u32,
    /// The runtime of the paused executions: `python`, or `python-data` (the started server
    /// gets `--python-data`; each program builds a small pandas DataFrame before it parks).
    #[arg(long, default_value = "python")]
    runtime: String,
    /// What each paused execution holds: `await` (it only waits), or `state` (a program with
    /// some state first: 60 records in a list and a dict, a JSON text of some of them, a
    /// compiled regex, a class and an instance).
    #[arg(long, default_value = "await")]
    program: String,
    /// Read the server's memory this many seconds after the last execution of a step ended
    /// (what it gave back); 0 skips it.
    #[arg(long, default_value_t = 60)]
    released_after_secs: u64,
    /// Extra `ptc-engine serve` flags for the started server, after `--`.
    #[arg(last = true)]
    serve_flags: Vec<String>,
}

/// The server child: `density __serve <serve flags>`. It serves until its stdin closes, so it
/// never outlives the harness.
#[derive(Parser, Debug)]
#[command(args_override_self = true)]
struct ChildArgs {
    #[command(flatten)]
    serve: ptc_server::cli::ServeArgs,
}

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if argv.get(1).map(String::as_str) == Some("__serve") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("PTC_LOG").unwrap_or_else(|_| "warn".into()))
            .with_writer(std::io::stderr)
            .init();
        let child = ChildArgs::parse_from(std::iter::once(argv[0].clone()).chain(argv[2..].iter().cloned()));
        return runtime.block_on(serve_child(child.serve));
    }
    runtime.block_on(harness(Args::parse()))
}

async fn serve_child(args: ptc_server::cli::ServeArgs) -> anyhow::Result<()> {
    let config = args.server_config().map_err(anyhow::Error::msg)?;
    let server = ptc_server::start(config).await?;
    println!("READY {} {}", server.grpc_addr, server.metrics_addr);
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    server.shutdown();
    server.wait().await;
    Ok(())
}

/// The server under test: a child we started, or one given by --connect/--pid.
struct Server {
    url: String,
    pid: u32,
    metrics_addr: Option<String>,
    _child: Option<tokio::process::Child>,
}

async fn start_server(args: &Args) -> anyhow::Result<Server> {
    if let Some(url) = &args.connect {
        return Ok(Server {
            url: url.clone(),
            pid: args.pid.expect("clap requires --pid"),
            metrics_addr: args.metrics_addr.clone(),
            _child: None,
        });
    }
    let most = args.counts.iter().copied().max().unwrap_or(0).max(args.idle_sessions) + args.throughput_clients + 16;
    let most = most.to_string();
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("__serve")
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .args(["--max-concurrent", &most, "--tenant-max-concurrent", &most, "--tenant-max-paused", &most])
        .args(["--max-sessions-per-tenant", &most])
        .args(if args.runtime == "python-data" { &["--python-data"][..] } else { &[] })
        .args(&args.serve_flags)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut line = String::new();
    let ready = tokio::time::timeout(Duration::from_secs(300), BufReader::new(stdout).read_line(&mut line)).await;
    let parts: Vec<&str> = line.split_whitespace().collect();
    match (ready, parts.as_slice()) {
        (Ok(Ok(_)), ["READY", grpc, metrics]) => Ok(Server {
            url: format!("http://{grpc}"),
            pid: child.id().expect("running"),
            metrics_addr: Some(metrics.to_string()),
            _child: Some(child),
        }),
        _ => anyhow::bail!("the server child did not start (it printed {line:?}); see its log above"),
    }
}

/// A server with connected, warmed-up clients (first instantiations, allocator and thread
/// pools), ready for its idle baseline to be read.
async fn ready_server(args: &Args, streams: usize) -> anyhow::Result<(Server, Vec<SandboxClient<Channel>>)> {
    let server = start_server(args).await?;
    let channels = connect(&server.url, streams.div_ceil(args.streams_per_connection.max(1))).await?;
    run_trivial_batch(&channels, args.api_key.as_deref(), 32).await?;
    Ok((server, channels))
}

async fn harness(args: Args) -> anyhow::Result<()> {
    let key = args.api_key.clone();
    let started = Instant::now();
    let max = args.counts.iter().copied().max().unwrap_or(1);
    let (mut server, mut channels) = ready_server(&args, max).await?;
    let mut steps = Vec::new();
    // What one paused execution takes, server and harness together, until a step measures it
    // (a hibernated one takes a tenth of a live one), and the least a measure is trusted as.
    let (mut per_exec_estimate, floor): (u64, u64) =
        if hibernates(&args) { (1 << 20, 128 << 10) } else { (4 << 20, 256 << 10) };
    if let Some(kib) = args.estimate_kib {
        per_exec_estimate = kib << 10;
    }
    let mut stopped = None;
    for &n in &args.counts {
        if started.elapsed() > Duration::from_secs(args.time_budget_secs) {
            stopped = Some(format!("time budget of {} s spent before N = {n}", args.time_budget_secs));
            break;
        }
        let need = n as u64 * per_exec_estimate * 5 / 4 + (args.min_available_mib << 20);
        if procfs::mem_available() < need {
            stopped = Some(format!(
                "memory bound: N = {n} needs about {} MiB more than the {} MiB available",
                (need - procfs::mem_available().min(need)) >> 20,
                procfs::mem_available() >> 20
            ));
            break;
        }
        // Memory freed by one step stays with the allocators and is reused by the next, which
        // would flatter its per-execution figure: each step gets a server of its own.
        if !steps.is_empty() && args.connect.is_none() && !args.reuse_server {
            drop((server, channels));
            (server, channels) = ready_server(&args, max).await?;
        }
        eprintln!("density: N = {n} ...");
        let step = run_step(&server, &channels, key.as_deref(), n, &args).await?;
        eprintln!("{}", report::step_line(&step));
        if step.correct == n {
            per_exec_estimate = step.pss_per_exec().max(floor);
        }
        let failed = step.correct < n;
        steps.push(step);
        if failed {
            stopped = Some(format!("N = {n}: not every execution completed correctly"));
            break;
        }
    }
    let throughput = if args.throughput_secs > 0 {
        eprintln!("density: throughput, {} clients for {} s ...", args.throughput_clients, args.throughput_secs);
        Some(
            throughput(&channels, key.as_deref(), args.throughput_clients, Duration::from_secs(args.throughput_secs))
                .await,
        )
    } else {
        None
    };
    let idle_sessions = if args.idle_sessions > 0 {
        eprintln!("density: {} idle sessions ...", args.idle_sessions);
        if args.connect.is_none() {
            drop((server, channels));
            (server, channels) = ready_server(&args, max).await?;
        }
        Some(idle_sessions(&server, &channels, key.as_deref(), &args).await?)
    } else {
        None
    };
    let report = report::Report {
        machine: procfs::machine(),
        steps,
        throughput,
        idle_sessions,
        stopped,
        serve_flags: args.serve_flags.clone(),
    };
    print!("{}", report.table());
    if let Some(dir) = args.json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&report.to_json())?)?;
    println!("JSON: {}", args.json.display());
    Ok(())
}

/// Opens `n` live sessions, runs one program defining a variable in each, reads memory while
/// all are idle, then checks each variable and closes the sessions.
async fn idle_sessions(
    server: &Server,
    channels: &[SandboxClient<Channel>],
    key: Option<&str>,
    args: &Args,
) -> anyhow::Result<report::IdleSessions> {
    use ptc_server::proto;
    let n = args.idle_sessions;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = Memory::read(server.pid)?;
    let mut ids = Vec::with_capacity(n);
    let mut runs = Vec::with_capacity(n);
    let mut engine_runs = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let mut client = channels[i % channels.len()].clone();
        let id = client.open_session(keyed(proto::OpenSessionRequest::default(), key)).await?.into_inner().session_id;
        let start = proto::Start { session_id: id.clone(), ..grpc::start(&format!("v = {i}"), &[]) };
        let t0 = Instant::now();
        let done = Exec::open(&mut client, start, key)
            .await
            .map_err(anyhow::Error::msg)?
            .completion()
            .await
            .map_err(anyhow::Error::msg)?;
        runs.push(t0.elapsed());
        engine_runs.push(Duration::from_micros(done.stats.map_or(0, |s| s.wall_time_us)));
        ids.push(id);
    }
    let open = started.elapsed();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let hibernated = match (&server.metrics_addr, hibernates(args)) {
        (Some(addr), true) => {
            let count = reach_gauge(addr, "ptc_hibernated", n as f64).await;
            Some((count, gauge(addr, "ptc_hibernated_bytes").await))
        }
        _ => None,
    };
    let at_n = Memory::read(server.pid)?;
    let mut correct = 0;
    let mut reads = Vec::with_capacity(n);
    for (i, id) in ids.iter().enumerate() {
        let mut client = channels[i % channels.len()].clone();
        let start = proto::Start { session_id: id.clone(), ..grpc::start("print(v)", &[]) };
        let t0 = Instant::now();
        let out = Exec::open(&mut client, start, key).await.map_err(anyhow::Error::msg)?.completion().await;
        reads.push(t0.elapsed());
        if out.is_ok_and(|done| done.stdout == format!("{i}\n")) {
            correct += 1;
        }
        client.close_session(keyed(proto::CloseSessionRequest { session_id: id.clone() }, key)).await?;
    }
    runs.sort();
    engine_runs.sort();
    reads.sort();
    Ok(report::IdleSessions {
        n,
        correct,
        before,
        at_n,
        open,
        first_p50: percentile(&runs, 0.50),
        first_engine_p50: percentile(&engine_runs, 0.50),
        next_p50: percentile(&reads, 0.50),
        hibernated,
    })
}

/// `message` with `x-api-key` when a key is given.
fn keyed<T>(message: T, key: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(key) = key {
        request.metadata_mut().insert("x-api-key", key.parse().expect("an API key is valid metadata"));
    }
    request
}

async fn connect(url: &str, n: usize) -> anyhow::Result<Vec<SandboxClient<Channel>>> {
    let mut out = Vec::new();
    for _ in 0..n.max(1) {
        // Each `connect` is its own HTTP/2 connection.
        let channel = Channel::from_shared(url.to_string())?.tcp_nodelay(true).connect().await?;
        out.push(SandboxClient::new(channel).max_decoding_message_size(64 << 20));
    }
    Ok(out)
}

const HOLD_TOOLS: [&str; 2] = ["hold", "echo"];

/// What a paused program with some state holds before it waits: 60 records in a list and a
/// dict, a JSON text of some of them, a compiled regex, a class and an instance (the held-out
/// runs' "programs with some state" measured 0.26-0.29 MiB PSS each at 2,000).
const STATE: &str = "import json, re\n\
rows = [{'id': k, 'name': f'item-{k}', 'tags': ['a', 'b']} for k in range(60)]\n\
index = {r['name']: r for r in rows}\n\
text = json.dumps(rows[:20])\n\
pattern = re.compile(r'item-(\\d+)')\n\
class Tally:\n    def __init__(self):\n        self.seen = {}\n\
tally = Tally()\n\
tally.seen.update((m.group(1), 1) for m in pattern.finditer(text))\n";

/// The paused program: wait at `hold`, then one instantly answered round trip through `echo`,
/// then print what came back, which the harness checks.
fn paused_program(i: usize, runtime: &str, program: &str) -> String {
    if program == "state" {
        return format!(
            "{STATE}token = await hold(n={i})\nprint(await echo(text=token), len(index), len(tally.seen))\n"
        );
    }
    if runtime == "python-data" {
        return format!(
            "import numpy as np, pandas as pd\ndf = pd.DataFrame({{'x': np.arange({})}})\n\
             token = await hold(n={i})\nprint(await echo(text=token), int(df.x.sum()))\n",
            10 + i % 100
        );
    }
    format!("token = await hold(n={i})\nprint(await echo(text=token))\n")
}

struct Paused {
    exec: Exec,
    call_id: String,
    token: String,
}

async fn run_step(
    server: &Server,
    channels: &[SandboxClient<Channel>],
    key: Option<&str>,
    n: usize,
    args: &Args,
) -> anyhow::Result<Step> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = Memory::read(server.pid)?;
    let gate = Arc::new(Semaphore::new(args.launch_concurrency.max(1)));
    let launch_started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (gate, mut client, key) = (gate.clone(), channels[i % channels.len()].clone(), key.map(str::to_owned));
        let (runtime, timeout_ms, program) = (args.runtime.clone(), args.timeout_ms, args.program.clone());
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open");
            let t0 = Instant::now();
            let mut start = ptc_server::proto::Start {
                runtime: runtime.clone(),
                ..grpc::start(&paused_program(i, &runtime, &program), &HOLD_TOOLS)
            };
            if let Some(limits) = &mut start.limits {
                limits.timeout_ms = Some(timeout_ms);
            }
            let mut exec = Exec::open(&mut client, start, key.as_deref()).await?;
            let calls = exec.next_calls().await?;
            let first_call = t0.elapsed();
            match calls.as_slice() {
                [call] if call.name == "hold" => Ok::<_, String>((
                    Paused { exec, call_id: call.id.clone(), token: format!("ok-{i}-{:x}", rand_u64()) },
                    first_call,
                )),
                _ => Err(format!("expected one `hold` call, got {calls:?}")),
            }
        });
    }
    let mut paused = Vec::with_capacity(n);
    let mut first_calls = Vec::with_capacity(n);
    let mut errors = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            Ok((p, t)) => {
                paused.push(p);
                first_calls.push(t);
            }
            Err(e) => errors.push(e),
        }
    }
    let launch = launch_started.elapsed();
    // Let the last instances settle (output flushes, task wake-ups) before reading memory.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let hibernated = match (&server.metrics_addr, hibernates(args)) {
        (Some(addr), true) => {
            let count = reach_gauge(addr, "ptc_hibernated", paused.len() as f64).await;
            Some((count, gauge(addr, "ptc_hibernated_bytes").await))
        }
        _ => None,
    };
    let at_n = Memory::read(server.pid)?;
    let paused_gauge = match &server.metrics_addr {
        Some(addr) => gauge(addr, "ptc_paused_executions").await,
        None => None,
    };
    if args.hold_secs > 0 {
        eprintln!(
            "density: {} executions paused in server pid {}; resuming in {} s",
            paused.len(),
            server.pid,
            args.hold_secs
        );
        tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    }

    let resume_started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in paused {
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.expect("open");
            resume(p).await
        });
    }
    let mut round_trips = Vec::with_capacity(n);
    let mut correct = 0;
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            Ok(rt) => {
                round_trips.push(rt);
                correct += 1;
            }
            Err(e) => errors.push(e),
        }
    }
    let resume = resume_started.elapsed();
    let live_after = match &server.metrics_addr {
        Some(addr) => settle_gauge(addr, "ptc_live_instances").await,
        None => None,
    };
    let after = Memory::read(server.pid)?;
    let released = match args.released_after_secs {
        0 => None,
        secs => {
            eprintln!("density: N = {n} ended; reading the server's memory in {secs} s");
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Some((Duration::from_secs(secs), Memory::read(server.pid)?))
        }
    };
    first_calls.sort();
    round_trips.sort();
    errors.sort();
    errors.dedup();
    Ok(Step {
        n,
        launch,
        resume,
        first_call_p50: percentile(&first_calls, 0.50),
        first_call_p99: percentile(&first_calls, 0.99),
        round_trip_p50: percentile(&round_trips, 0.50),
        round_trip_p99: percentile(&round_trips, 0.99),
        idle,
        at_n,
        after,
        released,
        paused_gauge,
        hibernated,
        live_after,
        correct,
        errors: errors.into_iter().take(5).collect(),
    })
}

/// Answers `hold`, times the `echo` round trip, answers it, and checks the printed token.
async fn resume(mut p: Paused) -> Result<Duration, String> {
    let t0 = Instant::now();
    p.exec.send_results(vec![grpc::ok(&p.call_id, &serde_json::Value::String(p.token.clone()))]).await?;
    let calls = p.exec.next_calls().await?;
    let round_trip = t0.elapsed();
    let [call] = calls.as_slice() else { return Err(format!("expected one `echo` call, got {calls:?}")) };
    let input: serde_json::Value = serde_json::from_str(&call.input_json).map_err(|e| e.to_string())?;
    p.exec.send_results(vec![grpc::ok(&call.id, &input["text"])]).await?;
    let done = p.exec.completion().await?;
    // The data runtime's program prints its DataFrame's sum after the token.
    if done.stdout.split_whitespace().next() != Some(p.token.as_str()) || !done.stdout.ends_with('\n') {
        return Err(format!("wrong output: {:?} instead of {:?}", done.stdout, p.token));
    }
    Ok(round_trip)
}

/// A few trivial executions, each checked (warm-up).
async fn run_trivial_batch(channels: &[SandboxClient<Channel>], key: Option<&str>, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        trivial(&mut channels[i % channels.len()].clone(), key).await.map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

async fn trivial(client: &mut SandboxClient<Channel>, key: Option<&str>) -> Result<(), String> {
    let mut exec = Exec::open(client, grpc::start("print(6 * 7)", &[]), key).await?;
    let done = exec.completion().await?;
    if done.stdout != "42\n" {
        return Err(format!("wrong output: {:?}", done.stdout));
    }
    Ok(())
}

/// Back-to-back trivial executions from `clients` tasks for `duration`.
async fn throughput(
    channels: &[SandboxClient<Channel>],
    key: Option<&str>,
    clients: usize,
    duration: Duration,
) -> Throughput {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients.max(1) {
        let (mut client, key) = (channels[c % channels.len()].clone(), key.map(str::to_owned));
        tasks.spawn(async move {
            let (mut latencies, mut errors) = (Vec::new(), Vec::new());
            while Instant::now() < deadline {
                let t0 = Instant::now();
                match trivial(&mut client, key.as_deref()).await {
                    Ok(()) => latencies.push(t0.elapsed()),
                    Err(e) => errors.push(e),
                }
            }
            (latencies, errors)
        });
    }
    let (mut latencies, mut errors) = (Vec::new(), Vec::new());
    while let Some(Ok((l, e))) = tasks.join_next().await {
        latencies.extend(l);
        errors.extend(e);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    errors.sort();
    errors.dedup();
    Throughput {
        clients,
        elapsed,
        completed: latencies.len(),
        failed_errors: errors.len(),
        latency_p50: percentile(&latencies, 0.50),
        latency_p99: percentile(&latencies, 0.99),
        errors: errors.into_iter().take(5).collect(),
    }
}

/// A gauge's value from the Prometheus endpoint (plain HTTP/1.0, no client library needed).
async fn gauge(addr: &str, name: &str) -> Option<f64> {
    let mut conn = tokio::net::TcpStream::connect(addr).await.ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: metrics\r\n\r\n").await.ok()?;
    let mut body = String::new();
    conn.read_to_string(&mut body).await.ok()?;
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Whether the server hibernates (as `serve` does by default; `-- --hibernate-after-ms 0`
/// measures executions and sessions kept live): memory is then read once all N paused
/// executions (or idle sessions) have.
fn hibernates(args: &Args) -> bool {
    let flags = &args.serve_flags;
    let value = flags.iter().enumerate().find_map(|(i, f)| match f.strip_prefix("--hibernate-after-ms") {
        Some("") => flags.get(i + 1).map(String::as_str),
        Some(v) => v.strip_prefix('='),
        None => None,
    });
    value != Some("0")
}

/// A gauge once it reaches `target`, or once it has not risen for 3 s (executions that time
/// out meanwhile make it fall), or after a minute.
async fn reach_gauge(addr: &str, name: &str, target: f64) -> Option<f64> {
    let started = Instant::now();
    let (mut high, mut rose) = (None, Instant::now());
    loop {
        let value = gauge(addr, name).await;
        if value > high {
            (high, rose) = (value, Instant::now());
        }
        if value == Some(target)
            || rose.elapsed() > Duration::from_secs(3)
            || started.elapsed() > Duration::from_secs(60)
        {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gauge once it stops changing (instances are freed by tasks finishing after the stream).
async fn settle_gauge(addr: &str, name: &str) -> Option<f64> {
    let mut last = gauge(addr, name).await;
    for _ in 0..50 {
        if last == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = gauge(addr, name).await;
    }
    last
}

fn rand_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(Instant::now())
}
