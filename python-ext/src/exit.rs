//! Awaitables whose results reach Python only while the interpreter is not finalizing.
//!
//! A result reaches asyncio from one of the runtime's threads, which attaches to the
//! interpreter to schedule it on the event loop. On CPython 3.10-3.13 a thread that attaches,
//! or takes the GIL back inside the loop's Python code, once the interpreter finalizes is ended
//! with `pthread_exit` (PyO3 checks for finalization only from 3.13 on, and this `abi3` build is
//! for 3.10): the forced unwind drops Python objects as if the GIL were held, while the main
//! thread collects garbage. The README's examples, run as one script in process, ended with
//! SIGSEGV in 1 of 20 to 40 runs that way (`method_dealloc` on an exiting `tokio-rt-worker`, the
//! main thread in `Py_FinalizeEx`'s collection), with pyo3-async-runtimes' `future_into_py`.
//!
//! So a result is handed over under a gate's read lock, held until the thread has detached
//! again. [`close`], at the process's exit (`atexit`, before finalization, registered when the
//! module is imported), takes the write lock (the GIL released, so a handover under way
//! finishes) and shuts the gate: a result that comes later is dropped, with nobody left to await
//! it. The remote client needs it as much as the engine: Strands' page run against a server
//! (a daemon thread's loop left with a call) ended with SIGABRT in 5 of 100 runs, a handover
//! thread's `call_soon_threadsafe` taking the GIL back during `Py_FinalizeEx` (CPython 3.11),
//! when only the in-process engine's `close` shut the gate.

use std::future::Future;
use std::sync::RwLock;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `true` once [`close`] has shut it.
static CLOSED: RwLock<bool> = RwLock::new(false);

/// `fut` as an asyncio future of the running event loop, its result set from the runtime's
/// threads through the gate. Cancelling the asyncio future leaves `fut` to run to its end
/// (a read then ends when its call is cancelled), and its result is dropped.
pub(crate) fn awaitable<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = PyResult<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = pyo3_async_runtimes::get_running_loop(py)?;
    let future = event_loop.call_method0("create_future")?;
    let (event_loop, awaited) = (event_loop.unbind(), future.clone().unbind());
    pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let result = fut.await;
        // Off the runtime's workers: attaching may wait for the GIL.
        tokio::task::spawn_blocking(move || hand_over(event_loop, awaited, result));
    });
    Ok(future)
}

/// Schedules `result` on `future`'s loop, unless the gate is shut. Python objects left here are
/// dropped without the GIL, which PyO3 defers to the next thread that holds it.
fn hand_over<T: for<'a> IntoPyObject<'a>>(event_loop: Py<PyAny>, future: Py<PyAny>, result: PyResult<T>) {
    let Ok(closed) = CLOSED.read() else { return };
    if *closed {
        return;
    }
    Python::attach(|py| {
        let (value, failed) = match result.and_then(|value| value.into_bound_py_any(py)) {
            Ok(value) => (value, false),
            Err(e) => (e.into_value(py).into_bound(py).into_any(), true),
        };
        let scheduled = wrap_pyfunction!(settle, py).and_then(|settle| {
            event_loop.bind(py).call_method1("call_soon_threadsafe", (settle, future.bind(py), value, failed))
        });
        // A closed loop: nobody awaits the result any more.
        drop(scheduled);
    });
    drop(closed);
}

/// On the event loop: `future`'s result (or exception, `failed`), unless it is done already
/// (cancelled by its awaiter).
#[pyfunction]
fn settle(future: &Bound<'_, PyAny>, value: Bound<'_, PyAny>, failed: bool) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    future.call_method1(if failed { "set_exception" } else { "set_result" }, (value,))?;
    Ok(())
}

/// Shuts the gate at the process's exit: [`close`] registered with `atexit`.
pub(crate) fn close_at_exit(py: Python<'_>) -> PyResult<()> {
    py.import("atexit")?.call_method1("register", (wrap_pyfunction!(close, py)?,))?;
    Ok(())
}

/// Shuts the gate, once every result being handed over has been (the GIL released meanwhile).
#[pyfunction]
pub(crate) fn close(py: Python<'_>) {
    py.detach(|| {
        if let Ok(mut closed) = CLOSED.write() {
            *closed = true;
        }
    });
}

/// A server message's bytes, made `bytes` as they are handed over.
pub(crate) struct Message(pub(crate) Vec<u8>);

impl<'py> IntoPyObject<'py> for Message {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Bound<'py, PyBytes>, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}
