//! ptc-engine: runs untrusted Python (CPython on WASI, in wasmtime) whose tool calls suspend
//! the instance until a client answers them. This is the library; the gRPC and HTTP front ends
//! and the `ptc-engine` binary are the `ptc-server` crate, built on this public API alone.
//!
//! `EngineConfig::default()` compiles the component at every start (~8 s); set
//! [`EngineConfig::cache_dir`] to a private directory to load it in milliseconds instead.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ptc_engine::Error> {
//! use ptc_engine::{Engine, EngineConfig, Event, ExecutionRequest, ToolDef, ToolResult};
//! let engine = Engine::new(EngineConfig::default())?;
//! let mut run = engine
//!     .start(ExecutionRequest::new("print(await add(a=1, b=2))").with_tools(vec![ToolDef::new("add")]))
//!     .await?;
//! while let Some(event) = run.next_event().await {
//!     match event {
//!         Event::ToolCalls { calls, .. } => run.submit(calls.iter().map(|c| ToolResult::ok_json(&c.id, "3")).collect())?,
//!         Event::Completed(done) => print!("{}", done.stdout),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```

// Floors, lowest first: net, api, calls, instance, pages, run, engine. Each imports only
// those before it (ARCHITECTURE.md; `.ci/import-circles` checks it).
mod api;
mod calls;
mod engine;
mod instance;
mod net;
mod pages;
mod run;

pub use api::config::{
    Ceilings, ComponentSource, EngineConfig, Limits, MIB, WhenBusy, cores, default_max_concurrent,
    default_memory_budget, default_tenant_max_running, python_data_artifacts,
};
pub use api::error::{Error, ErrorKind, Result};
pub use api::events::{
    ApprovalRequest, Completion, Decision, Event, Failure, FailureKind, OutputStream, Stats, ToolCall, ToolCallRecord,
    ToolResult, Verdict,
};
pub use api::journal::{Entry, Journal, JournalTake, RecordedCall, RecordedHttp, RecordedResult};
pub use api::keeper::{Hibernated, Keeper};
pub use api::request::{DATA_DIR, ExecutionRequest, Runtime, ToolDef};
pub use api::trace::Tracer;
pub use calls::schema::{INLINE_CHECK_STEPS, MAX_CHECK_STEPS, MAX_WIDEST, SchemaCache, check_tool_schema};
pub use engine::{DescribedTool, Engine, ToolDescription};
pub use instance::wasm::compile_ahead;
pub use net::{Network, NetworkPolicy, SecretSpec, install_crypto_provider};
pub use run::execution::{Control, Execution};
pub use run::session::{DEFAULT_IDLE_TIMEOUT, Dropped, Restored, Session, SessionRequest, SessionState};
