//! The runtimes behind one face: what the driver and live sessions call, whichever
//! runtime an execution chose.

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::Instance;

use crate::api::request::Runtime;
use crate::instance::bindings::{Outcome, Restored, Sandbox, SandboxPre, SessionState, ToolDef};
use crate::instance::data::DataRuntime;
use crate::instance::data::instance::DataInstance;
use crate::instance::host::HostState;

/// What an instance is made from.
#[derive(Clone)]
pub(crate) enum Pre {
    /// A component of the `sandbox` world: the Python one or the JavaScript one.
    Component(SandboxPre<HostState>, Runtime),
    Data(Arc<DataRuntime>),
}

/// One instance of either runtime.
pub(crate) enum Guest {
    /// The component's exports, the instance they belong to (hibernation reaches its
    /// memory through it), and which runtime's component it is.
    Component(Sandbox, Instance, Runtime),
    Data(DataInstance),
}

impl Pre {
    /// The runtime its instances are of.
    pub(crate) fn runtime(&self) -> Runtime {
        match self {
            Pre::Component(_, runtime) => *runtime,
            Pre::Data(_) => Runtime::PythonData,
        }
    }

    pub(crate) async fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Guest> {
        Ok(match self {
            Pre::Component(pre, runtime) => {
                let instance = pre.instance_pre().instantiate_async(&mut *store).await?;
                Guest::Component(Sandbox::new(&mut *store, &instance)?, instance, *runtime)
            }
            Pre::Data(runtime) => Guest::Data(runtime.instantiate(store).await?),
        })
    }
}

impl Guest {
    /// The runtime it is an instance of.
    pub(crate) fn runtime(&self) -> Runtime {
        match self {
            Guest::Component(.., runtime) => *runtime,
            Guest::Data(_) => Runtime::PythonData,
        }
    }

    /// Runs one program; `session` keeps its globals for the next program in this instance.
    /// `tools` is `None` only in a live session, for its previous program's tools.
    /// `Outcome::Hibernated`: the program got off the native stack at a wait for tools, and
    /// [`Guest::resume`] carries it on (in this instance, or in another its memory was
    /// thawed into).
    pub(crate) async fn execute(
        &self,
        store: &mut Store<HostState>,
        code: &str,
        tools: Option<&[ToolDef]>,
        session: bool,
    ) -> wasmtime::Result<Outcome> {
        let env = store.data().net.environment();
        match self {
            Guest::Component(sandbox, ..) => sandbox.call_execute(&mut *store, code, tools, session, &env).await,
            Guest::Data(instance) => instance.execute(store, code, tools, session, &env).await,
        }
    }

    /// Carries on the program that returned `Outcome::Hibernated`.
    pub(crate) async fn resume(&self, store: &mut Store<HostState>) -> wasmtime::Result<Outcome> {
        match self {
            Guest::Component(sandbox, ..) => sandbox.call_resume(&mut *store).await,
            Guest::Data(instance) => instance.resume(store).await,
        }
    }

    /// The live session's state (at most `max_bytes`), or the guest's words why not.
    pub(crate) async fn snapshot(
        &self,
        store: &mut Store<HostState>,
        max_bytes: u64,
    ) -> wasmtime::Result<Result<SessionState, String>> {
        match self {
            Guest::Component(sandbox, ..) => sandbox.call_snapshot(store, max_bytes).await,
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
            Guest::Component(sandbox, ..) => sandbox.call_restore(store, data).await,
            Guest::Data(instance) => instance.restore(store, data).await,
        }
    }
}
