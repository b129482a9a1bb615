//! Programs paused between two requests, by key: the HTTP API's executions waiting for a
//! continuation, and the MCP front end's parked for a client's sampling or approval. One
//! registry for both, with the caps that bound what one tenant and all of them may hold.
//!
//! A slot holds its program behind a lock: a request resuming it holds the lock (a second
//! request on the same key finds it locked, a replay) and empties the slot when done. The
//! registry's own look at a slot (a sweep, the count at an insert) also takes that lock, for
//! microseconds, always under the map's lock; a request takes it under the map's lock too
//! ([`Registry::claim`]), so it never finds a slot locked by the registry, only by another
//! request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the registry asks of a program it holds.
pub trait Held: Send + 'static {
    /// Whose it is (none: a caller no caps bind).
    fn tenant(&self) -> Option<&str>;
    /// Whether it has ended meanwhile (its deadline passed, cancelled, over its quota): it
    /// then no longer counts, and a sweep drops it.
    fn ended(&self) -> bool;
}

/// How many programs may wait at once: in all, and of one tenant.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub total: usize,
    pub per_tenant: usize,
}

/// The MCP front end's parking caps. Each parked program is also a paused execution the
/// engine's and the tenant's caps count; these bound one tenant's share: one tenant once took
/// all 1,000 places for 300 s each, and every other tenant's `llm_query` failed meanwhile.
pub const PARKING: Caps = Caps { total: 1000, per_tenant: 100 };

/// Why a program was not kept: a cap is reached (the program comes back).
pub enum Full<T> {
    /// Its tenant holds this many already.
    Tenant(usize, T),
    /// All tenants hold this many already.
    Total(usize, T),
}

/// One program's place.
type Slot<T> = Arc<tokio::sync::Mutex<Option<T>>>;

/// A slot, locked by the request that holds it: emptied when the request takes its program.
pub type Claim<T> = tokio::sync::OwnedMutexGuard<Option<T>>;

/// A place for `held` (in the registry).
fn slot<T>(held: T) -> Slot<T> {
    Arc::new(tokio::sync::Mutex::new(Some(held)))
}

/// `held`, claimed by the request that adopts it (in no registry yet).
pub fn claimed<T>(held: T) -> Claim<T> {
    slot(held).try_lock_owned().expect("a new slot is unlocked")
}

/// Programs paused between two requests, by key.
pub struct Registry<T> {
    slots: Mutex<HashMap<String, Slot<T>>>,
    /// `None`: the engine's and the tenants' caps on paused executions are the only bound.
    caps: Option<Caps>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry { slots: Mutex::default(), caps: None }
    }
}

impl<T: Held> Registry<T> {
    /// A registry that keeps at most `caps`.
    pub fn with_caps(caps: Caps) -> Self {
        Registry { slots: Mutex::default(), caps: Some(caps) }
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot<T>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.slots().len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots().is_empty()
    }

    /// Keeps `held` under `key`, within the caps (programs that ended early do not count).
    pub fn insert(&self, key: String, held: T) -> Result<(), Full<T>> {
        let mut slots = self.slots();
        if let Some(caps) = self.caps {
            slots.retain(|_, slot| slot.try_lock().map_or(true, |h| h.as_ref().is_some_and(|h| !h.ended())));
            let tenant = held.tenant();
            let mine = slots
                .values()
                .filter(|slot| slot.try_lock().is_ok_and(|h| h.as_ref().is_some_and(|h| h.tenant() == tenant)))
                .count();
            if mine >= caps.per_tenant {
                return Err(Full::Tenant(mine, held));
            }
            if slots.len() >= caps.total {
                return Err(Full::Total(caps.total, held));
            }
        }
        slots.insert(key, slot(held));
        Ok(())
    }

    /// The slot under `key`, locked for the caller; `Err` while another request holds it.
    pub fn claim(&self, key: &str) -> Option<Result<Claim<T>, tokio::sync::TryLockError>> {
        // Under the map's lock, which the registry's own looks at a slot hold throughout.
        self.slots().get(key).map(|slot| slot.clone().try_lock_owned())
    }

    pub fn remove(&self, key: &str) {
        self.slots().remove(key);
    }

    /// Takes the program under `key` out when `owns` says the caller may have it (another
    /// tenant's is as unknown as one that never existed, and stays), and no request is
    /// resuming it right now.
    pub fn take_if(&self, key: &str, owns: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut slots = self.slots();
        let taken = {
            let slot = slots.get(key)?;
            let mut guard = slot.try_lock().ok()?;
            if !guard.as_ref().is_some_and(owns) {
                return None;
            }
            guard.take()
        };
        slots.remove(key);
        taken
    }

    /// Forgets `key` at once, unless a request is resuming it right now (that request then
    /// sees it end and forgets it itself).
    pub fn forget(&self, key: &str) {
        let mut slots = self.slots();
        if slots.get(key).is_some_and(|slot| slot.try_lock().is_ok()) {
            slots.remove(key);
        }
    }

    /// Drops programs that have ended (deadline passed, cancelled, quota): this frees their
    /// handles and their tenants' slots. Returns their keys.
    pub fn sweep(&self) -> Vec<String> {
        let mut gone = Vec::new();
        self.slots().retain(|key, slot| {
            let keep = match slot.try_lock() {
                Ok(held) => held.as_ref().is_some_and(|h| !h.ended()),
                Err(_) => true, // a request is using it right now
            };
            if !keep {
                gone.push(key.clone());
            }
            keep
        });
        gone
    }

    /// Drops every program (shutdown): their instances end with them.
    pub fn clear(&self) {
        self.slots().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct P(Option<&'static str>, bool);

    impl Held for P {
        fn tenant(&self) -> Option<&str> {
            self.0
        }
        fn ended(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn caps_bound_a_tenant_and_everyone_and_ended_programs_do_not_count() {
        let registry = Registry::with_caps(Caps { total: 3, per_tenant: 2 });
        assert!(registry.insert("a1".into(), P(Some("a"), false)).is_ok());
        assert!(registry.insert("a2".into(), P(Some("a"), false)).is_ok());
        assert!(matches!(registry.insert("a3".into(), P(Some("a"), false)), Err(Full::Tenant(2, _))));
        assert!(registry.insert("b1".into(), P(Some("b"), false)).is_ok());
        assert!(matches!(registry.insert("c1".into(), P(Some("c"), false)), Err(Full::Total(3, _))));
        // One of a's ends: its place is free again.
        registry.remove("a1");
        registry.insert("a1".into(), P(Some("a"), true)).ok();
        assert!(registry.insert("c1".into(), P(Some("c"), false)).is_ok());
        assert_eq!(registry.len(), 3);
    }

    #[test]
    fn a_claim_fails_only_while_another_request_holds_the_slot() {
        let registry = Registry::with_caps(Caps { total: 1000, per_tenant: 1000 });
        registry.insert("k".into(), P(Some("a"), false)).ok();
        let held = registry.claim("k").unwrap().unwrap();
        assert!(registry.claim("k").unwrap().is_err(), "a second request is refused");
        assert!(registry.sweep().is_empty(), "a held slot is kept");
        drop(held);
        assert!(registry.claim("k").unwrap().is_ok(), "free again once the request is done");
        assert!(registry.claim("none").is_none());
    }

    #[test]
    fn another_tenants_program_is_not_taken_and_a_sweep_drops_ended_ones() {
        let registry = Registry::default();
        registry.insert("k".into(), P(Some("a"), false)).ok();
        registry.insert("gone".into(), P(Some("a"), true)).ok();
        assert!(registry.take_if("k", |p| p.tenant() == Some("b")).is_none());
        assert_eq!(registry.sweep(), vec!["gone".to_string()]);
        assert!(registry.take_if("k", |p| p.tenant() == Some("a")).is_some());
        assert!(registry.is_empty());
    }
}
