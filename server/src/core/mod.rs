//! What the front ends share: the engine, who the callers are ([`auth`]) and what each
//! tenant may hold ([`tenants`]), live sessions, session files, runs that pause between
//! requests ([`continuations`]), and the one path every run
//! takes ([`runs`]), with one error type ([`error`]) and the words a model reads when its
//! program fails ([`advice`]). Nothing here knows a wire format.

pub mod advice;
pub mod auth;
pub mod continuations;
pub mod error;
pub mod files;
pub mod images;
pub mod network;
pub(crate) mod run_files;
pub mod runs;
pub mod sessions;
pub mod tenants;
pub mod token;

use std::sync::Arc;

use ptc_engine::Engine;
use tokio_util::task::TaskTracker;

use auth::ApiKeys;
use files::FileStore;
use network::Networks;
use sessions::Sessions;
use tenants::Tenants;

pub use error::{Error, ErrorKind};

/// The shared core every front end holds (cheap to clone).
#[derive(Clone)]
pub struct Core {
    pub engine: Engine,
    pub keys: Arc<ApiKeys>,
    pub tenants: Arc<Tenants>,
    /// Live sessions (gRPC and MCP), and the session files (`/mnt/data`) every run's directory
    /// is kept in, if the server keeps any (not MCP on stdio).
    pub sessions: Arc<Sessions>,
    /// Work started on behalf of requests (gRPC stream pumps, file watchers): shutdown waits
    /// for it, so that final events reach their clients.
    pub tasks: TaskTracker,
    /// What each tenant's programs may reach over HTTP (`--network-policy`).
    pub networks: Arc<Networks>,
}

impl Core {
    /// Where runs keep their `/mnt/data`: the live sessions' file store, if there is one.
    pub fn files(&self) -> Option<&Arc<FileStore>> {
        self.sessions.file_store()
    }
}
