//! Where an HTTP execution of a cluster keeps its sealed image when it hibernates: beside its
//! journal in the shared store, so that a node that finds the owner gone thaws it there
//! instead of replaying its program (`front/http/replay.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ptc_engine::{Hibernated, Keeper};

use super::{Saving, Store};
use crate::core::token::now_ms;

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
            let ttl = Duration::from_millis(self.expires_at_ms.saturating_sub(now_ms()).max(1));
            let (id, round) = (&image.execution_id, image.round);
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
