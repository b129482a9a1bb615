//! The two runtimes behind one face: what the driver and live sessions call, whichever
//! runtime an execution chose.

use std::sync::Arc;

use wasmtime::Store;

use crate::bindings::{Outcome, Restored, Sandbox, SandboxPre, SessionState, ToolDef};
use crate::data::DataRuntime;
use crate::data::instance::DataInstance;
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
            Guest::Component(sandbox) => {
                let mut outcome = sandbox.call_execute(&mut *store, code, tools, session).await?;
                // The program got off the native stack when the host asked
                // (`Control::request_unwind`); it is re-entered in this same instance at once.
                // Hibernation will save the instance here and re-enter it in another.
                while let Outcome::Hibernated = outcome {
                    outcome = sandbox.call_resume(&mut *store).await?;
                }
                Ok(outcome)
            }
            Guest::Data(instance) => instance.execute(store, code, tools, session).await,
        }
    }

    /// The live session's state (at most `max_bytes`), or the guest's words why not.
    pub(crate) async fn snapshot(
        &self,
        store: &mut Store<HostState>,
        max_bytes: u64,
    ) -> wasmtime::Result<Result<SessionState, String>> {
        match self {
            Guest::Component(sandbox) => sandbox.call_snapshot(store, max_bytes).await,
            Guest::Data(instance) => instance.snapshot(store, max_bytes).await,
        }
    }

    /// Rebuilds a snapshot's state in this instance's live session.
    pub(crate) async fn restore(
        &self,
        store: &mut Store<HostState>,
        data: &[u8],
    ) -> wasmtime::Result<Result<Restored, String>> {
        match self {
            Guest::Component(sandbox) => sandbox.call_restore(store, data).await,
            Guest::Data(instance) => instance.restore(store, data).await,
        }
    }
}
