//! What every request of the HTTP API shares: the core, the file store, the token signer,
//! the paused executions, this node's cluster and a single server's images on disk.

use std::sync::Arc;

use ptc_engine::Runtime;

use super::conn::HttpLimits;
use super::paused::Registry;
use crate::cluster::Cluster;
use crate::core::Core;
use crate::core::files::FileStore;
use crate::core::images::DiskImages;
use crate::core::token::Signer;

pub(super) const REQUEST_ID_HEADER: &str = "x-librechat-code-request-id";

pub struct HttpState {
    pub core: Core,
    /// The core's file store (this front end always has one).
    pub files: Arc<FileStore>,
    pub signer: Signer,
    pub limits: HttpLimits,
    pub(super) paused: Registry,
    /// The runtime of a run that names none.
    pub(super) runtime: Runtime,
    /// This node, its peers and what they share.
    pub cluster: Arc<Cluster>,
    /// A single server's hibernated executions, on disk, so that a restart keeps them.
    pub(super) images: Option<Arc<DiskImages>>,
}

impl HttpState {
    /// The API over `core`, which must keep files (`/mnt/data` is every run's here).
    /// `images`: a single server's hibernated executions on disk, if it keeps them.
    pub fn new(
        core: Core,
        signer: Signer,
        cluster: Arc<Cluster>,
        limits: HttpLimits,
        runtime: Runtime,
        images: Option<Arc<DiskImages>>,
    ) -> Arc<Self> {
        let files = core.files().cloned().expect("the HTTP API's core keeps files");
        Arc::new(HttpState { core, files, signer, limits, paused: Registry::default(), runtime, cluster, images })
    }

    /// Executions paused between two requests.
    pub fn paused_count(&self) -> usize {
        self.paused.len()
    }

    /// Drops paused executions that have ended (deadline passed, cancelled, quota), and
    /// their images on disk.
    pub fn sweep(&self) {
        for id in self.paused.sweep() {
            self.forget_image(&id);
        }
    }

    /// Execution `id` has ended: its image on disk goes, if it has one.
    pub(super) fn forget_image(&self, id: &str) {
        if let Some(images) = &self.images {
            images.forget(id);
        }
    }

    /// Drops every paused execution (at shutdown, once the engine has failed them).
    pub fn clear(&self) {
        self.paused.clear();
    }
}
