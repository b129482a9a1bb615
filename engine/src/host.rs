//! The store's data: WASI, the memory limiter, the tool broker, the data runtime's turn; and
//! the component's `wait-for-tools` import, which the broker answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{self, ptc::sandbox::host as wit};
use crate::broker::Broker;
use crate::limiter::Limiter;
use crate::output::Output;

pub(crate) struct HostState {
    pub(crate) wasi: Wasi,
    pub(crate) limiter: Limiter,
    pub(crate) broker: Broker,
    /// The data runtime's turn (`data/door.rs` serves it); unused by the component.
    pub(crate) turn: TurnState,
    /// The engine's count of live instances; `None` for a warm instance's placeholder state
    /// (`warm.rs`), which is not an execution.
    live: Option<Arc<AtomicUsize>>,
}

/// One turn of the data runtime, as its door sees it: the job the guest asks for, and what
/// the guest reports back.
#[derive(Default)]
pub(crate) struct TurnState {
    pub(crate) job: Option<String>,
    pub(crate) outcome: Option<bindings::Outcome>,
    /// What a snapshot or restore job answered (`{"ok", "error", ...}`).
    pub(crate) answer: Option<serde_json::Value>,
    /// The largest frame this job may send, when larger than the door's `MAX_FRAME` (a
    /// snapshot's state).
    pub(crate) max_frame: Option<usize>,
}

/// WASI as each runtime links it: preview 2 for the component, preview 1 for the data
/// runtime's core module. A store only ever sees its own kind (each runtime's linker links one).
pub(crate) enum Wasi {
    P2 { ctx: WasiCtx, table: ResourceTable },
    P1(WasiP1Ctx),
}

impl Wasi {
    pub(crate) fn p2(ctx: WasiCtx) -> Self {
        Wasi::P2 { ctx, table: ResourceTable::new() }
    }

    pub(crate) fn p1(&mut self) -> &mut WasiP1Ctx {
        match self {
            Wasi::P1(ctx) => ctx,
            Wasi::P2 { .. } => unreachable!("preview 1 is linked only for the data runtime, whose stores have it"),
        }
    }
}

impl HostState {
    pub(crate) fn output(&self) -> &Output {
        &self.broker.output
    }

    pub(crate) fn new(wasi: Wasi, limiter: Limiter, broker: Broker, live: Option<Arc<AtomicUsize>>) -> Self {
        if let Some(live) = &live {
            live.fetch_add(1, Ordering::Relaxed);
            metrics::gauge!("ptc_live_instances").increment(1.0);
        }
        HostState { wasi, limiter, broker, turn: TurnState::default(), live }
    }
}

impl Drop for HostState {
    /// The store (and with it the instance) is gone: this is what "freed" means in tests.
    fn drop(&mut self) {
        if let Some(live) = &self.live {
            live.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("ptc_live_instances").decrement(1.0);
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        match &mut self.wasi {
            Wasi::P2 { ctx, table } => WasiCtxView { ctx, table },
            Wasi::P1(_) => unreachable!("preview 2 is linked only for the component, whose stores have it"),
        }
    }
}

impl wit::Host for HostState {
    async fn wait_for_tools(
        &mut self,
        calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<wit::WaitAnswer> {
        self.broker.wait_for_tools(calls, timeout_ms).await
    }
}
