//! Who may be hibernated right now, longest waiting first: what a start (or a thaw) that finds
//! every execution slot taken asks to hibernate, before it waits or is refused.
//!
//! Slots are where memory pressure shows: `max_concurrent` is the memory budget at 3 MiB per
//! paused execution, and the budget itself charges only what an instance grows past the
//! snapshot, which a hibernated instance never has (`freeze` keeps those live). So freeing a
//! slot is what hibernation gives back under pressure.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::calls::exchange::Exchange;

/// One that may be hibernated now, and how to ask it.
pub(crate) enum Sleeper {
    /// An execution parked on its tools: its wait ends with `hibernate`.
    Execution(Arc<Exchange>),
    /// An idle live session: its task hibernates its instance when notified.
    Session(Arc<Notify>),
}

impl Sleeper {
    /// Asks it to hibernate now.
    fn ask(&self) {
        match self {
            Sleeper::Execution(exchange) => exchange.request_unwind(),
            Sleeper::Session(wake) => wake.notify_one(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Parked {
    waits: Mutex<BTreeMap<(Instant, u64), Sleeper>>,
    next: AtomicU64,
}

/// Keeps a [`Sleeper`] listed until dropped.
pub(crate) struct Listed {
    parked: Arc<Parked>,
    key: (Instant, u64),
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.parked.waits().remove(&self.key);
    }
}

impl Parked {
    fn waits(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Instant, u64), Sleeper>> {
        self.waits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists `sleeper`, waiting since `since`, until the guard is dropped.
    pub(crate) fn list(self: &Arc<Self>, since: Instant, sleeper: Sleeper) -> Listed {
        let key = (since, self.next.fetch_add(1, Ordering::Relaxed));
        self.waits().insert(key, sleeper);
        Listed { parked: self.clone(), key }
    }

    /// Asks the one that has waited longest to hibernate (it leaves the list); false if none
    /// is listed.
    pub(crate) fn hibernate_oldest(&self) -> bool {
        let Some((_, sleeper)) = self.waits().pop_first() else { return false };
        sleeper.ask();
        metrics::counter!("ptc_hibernated_for_a_slot_total").increment(1);
        true
    }

    /// Asks every one listed to hibernate (they leave the list); how many were asked.
    pub(crate) fn hibernate_all(&self) -> usize {
        let all = std::mem::take(&mut *self.waits());
        all.values().for_each(Sleeper::ask);
        all.len()
    }

    /// An execution slot, now if one is free, else once the longest-waiting program that may
    /// hibernate has given its own up (or any slot frees); `None` with `wait` false when
    /// nobody could be asked, or the slot did not come within `grace`.
    pub(crate) async fn slot(
        &self,
        slots: &Arc<Semaphore>,
        wait: bool,
        grace: std::time::Duration,
    ) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Some(permit);
        }
        let asked = self.hibernate_oldest();
        let acquire = slots.clone().acquire_owned();
        match (wait, asked) {
            (true, _) => acquire.await.ok(),
            (false, true) => tokio::time::timeout(grace, acquire).await.ok()?.ok(),
            (false, false) => None,
        }
    }
}
