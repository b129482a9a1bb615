//! Where an HTTP execution of a cluster keeps its sealed image when it hibernates: beside its
//! journal in the shared store, so that a node that finds the owner gone thaws it there
//! instead of replaying its program (`core/continuations/replay.rs`). And where a live session keeps
//! its own, under a record of its tenant and id (`SessionKeeper`), so that a node that gets
//! its next program after the owner is gone takes it over (`core/sessions.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use ptc_engine::{Hibernated, Keeper};
use serde::{Deserialize, Serialize};

use super::{Saving, Segment, Store};
use crate::core::token::ttl_until;

/// Keeps one execution's images in the cluster's store, until its deadline.
pub struct StoreKeeper {
    pub store: Arc<dyn Store>,
    /// This node: the image's owner.
    pub node: String,
    pub tenant: String,
    /// The execution's deadline, Unix milliseconds: the image's expiry.
    pub expires_at_ms: u64,
}

impl std::fmt::Debug for StoreKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreKeeper").field("node", &self.node).field("tenant", &self.tenant).finish()
    }
}

impl Keeper for StoreKeeper {
    fn keep(&self, image: Hibernated) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let ttl = ttl_until(self.expires_at_ms);
            let (id, round) = (&image.execution_id, crate::core::token::pause_of(image.round, image.asking));
            let kept = self.store.keep_image(id, &self.tenant, round, &image.bytes, &self.node, ttl).await;
            match kept {
                Ok(Saving::Saved) => {
                    metrics::counter!("ptc_hibernated_images_kept_total").increment(1);
                    Ok(())
                }
                Ok(Saving::Refused(why)) => Err(why),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// What a live session's record keeps besides its image: enough to open it again elsewhere.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionHeader {
    pub tenant: String,
    /// The engine's id of the session, which its images are bound to (set at the first keep).
    #[serde(default)]
    pub engine_id: String,
    pub runtime: String,
    pub idle_timeout_ms: u64,
    pub max_memory_bytes: u64,
    pub timeout_ms: u64,
    /// Its `/mnt/data` under the tenant's directory (on the volume the nodes share).
    pub dir: Option<String>,
}

/// The store's id of the record of `tenant`'s session `id`: beside the journals, counted
/// against the same bounds.
pub fn session_record(tenant: &str, id: &str) -> String {
    format!("session {tenant} {id}")
}

/// Keeps one live session's images in the cluster's store. An image is current while its
/// round is the record's: each keep writes both at this keeper's round, and a thaw for a
/// command (`Keeper::thawed`) moves the record's round on, so that no node takes over an
/// image the session has since gone past.
pub struct SessionKeeper {
    store: Arc<dyn Store>,
    node: String,
    record: String,
    header: SessionHeader,
    round: AtomicU32,
    /// Whether the record (its header) is in the store.
    saved: AtomicBool,
}

impl std::fmt::Debug for SessionKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionKeeper").field("node", &self.node).field("record", &self.record).finish()
    }
}

impl SessionKeeper {
    /// For a session just opened on `node`, with the record `record`.
    pub fn new(store: Arc<dyn Store>, node: String, record: String, header: SessionHeader) -> Self {
        SessionKeeper { store, node, record, header, round: AtomicU32::new(0), saved: AtomicBool::new(false) }
    }

    /// For a session `node` took over at `round` (its record is in the store).
    pub fn taken_over(store: Arc<dyn Store>, node: String, record: String, header: SessionHeader, round: u32) -> Self {
        SessionKeeper { store, node, record, header, round: AtomicU32::new(round), saved: AtomicBool::new(true) }
    }

    /// The session's record lives while the session may: its idle timeout, from now.
    fn ttl(&self) -> Duration {
        Duration::from_millis(self.header.idle_timeout_ms.max(1))
    }

    /// The session has ended here for good: nobody may take it over.
    pub async fn forget(&self) {
        if self.saved.load(Ordering::Acquire)
            && let Err(e) = self.store.forget(&self.record).await
        {
            tracing::warn!(record = %self.record, "forgetting an ended session's record: {e}");
        }
    }
}

impl Keeper for SessionKeeper {
    fn keep(&self, image: Hibernated) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let round = self.round.load(Ordering::Acquire);
            let (tenant, ttl) = (&self.header.tenant, self.ttl());
            if !self.saved.load(Ordering::Acquire) {
                let header = SessionHeader { engine_id: image.execution_id.clone(), ..self.header.clone() };
                let header = serde_json::to_vec(&header).expect("a header serialises");
                let segment = Segment { id: &self.record, tenant, header: Some(&header), entries: b"[]", round };
                match self.store.save(segment, &self.node, ttl).await {
                    Ok(Saving::Saved) => self.saved.store(true, Ordering::Release),
                    Ok(Saving::Refused(why)) => return Err(why),
                    Err(e) => return Err(e.to_string()),
                }
            }
            match self.store.keep_image(&self.record, tenant, round, &image.bytes, &self.node, ttl).await {
                Ok(Saving::Saved) => {
                    metrics::counter!("ptc_hibernated_images_kept_total").increment(1);
                    Ok(())
                }
                Ok(Saving::Refused(why)) => Err(why),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn thawed(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            if !self.saved.load(Ordering::Acquire) {
                return Ok(());
            }
            let round = self.round.fetch_add(1, Ordering::AcqRel) + 1;
            self.store.set_owner(&self.record, &self.node, round, self.ttl()).await.map_err(|e| e.to_string())
        })
    }
}
