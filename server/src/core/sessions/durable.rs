//! Live sessions that outlive their node, in a cluster whose store is durable.
//!
//! A gRPC session's keeper ([`SessionKeeper`]) puts its sealed image in the store each time it
//! hibernates (idle for `--hibernate-after-ms`, or at a drain), under a record of its tenant
//! and id, and moves the record's round on when a command thaws it, so that an image the
//! session has since gone past is never taken over. A node that gets a program for a session
//! it does not hold looks the record up: when the owner is gone (it does not take a
//! connection) and the image is current, the node claims that round (one node wins), reopens
//! the session's directory on the shared volume and thaws the session there
//! ([`ptc_engine::Engine::thaw_session`]), with its globals, imports and random state.
//!
//! Not covered: a session whose owner is alive on another node (the client is told which:
//! gRPC cannot forward a stream), and a partition in which the owner lives on unseen.

use std::sync::Arc;
use std::time::Duration;

use ptc_engine::SessionRequest;

use super::{LiveSession, Sessions, not_found};
use crate::cluster::{SessionHeader, SessionKeeper, session_record};
use crate::core::error::{Error, ErrorKind};
use crate::core::files::SessionDir;

impl Sessions {
    /// The keeper of a durable session `id` of `tenant` about to open with `request`, when
    /// this node is part of a cluster with a durable store.
    pub(super) fn keeper(
        &self,
        tenant: &str,
        id: &str,
        request: &SessionRequest,
        dir: Option<&SessionDir>,
    ) -> Option<Arc<SessionKeeper>> {
        let cluster = self.cluster.as_ref()?;
        let limits = request.limits.clone().unwrap_or_else(|| self.engine.config().default_limits.clone());
        let header = SessionHeader {
            tenant: tenant.to_string(),
            engine_id: String::new(),
            runtime: request.runtime.as_str().to_string(),
            idle_timeout_ms: request.idle_timeout.as_millis() as u64,
            max_memory_bytes: limits.max_memory_bytes,
            timeout_ms: limits.timeout.as_millis() as u64,
            dir: dir.map(|d| d.id.clone()),
        };
        let record = session_record(tenant, id);
        Some(Arc::new(SessionKeeper::new(cluster.store.clone(), cluster.node.clone(), record, header)))
    }

    /// The live session `id` of `tenant`: this node's, or, in a cluster, one whose owner is
    /// gone, taken over here.
    pub async fn find(&self, tenant: &str, id: &str) -> Result<LiveSession, Error> {
        let key = (tenant.to_string(), id.to_string());
        let unknown = !self.map.lock().unwrap().contains_key(&key) && !self.ended.lock().unwrap().contains_key(&key);
        match self.get(tenant, id) {
            Err(e) if e.kind() == ErrorKind::NotFound && unknown && self.cluster.is_some() => {
                self.take_over(tenant, id).await
            }
            found => found,
        }
    }

    async fn take_over(&self, tenant: &str, id: &str) -> Result<LiveSession, Error> {
        let cluster = self.cluster.as_ref().expect("checked by find");
        let record = session_record(tenant, id);
        let saved = match cluster.store.load(&record).await {
            Ok(Some(saved)) => saved,
            Ok(None) => return Err(not_found(id)),
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "session {id:?} is not on this server, and the cluster's store cannot be reached ({e}): try again shortly"
                    ),
                ));
            }
        };
        let header: SessionHeader = serde_json::from_slice(&saved.header)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("a malformed session record: {e}")))?;
        if header.tenant != tenant {
            return Err(not_found(id));
        }
        if saved.owner != cluster.node && cluster.reachable(&saved.owner).await {
            return Err(Error::new(
                ErrorKind::Precondition,
                format!(
                    "session {id:?} is open on server {}, not this one: send its programs over a connection to that \
                     server (a session lives on one server while it is up)",
                    saved.owner
                ),
            ));
        }
        let image = match saved.image {
            Some((round, image)) if round == saved.round => image,
            _ => return Err(lost(id, "it was running a program, or had run one since it last kept its memory")),
        };
        let ttl = Duration::from_millis(header.idle_timeout_ms.max(1));
        let claimant = format!("{} {}", cluster.node, crate::core::token::random_hex::<8>());
        match cluster.store.claim(&record, saved.round, &claimant, ttl).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!("another server is taking session {id:?} over right now: try again in a moment"),
                ));
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("claiming session {id:?}: {e}; try again shortly"),
                ));
            }
        }
        self.make_room(tenant, id)?;
        let dir = match (&self.files, &header.dir) {
            (Some(store), Some(name)) => {
                let (store, tenant, name) = (store.clone(), tenant.to_string(), name.clone());
                let dir = tokio::task::spawn_blocking(move || store.reopen_live(&tenant, &name))
                    .await
                    .map_err(|e| Error::new(ErrorKind::Internal, format!("reopening the session's files: {e}")))??;
                Some(Arc::new(dir))
            }
            _ => None,
        };
        let runtime =
            header.runtime.parse().map_err(|e: ptc_engine::Error| Error::new(ErrorKind::Internal, e.message()))?;
        let defaults = &self.engine.config().default_limits;
        let limits = defaults
            .clone()
            .with_max_memory_bytes(header.max_memory_bytes)
            .with_timeout(Duration::from_millis(header.timeout_ms));
        let keeper = Arc::new(SessionKeeper::taken_over(
            cluster.store.clone(),
            cluster.node.clone(),
            record,
            header.clone(),
            saved.round,
        ));
        let mut request = SessionRequest::new()
            .with_tenant(tenant)
            .with_idle_timeout(ttl)
            .with_runtime(runtime)
            .with_limits(limits)
            .with_keeper(keeper.clone());
        request.data_dir = dir.as_ref().map(|d| d.path.clone());
        let session = match self.engine.thaw_session(&header.engine_id, &image, request).await {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(session = id, "not taken over: {}", e.message());
                keeper.forget().await;
                if let (Some(store), Some(dir)) = (self.files.clone(), dir) {
                    let _ = tokio::task::spawn_blocking(move || store.remove_live(&dir)).await;
                }
                return Err(lost(id, "its memory was kept by a server whose runtime differs from this one's"));
            }
        };
        tracing::info!(tenant, session = id, from = %saved.owner, round = saved.round, "session taken over");
        metrics::counter!("ptc_sessions_taken_over_total").increment(1);
        let live = LiveSession { session, files: dir };
        self.register(tenant, id, &live, Some(keeper))?;
        Ok(live)
    }
}

/// A session whose server was lost and that cannot be carried on here, and why.
fn lost(id: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!(
            "session {id:?} was lost with its server ({why}); its variables are gone: open a new session and define \
             them again"
        ),
    )
}
