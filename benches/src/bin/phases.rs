//! Where a fresh execution's time goes: runs one program many times through the library,
//! one after another (answering `add` at once), and prints the medians of the engine's own
//! phases (`just phases`) and how many pages warm instances write ahead; with
//! `--grpc URL`, the same over gRPC against a server in another process, beside the floors of
//! the wire (a stream refused at its `Start`, a unary call refused).
//! Meant to be run under `perf record` too: nothing else happens in the process.

use std::time::{Duration, Instant};

use clap::Parser;
use ptc_engine::{Engine, EngineConfig, Event, ExecutionRequest, Runtime};

#[derive(Parser)]
struct Args {
    /// The program.
    #[arg(long, default_value = "pass")]
    code: String,
    /// How many executions.
    #[arg(long, default_value_t = 2000)]
    n: usize,
    #[arg(long, default_value = "python")]
    runtime: String,
    /// Instances kept instantiated ahead of demand (`EngineConfig::warm_instances`).
    #[arg(long, default_value_t = 2)]
    warm: usize,
    /// Pause between executions, ms (an agent's requests arrive spaced; 0: back to back).
    #[arg(long, default_value_t = 0)]
    gap_ms: u64,
    /// Print each execution's times between its events to stderr, in µs: its start to its
    /// first tool call, each answer to the next call, the last answer to its end.
    #[arg(long)]
    rounds: bool,
    /// After the runs, wait a second (the warm instances are made) and print the process's PSS.
    #[arg(long)]
    pss: bool,
    /// Run the program N times in one live session instead of N fresh executions (the
    /// instantiate median is then 0).
    #[arg(long)]
    session: bool,
    /// A sandbox component file to load instead of the embedded one (to compare builds).
    #[arg(long)]
    component: Option<std::path::PathBuf>,
    /// MCP tools (a JSON list of `{name, description, inputSchema}`, as in
    /// `runtime-python-wasm/toolsets`) given to every execution instead of the one `add`, in a
    /// namespace named after the file; repeatable (all five files: the 102-tool yardstick).
    #[arg(long)]
    toolset: Vec<std::path::PathBuf>,
    /// `--toolset`'s tools at the top level, in no namespace (a program's globals get a stub
    /// for each it names).
    #[arg(long)]
    top_level: bool,
    /// Run over gRPC against the server at this URL from this process (`--session`: in one
    /// gRPC session), answering `add` at once; also times the two floors of the wire: an
    /// `Execute` stream refused at its `Start`, and a unary call refused at once.
    #[arg(long)]
    grpc: Option<String>,
    /// Let programs reach this URL's host over HTTP (a network policy allowing it, its port
    /// and scheme, and loopback addresses), and make `--code` default to one request of it.
    #[arg(long)]
    network: Option<String>,
}

/// The tools of `--toolset` files, each file's in a namespace named after it (none with
/// `top_level`).
fn toolsets(paths: &[std::path::PathBuf], top_level: bool) -> anyhow::Result<Vec<ptc_engine::ToolDef>> {
    let mut tools = Vec::new();
    for path in paths {
        let namespace = match top_level {
            true => String::new(),
            false => path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(path)?)?;
        for t in listed {
            let name = t["name"].as_str().unwrap_or_default();
            let mut tool = ptc_engine::ToolDef::new(name);
            if !namespace.is_empty() {
                tool = tool.with_namespace(namespace.clone());
            }
            tool.description = t["description"].as_str().unwrap_or_default().to_string();
            tool = tool.with_parameters(t["inputSchema"].clone());
            tools.push(tool);
        }
    }
    Ok(tools)
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(url) = &args.grpc {
        return over_grpc(&args, url).await;
    }
    let runtime: Runtime = args.runtime.parse().map_err(anyhow::Error::msg)?;
    let mut config = EngineConfig::default();
    config.cache_dir = Some(ptc_server::default_cache_dir());
    config.warm_instances = args.warm;
    if let Some(path) = args.component.clone() {
        config.component = ptc_engine::ComponentSource::File(path);
    }
    let (code, network) = match &args.network {
        Some(url) => {
            let code = match args.code.as_str() {
                "pass" => format!("import urllib.request\nurllib.request.urlopen({url:?}).read()"),
                other => other.to_string(),
            };
            (code, Some(allowing(url)?))
        }
        None => (args.code.clone(), None),
    };
    if runtime == Runtime::PythonData {
        config.python_data = Some(ptc_engine::python_data_artifacts());
    }
    let tools = if args.toolset.is_empty() { ptc_benches::tools() } else { toolsets(&args.toolset, args.top_level)? };
    config.ceilings.max_tools = config.ceilings.max_tools.max(tools.len());
    let engine = Engine::new(config)?;
    let session = if args.session {
        let limits = ptc_benches::limits();
        Some(engine.open_session(ptc_engine::SessionRequest::new().with_limits(limits).with_runtime(runtime)).await?.0)
    } else {
        None
    };
    let (mut total, mut wall, mut inst) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.n {
        if args.gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
        }
        let t0 = Instant::now();
        let mut last = t0;
        let mut request = ExecutionRequest::new(code.clone()).with_tools(tools.clone()).with_runtime(runtime);
        request.network = network.clone();
        let mut exec = match &session {
            Some(session) => engine.execute_in(session, request.with_limits(ptc_benches::limits())).await?,
            None => engine.start(request).await?,
        };
        while let Some(event) = exec.next_event().await {
            match event {
                // A session's execution ends here; its event channel stays with the session.
                Event::Completed(done) => {
                    if args.rounds {
                        eprintln!("{:.0}", last.elapsed().as_secs_f64() * 1e6);
                    }
                    wall.push(done.stats.wall_time);
                    inst.push(done.stats.instantiate_time);
                    break;
                }
                Event::Failed(f) => anyhow::bail!("{}: {}", f.message, f.stderr),
                // `add` answered at once, as over gRPC.
                Event::ToolCalls { calls, .. } => {
                    if args.rounds {
                        eprint!("{:.0} ", last.elapsed().as_secs_f64() * 1e6);
                    }
                    exec.submit(
                        calls
                            .iter()
                            .map(|c| ptc_engine::ToolResult::ok_json(&c.id, ptc_benches::add(&c.input)))
                            .collect(),
                    )?;
                    last = Instant::now();
                }
                Event::Output { .. } => {}
            }
        }
        total.push(t0.elapsed());
    }
    println!(
        "n={} total {:.3} ms, engine wall {:.3} ms, instantiate {:.3} ms (medians); warm instances write {} pages ahead",
        args.n,
        median(total),
        median(wall),
        median(inst),
        engine.warm_pages_ahead()
    );
    if args.pss {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rollup = std::fs::read_to_string("/proc/self/smaps_rollup")?;
        // Pss_File: pages of files (the component's memory image) this process maps, as its
        // share of each; Pss_Anon: its own.
        let field = |name: &str| {
            let line = rollup.lines().find(|l| l.starts_with(name)).unwrap_or("? ?");
            line.split_whitespace().nth(1).unwrap_or("?").to_string()
        };
        println!(
            "{} warm instances ready; PSS {} kB (anonymous {} kB, files {} kB)",
            engine.warm_instances(),
            field("Pss:"),
            field("Pss_Anon:"),
            field("Pss_File:")
        );
    }
    Ok(())
}

/// A network policy that lets programs reach `url`'s host, scheme and port, loopback included.
fn allowing(url: &str) -> anyhow::Result<std::sync::Arc<ptc_engine::Network>> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| anyhow::anyhow!("{url} is not a URL"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse::<u16>()?),
        None => (authority.to_string(), if scheme == "https" { 443 } else { 80 }),
    };
    let mut policy = ptc_engine::NetworkPolicy::default();
    policy.allow = vec![host];
    policy.schemes = vec![scheme.to_string()];
    policy.ports = vec![port];
    policy.allow_addresses = vec!["127.0.0.0/8".into(), "::1/128".into()];
    ptc_engine::Network::new(None, &policy).map_err(anyhow::Error::msg)
}

/// `phases --grpc URL`: the client's whole call and the server's engine time (`Stats`), and
/// the wire's floors, each timed from this process against a server in another.
async fn over_grpc(args: &Args, url: &str) -> anyhow::Result<()> {
    use ptc_benches::grpc::{Exec, ok, start};
    use ptc_server::proto::{CloseSessionRequest, OpenSessionRequest, sandbox_client::SandboxClient};
    let channel = tonic::transport::Channel::from_shared(url.to_string())?.tcp_nodelay(true).connect().await?;
    let mut client = SandboxClient::new(channel);
    let session_id = match args.session {
        true => client.open_session(OpenSessionRequest::default()).await?.into_inner().session_id,
        false => String::new(),
    };
    // `--toolset`'s tools as a client sends them, or the one `add`.
    let tools: Vec<ptc_server::proto::Tool> = toolsets(&args.toolset, args.top_level)?
        .into_iter()
        .map(|t| ptc_server::proto::Tool {
            parameters_json: t.parameters.map(|p| p.to_string()).unwrap_or_default(),
            namespace: t.namespace.unwrap_or_default(),
            name: t.name,
            description: t.description,
            ..Default::default()
        })
        .collect();
    let (mut total, mut wall, mut inst, mut refused, mut unary) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..args.n {
        if args.gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
        }
        let t0 = Instant::now();
        let mut request = ptc_server::proto::Start { session_id: session_id.clone(), ..start(&args.code, &["add"]) };
        if !tools.is_empty() {
            request.tools = tools.clone();
        }
        let mut exec = Exec::open(&mut client, request, None).await.map_err(anyhow::Error::msg)?;
        while let Some(calls) = exec.next_batch().await.map_err(anyhow::Error::msg)? {
            let results = calls.iter().map(|c| ok(&c.id, &serde_json::json!(3))).collect();
            exec.send_results(results).await.map_err(anyhow::Error::msg)?;
        }
        total.push(t0.elapsed());
        let stats = exec.stats().unwrap_or_default();
        wall.push(Duration::from_micros(stats.wall_time_us));
        inst.push(Duration::from_micros(stats.instantiate_time_us));
    }
    // The floors, each in a loop of its own (so that each is back to back, or spaced, as asked).
    for _ in 0..args.n {
        if args.gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
        }
        let t0 = Instant::now();
        let start = ptc_server::proto::Start { session_id: "no-such-session".into(), ..start("pass", &[]) };
        let _ = Exec::open(&mut client, start, None).await.err().expect("refused");
        refused.push(t0.elapsed());
    }
    for _ in 0..args.n {
        if args.gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
        }
        let t0 = Instant::now();
        let _ = client.close_session(CloseSessionRequest { session_id: "no-such-session".into() }).await;
        unary.push(t0.elapsed());
    }
    println!(
        "n={} over gRPC: total {:.3} ms, engine wall {:.3} ms, instantiate {:.3} ms; \
         a stream refused at Start {:.3} ms, a unary call refused {:.3} ms (medians)",
        args.n,
        median(total),
        median(wall),
        median(inst),
        median(refused),
        median(unary)
    );
    Ok(())
}
