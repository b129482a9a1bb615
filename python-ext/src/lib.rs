//! `ptc_engine._native`: ptc-engine's service in the Python caller's process. The Python
//! package's in-process transport (`_local.py`) makes the same `ptc.v1.Sandbox` calls it makes
//! to a server, as protobuf bytes, and this module answers them with the server's own service
//! ([`ptc_server::local`]) on a tokio runtime of the process: no listener, no socket, no other
//! process. Awaitables are asyncio's (pyo3-async-runtimes); the GIL is released while the engine
//! starts and whenever a call waits. `main` is the `ptc-engine` command itself, for the
//! package's script.

use std::sync::Arc;

use ptc_server::local::{Local as Service, Reader, Writer};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::Mutex;
use tonic::{Code, Status};

create_exception!(_native, RpcError, PyException, "A call refused with a gRPC status: `(code, message)`.");

/// `status` as a Python `RpcError(code, message)`, `code` a `grpc.StatusCode` name.
fn rpc_error(status: Status) -> PyErr {
    RpcError::new_err((code_name(status.code()), status.message().to_string()))
}

/// The name `grpc.StatusCode` gives `code`.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn bytes(message: Vec<u8>) -> Py<PyBytes> {
    Python::attach(|py| PyBytes::new(py, &message).unbind())
}

/// The service in this process, over an engine of its own.
#[pyclass(frozen)]
struct Local {
    service: Arc<Service>,
    /// This process's session files, removed by `close`.
    files: std::path::PathBuf,
}

#[pymethods]
impl Local {
    /// Starts the engine (its compiled component from the cache, or compiled now) with the
    /// server's defaults; session files go under a directory of this process's.
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let mut config = ptc_server::ServerConfig::default();
        let files = std::env::temp_dir().join(format!("ptc-engine-files-{}", std::process::id()));
        config.files.dir = files.clone();
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        let service = py
            .detach(|| runtime.block_on(Service::new(config)))
            .map_err(|e| PyRuntimeError::new_err(format!("the in-process engine could not start: {e:#}")))?;
        Ok(Local { service: Arc::new(service), files })
    }

    /// Stops taking executions and removes this process's session files (at the process's
    /// exit: `_local.py` registers it with `atexit`).
    fn close(&self) {
        self.service.engine().stop_accepting();
        let _ = std::fs::remove_dir_all(&self.files);
    }

    /// The answer (bytes) of the unary call `method` to `request` (bytes), as an awaitable.
    fn unary<'py>(&self, py: Python<'py>, method: String, request: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let (service, request) = (self.service.clone(), request.to_vec());
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            service.unary(&method, &request).await.map(bytes).map_err(rpc_error)
        })
    }

    /// A new `Execute` call.
    fn execute(&self) -> Call {
        let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
        let call = self.service.execute();
        Call { writer: call.writer, reader: Arc::new(Mutex::new(call.reader)) }
    }
}

/// One `Execute` call: `write` client messages (concurrently), `read` server messages (`None`
/// at the end), `cancel` to end it.
#[pyclass(frozen)]
struct Call {
    writer: Writer,
    reader: Arc<Mutex<Reader>>,
}

#[pymethods]
impl Call {
    fn write<'py>(&self, py: Python<'py>, message: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let (writer, message) = (self.writer.clone(), message.to_vec());
        pyo3_async_runtimes::tokio::future_into_py(py, async move { writer.write(&message).await.map_err(rpc_error) })
    }

    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let reader = self.reader.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            match reader.lock().await.read().await {
                Some(Ok(message)) => Ok(Some(bytes(message))),
                Some(Err(status)) => Err(rpc_error(status)),
                None => Ok(None),
            }
        })
    }

    /// Ends the call: before its end, that cancels the execution.
    fn cancel(&self) {
        self.writer.cancel();
    }
}

/// Runs the `ptc-engine` command (`serve`, `mcp`, `run`) with `argv` (its name first) in this
/// process, the GIL released, to its end: its exit code. The package's `ptc-engine` script.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    py.detach(|| ptc_server::entry::main(argv)).map_err(|e| PyRuntimeError::new_err(format!("{e:#}")))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_class::<Local>()?;
    m.add_class::<Call>()?;
    m.add("RpcError", m.py().get_type::<RpcError>())?;
    Ok(())
}
