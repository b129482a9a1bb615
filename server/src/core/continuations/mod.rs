//! Runs that pause between requests and go on with a signed continuation token: the
//! protocol of the HTTP API, whatever node a continuation reaches.
//!
//! A run starts ([`Continuations::start`]) journaled in the cluster's shared store when there
//! is one (so that another node can run it again up to where it paused), or with its images
//! kept on a single server's disk (so that a restart keeps it). At each pause the journal's
//! new entries are saved, a token for the pause is signed, and the live execution is kept in
//! the [`Registry`]. A continuation ([`Continuations::resume`]) resumes the execution held
//! here, forwards the token to the node that holds it, or carries it on from what the store
//! or the disk kept (`replay.rs`). [`Continuations::cancel`] ends one by its request id,
//! wherever it is.
//!
//! The front end decodes its wire into these calls and encodes the [`Turn`] each returns.

mod pause;
pub mod registry;
mod replay;
mod resume;
mod route;
mod start;

pub use route::Cancelled;

pub(crate) mod paused;

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use ptc_engine::{ApprovalRequest, Decision, Runtime, ToolCall, ToolDef, ToolResult};

use super::Core;
use super::files::Import;
use super::images::DiskImages;
use super::runs::Ending;
use super::token::Signer;
use crate::cluster::Cluster;
use paused::Paused;
pub use registry::Registry;

/// The continuation protocol of one node: its core, its token signer, its cluster, a single
/// server's images on disk, and the executions paused here.
pub struct Continuations {
    core: Core,
    signer: Signer,
    cluster: Arc<Cluster>,
    /// A single server's hibernated executions, on disk, so that a restart keeps them.
    images: Option<Arc<DiskImages>>,
    paused: Registry<Paused>,
}

/// A run to start with [`Continuations::start`].
pub struct Program {
    pub code: String,
    pub tools: Vec<ToolDef>,
    pub runtime: Runtime,
    /// Milliseconds, within the engine's ceilings.
    pub timeout_ms: Option<u64>,
    /// Its session directory (`/mnt/data`); none: a new one.
    pub session_id: Option<String>,
    /// Files of the tenant's earlier sessions to copy in.
    pub imports: Vec<Import>,
    /// Hosts that narrow the tenant's network policy.
    pub network_allow: Vec<String>,
    /// The span its execution's span goes under (the first request's).
    pub trace_parent: Option<opentelemetry::trace::SpanContext>,
}

/// What a continuation brings: results for the calls the pause listed, and decisions on the
/// calls it asked approval for; and how to hand it on to the node that holds its execution.
pub struct Answers<'a> {
    pub results: Vec<ToolResult>,
    pub decisions: Vec<Decision>,
    pub forward: Forward<'a>,
}

/// A request as another node would take it: the client's headers (its credentials) and the
/// body to send, made only when the request is forwarded.
pub struct Forward<'a> {
    pub headers: &'a HeaderMap,
    pub body: Box<dyn FnOnce() -> Vec<u8> + Send + 'a>,
}

/// Where a request left its run.
pub enum Turn {
    /// Paused for tools: `token` resumes it with results for `calls` and decisions on
    /// `approvals`.
    Paused { session_id: String, token: String, calls: Vec<ToolCall>, approvals: Vec<ApprovalRequest> },
    /// Ended.
    Ended { session_id: String, ending: Ending },
    /// It cannot be carried on (its node was lost, a replay diverged): `why`, for the model.
    Lost { session_id: String, why: String },
    /// The node that holds it answered.
    Forwarded(Response),
}

impl Continuations {
    /// The protocol over `core`; `images`: a single server's hibernated executions on disk,
    /// if it keeps them.
    pub fn new(core: Core, signer: Signer, cluster: Arc<Cluster>, images: Option<Arc<DiskImages>>) -> Self {
        Continuations { core, signer, cluster, images, paused: Registry::default() }
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

    /// Drops every paused execution (at shutdown, once the engine has failed them).
    pub fn clear(&self) {
        self.paused.clear();
    }

    /// Execution `id` has ended: its image on disk goes, if it has one.
    fn forget_image(&self, id: &str) {
        if let Some(images) = &self.images {
            images.forget(id);
        }
    }
}
