//! Live sessions as the front ends see them: per-tenant ids, caps, and snapshots sealed for
//! transport.
//!
//! **Ids.** A session is found by (tenant, id), so another tenant's id is exactly as unknown
//! as one that never existed. Ids are the server's (128 random bits) or the client's own
//! (letters, digits, `-`, `_`; unique within its tenant).
//!
//! **Caps.** A tenant has at most `max_per_tenant` sessions. Opening one more ends the
//! tenant's session idle the longest (its next use says it ended); if every session of the
//! tenant is running, the open is refused. Idle sessions also hold their memory (counted in
//! the engine's budget and the tenant's share) and an execution slot.
//!
//! **Files.** Each session has its own `/mnt/data`, a new directory of the server's file
//! store (`live_<random>` in the tenant's directory) that lives as long as the session: files
//! a program writes are there for the next one, count against the tenant's file quota like
//! the HTTP API's, and are removed when the session ends, however it ends.
//!
//! **In a cluster** (a durable store), a session opened over gRPC keeps its sealed image in
//! the store each time it hibernates, and a node that gets its next program after its owner
//! is gone takes it over there (`sessions/durable.rs`).
//!
//! **Snapshots** are sealed: `PTCSNAP1`, the component's SHA-256, a JSON header (what was
//! kept and dropped, the state's size, and the names and sizes of the files it carries), the
//! guest's state, the files' bytes, and an HMAC-SHA256 over all of it and the tenant, keyed
//! from the token secret (`--token-secret`). Any change to the bytes, another tenant, a server
//! with another secret, or another component version is refused with a message saying which.
//! The state and the files together are bounded by `max_snapshot_bytes`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use ptc_engine::{Engine, Restored, Session, SessionRequest, SessionState};

use super::error::{Error, ErrorKind};
use super::files::{self, FileStore};
use crate::cluster::{Cluster, SessionKeeper};

mod durable;

/// Bounds on live sessions; every field has a default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionLimits {
    /// Live sessions per tenant. Default 16.
    pub max_per_tenant: usize,
    /// Idle timeout when a client asks for none. Default 10 minutes.
    pub idle_timeout: Duration,
    /// The longest idle timeout a client may ask for. Default 1 hour.
    pub max_idle_timeout: Duration,
    /// Largest session state a snapshot may hold (pickled). Default 64 MiB.
    pub max_snapshot_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_per_tenant: 16,
            idle_timeout: Duration::from_secs(600),
            max_idle_timeout: Duration::from_secs(3600),
            max_snapshot_bytes: 64 * 1024 * 1024,
        }
    }
}

/// What a client asks for when it opens a session.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The client's id for it; `None`: the server picks one.
    pub id: Option<String>,
    pub limits: Option<ptc_engine::Limits>,
    pub idle_timeout: Option<Duration>,
    /// A sealed snapshot ([`Sessions::snapshot`]) to start from.
    pub snapshot: Option<Vec<u8>>,
    /// The runtime of a new session; one restored from a snapshot runs in the snapshot's.
    pub runtime: ptc_engine::Runtime,
    /// In a cluster, keep its image in the shared store, so that another node can take it
    /// over when this one is gone (gRPC sessions; an MCP session lives with its connection).
    pub durable: bool,
}

/// A sealed snapshot and what it holds.
#[derive(Debug, Clone)]
pub struct SealedSnapshot {
    pub bytes: Vec<u8>,
    pub state: SessionState,
    /// Names of the files it carries (under `/mnt/data`).
    pub files: Vec<String>,
}

/// A live session and its directory (`/mnt/data`), if the server keeps files.
#[derive(Clone)]
pub struct LiveSession {
    pub session: Session,
    pub files: Option<Arc<files::SessionDir>>,
}

/// A session just opened.
pub struct Opened {
    pub id: String,
    pub live: LiveSession,
    /// What a snapshot's state rebuilt.
    pub restored: Restored,
    /// The files a snapshot put back into `/mnt/data`.
    pub files: Vec<String>,
}

/// A live session in the registry, and when it was last used (the least recently used idle
/// one goes first when its tenant opens one too many).
struct Registered {
    live: LiveSession,
    last_used: Instant,
    /// It keeps its image in the cluster's store (a drain keeps it for another node).
    durable: bool,
}

pub struct Sessions {
    engine: Engine,
    limits: SessionLimits,
    key: Vec<u8>,
    files: Option<Arc<FileStore>>,
    /// The cluster, when its store outlives this node.
    cluster: Option<Arc<Cluster>>,
    map: Mutex<HashMap<(String, String), Registered>>,
    /// Why sessions that are gone from `map` ended, so that their next use says so rather than
    /// "no session": the most recent [`ENDED_KEPT`], each for [`ENDED_FOR`].
    ended: Mutex<HashMap<(String, String), (String, Instant)>>,
}

/// How many ended sessions' reasons are kept, and for how long.
const ENDED_KEPT: usize = 4096;
const ENDED_FOR: Duration = Duration::from_secs(3600);

/// A sealed snapshot's contents, once its seal checks out.
struct Unsealed {
    state: Vec<u8>,
    files: Vec<(String, Vec<u8>)>,
    runtime: ptc_engine::Runtime,
}

const MAGIC: &[u8; 8] = b"PTCSNAP1";
const TAG: usize = 32;

impl Sessions {
    /// `key` seals snapshots (derive it from the token secret so that servers sharing the
    /// secret accept each other's snapshots); with `files`, each session gets a `/mnt/data`;
    /// with a `cluster` whose store is durable, durable sessions keep their images there.
    pub fn new(
        engine: Engine,
        limits: SessionLimits,
        key: Vec<u8>,
        files: Option<Arc<FileStore>>,
        cluster: Option<Arc<Cluster>>,
    ) -> Arc<Self> {
        Arc::new(Sessions {
            engine,
            limits,
            key,
            files,
            cluster: cluster.filter(|c| c.durable()),
            map: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashMap::new()),
        })
    }

    /// The file store sessions keep their files in.
    pub fn file_store(&self) -> Option<&Arc<FileStore>> {
        self.files.as_ref()
    }

    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    /// Opens a session for `tenant` (restoring a snapshot if given).
    pub async fn open(&self, tenant: &str, options: OpenOptions) -> Result<Opened, Error> {
        let id = match options.id {
            Some(id) if !files::valid_session_id(&id) => {
                return Err(Error::new(
                    ErrorKind::Invalid,
                    "session_id may only contain letters, digits, '-' and '_' (1 to 128 of them)",
                ));
            }
            Some(id) => id,
            None => crate::core::token::random_hex::<16>(),
        };
        let idle = options.idle_timeout.unwrap_or(self.limits.idle_timeout);
        if idle.is_zero() || idle > self.limits.max_idle_timeout {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("idle_timeout_ms must be between 1 and {}", self.limits.max_idle_timeout.as_millis()),
            ));
        }
        let unsealed = match &options.snapshot {
            Some(bytes) => Some(self.unseal(tenant, bytes)?),
            None => None,
        };
        self.make_room(tenant, &id)?;
        let runtime = unsealed.as_ref().map_or(options.runtime, |u| u.runtime);
        let mut request = SessionRequest::new().with_tenant(tenant).with_idle_timeout(idle).with_runtime(runtime);
        request.limits = options.limits;
        let (restore, restore_files) = match unsealed {
            Some(u) => (Some(u.state), u.files),
            None => (None, Vec::new()),
        };
        request.restore = restore;
        let file_names: Vec<String> = restore_files.iter().map(|(name, _)| name.clone()).collect();
        let dir = match &self.files {
            Some(store) => Some(open_dir(store.clone(), tenant.to_string(), restore_files).await?),
            None => None,
        };
        request.data_dir = dir.as_ref().map(|d| d.path.clone());
        let keeper = options.durable.then(|| self.keeper(tenant, &id, &request, dir.as_deref())).flatten();
        request.keeper = keeper.clone().map(|k| k as Arc<dyn ptc_engine::Keeper>);
        let (session, restored) = match self.engine.open_session(request).await {
            Ok(opened) => opened,
            Err(e) => {
                if let (Some(store), Some(dir)) = (self.files.clone(), dir) {
                    let _ = tokio::task::spawn_blocking(move || store.remove_live(&dir)).await;
                }
                return Err(e.into());
            }
        };
        let live = LiveSession { session: session.clone(), files: dir.clone() };
        self.register(tenant, &id, &live, keeper)?;
        metrics::counter!("ptc_sessions_opened_total").increment(1);
        Ok(Opened { id, live, restored, files: file_names })
    }

    /// Puts `live` in the registry as `tenant`'s session `id` (refused if one is open there),
    /// and has what goes with it (its directory, its record in the cluster's store) go when
    /// it ends: unless it ended for a drain with its image kept, when another node takes it
    /// over, files and all.
    fn register(
        &self,
        tenant: &str,
        id: &str,
        live: &LiveSession,
        keeper: Option<Arc<SessionKeeper>>,
    ) -> Result<(), Error> {
        let durable = keeper.is_some();
        let (session, store, dir) = (live.session.clone(), self.files.clone(), live.files.clone());
        if keeper.is_some() || dir.is_some() {
            tokio::spawn(async move {
                session.ended().await;
                if session.kept() {
                    return;
                }
                if let Some(keeper) = keeper {
                    keeper.forget().await;
                }
                if let (Some(store), Some(dir)) = (store, dir) {
                    let _ = tokio::task::spawn_blocking(move || store.remove_live(&dir)).await;
                }
            });
        }
        let mut map = self.map.lock().unwrap();
        let key = (tenant.to_string(), id.to_string());
        if map.get(&key).is_some_and(|e| !e.live.session.is_ended()) {
            live.session.close();
            return Err(exists(id));
        }
        self.ended.lock().unwrap().remove(&key);
        map.insert(key, Registered { live: live.clone(), last_used: Instant::now(), durable });
        Ok(())
    }

    /// Ends sessions of `tenant` that ended or must go for a new one; refuses if `id` is
    /// taken or every session of the tenant is running.
    fn make_room(&self, tenant: &str, id: &str) -> Result<(), Error> {
        let mut map = self.map.lock().unwrap();
        let mut gone = Vec::new();
        map.retain(|key, e| {
            let ended = e.live.session.ended_error();
            if let Some(error) = &ended {
                gone.push((key.clone(), error.message().to_string()));
            }
            ended.is_none()
        });
        for (key, why) in gone {
            self.remember_ended(key, why);
        }
        if map.contains_key(&(tenant.to_string(), id.to_string())) {
            return Err(exists(id));
        }
        let mine: Vec<_> = map.iter().filter(|((t, _), _)| t == tenant).collect();
        if mine.len() < self.limits.max_per_tenant {
            return Ok(());
        }
        let oldest_idle = mine
            .iter()
            .filter(|(_, e)| !e.live.session.is_busy())
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, _)| (*k).clone());
        match oldest_idle {
            Some(key) => {
                if let Some(e) = map.remove(&key) {
                    tracing::info!(tenant, session = %key.1, "ending the tenant's longest idle session for a new one");
                    e.live.session.close_because(format!(
                        "this API key opened more than {} sessions, and it was the one idle the longest",
                        self.limits.max_per_tenant
                    ));
                    if let Some(error) = e.live.session.ended_error() {
                        self.remember_ended(key, error.message().to_string());
                    }
                }
                Ok(())
            }
            None => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "all {} sessions of this tenant are running executions; wait for one to finish or close one",
                    self.limits.max_per_tenant
                ),
            )),
        }
    }

    /// The live session `id` of `tenant`.
    pub fn get(&self, tenant: &str, id: &str) -> Result<LiveSession, Error> {
        let mut map = self.map.lock().unwrap();
        let key = (tenant.to_string(), id.to_string());
        match map.get_mut(&key) {
            Some(e) => match e.live.session.ended_error() {
                None => {
                    e.last_used = Instant::now();
                    Ok(e.live.clone())
                }
                Some(ended) => {
                    map.remove(&key);
                    self.remember_ended(key, ended.message().to_string());
                    Err(ended.into())
                }
            },
            None => match self.ended.lock().unwrap().get(&key) {
                Some((why, _)) => Err(Error::new(ErrorKind::NotFound, why.clone())),
                None => Err(not_found(id)),
            },
        }
    }

    /// Keeps why session `key` ended, for its next use (bounded: see [`ENDED_KEPT`]).
    fn remember_ended(&self, key: (String, String), why: String) {
        let mut ended = self.ended.lock().unwrap();
        ended.retain(|_, (_, at)| at.elapsed() < ENDED_FOR);
        if ended.len() >= ENDED_KEPT
            && let Some(oldest) = ended.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
        {
            ended.remove(&oldest);
        }
        ended.insert(key, (why, Instant::now()));
    }

    /// How many sessions of `tenant` are open.
    pub fn open_count(&self, tenant: &str) -> usize {
        self.map.lock().unwrap().iter().filter(|((t, _), e)| t == tenant && !e.live.session.is_ended()).count()
    }

    /// Ends session `id` of `tenant`; false if there was none.
    pub fn close(&self, tenant: &str, id: &str) -> bool {
        let key = (tenant.to_string(), id.to_string());
        let removed = self.map.lock().unwrap().remove(&key);
        match removed {
            Some(e) => {
                let alive = !e.live.session.is_ended();
                e.live.session.close();
                if let Some(error) = e.live.session.ended_error() {
                    self.remember_ended(key, error.message().to_string());
                }
                alive
            }
            None => false,
        }
    }

    /// Ends every session (server shutdown), but those that keep their image in the
    /// cluster's store: the engine's drain ends them once their image is kept (an idle one at
    /// once, a running one after its program), so that another node takes them over.
    pub fn clear(&self) {
        for (_, e) in self.map.lock().unwrap().drain() {
            if !e.durable {
                e.live.session.close();
            }
        }
    }

    /// Takes session `id`'s state (and with `include_files` its files, as they are once the
    /// state is taken) and seals them for `tenant`.
    pub async fn snapshot(&self, tenant: &str, id: &str, include_files: bool) -> Result<SealedSnapshot, Error> {
        let live = self.get(tenant, id)?;
        let max = self.limits.max_snapshot_bytes;
        let state = live.session.snapshot(max).await?;
        let files = match (&self.files, &live.files) {
            (Some(store), Some(dir)) if include_files => {
                let (store, dir, left) = (store.clone(), dir.clone(), max.saturating_sub(state.data.len() as u64));
                tokio::task::spawn_blocking(move || store.export(&dir, left))
                    .await
                    .map_err(|e| Error::new(ErrorKind::Internal, format!("reading the session's files: {e}")))??
            }
            _ => Vec::new(),
        };
        let names = files.iter().map(|(name, _)| name.clone()).collect();
        let bytes = self.seal(tenant, live.session.runtime(), &state, &files);
        Ok(SealedSnapshot { bytes, state, files: names })
    }

    fn mac(&self, tenant: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(&(tenant.len() as u64).to_le_bytes());
        mac.update(tenant.as_bytes());
        mac
    }

    fn seal(
        &self,
        tenant: &str,
        runtime: ptc_engine::Runtime,
        state: &SessionState,
        files: &[(String, Vec<u8>)],
    ) -> Vec<u8> {
        let header = serde_json::json!({
            "runtime": runtime.as_str(),
            "kept": state.kept,
            "modules": state.modules,
            "dropped": state.dropped.iter().map(|d| [&d.name, &d.reason]).collect::<Vec<_>>(),
            "state_bytes": state.data.len(),
            "files": files.iter().map(|(name, bytes)| serde_json::json!([name, bytes.len()])).collect::<Vec<_>>(),
        })
        .to_string();
        let file_bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
        let mut out = Vec::with_capacity(state.data.len() + file_bytes + header.len() + 96);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.engine.runtime_digest(runtime));
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&state.data);
        for (_, bytes) in files {
            out.extend_from_slice(bytes);
        }
        let mut mac = self.mac(tenant);
        mac.update(&out);
        out.extend_from_slice(&mac.finalize().into_bytes());
        out
    }

    /// The guest state and files inside a sealed snapshot, once its seal, tenant and component
    /// check out.
    fn unseal(&self, tenant: &str, bytes: &[u8]) -> Result<Unsealed, Error> {
        let invalid = |why: &str| Error::new(ErrorKind::Invalid, format!("the snapshot is refused: {why}"));
        if bytes.len() < MAGIC.len() + 32 + 8 + TAG || &bytes[..MAGIC.len()] != MAGIC {
            return Err(invalid("it is not a ptc-engine session snapshot (or not version 1)"));
        }
        let (body, tag) = bytes.split_at(bytes.len() - TAG);
        let mut mac = self.mac(tenant);
        mac.update(body);
        if mac.verify_slice(tag).is_err() {
            return Err(invalid(
                "its seal does not match: it was changed, or taken for another tenant, or by a server with another \
                 token secret",
            ));
        }
        let rest = &body[MAGIC.len() + 32..];
        let header_len = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")) as usize;
        let truncated = || invalid("it is truncated");
        let header = rest.get(8..8usize.checked_add(header_len).ok_or_else(truncated)?).ok_or_else(truncated)?;
        let mut payload = &rest[8 + header_len..];
        // Sealed by this server's key, so well formed unless the server wrote it wrong; read
        // defensively all the same. Snapshots without files have no `state_bytes`, those of
        // the default runtime before python-data no `runtime`.
        let header: Header = serde_json::from_slice(header).map_err(|_| invalid("its header is malformed"))?;
        let runtime: ptc_engine::Runtime = match &header.runtime {
            Some(name) => name.parse().map_err(|_| invalid("it names a runtime this server does not know"))?,
            None => ptc_engine::Runtime::Python,
        };
        if runtime == ptc_engine::Runtime::PythonData && !self.engine.has_python_data() {
            return Err(invalid(
                "it was taken in the python-data runtime, which this server does not enable; restore it on a server \
                 started with --python-data",
            ));
        }
        let digest = &body[MAGIC.len()..MAGIC.len() + 32];
        if digest != self.engine.runtime_digest(runtime) {
            return Err(invalid(
                "it was taken with another version of the sandbox runtime; take a new snapshot on a server of this \
                 version (or restore it on one of the version that took it)",
            ));
        }
        let state_len = header.state_bytes.unwrap_or(payload.len());
        let state = payload.get(..state_len).ok_or_else(truncated)?.to_vec();
        payload = &payload[state_len..];
        let mut files = Vec::with_capacity(header.files.len());
        for (name, len) in header.files {
            let bytes = payload.get(..len).ok_or_else(truncated)?;
            files.push((name, bytes.to_vec()));
            payload = &payload[len..];
        }
        Ok(Unsealed { state, files, runtime })
    }
}

/// The part of a snapshot's header the server reads back.
#[derive(serde::Deserialize)]
struct Header {
    runtime: Option<String>,
    state_bytes: Option<usize>,
    #[serde(default)]
    files: Vec<(String, usize)>,
}

/// A new live-session directory for `tenant`, with `files` (from a snapshot) written into it.
async fn open_dir(
    store: Arc<FileStore>,
    tenant: String,
    files: Vec<(String, Vec<u8>)>,
) -> Result<Arc<files::SessionDir>, Error> {
    tokio::task::spawn_blocking(move || {
        let dir = store.open_live(&tenant)?;
        if let Err(e) = store.write(&dir, &files) {
            store.remove_live(&dir);
            return Err(e.into());
        }
        Ok(Arc::new(dir))
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Internal, format!("preparing the session's files: {e}")))?
}

/// 32 bytes for sealing snapshots, derived from the token secret (so servers that share the
/// secret accept each other's snapshots, and a leaked snapshot key is not a token key).
pub fn snapshot_key(signer: &crate::core::token::Signer) -> Vec<u8> {
    signer.derive(b"ptc-engine session snapshots v1")
}

fn not_found(id: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!(
            "no session {id:?}: it never existed, ended (closed, idle too long, or its execution timed out) or belongs \
         to another key; open a new session"
        ),
    )
}

fn exists(id: &str) -> Error {
    Error::new(ErrorKind::Exists, format!("a session {id:?} is already open; use it, close it, or choose another id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_snapshot_of_another_runtime_version_is_refused_in_words() {
        let mut config = ptc_engine::EngineConfig::default();
        config.cache_dir = Some(crate::default_cache_dir());
        let engine = Engine::new(config).expect("engine");
        let sessions = Sessions::new(engine, SessionLimits::default(), b"key".to_vec(), None, None);
        let state = SessionState { data: b"state".to_vec(), kept: vec![], modules: vec![], dropped: vec![] };
        let sealed = sessions.seal("t", ptc_engine::Runtime::Python, &state, &[]);
        assert_eq!(sessions.unseal("t", &sealed).ok().map(|u| u.state), Some(b"state".to_vec()));
        // What a server of another runtime version seals with the same key: the same layout
        // and a valid seal, with another component digest in it.
        let mut other = sealed[..sealed.len() - TAG].to_vec();
        other[MAGIC.len()] ^= 1;
        let mut mac = sessions.mac("t");
        mac.update(&other);
        other.extend_from_slice(&mac.finalize().into_bytes());
        let refused = sessions.unseal("t", &other).err().expect("refused");
        assert_eq!(refused.kind(), ErrorKind::Invalid, "{refused:?}");
        assert!(refused.message().contains("another version of the sandbox runtime"), "{}", refused.message());
        assert!(refused.message().contains("take a new snapshot"), "{}", refused.message());
    }
}
