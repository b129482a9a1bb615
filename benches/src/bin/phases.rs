//! Where a fresh execution's time goes: runs one program many times through the library,
//! one after another, and prints the medians of the engine's own phases (`just phases`).
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
}

/// The tools of `--toolset` files, each file's in a namespace named after it.
fn toolsets(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<ptc_engine::ToolDef>> {
    let mut tools = Vec::new();
    for path in paths {
        let namespace = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(path)?)?;
        for t in listed {
            let name = t["name"].as_str().unwrap_or_default();
            let mut tool = ptc_engine::ToolDef::new(name).with_namespace(namespace.clone());
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
    let runtime: Runtime = args.runtime.parse().map_err(anyhow::Error::msg)?;
    let mut config = EngineConfig::default();
    config.cache_dir = Some(ptc_server::default_cache_dir());
    config.warm_instances = args.warm;
    if let Some(path) = args.component {
        config.component = ptc_engine::ComponentSource::File(path);
    }
    if runtime == Runtime::PythonData {
        config.python_data = Some(ptc_engine::python_data_artifacts());
    }
    let engine = Engine::new(config)?;
    let session = if args.session {
        let limits = ptc_benches::limits();
        Some(engine.open_session(ptc_engine::SessionRequest::new().with_limits(limits).with_runtime(runtime)).await?.0)
    } else {
        None
    };
    let tools = if args.toolset.is_empty() { ptc_benches::tools() } else { toolsets(&args.toolset)? };
    let (mut total, mut wall, mut inst) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.n {
        if args.gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
        }
        let t0 = Instant::now();
        let request = ExecutionRequest::new(args.code.clone()).with_tools(tools.clone()).with_runtime(runtime);
        let mut exec = match &session {
            Some(session) => engine.execute_in(session, request.with_limits(ptc_benches::limits())).await?,
            None => engine.start(request).await?,
        };
        while let Some(event) = exec.next_event().await {
            match event {
                // A session's execution ends here; its event channel stays with the session.
                Event::Completed(done) => {
                    wall.push(done.stats.wall_time);
                    inst.push(done.stats.instantiate_time);
                    break;
                }
                Event::Failed(f) => anyhow::bail!("{}: {}", f.message, f.stderr),
                _ => {}
            }
        }
        total.push(t0.elapsed());
    }
    println!(
        "n={} total {:.3} ms, engine wall {:.3} ms, instantiate {:.3} ms (medians)",
        args.n,
        median(total),
        median(wall),
        median(inst)
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
