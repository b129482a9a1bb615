//! A run's start: journaled in the cluster's shared store, or with its images kept on a
//! single server's disk, and where each of its hibernated images is kept.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ptc_engine::{ExecutionRequest, Journal, Keeper, Runtime};

use super::pause::advance_to_turn;
use super::paused::Paused;
use super::{Continuations, Program, Turn};
use crate::cluster::{JournalHeader, StoreKeeper};
use crate::core::error::Error;
use crate::core::files::new_session_id;
use crate::core::images::DiskKeeper;
use crate::core::runs::{DataDir, Run, Start};
use crate::core::token::now_ms;

impl Continuations {
    /// Starts `program` for `tenant` (`request_id`: the client's idempotency key) and runs it
    /// to its first stop: paused for tools, or ended.
    pub async fn start(&self, tenant: String, request_id: Option<&str>, program: Program) -> Result<Turn, Error> {
        let Program { code, tools, runtime, timeout_ms, session_id, imports, network_allow, trace_parent } = program;
        let session_id = session_id.filter(|s| !s.is_empty()).unwrap_or_else(new_session_id);
        let traceparent = crate::traces::traceparent(trace_parent.as_ref());
        let mut request =
            ExecutionRequest::new(code).with_tools(tools).with_session_id(session_id.clone()).with_runtime(runtime);
        request.trace_parent = trace_parent;
        let start = Start {
            tenant: Some(&tenant),
            request_id,
            limits: self.core.engine.config().default_limits.clone(),
            timeout_ms,
            network_allow: &network_allow,
            request,
        };
        let mut prepared = self.core.prepare(start)?;
        let ttl = prepared.request.limits.as_ref().expect("prepared with limits").timeout;
        let expires_at_ms = now_ms() + ttl.as_millis() as u64;
        // With a shared store, the run is journaled so that another node can finish it (a
        // JavaScript one too: its random seed and clocks are the journal's). A python-data run
        // cannot be run again (each server pre-initialises its own runtime): its image, kept in
        // the store at each pause, is what another node carries it on from.
        let journaling = self.cluster.journaling().await;
        let journal = (journaling && runtime != Runtime::PythonData).then(Journal::new);
        let imaged = journaling && runtime == Runtime::PythonData;
        // What another node needs to run it again, or to thaw it (the files `/mnt/data`
        // started with are added once it has started).
        let request = &mut prepared.request;
        let header = JournalHeader {
            code: request.code.clone(),
            tools: request.tools.clone(),
            tenant: tenant.clone(),
            session_id: session_id.clone(),
            runtime: runtime.as_str().to_string(),
            seed: journal.as_ref().map(|j| hex::encode(j.seed)).unwrap_or_default(),
            expires_at_ms,
            files: Vec::new(),
            network_allow,
            traceparent,
        };
        if imaged {
            request.hibernate_after = Some(Duration::ZERO);
        }
        let disk_header = Arc::new(OnceLock::new());
        let stored = journal.is_some() || imaged;
        request.keeper = self.keeper(&tenant, expires_at_ms, stored, &disk_header);
        let on_disk = request.keeper.is_some() && !stored;
        request.journal = journal;
        let dir = DataDir::Session { id: session_id.clone(), imports };
        let run = self.core.start(prepared, dir, None).await?;
        let header = kept_header(&run, header, stored, on_disk, &disk_header);
        let id = run.execution.id().to_string();
        tracing::info!(execution = %id, %tenant, session = %session_id, "http execution started");
        self.record_start(&tenant, request_id, &id, ttl, journaling).await;
        let journaled = header.is_some();
        let paused = Paused { id, journaled, header, run, tenant, session_id, round: 0, expires_at_ms, adopted: None };
        Ok(advance_to_turn(self, paused).await)
    }

    /// Where an execution of `tenant` keeps its sealed image when it hibernates, if anywhere:
    /// beside its journal in the cluster's store (`journaled`: it has one there), or on a
    /// single server's disk with its request's `header` (set once the run has started).
    pub(super) fn keeper(
        &self,
        tenant: &str,
        expires_at_ms: u64,
        journaled: bool,
        header: &Arc<OnceLock<Vec<u8>>>,
    ) -> Option<Arc<dyn Keeper>> {
        if self.cluster.durable() {
            return journaled.then(|| {
                Arc::new(StoreKeeper {
                    store: self.cluster.store.clone(),
                    node: self.cluster.node.clone(),
                    tenant: tenant.to_string(),
                    expires_at_ms,
                }) as Arc<dyn Keeper>
            });
        }
        let images = self.images.clone()?;
        Some(Arc::new(DiskKeeper { images, tenant: tenant.to_string(), header: header.clone() }))
    }

    /// Tells the cluster's store about a run just started: its `request_id` (so that a cancel
    /// reaching another node finds it here), and, when `journaling`, one more execution of its
    /// tenant. Neither is needed to answer the request: a failure is logged (the request id) or
    /// let go (the count).
    async fn record_start(&self, tenant: &str, request_id: Option<&str>, id: &str, ttl: Duration, journaling: bool) {
        let cluster = &self.cluster;
        if let Some(request_id) = request_id
            && !cluster.is_single()
            && let Err(e) = cluster.store.set_request(tenant, request_id, id, &cluster.node, ttl).await
        {
            tracing::warn!("recording request id {request_id:?}: {e}");
        }
        if journaling {
            let _ = cluster.store.add_usage(tenant, "executions", 1).await;
        }
    }
}

/// The `header` of a run just started, with the files `/mnt/data` started with, serialised
/// where it is kept: returned for the store (`stored`: its first pause saves it there), or
/// set in `disk_header` for a single server's disk (`on_disk`: its images are kept with it).
fn kept_header(
    run: &Run,
    mut header: JournalHeader,
    stored: bool,
    on_disk: bool,
    disk_header: &OnceLock<Vec<u8>>,
) -> Option<Vec<u8>> {
    if !stored && !on_disk {
        return None;
    }
    header.files = run.files_before();
    let header = serde_json::to_vec(&header).expect("a header serialises");
    if on_disk {
        let _ = disk_header.set(header.clone());
    }
    stored.then_some(header)
}
