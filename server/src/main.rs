//! The `ptc-engine` binary: `serve`, `mcp` and `run` ([`ptc_server::entry::main`]).

#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: ptc_server::Allocator = ptc_server::Allocator;

fn main() -> anyhow::Result<()> {
    let code = ptc_server::entry::main(std::env::args_os())?;
    std::process::exit(code);
}
