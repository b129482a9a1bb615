//! What every request of the HTTP API shares: the core, the file store, the continuation
//! protocol (tokens, paused executions, the cluster) and the runtime of a run that names none.

use std::sync::Arc;

use ptc_engine::Runtime;

use super::conn::HttpLimits;
use crate::core::Core;
use crate::core::continuations::Continuations;
use crate::core::files::FileStore;

pub(super) const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";

pub struct HttpState {
    pub core: Core,
    /// The core's file store (this front end always has one).
    pub files: Arc<FileStore>,
    pub limits: HttpLimits,
    /// Runs paused between requests, wherever their continuations arrive.
    pub continuations: Continuations,
    /// The runtime of a run that names none.
    pub(super) runtime: Runtime,
}

impl HttpState {
    /// The API over `core`, which must keep files (`/mnt/data` is every run's here).
    pub fn new(core: Core, continuations: Continuations, limits: HttpLimits, runtime: Runtime) -> Arc<Self> {
        let files = core.files().cloned().expect("the HTTP API's core keeps files");
        Arc::new(HttpState { core, files, limits, continuations, runtime })
    }

    /// Executions paused between two requests.
    pub fn paused_count(&self) -> usize {
        self.continuations.paused_count()
    }
}
