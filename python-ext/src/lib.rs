//! `ptc_engine._native`: ptc-engine's service in the Python caller's process. The Python
//! package's in-process transport (`_local.py`) makes the same `ptc.v1.Sandbox` calls it makes
//! to a server, as protobuf bytes, and this module answers them with the server's own service
//! ([`ptc_server::local`]) on the process's lanes (`lanes.rs`): no listener, no socket, no other
//! process. A message that is ready (or comes within a short spin and sleep) is handed over at
//! once, with no asyncio future; otherwise the awaitable is an asyncio future set from the
//! runtime's threads (`exit.rs`).
//! The GIL is released while the engine starts and whenever a call waits. `Remote` makes the
//! same calls to a server (`remote.rs`), with the same faces. `main` is the `ptc-engine`
//! command itself, for the package's script.

mod exit;
mod files;
mod jobs;
mod lanes;
mod remote;
mod spin;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use lanes::{Lanes, Placed};
use prost::Message;
use ptc_server::local::{Local as Service, Reader, Writer};
use ptc_server::proto::{self, client_message};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes};
use tokio::sync::Mutex;
use tonic::{Code, Status};

create_exception!(_native, RpcError, PyException, "A call refused with a gRPC status: `(code, message)`.");

/// `status` as a Python `RpcError(code, message)`, `code` a `grpc.StatusCode` name. A client's
/// own status (a connection refused, a certificate not trusted) carries its causes, which say
/// what to fix: `tcp connect error` alone did not.
fn rpc_error(status: Status) -> PyErr {
    let mut message = status.message().to_string();
    let mut cause = std::error::Error::source(&status);
    while let Some(e) = cause {
        let said = e.to_string();
        if !message.contains(&said) {
            message = format!("{message}: {said}");
        }
        cause = e.source();
    }
    RpcError::new_err((code_name(status.code()), message))
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

/// The service in this process, over an engine of its own, and the lanes its calls run on.
#[pyclass(frozen)]
struct Local {
    service: Arc<Service>,
    lanes: Arc<Lanes>,
    /// This process's session files, removed by `close` (`files.rs`).
    files: files::Owned,
}

#[pymethods]
impl Local {
    /// Starts the engine with the server's defaults (its compiled component from the cache,
    /// else from `ahead`, the package's component compiled ahead, else compiled now), and one
    /// lane per CPU; session files go under a directory of this process's. `python_data`: the
    /// data runtime's files (`_data.py`), prepared at the first program that asks for it.
    #[new]
    #[pyo3(signature = (ahead=None, python_data=None))]
    fn new(
        py: Python<'_>,
        ahead: Option<std::path::PathBuf>,
        python_data: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let mut config = ptc_server::ServerConfig::default();
        // `PTC_AHEAD_DIR`, when the caller set it, wins (as for the package's `ptc-engine`).
        if config.engine.ahead_dir.is_none() {
            config.engine.ahead_dir = ahead;
        }
        config.engine.python_data = python_data;
        config.engine.python_data_at_first_use = true;
        let files = files::claim(&std::env::temp_dir()).map_err(|e| {
            PyRuntimeError::new_err(format!(
                "the in-process engine could not make its files directory under {}: {e}; \
                 set TMPDIR to a directory this user can write to",
                std::env::temp_dir().display()
            ))
        })?;
        config.files.dir = files.dir.clone();
        let runtime = pyo3_async_runtimes::tokio::get_runtime();
        let started = |e: &dyn std::fmt::Display| {
            PyRuntimeError::new_err(format!("the in-process engine could not start: {e:#}"))
        };
        let service = py.detach(|| runtime.block_on(Service::new(config))).map_err(|e| started(&e))?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let lanes = Lanes::start(cpus, lanes::SPIN).map_err(|e| started(&e))?;
        Ok(Local { service: Arc::new(service), lanes: Arc::new(lanes), files })
    }

    /// Stops taking executions, hands Python no more results (`exit.rs`) and removes this
    /// process's session files (at the process's exit: `_local.py` registers it with `atexit`).
    fn close(&self, py: Python<'_>) {
        self.service.engine().stop_accepting();
        exit::close(py);
        let _ = std::fs::remove_dir_all(&self.files.dir);
    }

    /// The answer (bytes) of the unary call `method` to `request` (bytes), as an awaitable. It
    /// runs on a lane: a session opened lives on the lane that opened it.
    fn unary<'py>(&self, py: Python<'py>, method: String, request: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let (service, lanes, request) = (self.service.clone(), self.lanes.clone(), request.to_vec());
        exit::awaitable(py, async move {
            let named = session_of(&method, &request);
            let called = method.clone();
            let (answer, placed) =
                lanes.run(named.as_deref(), async move { service.unary(&called, &request).await }).await;
            let answer = answer.map_err(rpc_error)?;
            match method.as_str() {
                "OpenSession" => {
                    if let Ok(opened) = proto::OpenSessionResponse::decode(answer.as_slice()) {
                        lanes.opened(&opened.session_id, &placed);
                    }
                }
                "CloseSession" => lanes.closed(named.as_deref().unwrap_or_default()),
                _ => {}
            }
            Ok(exit::Message(answer))
        })
    }

    /// A new `Execute` call; it starts on a lane at its first message (its `Start`), as a
    /// part of the caller's trace when given its `traceparent`.
    #[pyo3(signature = (traceparent=None))]
    fn execute(&self, traceparent: Option<String>) -> Call {
        Call { via: Via::Local(self.service.clone(), self.lanes.clone()), traceparent, open: OnceLock::new() }
    }
}

/// A ptc-engine server's client: the calls `Local` answers, made to the server.
#[pyclass(frozen)]
struct Remote {
    remote: Arc<remote::Remote>,
}

#[pymethods]
impl Remote {
    /// A client of the server at `url` (`http://host:port` or `https://host:port`), sending
    /// `api_key` with every call if given; it connects at its first call.
    #[new]
    #[pyo3(signature = (url, api_key=None))]
    fn new(url: &str, api_key: Option<&str>) -> PyResult<Self> {
        let remote =
            remote::Remote::new(url, api_key).map_err(|e| RpcError::new_err(("INVALID_ARGUMENT", e.to_string())))?;
        Ok(Remote { remote: Arc::new(remote) })
    }

    /// The answer (bytes) of the unary call `method` to `request` (bytes), as an awaitable.
    fn unary<'py>(&self, py: Python<'py>, method: String, request: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let (remote, request) = (self.remote.clone(), request.to_vec());
        let lane = self.remote.place();
        exit::awaitable(py, async move {
            let answer = lane.handle.spawn(async move { remote.unary(&method, &request).await });
            let answer = answer.await.expect("a lane's task panicked").map_err(rpc_error)?;
            Ok(exit::Message(answer))
        })
    }

    /// A new `Execute` call; it starts at its first message (its `Start`), as a part of the
    /// caller's trace when given its `traceparent`.
    #[pyo3(signature = (traceparent=None))]
    fn execute(&self, traceparent: Option<String>) -> Call {
        Call { via: Via::Remote(self.remote.clone()), traceparent, open: OnceLock::new() }
    }
}

/// The session a `CloseSession` or `SnapshotSession` request names.
fn session_of(method: &str, request: &[u8]) -> Option<String> {
    let named = match method {
        "CloseSession" => proto::CloseSessionRequest::decode(request).ok()?.session_id,
        "SnapshotSession" => proto::SnapshotSessionRequest::decode(request).ok()?.session_id,
        _ => return None,
    };
    Some(named).filter(|s| !s.is_empty())
}

/// One `Execute` call: `send` client messages, `next` (or `wait` for) server messages, `cancel`
/// to end it.
#[pyclass(frozen)]
struct Call {
    via: Via,
    /// The caller's span (W3C `traceparent`), which the run continues.
    traceparent: Option<String>,
    open: OnceLock<Open>,
}

/// What answers a call: the service in this process, or a server.
enum Via {
    Local(Arc<Service>, Arc<Lanes>),
    Remote(Arc<remote::Remote>),
}

/// A call started on its lane.
struct Open {
    writer: Writer,
    reader: Arc<Mutex<Reader>>,
    lane: Placed,
    /// The read `arm` started, on the lane: the message it took, until `next` takes it.
    armed: Arc<Armed>,
}

/// A read under way on the lane, for an event loop that waits for its socket to be readable.
/// An asyncio future set from the runtime's threads took three wake-ups (a runtime worker, a
/// thread that takes the GIL, the loop through its self-pipe); the socket takes one, and no
/// other thread enters the interpreter.
#[derive(Default)]
struct Armed {
    state: std::sync::Mutex<ArmedState>,
    /// The socket pair: the loop watches the first, the read writes a byte to the second once
    /// it has taken a message. Made at the first `ready_fd`.
    pair: OnceLock<(UnixStream, UnixStream)>,
}

#[derive(Default)]
struct ArmedState {
    /// A read is under way.
    reading: bool,
    /// What it took: a message, an error, or the call's end (`None`).
    taken: Option<Option<Result<Vec<u8>, Status>>>,
}

impl Armed {
    /// Empties the socket of the bytes earlier reads wrote.
    fn drain(&self) {
        if let Some((ready, _)) = self.pair.get() {
            let mut buf = [0u8; 64];
            while matches!((&*ready).read(&mut buf), Ok(n) if n > 0) {}
        }
    }

    /// Makes the loop's side readable.
    fn signal(&self) {
        if let Some((_, signal)) = self.pair.get() {
            let _ = (&*signal).write(&[1]); // full: it is readable already
        }
    }
}

impl Call {
    /// The call, once its `Start` has been sent.
    fn started(&self) -> PyResult<&Open> {
        self.open
            .get()
            .ok_or_else(|| RpcError::new_err(("FAILED_PRECONDITION", "the call has not started: send its Start first")))
    }

    /// The call, started on its lane at `first` (its first message) if it has not yet been.
    fn open(&self, first: &[u8]) -> &Open {
        self.open.get_or_init(|| {
            let (call, lane) = match &self.via {
                Via::Local(service, lanes) => {
                    let session = match proto::ClientMessage::decode(first) {
                        Ok(proto::ClientMessage { message: Some(client_message::Message::Start(start)) }) => {
                            Some(start.session_id).filter(|s| !s.is_empty())
                        }
                        _ => None,
                    };
                    let lane = lanes.place(session.as_deref());
                    let _on_lane = lane.handle.enter();
                    (service.execute(self.traceparent.as_deref()), lane)
                }
                Via::Remote(remote) => {
                    let lane = remote.place();
                    (remote.execute(&lane, self.traceparent.as_deref()), lane)
                }
            };
            Open { writer: call.writer, reader: Arc::new(Mutex::new(call.reader)), lane, armed: Arc::default() }
        })
    }
}

#[pymethods]
impl Call {
    /// Sends `message`: `None` once it is sent, or an awaitable to wait for room in the call.
    fn send<'py>(&self, py: Python<'py>, message: &[u8]) -> PyResult<Option<Bound<'py, PyAny>>> {
        let open = self.open(message);
        if open.writer.try_write(message).map_err(rpc_error)? {
            open.lane.wake.wake();
            return Ok(None);
        }
        let (writer, message, wake) = (open.writer.clone(), message.to_vec(), open.lane.wake.clone());
        exit::awaitable(py, async move {
            writer.write(&message).await.map_err(rpc_error)?;
            wake.wake();
            Ok(())
        })
        .map(Some)
    }

    /// Sends `message` (not the call's first) if the call has room for it now, from any
    /// thread: `False` when it has none (then `send`).
    fn try_send(&self, message: &[u8]) -> PyResult<bool> {
        let open = self.started()?;
        let sent = open.writer.try_write(message).map_err(rpc_error)?;
        if sent {
            open.lane.wake.wake();
        }
        Ok(sent)
    }

    /// The next server message if one is there or comes within `spin_micros` (spent spinning,
    /// yielding the CPU to the lane if they share it: `lanes.rs`) and then `block_micros` more
    /// (spent asleep until it comes), the GIL released all along:
    /// its bytes, `None` at the call's end, or `False` when none came (then `wait`).
    fn next<'py>(&self, py: Python<'py>, spin_micros: u64, block_micros: u64) -> PyResult<Bound<'py, PyAny>> {
        let open = self.started()?;
        let taken = open.armed.state.lock().unwrap_or_else(|e| e.into_inner()).taken.take();
        if let Some(got) = taken {
            return answer(py, got);
        }
        let Ok(mut reader) = open.reader.try_lock() else {
            return Ok(PyBool::new(py, false).to_owned().into_any()); // an armed read or a `wait` is reading
        };
        let (spin, block) = (Duration::from_micros(spin_micros), Duration::from_micros(block_micros));
        let got = py.detach(|| {
            let _reading = jobs::Reading::start();
            let mut spinning = spin::Spin::new(spin);
            loop {
                match reader.try_read() {
                    Poll::Pending if spinning.turn() => {}
                    Poll::Pending if !block.is_zero() && tokio::runtime::Handle::try_current().is_err() => {
                        // Asleep, the lane's message wakes this thread itself: one wake-up,
                        // where an awaitable takes two (a runtime's worker, then the loop).
                        let runtime = pyo3_async_runtimes::tokio::get_runtime();
                        let read = async { tokio::time::timeout(block, reader.read()).await };
                        return runtime.block_on(read).map_or(Poll::Pending, Poll::Ready);
                    }
                    got => return got,
                }
            }
        });
        match got {
            Poll::Ready(got) => answer(py, got),
            Poll::Pending => Ok(PyBool::new(py, false).to_owned().into_any()),
        }
    }

    /// The file descriptor an event loop watches (`add_reader`) for the read `arm` starts:
    /// readable once it has taken a message (then `next` returns it), or spuriously.
    fn ready_fd(&self) -> PyResult<i32> {
        let armed = &self.started()?.armed;
        if armed.pair.get().is_none() {
            let pair = UnixStream::pair().and_then(|(a, b)| {
                a.set_nonblocking(true)?;
                b.set_nonblocking(true)?;
                Ok((a, b))
            });
            let pair = pair.map_err(|e| PyRuntimeError::new_err(format!("could not make a socket pair: {e}")))?;
            let _ = armed.pair.set(pair);
        }
        Ok(armed.pair.get().map(|(ready, _)| ready.as_raw_fd()).unwrap_or(-1))
    }

    /// Starts a read of the next message on the call's lane, unless one is under way, that
    /// makes `ready_fd` readable once it has the message (at once if a message is already
    /// taken). Bytes earlier reads left in the socket are drained first.
    fn arm(&self) -> PyResult<()> {
        let open = self.started()?;
        let armed = open.armed.clone();
        armed.drain();
        let mut state = armed.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.taken.is_some() {
            drop(state);
            armed.signal();
            return Ok(());
        }
        if state.reading {
            return Ok(());
        }
        state.reading = true;
        drop(state);
        let reader = open.reader.clone();
        open.lane.handle.spawn(async move {
            let got = reader.lock().await.read().await;
            {
                let mut state = armed.state.lock().unwrap_or_else(|e| e.into_inner());
                state.taken = Some(got);
                state.reading = false;
            }
            armed.signal();
        });
        Ok(())
    }

    /// The next server message as an awaitable: its bytes, or `None` at the call's end.
    fn wait<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let reader = self.started()?.reader.clone();
        exit::awaitable(py, async move {
            match reader.lock().await.read().await {
                Some(Ok(message)) => Ok(Some(exit::Message(message))),
                Some(Err(status)) => Err(rpc_error(status)),
                None => Ok(None),
            }
        })
    }

    /// Ends the call: before its end, that cancels the execution.
    fn cancel(&self) {
        if let Some(open) = self.open.get() {
            open.writer.cancel();
        }
    }
}

/// A read's outcome as Python gets it: the message's bytes, `None` at the call's end, or the
/// call's error raised.
fn answer(py: Python<'_>, got: Option<Result<Vec<u8>, Status>>) -> PyResult<Bound<'_, PyAny>> {
    match got {
        Some(Ok(message)) => Ok(PyBytes::new(py, &message).into_any()),
        Some(Err(status)) => Err(rpc_error(status)),
        None => Ok(py.None().into_bound(py)),
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
    exit::close_at_exit(m.py())?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_class::<Local>()?;
    m.add_class::<Remote>()?;
    m.add_class::<Call>()?;
    m.add_class::<jobs::Jobs>()?;
    m.add("RpcError", m.py().get_type::<RpcError>())?;
    Ok(())
}
