//! The sleep policy: when an execution or a live session hibernates and how it wakes, over
//! the engine's stores (the image of its runtime, warm instances, the bounds on kept images)
//! and its execution slots; where a sealed image goes. The mechanism (freezing an instance's
//! pages and thawing them into another) is `hibernation`'s.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Store;

use super::trace::Trace;
use crate::api::keeper::{Hibernated, Keeper};
use crate::api::request::Runtime;
use crate::calls::shares::MemoryClaim;
use crate::instance::broker::Progress;
use crate::instance::guest::Guest;
use crate::instance::host::HostState;
use crate::pages::{self as pages, Body, Frozen, Image, Kept, sealed};
use crate::run::stores::Stores;

/// What an execution or a live session needs to hibernate: the engine's stores (the image,
/// warm instances, the component) and its execution slots, one of which it gives back while
/// it sleeps.
pub(crate) struct Hibernation {
    pub(crate) stores: Arc<Stores>,
    pub(crate) slots: Arc<Semaphore>,
    /// The execution's (or session's) slot, while it has one.
    pub(crate) permit: Mutex<Option<OwnedSemaphorePermit>>,
    /// Where its sealed image goes at each hibernation, if anywhere.
    pub(crate) sealing: Option<Sealing>,
    /// The execution's spans, when the engine traces (a session's idle hibernations have
    /// none: they belong to no execution).
    pub(crate) trace: Option<Arc<Trace>>,
}

impl Hibernation {
    /// With each hibernation and thaw a span under `trace`'s execution.
    pub(crate) fn traced(mut self, trace: Option<Arc<Trace>>) -> Self {
        self.trace = trace;
        self
    }
}

/// Where a hibernating execution's sealed image goes, and what it is bound to.
pub(crate) struct Sealing {
    pub(crate) keeper: Arc<dyn Keeper>,
    pub(crate) key: Arc<[u8]>,
    pub(crate) tenant: Option<String>,
    pub(crate) execution: Arc<str>,
    /// When the execution started (its stats' wall time counts from there).
    pub(crate) started: Instant,
    /// The fuel it started with.
    pub(crate) fuel: Option<u64>,
}

impl Sealing {
    /// What the sealed image of an execution hibernated as `frozen`, against `image`, holds.
    fn body(&self, store: &Store<HostState>, image: &Image, frozen: &Frozen, fuel: Option<u64>) -> Body {
        let data = store.data();
        let broker = &data.broker;
        let Progress { rounds, calls, log, log_room, timer } = broker.kept();
        let exchange = broker.exchange.pending_calls();
        let (stdout, stderr, truncated) = broker.output.kept();
        Body {
            tenant: self.tenant.clone(),
            runtime: image.build,
            execution: self.execution.to_string(),
            round: rounds,
            frozen: frozen.clone(),
            host: sealed::Host {
                fuel,
                fuel_initial: self.fuel,
                monotonic: data.monotonic_now(),
                elapsed_ms: self.started.elapsed().as_millis() as u64,
                timer_ms: timer.map(|t| t.as_millis() as u64),
                rounds,
                calls,
                log,
                log_room: log_room as u64,
                exchange,
                suffix: broker.suffix.clone(),
                stdout,
                stderr,
                truncated,
                peak_memory: data.limiter.peak,
                requests: data.net.made(),
            },
        }
    }

    /// The image of `body`, sealed.
    async fn seal(&self, body: Body) -> Result<Hibernated, String> {
        let (round, asking) = (body.round, !body.host.exchange.held.is_empty());
        // The output and call log it carries may be megabytes: sealed off the async workers.
        let key = self.key.clone();
        let bytes = tokio::task::spawn_blocking(move || sealed::seal(&key, &body))
            .await
            .map_err(|e| format!("sealing failed: {e}"))?;
        Ok(Hibernated { execution_id: self.execution.to_string(), tenant: self.tenant.clone(), round, asking, bytes })
    }
}

/// A hibernated instance, and what its store had besides.
pub(crate) struct Asleep {
    kept: Kept,
    /// Bytes of its linear memory.
    len: usize,
    image: Arc<Image>,
    fuel: Option<u64>,
}

impl Asleep {
    /// A sealed image's instance, to thaw on this engine: kept in memory (and charged to
    /// `claim`), since its thaw follows.
    pub(crate) async fn opened(
        stores: &Stores,
        frozen: Frozen,
        image: Arc<Image>,
        fuel: Option<u64>,
        claim: &mut MemoryClaim,
    ) -> Result<Self, String> {
        let len = frozen.memory_len();
        let tenant = claim.tenant().map(str::to_string);
        let kept = stores.images.keep(tenant.as_deref(), frozen, claim, true).await?;
        Ok(Asleep { kept, len, image, fuel })
    }

    /// What it takes at rest, about.
    pub(crate) fn size(&self) -> u64 {
        self.kept.size()
    }

    /// The memory its thaw grows past the image's.
    pub(crate) fn grown(&self) -> u64 {
        self.len.saturating_sub(self.image.memory_len()) as u64
    }
}

impl Hibernation {
    /// The program returned `hibernated`: hibernates it, waits until an answer arrives or its
    /// next timer is due, and thaws it into another instance, which it returns. A program
    /// that cannot be hibernated is returned as it is, and is not asked again. The deadline
    /// and cancellation still end it meanwhile (the driver races this).
    pub(crate) async fn sleep(&self, store: &mut Store<HostState>, guest: Guest) -> wasmtime::Result<Guest> {
        let asleep = match self.freeze(store, guest).await {
            Ok(asleep) => asleep,
            Err(guest) => {
                store.data_mut().broker.hibernate_after = None;
                return Ok(guest);
            }
        };
        // A parked program holds no run slot of its tenant; the wait took it back to unwind.
        store.data().broker.run_slot.release();
        self.wake(store, asleep).await
    }

    /// Waits until an answer arrives for the hibernated program in `store`, or its next timer
    /// is due, then takes its tenant's run slot and thaws it.
    pub(crate) async fn wake(&self, store: &mut Store<HostState>, asleep: Asleep) -> wasmtime::Result<Guest> {
        let due = store.data().broker.next_timer();
        store.data().broker.exchange.clone().arrival(due).await;
        store.data().broker.run_slot.acquire().await;
        self.thaw(store, asleep).await
    }

    /// Keeps the instance's pages, frees it (its store is replaced by one without an
    /// instance, holding the same host state) and gives its execution slot back; or, when
    /// it cannot be hibernated, says why in the log and hands the instance back.
    pub(crate) async fn freeze(&self, store: &mut Store<HostState>, guest: Guest) -> Result<Asleep, Guest> {
        let started = Instant::now();
        let runtime = guest.runtime();
        let placeholder = self.stores.placeholder().map_err(|e| e.to_string());
        let frozen = match (self.stores.image(runtime).await, placeholder) {
            (Ok(image), Ok(placeholder)) => {
                pages::freeze(store, &guest, &image, self.sealing.is_some()).await.map(|frozen| {
                    if runtime == Runtime::Python {
                        self.stores.hot.learn(frozen.pages());
                    }
                    (frozen, image, placeholder)
                })
            }
            (Err(e), _) => Err(e.to_string()),
            (_, Err(why)) => Err(why),
        };
        let (frozen, image, placeholder) = match frozen {
            Ok(frozen) => frozen,
            Err(why) => {
                tracing::debug!(%why, "not hibernating; the instance stays live");
                return Err(guest);
            }
        };
        let fuel = store.get_fuel().ok();
        let len = frozen.memory_len();
        // Kept elsewhere first: if that fails (a store that is down), it stays live here.
        if let Some(sealing) = &self.sealing {
            let body = sealing.body(store, &image, &frozen, fuel);
            let kept = match sealing.seal(body).await {
                Ok(image) => sealing.keeper.keep(image).await,
                Err(why) => Err(why),
            };
            if let Err(why) = kept {
                tracing::warn!(%why, "not hibernating: its image could not be kept; the instance stays live");
                metrics::counter!("ptc_hibernate_keep_failures_total").increment(1);
                return Err(guest);
            }
        }
        // Here, within the bounds on images (`kept.rs`); in memory, its pages count against its
        // memory claim while it sleeps.
        let data = store.data_mut();
        let tenant = data.limiter.claim.tenant().map(str::to_string);
        let frozen = match self.stores.images.keep(tenant.as_deref(), frozen, &mut data.limiter.claim, false).await {
            Ok(kept) => kept,
            Err(why) => {
                tracing::debug!(%why, "not hibernating; the instance stays live");
                metrics::counter!("ptc_hibernate_refused_total").increment(1);
                return Err(guest);
            }
        };
        let host = std::mem::replace(store.data_mut(), placeholder);
        drop(guest);
        // The old store goes, and the instance with it. Arming the new one only sets the fuel
        // read from the old, which cannot fail.
        *store = self.stores.bare_store(host, runtime, fuel).expect("arming a store as the last one was");
        let size = frozen.size();
        store.data_mut().asleep(&self.stores.hibernated, size);
        drop(self.permit.lock().unwrap_or_else(|e| e.into_inner()).take());
        tracing::debug!(bytes = size, on_disk = !frozen.in_memory(), elapsed = ?started.elapsed(), "hibernated");
        metrics::histogram!("ptc_hibernate_seconds").record(started.elapsed().as_secs_f64());
        if let Some(trace) = &self.trace {
            let attributes = vec![
                KeyValue::new("ptc.hibernated.bytes", size as i64),
                KeyValue::new("ptc.hibernated.on_disk", !frozen.in_memory()),
                KeyValue::new("ptc.hibernated.sealed", self.sealing.is_some()),
            ];
            trace.phase("ptc.hibernate", started, attributes);
        }
        Ok(Asleep { kept: frozen, len, image, fuel })
    }

    /// Takes an execution slot again, and thaws the instance into a warm (or new) one.
    pub(crate) async fn thaw(&self, store: &mut Store<HostState>, asleep: Asleep) -> wasmtime::Result<Guest> {
        let permit = self
            .stores
            .parked
            .slot(&self.slots, true, Duration::ZERO)
            .await
            .ok_or_else(|| wasmtime::Error::msg("the engine's execution slots were closed"))?;
        *self.permit.lock().unwrap_or_else(|e| e.into_inner()) = Some(permit);
        let started = Instant::now();
        store.data_mut().rewire().map_err(wasmtime::Error::msg)?;
        let warm = match asleep.image.runtime {
            Runtime::Python => self.stores.move_to_warm(store, asleep.fuel).map_err(wasmtime::Error::msg)?,
            Runtime::PythonData | Runtime::Javascript | Runtime::Typescript => None,
        };
        let guest = match warm {
            Some(guest) => guest,
            None => {
                let pre = self.stores.pre(asleep.image.runtime).await.map_err(wasmtime::Error::msg)?;
                pre.instantiate(&mut *store).await?
            }
        };
        let instantiated = started.elapsed();
        let (size, in_memory) = (asleep.kept.size(), asleep.kept.in_memory());
        let frozen = asleep.kept.take().await.map_err(wasmtime::Error::msg)?;
        if in_memory {
            store.data_mut().limiter.claim.shrink(size);
        }
        pages::thaw(store, &guest, &asleep.image, frozen).await?;
        store.data_mut().awake();
        tracing::debug!(?instantiated, elapsed = ?started.elapsed(), "thawed");
        metrics::histogram!("ptc_thaw_seconds").record(started.elapsed().as_secs_f64());
        if let Some(trace) = &self.trace {
            let attributes = vec![
                KeyValue::new("ptc.hibernated.bytes", size as i64),
                KeyValue::new("ptc.hibernated.on_disk", !in_memory),
            ];
            trace.phase("ptc.thaw", started, attributes);
        }
        Ok(guest)
    }
}
