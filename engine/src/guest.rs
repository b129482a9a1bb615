//! The two runtimes behind one face: what the driver and live sessions call, whichever
//! runtime an execution chose.

use std::sync::Arc;

use wasmtime::Store;

use crate::bindings::{Outcome, Sandbox, SandboxPre, ToolDef};
use crate::data::{DataInstance, DataRuntime};
use crate::host::HostState;

/// What an instance is made from.
#[derive(Clone)]
pub(crate) enum Pre {
    Component(SandboxPre<HostState>),
    Data(Arc<DataRuntime>),
}

/// One instance of either runtime.
pub(crate) enum Guest {
    Component(Sandbox),
    Data(DataInstance),
}

impl Pre {
    pub(crate) async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Guest> {
        Ok(match self {
            Pre::Component(pre) => Guest::Component(pre.instantiate_async(store).await?),
            Pre::Data(runtime) => Guest::Data(runtime.instantiate(store).await?),
        })
    }
}

impl Guest {
    /// Runs one program; `session` keeps its globals for the next program in this instance.
    pub(crate) async fn execute(
        &self,
        store: &mut Store<HostState>,
        code: &str,
        tools: &[ToolDef],
        session: bool,
    ) -> wasmtime::Result<Outcome> {
        match self {
            Guest::Component(sandbox) => sandbox.call_execute(store, code, tools, session).await,
            Guest::Data(instance) => instance.execute(store, code, tools, session).await,
        }
    }

    /// The component's exports that only it has (snapshots); `None` for the data runtime.
    pub(crate) fn component(&self) -> Option<&Sandbox> {
        match self {
            Guest::Component(sandbox) => Some(sandbox),
            Guest::Data(_) => None,
        }
    }
}
