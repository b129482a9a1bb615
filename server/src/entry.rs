//! The `ptc-engine` command (`serve`, `mcp`, `run`, `compile`) as a function: the binary's `main` and the
//! Python package's `ptc-engine` script (`ptc_engine._native.main`) both run it.

use clap::Parser;

use crate::cli::{Cli, Command};

/// Runs the `ptc-engine` command with `args` (the program's name first, as `std::env::args_os`
/// gives them) to its end: its exit code. Help, a version, or arguments clap refuses end the
/// process here, as any command line's do.
pub fn main<I, T>(args: I) -> anyhow::Result<i32>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    // Every HTTPS client of the process (the OTLP exporter, downstream MCP servers, a
    // cluster's forwarding, programs' requests) on one crypto provider.
    ptc_engine::install_crypto_provider();
    // `run` is a client: its own output matters, so only errors are logged unless asked.
    // `mcp` speaks on stdout and its client shows stderr as a log: warnings only.
    let default_level = match cli.command {
        Command::Run(_) => "error",
        Command::Mcp(_) => "warn",
        Command::Serve(_) | Command::Compile(_) => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PTC_LOG").unwrap_or_else(|_| default_level.into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init()
        .ok();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(*args).await.map(|()| 0),
            Command::Mcp(args) => mcp(args).await.map(|()| 0),
            Command::Run(args) => crate::client::run(args).await,
            Command::Compile(args) => {
                let engine = args.engine_config();
                let written = tokio::task::spawn_blocking(move || {
                    ptc_engine::compile_ahead(&engine, &args.out, !args.without_javascript)
                })
                .await??;
                for path in written {
                    println!("{}", path.display());
                }
                Ok(0)
            }
        }
    })
}

async fn serve(args: crate::cli::ServeArgs) -> anyhow::Result<()> {
    let config = args.server_config().map_err(anyhow::Error::msg)?;
    let server = crate::start(config).await?;
    let stop = server_shutdown_signal();
    tokio::pin!(stop);
    stop.await;
    server.shutdown();
    server.wait().await;
    tracing::info!("stopped");
    Ok(())
}

async fn mcp(args: crate::cli::McpArgs) -> anyhow::Result<()> {
    let (mut engine_config, mcp_config) = args.configs().map_err(anyhow::Error::msg)?;
    let traces = match args.traces.otlp() {
        Some(otlp) => {
            let (traces, tracer) = crate::traces::Traces::start(&otlp, &crate::cluster::default_node_id())?;
            engine_config.tracer = Some(tracer);
            Some(traces)
        }
        None => None,
    };
    let engine = tokio::task::spawn_blocking(move || ptc_engine::Engine::new(engine_config)).await??;
    engine.warm_up();
    // One client owns a stdio server: its requests name no tenant (no tenant caps), its
    // session needs no snapshot key and keeps no files.
    let key = crate::core::token::random_hex::<32>().into_bytes();
    let core = crate::core::Core {
        sessions: crate::core::sessions::Sessions::new(engine.clone(), Default::default(), key, None, None),
        engine,
        keys: Default::default(),
        tenants: crate::core::tenants::Tenants::new(Default::default()),
        tasks: tokio_util::task::TaskTracker::new(),
        networks: std::sync::Arc::new(crate::core::network::Networks::new(args.network_policies()?)),
    };
    let downstream = crate::front::mcp::Downstream::new(&mcp_config);
    let state = crate::front::mcp::McpState::new(core, downstream, args.runtime, !args.stateless, args.discovery_above);
    let served = crate::front::mcp::serve_stdio(state).await;
    if let Some(traces) = traces {
        // The batch processor's thread blocks on its last export.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    served
}

async fn server_shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
}
