//! Calls into a live instance outside an execution (a snapshot, a restore), within the
//! session's budget.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmtime::Store;

use crate::api::error::{Error, ErrorKind, Result};
use crate::instance::host::HostState;

/// What a guest call returns.
type GuestFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = wasmtime::Result<T>> + Send + 'a>>;

/// The budget of work outside an execution (snapshot, restore): the session's own limits, as
/// a program of it would have. Unlimited fuel once let a value's `__reduce__` loop for 8 s
/// inside a snapshot on a server with fuel metering.
#[derive(Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) timeout: Duration,
    /// The fuel each call starts with; `None` without fuel metering.
    pub(crate) fuel: Option<u64>,
}

/// Calls into the live instance outside an execution (snapshot, restore): with a run slot, a
/// fresh epoch deadline and the session's fuel, raced against its time limit and shutdown.
/// Memory growth past the limit fails (a `MemoryError` the guest answers in words) instead of
/// trapping. Running out of time or fuel is an [`ErrorKind::Limit`] error, any other trap an
/// [`ErrorKind::Engine`] one; either way the instance cannot be used after it.
pub(crate) async fn guest_call<'a, T>(
    store: &'a mut Store<HostState>,
    budget: Budget,
    shutdown: &CancellationToken,
    what: &str,
    call: impl FnOnce(&'a mut Store<HostState>) -> GuestFuture<'a, T>,
) -> Result<T> {
    let run_slot = store.data().broker.run_slot.clone();
    run_slot.acquire().await;
    store.set_epoch_deadline(1);
    if let Some(fuel) = budget.fuel {
        let _ = store.set_fuel(fuel);
    }
    let soft = SoftLimit::on(store.data().limiter.soft());
    let timeout = budget.timeout;
    let result = tokio::select! {
        biased;
        _ = shutdown.cancelled() => Err(Error::new(ErrorKind::Unavailable, "the engine is shutting down")),
        _ = tokio::time::sleep(timeout) => Err(Error::new(
            ErrorKind::Limit,
            format!("{what} did not finish within the session's time limit ({} ms)", timeout.as_millis()),
        )),
        r = call(store) => r.map_err(|trap| stopped(what, &trap)),
    };
    drop(soft);
    run_slot.release();
    result
}

/// The limiter's soft mode while a guest call lasts, turned off however the call ends.
struct SoftLimit(Arc<std::sync::atomic::AtomicBool>);

impl SoftLimit {
    fn on(switch: Arc<std::sync::atomic::AtomicBool>) -> Self {
        switch.store(true, Ordering::Relaxed);
        SoftLimit(switch)
    }
}

impl Drop for SoftLimit {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// A trap of a guest call, in words.
fn stopped(what: &str, trap: &wasmtime::Error) -> Error {
    if let Some(wasmtime::Trap::OutOfFuel) = trap.downcast_ref::<wasmtime::Trap>() {
        return Error::new(ErrorKind::Limit, format!("{what} ran out of the session's fuel"));
    }
    if let Some(crate::api::error::HostTrap { message, .. }) = trap.downcast_ref::<crate::api::error::HostTrap>() {
        return Error::new(ErrorKind::Limit, format!("{what} stopped: {message}"));
    }
    Error::engine(what, trap)
}
