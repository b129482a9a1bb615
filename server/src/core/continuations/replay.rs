//! A continuation whose execution's node is gone (cluster with a shared store), or whose
//! single server restarted. When the execution had hibernated at the round the token resumes,
//! its sealed image (kept beside the journal, or on the disk) is thawed here and goes on
//! exactly where it stopped. Otherwise the journal is loaded from the store and the program
//! run again from it, the recorded rounds answered by the engine itself, up to the round the
//! token resumes. Either way it is resumed with the client's results as a copy of this
//! request's own, and becomes this node's (its owner in the store, its place among the
//! paused) only once the round is claimed ([`Continuations::resume_held`]): of two nodes
//! given the same continuation, the one that loses the claim drops its copy.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ptc_engine::{Decision, Entry, ExecutionRequest, Journal, Limits, Runtime, ToolResult};

use super::pause::ended;
use super::paused::{Paused, Stop, advance};
use super::registry::claimed;
use super::resume::{expired, invalid_token};
use super::{Continuations, Turn};
use crate::cluster::{JournalHeader, StoreError};
use crate::core::error::{Error, ErrorKind};
use crate::core::runs::{DataDir, Start, Thaw};
use crate::core::token::{Claims, now_ms};

/// Why a python-data run whose server was lost cannot go on here.
const NOT_KEPT: &str = "this execution's server was lost before another could take it over: a python-data program is \
                        carried on elsewhere only from its kept memory, which was missing or made by a server whose \
                        python-data runtime differs from this one's. Run the program again from the start";

/// Why a run whose node was lost just after its last pause cannot go on here.
const NOT_KEPT_SINCE: &str = "this execution's server was lost right after its last pause, before it had kept what the \
                              program did since the round before; no other server can carry it on. Run the program \
                              again from the start";

/// What the store kept of an execution whose node is gone.
enum Loaded {
    /// At the token's round: its journal (none for a python-data run) and its sealed image,
    /// when it hibernated at that round.
    Kept { header: JournalHeader, journal: Option<Journal>, image: Option<Vec<u8>> },
    /// Of an earlier round than the token's: what it did since was not kept.
    Behind(JournalHeader),
}

impl Continuations {
    /// Resumes an execution whose node is gone, from what the shared store kept of it: thaws
    /// its sealed image when it hibernated at the token's round, or else runs its program
    /// again from the journal ([`Self::run_again`]); either way it is then handed the
    /// client's results.
    pub(super) async fn replay(
        &self,
        tenant: String,
        claims: Claims,
        results: Vec<ToolResult>,
        decisions: Vec<Decision>,
    ) -> Result<Turn, Error> {
        let store = &self.cluster.store;
        let (header, journal, image) = match self.load_journal(&tenant, &claims).await? {
            Some(Loaded::Kept { header, journal, image }) => (header, journal, image),
            Some(Loaded::Behind(header)) => {
                let _ = store.forget(&claims.execution_id).await;
                return Ok(lost(header.session_id, NOT_KEPT_SINCE));
            }
            None => return Err(expired()),
        };
        if let Some(image) = image
            && let Some(paused) = self.thaw(&tenant, &claims, &header, image).await?
        {
            return self.resume_held(&tenant, &claims, claimed(paused), results, decisions).await;
        }
        let Some(journal) = journal else {
            let _ = store.forget(&claims.execution_id).await;
            return Ok(lost(header.session_id, NOT_KEPT));
        };
        match self.run_again(&tenant, &claims, header, journal).await? {
            Ok(paused) => self.resume_held(&tenant, &claims, claimed(paused), results, decisions).await,
            Err(turn) => Ok(turn),
        }
    }

    /// Runs the program of the execution `claims` resumes again from its `journal` (the
    /// recorded tool results answered at once, the calls checked against the record) up to
    /// the token's round, where it is returned paused. A run that stops anywhere else
    /// diverged from the first, and is lost; one that ends is answered as ended: either is
    /// the request's turn (`Err`).
    async fn run_again(
        &self,
        tenant: &str,
        claims: &Claims,
        header: JournalHeader,
        journal: Journal,
    ) -> Result<Result<Paused, Turn>, Error> {
        let store = &self.cluster.store;
        let started = Instant::now();
        // Its first run's id: the same calls get the same ids (a client may have run some).
        let mut request = ExecutionRequest::new(header.code)
            .with_id(claims.execution_id.clone())
            .with_tools(header.tools)
            .with_session_id(header.session_id.clone())
            .with_runtime(runtime_of(&header.runtime)?)
            .with_journal(journal);
        request.trace_parent = crate::traces::from_traceparent(&header.traceparent);
        let mut prepared =
            self.core.prepare(self.carried_on(tenant, header.expires_at_ms, &header.network_allow, request))?;
        prepared.request.keeper = self.keeper(tenant, header.expires_at_ms, true, &Arc::default());
        let dir = DataDir::Rewound { id: header.session_id.clone(), before: header.files };
        let mut run = match self.core.start(prepared, dir, None).await {
            Ok(run) => run,
            Err(e) if e.kind() == ErrorKind::Lost => {
                let _ = store.forget(&claims.execution_id).await;
                return Ok(Err(lost(header.session_id, e.message())));
            }
            Err(e) => return Err(e),
        };
        match advance(&mut run.execution).await {
            Stop::Calls(round, _, _) if round == claims.round => {
                tracing::info!(execution = %claims.execution_id, round, elapsed = ?started.elapsed(), "resumed by replay");
                metrics::histogram!("ptc_replay_seconds").record(started.elapsed().as_secs_f64());
                Ok(Ok(Paused {
                    id: claims.execution_id.clone(),
                    run,
                    tenant: tenant.to_string(),
                    session_id: header.session_id,
                    round,
                    expires_at_ms: header.expires_at_ms,
                    header: None,
                    journaled: true,
                    adopted: Some("replays"),
                }))
            }
            Stop::Calls(round, _, _) => {
                let _ = store.forget(&claims.execution_id).await;
                let why = format!(
                    "running it again stopped for tools at round {round}, not at round {} where it was paused",
                    claims.round
                );
                Ok(Err(lost(header.session_id, &Journal::diverged(&why))))
            }
            Stop::Ended(end) => {
                let _ = store.forget(&claims.execution_id).await;
                let _ = store.add_usage(tenant, "replays", 1).await;
                Ok(Err(ended(&run, end).await))
            }
        }
    }

    /// A single server's continuation that finds no paused execution (the server restarted):
    /// the execution's image on disk, if it hibernated at the token's round, is thawed here.
    pub(super) async fn thaw_from_disk(
        &self,
        tenant: String,
        claims: Claims,
        results: Vec<ToolResult>,
        decisions: Vec<Decision>,
    ) -> Result<Turn, Error> {
        let images = self.images.as_ref().expect("a server that keeps images");
        let Some(kept) = images.load(&claims.execution_id).await else { return Err(expired()) };
        if kept.header.tenant != tenant || kept.round > claims.round {
            return Err(invalid_token());
        }
        // It had gone on past its image when the server stopped: that part is lost.
        if kept.round < claims.round {
            images.forget(&claims.execution_id);
            return Ok(lost(kept.header.session_id, NOT_KEPT_SINCE));
        }
        match self.thaw(&tenant, &claims, &kept.header, kept.image).await? {
            Some(paused) => self.resume_held(&tenant, &claims, claimed(paused), results, decisions).await,
            None => {
                images.forget(&claims.execution_id);
                Err(expired())
            }
        }
    }

    /// Thaws the execution `claims` resumes from its sealed `image` (which the store or the
    /// disk kept for the token's round), paused as it was; `None` when the image is refused or
    /// the thaw fails (the log says why): a cluster then replays the journal instead.
    async fn thaw(
        &self,
        tenant: &str,
        claims: &Claims,
        header: &JournalHeader,
        image: Vec<u8>,
    ) -> Result<Option<Paused>, Error> {
        let started = Instant::now();
        let mut request = ExecutionRequest::new(String::new())
            .with_tools(header.tools.clone())
            .with_session_id(header.session_id.clone())
            .with_runtime(runtime_of(&header.runtime)?);
        request.trace_parent = crate::traces::from_traceparent(&header.traceparent);
        let mut prepared =
            self.core.prepare(self.carried_on(tenant, header.expires_at_ms, &header.network_allow, request))?;
        let disk_header = Arc::new(OnceLock::new());
        let _ = disk_header.set(serde_json::to_vec(header).expect("a header serialises"));
        prepared.request.keeper = self.keeper(tenant, header.expires_at_ms, true, &disk_header);
        if self.cluster.durable() {
            // It has no journal here (the one in the store is of the run before the image):
            // its image is what carries it on, so it hibernates as soon as it waits again, a
            // few ms after its client has the token, rather than a second later.
            prepared.request.hibernate_after = Some(Duration::ZERO);
        }
        let dir = DataDir::Reopened { id: header.session_id.clone(), before: header.files.clone() };
        let thaw = Thaw { id: claims.execution_id.clone(), image };
        let run = match self.core.start(prepared, dir, Some(thaw)).await {
            Ok(run) => run,
            Err(e) => {
                tracing::warn!(execution = %claims.execution_id, "not thawed: {}", e.message());
                metrics::counter!("ptc_thaw_refused_total").increment(1);
                return Ok(None);
            }
        };
        tracing::info!(execution = %claims.execution_id, round = claims.round, elapsed = ?started.elapsed(), "resumed by thaw");
        metrics::histogram!("ptc_thaw_elsewhere_seconds").record(started.elapsed().as_secs_f64());
        Ok(Some(Paused {
            id: claims.execution_id.clone(),
            run,
            tenant: tenant.to_string(),
            session_id: header.session_id.clone(),
            round: claims.round,
            expires_at_ms: header.expires_at_ms,
            header: None,
            // The store knows it: the token's round is claimed there, and its end forgets it.
            journaled: true,
            adopted: Some("thaws"),
        }))
    }

    /// The start of an execution carried on here: its tenant admitted again, and the first
    /// run's deadline (`expires_at_ms`) holding, with the engine's shortest timeout its floor.
    fn carried_on<'a>(
        &self,
        tenant: &'a str,
        expires_at_ms: u64,
        network_allow: &'a [String],
        request: ExecutionRequest,
    ) -> Start<'a> {
        let config = self.core.engine.config();
        let remaining = expires_at_ms.saturating_sub(now_ms());
        let timeout = Duration::from_millis(remaining).max(config.ceilings.min_timeout);
        let limits: Limits = config.default_limits.clone().with_timeout(timeout);
        Start { tenant: Some(tenant), request_id: None, limits, timeout_ms: None, network_allow, request }
    }

    /// The journal of the execution `claims` resumes, from the shared store, ready to replay
    /// (none for a python-data run), and its sealed image when it hibernated at the token's
    /// round; `None` if it is gone or its deadline passed. A token of an older round, or
    /// another tenant's, is refused.
    async fn load_journal(&self, tenant: &str, claims: &Claims) -> Result<Option<Loaded>, Error> {
        let unavailable =
            |e: StoreError| Error::new(ErrorKind::Unavailable, format!("{e}; try the continuation again shortly"));
        let malformed =
            |e: &dyn std::fmt::Display| Error::new(ErrorKind::Internal, format!("a malformed journal: {e}"));
        let Some(saved) = self.cluster.store.load(&claims.execution_id).await.map_err(unavailable)? else {
            return Ok(None);
        };
        let header: JournalHeader = serde_json::from_slice(&saved.header).map_err(|e| malformed(&e))?;
        if header.tenant != tenant {
            return Err(invalid_token());
        }
        // An older round's token was used already (here or on the node that resumed it).
        if saved.round > claims.round {
            return Err(invalid_token());
        }
        // Its node went on past what it kept (a run thawed there is kept only once it
        // hibernates again, a few ms after its pause) and was lost before that.
        if saved.round < claims.round {
            return Ok(Some(Loaded::Behind(header)));
        }
        if header.expires_at_ms <= now_ms() {
            return Ok(None);
        }
        let mut entries: Vec<Entry> = Vec::new();
        for segment in &saved.segments {
            let part: Vec<Entry> = serde_json::from_slice(segment).map_err(|e| malformed(&e))?;
            entries.extend(part);
        }
        let image = saved.image.filter(|(round, _)| *round == claims.round).map(|(_, image)| image);
        // A python-data run has no seed: it was never journaled, only its image kept.
        if header.seed.is_empty() {
            return Ok(Some(Loaded::Kept { header, journal: None, image }));
        }
        let mut seed = [0u8; 32];
        hex::decode_to_slice(&header.seed, &mut seed).map_err(|e| malformed(&e))?;
        Ok(Some(Loaded::Kept { header, journal: Some(Journal::replay(seed, entries)), image }))
    }
}

/// An execution that cannot be carried on: the model is told `why` and what to do.
fn lost(session_id: String, why: &str) -> Turn {
    Turn::Lost { session_id, why: why.to_string() }
}

/// The runtime a stored execution ran in.
fn runtime_of(name: &str) -> Result<Runtime, Error> {
    name.parse().map_err(|e: ptc_engine::Error| Error::invalid(e.message()))
}
