//! The one place a run starts and ends, for every front end.
//!
//! **Start** ([`Core::prepare`], then [`Core::start`]): what the request asks is checked in
//! one order for every front end (its limits against the engine's ceilings, its network
//! hosts against the tenant's policy) and the tenant admitted (its caps, its request id),
//! all before anything is prepared for the run; then the run's `/mnt/data` is prepared (none,
//! a directory of its own, the HTTP API's session directory, one put back for a replay or
//! reopened for a thaw, or a live session's), the execution starts (fresh, thawed from its
//! sealed image, or in the live session), its tenant slot is bound to it, and a watcher keeps
//! the directory within the tenant's file quota while it runs.
//!
//! **End** ([`Run::end`]): the run's files are settled exactly once against the quota, and the
//! program's end becomes an [`Ending`]: what it returned and the files it wrote, or, if it left
//! the tenant over its quota, a `file_quota` failure in [`advice::over_quota`]'s words (what
//! it wrote is gone).
//!
//! The front ends keep only their protocol: how a request names these things, how events and
//! results travel, and how an [`Ending`] and an [`Error`] look on their wire.

use std::sync::Arc;
use std::time::Duration;

use ptc_engine::{Completion, Engine, Execution, ExecutionRequest, Failure, Limits};

use super::Core;
use super::advice;
use super::error::{Error, ErrorKind};
use super::files::{FileRef, Import, ScanEntry};
use super::run_files::RunFiles;
use super::sessions::LiveSession;
use super::tenants::Admission;

/// The limits of a run: `base` (the engine's defaults or a front end's own) with the deadline
/// a request asked for, checked against the engine's ceilings before anything is prepared.
fn limits(engine: &Engine, base: Limits, timeout_ms: Option<u64>) -> Result<Limits, Error> {
    let limits = match timeout_ms {
        Some(ms) => base.with_timeout(Duration::from_millis(ms)),
        None => base,
    };
    let config = engine.config();
    config.ceilings.check(&limits, config.fuel)?;
    Ok(limits)
}

/// Where a run's `/mnt/data` comes from.
pub enum DataDir {
    /// None: the program has no `/mnt/data`.
    None,
    /// A directory of the run's own holding these files (name, bytes), under the tenant's
    /// quota, removed once the run is over and its files were read.
    Own(Vec<(String, Vec<u8>)>),
    /// The HTTP API's session directory `id`, with files of the tenant's earlier sessions
    /// copied in.
    Session { id: String, imports: Vec<Import> },
    /// Session directory `id` put back as it was when a replayed run first started.
    Rewound { id: String, before: Vec<ScanEntry> },
    /// Session directory `id` as it is, for a run thawed from its image; `before` is what it
    /// held when the run first started.
    Reopened { id: String, before: Vec<ScanEntry> },
    /// A live session's directory (if the server keeps files), with these files written in
    /// first; the program runs in the session.
    Live(LiveSession, Vec<(String, Vec<u8>)>),
}

/// What a front end asks of a run, checked by [`Core::prepare`] before anything is
/// prepared for it.
pub struct Start<'a> {
    /// Whose run (none: a caller with no tenant, MCP on stdio, whom no caps bind).
    pub tenant: Option<&'a str>,
    /// The client's idempotency key within the tenant.
    pub request_id: Option<&'a str>,
    /// The limits to start from (the engine's defaults or a front end's own).
    pub limits: Limits,
    /// The deadline the request asked for, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Hosts that narrow the tenant's network policy.
    pub network_allow: &'a [String],
    /// The engine's request: code, tools, runtime (its tenant, limits and network are set here).
    pub request: ExecutionRequest,
}

/// A run checked and admitted ([`Core::prepare`]): the engine's request as it will start,
/// and the tenant's place for it. Dropping it frees the place.
pub struct Prepared {
    pub request: ExecutionRequest,
    admitted: Admitted,
}

/// A hibernated execution's id and sealed image ([`Engine::thaw`]), to go on with instead of
/// the request's code.
pub struct Thaw {
    pub id: String,
    pub image: Vec<u8>,
}

/// A tenant's place for one run, taken before anything is prepared for it (a live session
/// opened, a directory made), so that a refused run leaves nothing behind.
struct Admitted(Option<Admission>);

/// A started run: the execution the front end drives, with its tenant slot and its files.
pub struct Run {
    pub execution: Execution,
    _admission: Option<Admission>,
    files: Option<Arc<RunFiles>>,
    /// Whether it runs in a live session (which a file-quota stop ends).
    live: bool,
}

/// How a run ended, once its files are settled.
pub struct Ending {
    pub outcome: Outcome,
    /// The files the program created or changed in `/mnt/data` (none without one); an error
    /// when they could not be settled.
    pub files: Result<Vec<FileRef>, Error>,
    /// The bytes of those [`Run::end`] was asked to read (`None`: over its byte budget).
    pub contents: Vec<(FileRef, Option<Vec<u8>>)>,
}

pub enum Outcome {
    Completed(Completion),
    Failed(Failure),
    /// The run left its tenant over the file quota; `message` says so and what to do, `end`
    /// is how the program itself ended (its output, its calls).
    OverQuota {
        message: String,
        end: Result<Completion, Failure>,
    },
}

impl From<Result<Completion, Failure>> for Outcome {
    /// The program's own end, as its run's outcome when its files are within the quota.
    fn from(end: Result<Completion, Failure>) -> Self {
        match end {
            Ok(c) => Outcome::Completed(c),
            Err(f) => Outcome::Failed(f),
        }
    }
}

/// Which of the written files [`Run::end`] reads: those whose name passes `wanted`, within
/// `max_bytes` together.
pub struct Read {
    pub max_bytes: u64,
    pub wanted: fn(&str) -> bool,
}

impl Core {
    /// Checks `start` (its limits, then its network hosts) and admits its tenant: the one
    /// order every front end's run starts in, so that a refused run has prepared nothing.
    pub fn prepare(&self, start: Start<'_>) -> Result<Prepared, Error> {
        let Start { tenant, request_id, limits: base, timeout_ms, network_allow, mut request } = start;
        request.limits = Some(limits(&self.engine, base, timeout_ms)?);
        request.network = self.networks.for_run(tenant, network_allow)?;
        request.tenant = tenant.map(str::to_owned);
        let admitted = self.admit(tenant, request_id)?;
        Ok(Prepared { request, admitted })
    }

    /// Admits a run of `tenant`, with the client's `request_id` as an idempotency key within
    /// the tenant.
    fn admit(&self, tenant: Option<&str>, request_id: Option<&str>) -> Result<Admitted, Error> {
        match tenant {
            Some(tenant) => {
                let paused = self.engine.paused_executions_of(tenant);
                Ok(Admitted(Some(self.tenants.admit(tenant, request_id, paused)?)))
            }
            None => Ok(Admitted(None)),
        }
    }

    /// Prepares and starts an admitted run (see the module's header). Nothing is left behind
    /// when it is refused: the tenant's place is freed, and a directory of the run's own
    /// removed.
    pub async fn start(&self, prepared: Prepared, dir: DataDir, thaw: Option<Thaw>) -> Result<Run, Error> {
        let Prepared { request, admitted: Admitted(admission) } = prepared;
        let (execution, files, live) = match dir {
            DataDir::Live(live, inputs) => {
                let files = self.live_files(&live, inputs).await?;
                (self.engine.execute_in(&live.session, request).await?, files, true)
            }
            fresh => {
                let files = self.fresh_files(request.tenant.as_deref(), fresh).await?;
                let mut request = request;
                if let Some(files) = &files {
                    request.data_dir = Some(files.session.path.clone());
                }
                let execution = match thaw {
                    Some(Thaw { id, image }) => self.engine.thaw(&id, &image, request).await?,
                    None => self.engine.start(request).await?,
                };
                (execution, files, false)
            }
        };
        if let Some(admission) = &admission {
            admission.attach(execution.control());
        }
        if let Some(files) = &files {
            files.watch(execution.control(), &self.tasks);
        }
        Ok(Run { execution, _admission: admission, files, live })
    }

    /// The `/mnt/data` of a run outside any live session.
    async fn fresh_files(&self, tenant: Option<&str>, dir: DataDir) -> Result<Option<Arc<RunFiles>>, Error> {
        if matches!(dir, DataDir::None) {
            return Ok(None);
        }
        let store = self.files().ok_or_else(no_files)?;
        let tenant = tenant.unwrap_or(super::auth::LOCAL_TENANT);
        let files = match dir {
            DataDir::Own(inputs) => RunFiles::own(store, tenant, inputs).await?,
            DataDir::Session { id, imports } => RunFiles::prepare(store, tenant, &id, imports).await?,
            DataDir::Rewound { id, before } => {
                RunFiles::rewind(store, tenant, &id, before).await.map_err(|why| Error::new(ErrorKind::Lost, why))?
            }
            DataDir::Reopened { id, before } => {
                RunFiles::reopen(store, tenant, &id, before).await.map_err(|why| Error::new(ErrorKind::Lost, why))?
            }
            DataDir::None | DataDir::Live(..) => unreachable!("handled by the caller"),
        };
        Ok(Some(files))
    }

    /// The next run's files in a live session's `/mnt/data`, with `inputs` written first.
    async fn live_files(
        &self,
        live: &LiveSession,
        inputs: Vec<(String, Vec<u8>)>,
    ) -> Result<Option<Arc<RunFiles>>, Error> {
        let (Some(store), Some(dir)) = (self.files(), &live.files) else {
            return if inputs.is_empty() { Ok(None) } else { Err(no_files()) };
        };
        RunFiles::put(store, dir, inputs).await?;
        Ok(Some(RunFiles::resume(store, dir).await?))
    }
}

fn no_files() -> Error {
    Error::new(ErrorKind::Precondition, "this server keeps no files: run without files and return_files")
}

impl Run {
    /// The session directory's id (the HTTP API's `session_id`), if the run has one.
    pub fn session_id(&self) -> Option<&str> {
        self.files.as_ref().map(|f| f.session.id.as_str())
    }

    /// What the run's directory held before the program started (kept in a journal, so that
    /// a replay can put it back).
    pub fn files_before(&self) -> Vec<ScanEntry> {
        self.files.as_ref().map(|f| f.before().export()).unwrap_or_default()
    }

    /// Checks the file quota now (at a pause): over it, the execution is cancelled and
    /// `false` returned; its end event follows.
    pub async fn within_quota(&self) -> bool {
        match &self.files {
            Some(files) => files.check(&self.execution.control()).await,
            None => true,
        }
    }

    /// The run's end (`end`, the program's final event), once its files are settled; with
    /// `read`, the bytes of the written files it wants.
    pub async fn end(&self, end: Result<Completion, Failure>, read: Option<Read>) -> Ending {
        let Some(files) = &self.files else {
            return Ending { outcome: end.into(), files: Ok(Vec::new()), contents: Vec::new() };
        };
        let settled = files.settle().await;
        if let Some((why, stopped)) = files.quota_breach(&settled) {
            let message = advice::over_quota(&why, stopped, self.live);
            return Ending {
                outcome: Outcome::OverQuota { message, end },
                files: Ok(Vec::new()),
                contents: Vec::new(),
            };
        }
        let contents = match (&settled, read) {
            (Ok(changed), Some(read)) => {
                let wanted = changed.iter().filter(|f| (read.wanted)(&f.name)).cloned().collect();
                files.read(wanted, read.max_bytes).await
            }
            _ => Vec::new(),
        };
        Ending { outcome: end.into(), files: settled.map_err(Error::from), contents }
    }
}
