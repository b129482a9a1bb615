//! The `ptc-engine` binary: `serve`, `mcp` and `run`.

#![forbid(unsafe_code)]

use clap::Parser;
use ptc_server::cli::{Cli, Command};

#[global_allocator]
static ALLOCATOR: ptc_server::Allocator = ptc_server::Allocator;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // `run` is a client: its own output matters, so only errors are logged unless asked.
    // `mcp` speaks on stdout and its client shows stderr as a log: warnings only.
    let default_level = match cli.command {
        Command::Run(_) => "error",
        Command::Mcp(_) => "warn",
        Command::Serve(_) => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PTC_LOG").unwrap_or_else(|_| default_level.into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(*args).await,
            Command::Mcp(args) => mcp(args).await,
            Command::Run(args) => {
                let code = ptc_server::client::run(args).await?;
                std::process::exit(code);
            }
        }
    })
}

async fn serve(args: ptc_server::cli::ServeArgs) -> anyhow::Result<()> {
    let config = args.server_config().map_err(anyhow::Error::msg)?;
    let server = ptc_server::start(config).await?;
    let stop = server_shutdown_signal();
    tokio::pin!(stop);
    stop.await;
    server.shutdown();
    server.wait().await;
    tracing::info!("stopped");
    Ok(())
}

async fn mcp(args: ptc_server::cli::McpArgs) -> anyhow::Result<()> {
    let (engine_config, mcp_config) = args.configs().map_err(anyhow::Error::msg)?;
    let engine = tokio::task::spawn_blocking(move || ptc_engine::Engine::new(engine_config)).await??;
    engine.warm_up();
    // One client owns a stdio server: its requests name no tenant (no tenant caps), its
    // session needs no snapshot key and keeps no files.
    let key = ptc_server::core::token::random_hex::<32>().into_bytes();
    let core = ptc_server::core::Core {
        sessions: ptc_server::core::sessions::Sessions::new(engine.clone(), Default::default(), key, None, None),
        engine,
        keys: Default::default(),
        tenants: ptc_server::core::tenants::Tenants::new(Default::default()),
        tasks: tokio_util::task::TaskTracker::new(),
        networks: std::sync::Arc::new(ptc_server::core::network::Networks::new(args.network_policies()?)),
    };
    let downstream = ptc_server::front::mcp::Downstream::new(&mcp_config);
    let state =
        ptc_server::front::mcp::McpState::new(core, downstream, args.runtime, !args.stateless, args.discovery_above);
    ptc_server::front::mcp::serve_stdio(state).await
}

async fn server_shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
}
