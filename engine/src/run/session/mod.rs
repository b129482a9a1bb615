//! Live sessions: one instance kept between executions, so each program finds the globals,
//! imports, functions and classes the earlier ones left (as in a notebook).
//!
//! A session is a task that owns the store and the instance and runs one command at a time:
//! an execution, or a snapshot. Between them the instance is only memory, like a paused
//! execution; it holds its execution slot and its memory claim (so idle sessions count
//! against the engine's memory budget and the tenant's share), but no tenant run slot.
//!
//! **One execution at a time.** A second execution (or a snapshot) while one runs is refused
//! with [`ErrorKind::SessionBusy`], never queued: a queued program would wait with its own
//! deadline running, and a client that sent two at once wants to know.
//!
//! **What ends a session:** [`Session::close`] (or dropping every handle); its idle timeout
//! (idle = no execution or snapshot running); the engine stopping; and an execution that
//! stops the instance mid-program, which leaves no consistent state to continue from: a
//! timeout, a cancellation, running out of memory or fuel, a limit on tool calls. A Python
//! exception does not end it: what the program defined before raising stays, as in a notebook.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use wasmtime::Store;

use crate::api::config::Limits;
use crate::api::error::{Error, ErrorKind, Result};
use crate::api::events::Event;
use crate::api::request::Runtime;
use crate::instance::host::HostState;
use crate::instance::output::Output;
use crate::instance::tool_lists::LastTools;
use crate::run::job::Job;
use crate::run::sleep::Hibernation;

/// How to open a live session: `SessionRequest::new()` and the `with_*` methods.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionRequest {
    /// The session's memory limit and the default limits of its executions (each execution
    /// may set its own, except `max_memory_bytes`, which is the session's). `None`: the
    /// engine's defaults.
    pub limits: Option<Limits>,
    /// The session ends after this long without an execution. Default 10 minutes.
    pub idle_timeout: Duration,
    /// See [`crate::api::request::ExecutionRequest::tenant`].
    pub tenant: Option<String>,
    /// See [`crate::api::request::ExecutionRequest::data_dir`]; the session's for its whole life.
    pub data_dir: Option<std::path::PathBuf>,
    /// A snapshot's state ([`SessionState::data`]) to start from.
    pub restore: Option<Vec<u8>>,
    /// The session's runtime, for all its executions (their own `runtime` is ignored).
    pub runtime: Runtime,
    /// Where the session's sealed image goes each time it hibernates while idle
    /// ([`crate::api::config::EngineConfig::hibernate_after`]), so that any engine sharing the seal key can
    /// thaw it ([`crate::engine::Engine::thaw_session`]). `None`: it hibernates in this process only.
    pub keeper: Option<Arc<dyn crate::api::keeper::Keeper>>,
}

impl Default for SessionRequest {
    fn default() -> Self {
        SessionRequest {
            limits: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            tenant: None,
            data_dir: None,
            restore: None,
            runtime: Runtime::Python,
            keeper: None,
        }
    }
}

/// [`SessionRequest::idle_timeout`]'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

impl SessionRequest {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    pub fn with_data_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    pub fn with_restore(mut self, data: Vec<u8>) -> Self {
        self.restore = Some(data);
        self
    }

    pub fn with_runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = runtime;
        self
    }

    pub fn with_keeper(mut self, keeper: Arc<dyn crate::api::keeper::Keeper>) -> Self {
        self.keeper = Some(keeper);
        self
    }
}

/// A global a snapshot (or a restore) could not keep, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    pub name: String,
    pub reason: String,
}

/// A live session's state, as [`Session::snapshot`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// What [`SessionRequest::restore`] takes. The guest's own encoding (pickle): restoring
    /// runs inside the sandbox, so bytes from anywhere can harm only that sandbox. Check their
    /// origin (the server seals them) if the session's state must be trusted.
    pub data: Vec<u8>,
    /// Globals kept: modules (by name), functions and classes (by source), picklable values.
    pub kept: Vec<String>,
    /// Modules the session imported.
    pub modules: Vec<String>,
    /// Globals that could not be kept, each with the reason (a generator, an open file, ...).
    pub dropped: Vec<Dropped>,
}

/// What a restore rebuilt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    pub kept: Vec<String>,
    pub dropped: Vec<Dropped>,
}

/// A handle on a live session. Cloning shares the session; it ends when closed, when its idle
/// timeout passes, or when the last handle is dropped.
#[derive(Clone)]
pub struct Session {
    shared: Arc<SessionCore>,
    commands: mpsc::UnboundedSender<Command>,
    limits: Arc<Limits>,
    runtime: Runtime,
}

/// What a session's handles and its task share: its identity, whether it is busy or ended (and
/// why), its output and its last tools' schemas.
pub(crate) struct SessionCore {
    pub(crate) id: Arc<str>,
    busy: AtomicBool,
    ended: CancellationToken,
    /// Why the session ended, once it has.
    reason: Mutex<Option<String>>,
    /// It ended for a drain with its last image kept ([`Session::kept`]).
    kept: AtomicBool,
    pub(crate) tenant: Option<String>,
    /// The instance's stdout and stderr, emptied for each execution.
    pub(crate) output: Output,
    /// The tools of its last program as checked and numbered: a next program given the same
    /// ones skips the checks, and its instance is not sent them again.
    pub(crate) last_tools: LastTools,
}

/// Prepares the store for the next execution (its exchange, events, tools and limits).
pub(crate) type Install = Box<dyn FnOnce(&mut Store<HostState>) + Send>;

pub(crate) enum Command {
    Execute(Box<Job>, Install),
    Snapshot { max_bytes: u64, reply: oneshot::Sender<Result<SessionState>> },
}

impl Command {
    /// Answers the command with `reason` as an internal failure, without running it.
    fn refuse(self, reason: &str) {
        match self {
            Command::Execute(job, _) => {
                let _ = job.events.send(Event::Failed(crate::api::events::Failure {
                    kind: crate::api::events::FailureKind::Internal,
                    message: reason.to_string(),
                    traceback: String::new(),
                    exit_code: None,
                    stdout: String::new(),
                    stderr: String::new(),
                    tool_calls: Vec::new(),
                    stats: Default::default(),
                }));
            }
            Command::Snapshot { reply, .. } => {
                let _ = reply.send(Err(Error::engine("taking the snapshot", reason)));
            }
        }
    }
}

impl Session {
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    pub fn tenant(&self) -> Option<&str> {
        self.shared.tenant.as_deref()
    }

    /// Whether an execution or a snapshot is running in it now.
    pub fn is_busy(&self) -> bool {
        self.shared.busy.load(Ordering::Acquire)
    }

    /// Whether the session has ended (see [`Session::ended_reason`]).
    pub fn is_ended(&self) -> bool {
        self.shared.ended.is_cancelled()
    }

    /// Why the session ended (`None` while it lives).
    pub fn ended_reason(&self) -> Option<String> {
        self.shared.reason.lock().unwrap().clone()
    }

    /// Whether it ended for the engine's drain with its last image in its keeper's hands
    /// ([`SessionRequest::keeper`]): another engine can thaw it where it was
    /// ([`crate::engine::Engine::thaw_session`]), so what goes with it (its files) should stay.
    pub fn kept(&self) -> bool {
        self.is_ended() && self.shared.kept.load(Ordering::Acquire)
    }

    /// Resolves when the session has ended and its instance is freed.
    pub async fn ended(&self) {
        self.shared.ended.cancelled().await
    }

    /// Ends the session and frees its instance (an execution running in it is cancelled).
    pub fn close(&self) {
        self.close_because("closed");
    }

    /// [`Session::close`], with the reason its later uses are told (`ended (REASON)`).
    pub fn close_because(&self, reason: impl Into<String>) {
        self.shared.end(reason.into());
    }

    /// The session's memory limit and its executions' default limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The runtime its programs run in (a snapshot restores into the same one).
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// What its handles and its task share (its last tools among them).
    pub(crate) fn core(&self) -> &SessionCore {
        &self.shared
    }

    /// A token for the next execution: cancelled with it, or when the session ends.
    pub(crate) fn cancel_token(&self) -> CancellationToken {
        self.shared.ended.child_token()
    }

    pub(crate) fn output(&self) -> Output {
        self.shared.output.clone()
    }

    /// The error any use of the session gets once it has ended (kind `Finished`, saying why
    /// and what to do); `None` while it lives.
    pub fn ended_error(&self) -> Option<Error> {
        Some(self.ended_with(&self.ended_reason()?))
    }

    /// [`Session::ended_error`] for a session whose task is gone.
    fn gone(&self) -> Error {
        self.ended_with(&self.ended_reason().unwrap_or_else(|| "closed".into()))
    }

    fn ended_with(&self, reason: &str) -> Error {
        Error::new(
            ErrorKind::Finished,
            format!(
                "session {} has ended ({reason}); its variables are gone: open a new session and define them again",
                self.shared.id
            ),
        )
    }

    /// Takes the busy flag, or says why not.
    pub(crate) fn claim(&self) -> Result<()> {
        if let Some(error) = self.ended_error() {
            return Err(error);
        }
        if self.shared.busy.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(Error::new(
                ErrorKind::SessionBusy,
                format!(
                    "session {} is running another execution; run one at a time in a session (wait for the \
                     running one to end), or use another session",
                    self.shared.id
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn send(&self, command: Command) -> Result<()> {
        self.commands.send(command).map_err(|_| {
            self.shared.busy.store(false, Ordering::Release);
            self.gone()
        })
    }

    /// The session's state as bytes (see [`SessionState`]); refused while an execution runs.
    /// `max_bytes` bounds the state; a larger one fails with a message saying what to delete.
    pub async fn snapshot(&self, max_bytes: u64) -> Result<SessionState> {
        self.claim()?;
        let (reply, answer) = oneshot::channel();
        self.send(Command::Snapshot { max_bytes, reply })?;
        answer.await.unwrap_or_else(|_| Err(self.gone()))
    }
}

impl SessionCore {
    pub(crate) fn new(id: Arc<str>, tenant: Option<String>, output: Output) -> Arc<Self> {
        Arc::new(SessionCore {
            output,
            id,
            busy: AtomicBool::new(false),
            ended: CancellationToken::new(),
            reason: Mutex::new(None),
            kept: AtomicBool::new(false),
            tenant,
            last_tools: LastTools::default(),
        })
    }

    fn end(&self, reason: String) {
        let mut slot = self.reason.lock().unwrap();
        if slot.is_none() {
            *slot = Some(reason);
        }
        drop(slot);
        self.ended.cancel();
    }
}

pub(crate) fn handle(
    shared: Arc<SessionCore>,
    commands: mpsc::UnboundedSender<Command>,
    limits: Limits,
    runtime: Runtime,
) -> Session {
    Session { shared, commands, limits: Arc::new(limits), runtime }
}

/// What the session task needs besides its store and instance.
pub(crate) struct Serve {
    pub(crate) shared: Arc<SessionCore>,
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    pub(crate) idle_timeout: Duration,
    /// The time and fuel a snapshot may take: a program's of the session.
    pub(crate) budget: Budget,
    /// The engine stops accepting (ends idle sessions) or shuts down (ends all).
    pub(crate) closing: CancellationToken,
    pub(crate) shutdown: CancellationToken,
    /// The session's execution slot, unless `hibernation` holds it.
    pub(crate) _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// With `hibernate_after`: an idle session hibernates after that long, and thaws at its
    /// next command.
    pub(crate) hibernation: Option<(Hibernation, Duration)>,
    /// Its runtime's fresh memory, against which a JavaScript session's snapshot is taken.
    pub(crate) stores: Arc<crate::run::stores::Stores>,
}

mod execute;
mod guest_call;
mod snapshot;
mod task;

pub(crate) use guest_call::{Budget, guest_call};
pub(crate) use task::serve;
