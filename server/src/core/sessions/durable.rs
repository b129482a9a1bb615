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
use crate::cluster::{Cluster, Saved, SessionHeader, SessionKeeper, session_record};
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

    /// Takes over session `id` of `tenant` from a server that is gone: its record names an
    /// owner that does not take a connection, and an image of the record's round. Once this
    /// node has claimed that round, the session's directory is reopened and the session thawed
    /// and registered here.
    async fn take_over(&self, tenant: &str, id: &str) -> Result<LiveSession, Error> {
        let cluster = self.cluster.as_ref().expect("checked by find");
        let record = session_record(tenant, id);
        let (saved, header) = load_record(cluster, &record, tenant, id).await?;
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
        claim_round(cluster, &record, saved.round, ttl, id).await?;
        self.make_room(tenant, id)?;
        let dir = self.reopen_dir(tenant, &header).await?;
        let request = self.thaw_request(tenant, &header, ttl)?;
        let keeper = Arc::new(SessionKeeper::taken_over(
            cluster.store.clone(),
            cluster.node.clone(),
            record,
            header.clone(),
            saved.round,
        ));
        let mut request = request.with_keeper(keeper.clone());
        request.data_dir = dir.as_ref().map(|d| d.path.clone());
        let session = match self.engine.thaw_session(&header.engine_id, &image, request).await {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(session = id, "not taken over: {}", e.message());
                self.let_go(&keeper, dir).await;
                return Err(lost(id, "its memory was kept by a server whose runtime differs from this one's"));
            }
        };
        tracing::info!(tenant, session = id, from = %saved.owner, round = saved.round, "session taken over");
        metrics::counter!("ptc_sessions_taken_over_total").increment(1);
        let live = LiveSession { session, files: dir };
        self.register(tenant, id, &live, Some(keeper))?;
        Ok(live)
    }

    /// Reopens a session's `/mnt/data` (`header.dir`, on the volume the nodes share) for a
    /// take-over here; `None` when this node keeps no files or the session had no directory.
    async fn reopen_dir(&self, tenant: &str, header: &SessionHeader) -> Result<Option<Arc<SessionDir>>, Error> {
        let (Some(store), Some(name)) = (&self.files, &header.dir) else { return Ok(None) };
        let (store, tenant, name) = (store.clone(), tenant.to_string(), name.clone());
        let dir = tokio::task::spawn_blocking(move || store.reopen_live(&tenant, &name))
            .await
            .map_err(|e| Error::new(ErrorKind::Internal, format!("reopening the session's files: {e}")))??;
        Ok(Some(Arc::new(dir)))
    }

    /// The request that thaws a session taken over, as its record describes it (runtime,
    /// memory, timeout), idle for `ttl` at most; its keeper and directory are added by the
    /// caller.
    fn thaw_request(&self, tenant: &str, header: &SessionHeader, ttl: Duration) -> Result<SessionRequest, Error> {
        let runtime =
            header.runtime.parse().map_err(|e: ptc_engine::Error| Error::new(ErrorKind::Internal, e.message()))?;
        let defaults = &self.engine.config().default_limits;
        let limits = defaults
            .clone()
            .with_max_memory_bytes(header.max_memory_bytes)
            .with_timeout(Duration::from_millis(header.timeout_ms));
        Ok(SessionRequest::new().with_tenant(tenant).with_idle_timeout(ttl).with_runtime(runtime).with_limits(limits))
    }

    /// Lets go of a session taken over whose thaw failed, which is lost: its record in the
    /// store is forgotten and the directory reopened for it removed.
    async fn let_go(&self, keeper: &SessionKeeper, dir: Option<Arc<SessionDir>>) {
        keeper.forget().await;
        if let (Some(store), Some(dir)) = (self.files.clone(), dir) {
            let _ = tokio::task::spawn_blocking(move || store.remove_live(&dir)).await;
        }
    }
}

/// The store's `record` of session `id` and its header, when the record is `tenant`'s.
async fn load_record(cluster: &Cluster, record: &str, tenant: &str, id: &str) -> Result<(Saved, SessionHeader), Error> {
    let saved = match cluster.store.load(record).await {
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
    Ok((saved, header))
}

/// Claims the record's `round` for this node: of two nodes taking the session over at once,
/// one wins and the other is told to try again.
async fn claim_round(cluster: &Cluster, record: &str, round: u32, ttl: Duration, id: &str) -> Result<(), Error> {
    match cluster.claim(record, round, ttl).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(Error::new(
            ErrorKind::Busy,
            format!("another server is taking session {id:?} over right now: try again in a moment"),
        )),
        Err(e) => Err(Error::new(ErrorKind::Unavailable, format!("claiming session {id:?}: {e}; try again shortly"))),
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
