//! Session files for the HTTP API: `/mnt/data` inside the sandbox is a per-session directory
//! on the host, `<files_dir>/<tenant digest>/<session id>/`.
//!
//! Files named in a request's `files` (from an earlier session of the same tenant) are copied
//! in before the program runs; files the program creates or changes are returned. A tenant's
//! files are capped in bytes and entries; a run that leaves the tenant over quota has what it
//! wrote removed. Sessions untouched for `ttl` are deleted.
//!
//! Everything in a session directory was written by a program, so every name, link and size
//! in it is hostile. The host never resolves a path it did not build itself: it opens one
//! component at a time from a directory handle, refusing links (`open_dir_nofollow`, `O_NOFOLLOW`),
//! and reads metadata without following them. Links a program makes inside `/mnt/data` stay
//! there for the program itself (the sandbox resolves them within the session), but the host
//! never follows, lists, exports or imports them; nor anything that is not a plain directory
//! or a regular file with one link (hard links, FIFOs, sockets, devices).
//!
//! Usage is kept per tenant and session in memory, updated from bounded walks of one session
//! (never a whole tenant on the request path). Every function here does blocking I/O: callers
//! on the async runtime go through `spawn_blocking`.

mod paths;
mod scan;
mod transfer;

use paths::*;
use paths::{Kind, entry_of};
use scan::{INLINE_WALK_ENTRIES, walk};
pub use scan::{Scan, ScanEntry, Usage};

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FilesConfig {
    pub dir: PathBuf,
    pub ttl: Duration,
    pub quota_bytes: u64,
    /// Entries (files, directories, links) a tenant may keep.
    pub quota_files: u64,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            dir: std::env::temp_dir().join("ptc-engine-files"),
            ttl: Duration::from_secs(24 * 3600),
            quota_bytes: 100 * 1024 * 1024,
            quota_files: 1000,
        }
    }
}

/// A file to copy into a run's session: from session `session_id` of the same tenant, found
/// by `id` (as the API handed it out) when given, else by `name`; written as `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    pub session_id: String,
    pub id: Option<String>,
}

/// A file of a session, as the API names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileRef {
    pub id: String,
    pub name: String,
    pub session_id: String,
    pub size: u64,
}

/// Why a file operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilesError {
    /// The request named something invalid or absent: the client's fault (400).
    Invalid(String),
    /// The tenant's quota does not allow it (the message says which bound).
    Quota(String),
    /// The host's filesystem failed: the server's fault (500).
    Io(String),
}

impl FilesError {
    pub fn message(&self) -> &str {
        match self {
            FilesError::Invalid(m) | FilesError::Quota(m) | FilesError::Io(m) => m,
        }
    }
}

fn io_error(context: &str) -> impl FnOnce(io::Error) -> FilesError + '_ {
    move |e| FilesError::Io(format!("{context}: {e}"))
}

/// One session's directory, beneath the tenant's, beneath the files root. It holds no
/// descriptor of its own: each use opens the two directories again from the root, one
/// component at a time and never through a link (two `openat`s), so that a paused run, which
/// keeps its `SessionDir` between requests, costs the server no descriptor (a held-out run saw
/// 2 per paused HTTP execution, 8,000 at 4,000 paused).
pub struct SessionDir {
    root: Arc<Dir>,
    /// The tenant's directory's name beneath the root.
    tenant_name: String,
    /// The host path, for the sandbox's preopen (built only from validated components).
    pub path: PathBuf,
    tenant: String,
    pub id: String,
}

impl SessionDir {
    /// The tenant's directory, where imports come from.
    fn tenant_dir(&self) -> io::Result<Dir> {
        open_dir_beneath(&self.root, Path::new(&self.tenant_name))
    }

    /// The session's directory.
    fn dir(&self) -> io::Result<Dir> {
        self.tenant_dir()?.open_dir_nofollow(&self.id)
    }
}

pub struct FileStore {
    config: FilesConfig,
    root: Arc<Dir>,
    /// Per tenant digest: each session's usage as last seen. A tenant is loaded once (a walk
    /// of its sessions, each bounded) and kept up to date from session walks afterwards.
    usage: Mutex<HashMap<String, HashMap<String, Usage>>>,
    /// Directories of live sessions (tenant digest, name): the sweep never removes them,
    /// however long ago they were written; their session removes them when it ends.
    live: Mutex<HashSet<(String, String)>>,
}

/// What a live session's directory is named: never a name the HTTP API hands out (those
/// have no `live_` prefix), and new for every session, so a reused session id finds no
/// files of an earlier session.
const LIVE_PREFIX: &str = "live_";

fn tenant_dir_name(tenant: &str) -> String {
    hex::encode(&Sha256::digest(tenant.as_bytes())[..12])
}

/// How long the ids the API hands out are: LibreChat's download route takes only ids of 21
/// characters of `[A-Za-z0-9_-]` (nanoid's), for sessions and files alike.
pub const ID_CHARS: usize = 21;

/// A file's id: derived from its session and name, so that it names the same file for as long
/// as the file has that name (21 characters of base64url, 126 bits).
pub(crate) fn file_id(session_id: &str, name: &str) -> String {
    use base64::Engine as _;
    let digest = Sha256::digest(format!("{session_id}/{name}").as_bytes());
    let mut id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16]);
    id.truncate(ID_CHARS);
    id
}

/// A new session id the API hands out: 126 random bits as 21 characters of base64url.
pub fn new_session_id() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source");
    let mut id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    id.truncate(ID_CHARS);
    id
}

/// A regular file of a session as the file endpoints list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// Its path beneath the session directory (`/mnt/data/NAME` in the sandbox).
    pub name: String,
    pub size: u64,
    pub modified: Option<SystemTime>,
}

/// Session ids become directory names: only `[A-Za-z0-9_-]`, 1–128 characters.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl FileStore {
    /// Opens (creating it if needed) the files directory. The server does not need root:
    /// it needs only to own this directory.
    pub fn new(config: FilesConfig) -> io::Result<Self> {
        std::fs::create_dir_all(&config.dir)?;
        let root = Dir::open_ambient_dir(&config.dir, ambient_authority())?;
        Ok(FileStore {
            config,
            root: Arc::new(root),
            usage: Mutex::new(HashMap::new()),
            live: Mutex::new(HashSet::new()),
        })
    }

    pub fn config(&self) -> &FilesConfig {
        &self.config
    }

    /// The most entries one walk of a session reads: past the quota the answer is "over".
    fn walk_limit(&self) -> u64 {
        self.config.quota_files.saturating_add(1)
    }

    fn tenant_dir(&self, tenant: &str) -> io::Result<Dir> {
        create_dir_beneath(&self.root, Path::new(&tenant_dir_name(tenant)))
    }

    /// The session's directory, created if needed.
    pub fn open_session(&self, tenant: &str, session_id: &str) -> Result<SessionDir, FilesError> {
        if !valid_session_id(session_id) {
            return Err(FilesError::Invalid(
                "session_id may only contain letters, digits, '-' and '_' (at most 128)".into(),
            ));
        }
        let tenant_dir = self.tenant_dir(tenant).map_err(io_error("cannot create the tenant directory"))?;
        self.load_tenant(tenant, &tenant_dir);
        create_dir_beneath(&tenant_dir, Path::new(session_id))
            .map_err(io_error("cannot create the session directory"))?;
        Ok(self.session_dir(tenant, session_id))
    }

    /// Session `session_id` of `tenant`, as a handle that opens it at each use.
    fn session_dir(&self, tenant: &str, session_id: &str) -> SessionDir {
        let tenant_name = tenant_dir_name(tenant);
        SessionDir {
            root: self.root.clone(),
            path: self.config.dir.join(&tenant_name).join(session_id),
            tenant_name,
            tenant: tenant.to_string(),
            id: session_id.to_string(),
        }
    }

    /// A new directory for a live session of `tenant`, kept (never swept) until
    /// [`FileStore::remove_live`].
    pub fn open_live(&self, tenant: &str) -> Result<SessionDir, FilesError> {
        let name = format!("{LIVE_PREFIX}{}", crate::core::token::random_hex::<16>());
        let session = self.open_session(tenant, &name)?;
        self.live.lock().unwrap().insert((tenant_dir_name(tenant), name));
        Ok(session)
    }

    /// The directory `name` of a live session of `tenant` that another node opened (on the
    /// volume the nodes share), taken over here: kept until [`FileStore::remove_live`].
    pub fn reopen_live(&self, tenant: &str, name: &str) -> Result<SessionDir, FilesError> {
        if !name.starts_with(LIVE_PREFIX) {
            return Err(FilesError::Invalid(format!("{name:?} is not a live session's directory")));
        }
        let session = self.open_session(tenant, name)?;
        self.live.lock().unwrap().insert((tenant_dir_name(tenant), name.to_string()));
        Ok(session)
    }

    /// Removes a live session's directory and forgets its usage.
    pub fn remove_live(&self, session: &SessionDir) {
        let key = tenant_dir_name(&session.tenant);
        // cap-std removes links as links: nothing outside the session is touched.
        if let Err(e) = session.tenant_dir().and_then(|t| t.remove_dir_all(&session.id))
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(session = %session.id, "removing a live session's files: {e}");
        }
        if let Some(sessions) = self.usage.lock().unwrap().get_mut(&key) {
            sessions.remove(&session.id);
        }
        self.live.lock().unwrap().remove(&(key, session.id.clone()));
    }

    /// Session `session_id` of `tenant` if it exists (never created: a listing or a download
    /// of another tenant's or an unknown session finds nothing).
    pub fn existing_session(&self, tenant: &str, session_id: &str) -> Option<SessionDir> {
        if !valid_session_id(session_id) {
            return None;
        }
        let session = self.session_dir(tenant, session_id);
        session.dir().ok()?;
        Some(session)
    }

    /// Removes a whole session directory (an upload that kept nothing) and forgets its usage.
    pub fn remove_session(&self, session: &SessionDir) {
        // cap-std removes links as links: nothing outside the session is touched.
        let _ = session.tenant_dir().and_then(|t| t.remove_dir_all(&session.id));
        if let Some(sessions) = self.usage.lock().unwrap().get_mut(&tenant_dir_name(&session.tenant)) {
            sessions.remove(&session.id);
        }
    }

    /// First sight of a tenant since start: what its sessions hold, each walk bounded.
    fn load_tenant(&self, tenant: &str, tenant_dir: &Dir) {
        let key = tenant_dir_name(tenant);
        if self.usage.lock().unwrap().contains_key(&key) {
            return;
        }
        let mut sessions = HashMap::new();
        if let Ok(entries) = tenant_dir.entries() {
            for item in entries.flatten() {
                let name = item.file_name();
                let Some(id) = name.to_str().filter(|id| valid_session_id(id)) else { continue };
                let Ok(dir) = tenant_dir.open_dir_nofollow(&name) else { continue };
                let usage = walk(&dir, self.walk_limit()).map(|s| s.usage).unwrap_or_default();
                sessions.insert(id.to_string(), usage);
            }
        }
        self.usage.lock().unwrap().entry(key).or_insert(sessions);
    }

    /// The tenant's usage with `session`'s replaced by `session_usage`.
    fn tenant_usage_with(&self, tenant: &str, session: &str, session_usage: Usage) -> Usage {
        let usage = self.usage.lock().unwrap();
        let others = usage.get(&tenant_dir_name(tenant)).map_or(Usage::default(), |sessions| {
            sessions.iter().filter(|(id, _)| *id != session).fold(Usage::default(), |acc, (_, u)| acc.add(*u))
        });
        others.add(session_usage)
    }

    fn record(&self, tenant: &str, session: &str, session_usage: Usage) {
        let mut usage = self.usage.lock().unwrap();
        usage.entry(tenant_dir_name(tenant)).or_default().insert(session.to_string(), session_usage);
    }

    fn over_quota(&self, usage: Usage) -> bool {
        usage.bytes > self.config.quota_bytes || usage.files > self.config.quota_files
    }

    fn quota_message(&self, usage: Usage) -> String {
        format!(
            "File quota exceeded: a tenant may keep {} bytes in {} entries under /mnt/data, and this run would leave {} bytes in {} entries",
            self.config.quota_bytes, self.config.quota_files, usage.bytes, usage.files
        )
    }

    /// Refuses adding `needed` to `session` if that would leave the tenant over quota
    /// (`what` names the addition in the message).
    fn check_room(&self, session: &SessionDir, needed: Usage, what: &str) -> Result<(), FilesError> {
        let before = self.scan(session)?;
        let after = self.tenant_usage_with(&session.tenant, &session.id, before.usage.add(needed));
        if self.over_quota(after) {
            return Err(FilesError::Quota(format!(
                "File quota exceeded: {what} would leave {} bytes in {} entries; a tenant may keep {} bytes in {} entries",
                after.bytes, after.files, self.config.quota_bytes, self.config.quota_files
            )));
        }
        Ok(())
    }

    /// What the session holds now (bounded by the quota).
    pub fn scan(&self, session: &SessionDir) -> Result<Scan, FilesError> {
        session
            .dir()
            .and_then(|dir| walk(&dir, self.walk_limit()))
            .map_err(io_error("cannot list the session directory"))
    }

    /// While a run goes on: whether the tenant is over quota with the session as it is now.
    pub fn check(&self, session: &SessionDir) -> Result<(), FilesError> {
        let scan = self.scan(session)?;
        let usage = self.tenant_usage_with(&session.tenant, &session.id, scan.usage);
        if !scan.complete || self.over_quota(usage) {
            Err(FilesError::Quota(self.quota_message(usage)))
        } else {
            Ok(())
        }
    }

    /// Counts `session` as it is now in its tenant's usage (after an upload).
    pub fn refresh(&self, session: &SessionDir) -> Result<(), FilesError> {
        let usage = self.scan(session)?.usage;
        self.record(&session.tenant, &session.id, usage);
        Ok(())
    }

    /// Regular files created or changed since `before`, sorted by name.
    pub fn changed(session: &SessionDir, before: &Scan, after: &Scan) -> Vec<FileRef> {
        let mut out: Vec<FileRef> = after
            .entries
            .iter()
            .filter(|(path, e)| e.kind == Kind::File && before.entries.get(*path) != Some(*e))
            .filter_map(|(path, e)| {
                let name = path.to_str()?.to_string();
                Some(FileRef { id: file_id(&session.id, &name), session_id: session.id.clone(), name, size: e.size })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The session as it is now if it holds at most `INLINE_WALK_ENTRIES` (64) entries: a walk
    /// short enough for an async thread. `None`: walk it on the blocking pool.
    pub fn scan_small(&self, session: &SessionDir) -> Option<Scan> {
        session.dir().and_then(|dir| walk(&dir, INLINE_WALK_ENTRIES)).ok().filter(|scan| scan.complete)
    }

    /// After a run, however it ended: the files it created or changed, or — if it leaves the
    /// tenant over quota — a quota error, with everything it created or changed removed.
    pub fn settle(&self, session: &SessionDir, before: &Scan) -> Result<Vec<FileRef>, FilesError> {
        let after = self.scan(session)?;
        self.settle_with(session, before, after)
    }

    /// [`FileStore::settle`] with the session's walk already taken.
    pub fn settle_with(&self, session: &SessionDir, before: &Scan, after: Scan) -> Result<Vec<FileRef>, FilesError> {
        let usage = self.tenant_usage_with(&session.tenant, &session.id, after.usage);
        if after.complete && !self.over_quota(usage) {
            self.record(&session.tenant, &session.id, after.usage);
            return Ok(Self::changed(session, before, &after));
        }
        let removed = session.dir().and_then(|dir| remove_new(&dir, Path::new(""), before));
        let left = self.scan(session).map(|s| s.usage).unwrap_or(before.usage);
        self.record(&session.tenant, &session.id, left);
        if let Err(e) = removed {
            tracing::warn!(session = %session.id, "removing an over-quota run's files: {e}");
        }
        Err(FilesError::Quota(format!("{}; what the run wrote was removed", self.quota_message(usage))))
    }

    /// Puts the session back as `before` (an exported scan) had it, for a replay of a run that
    /// started from it: what the run created since is removed; a file or directory it started
    /// with that is gone or changed cannot be put back, and refuses the replay (the message
    /// says which).
    pub fn rewind(&self, session: &SessionDir, before: &[ScanEntry]) -> Result<Scan, String> {
        let mut scan = Scan::of(before);
        let now = self.scan(session).map_err(|e| e.message().to_string())?;
        for (path, old) in &scan.entries {
            if now.entries.get(path) != Some(old) {
                return Err(format!(
                    "/mnt/data/{} changed since the program started, so running it again would not repeat it",
                    path.display()
                ));
            }
        }
        session
            .dir()
            .and_then(|dir| remove_new(&dir, Path::new(""), &scan))
            .map_err(|e| format!("removing what the first run wrote: {e}"))?;
        scan.usage = now.usage;
        Ok(scan)
    }

    /// The directory of a run that goes on here (thawed from its image), as it is: what it
    /// held `before` the program started, for the files it wrote, and its usage now.
    pub fn reopen(&self, session: &SessionDir, before: &[ScanEntry]) -> Result<Scan, String> {
        let mut scan = Scan::of(before);
        scan.usage = self.scan(session).map_err(|e| e.message().to_string())?.usage;
        Ok(scan)
    }

    /// Deletes sessions not modified for the retention period.
    pub fn sweep(&self) {
        let Ok(tenants) = self.root.entries() else { return };
        let now = SystemTime::now();
        for tenant in tenants.flatten() {
            let tenant_name = tenant.file_name();
            // The server's own directories beside the tenants' (hibernated images) have a `.`
            // in their names, which a tenant's (hex) never has.
            if tenant_name.to_str().is_none_or(|n| n.contains('.')) {
                continue;
            }
            let Ok(tenant_dir) = self.root.open_dir_nofollow(&tenant_name) else { continue };
            let Ok(sessions) = tenant_dir.entries() else { continue };
            for session in sessions.flatten() {
                let name = session.file_name();
                if let (Some(t), Some(s)) = (tenant_name.to_str(), name.to_str())
                    && self.live.lock().unwrap().contains(&(t.to_string(), s.to_string()))
                {
                    continue;
                }
                let Ok(dir) = tenant_dir.open_dir_nofollow(&name) else { continue };
                let scan = walk(&dir, self.walk_limit()).unwrap_or_default();
                let newest = scan
                    .entries
                    .values()
                    .filter_map(|e| e.modified)
                    .chain(dir.dir_metadata().ok().and_then(|m| m.modified().ok()).map(|t| t.into_std()))
                    .max();
                if newest.is_some_and(|t| now.duration_since(t).unwrap_or_default() > self.config.ttl) {
                    // cap-std removes links as links: nothing outside the session is touched.
                    if tenant_dir.remove_dir_all(&name).is_ok()
                        && let (Some(t), Some(s)) = (tenant_name.to_str(), name.to_str())
                        && let Some(sessions) = self.usage.lock().unwrap().get_mut(t)
                    {
                        sessions.remove(s);
                    }
                }
            }
        }
    }
}

/// Removes, beneath `dir`, every entry that `before` did not have or had otherwise; returns
/// the first error but goes on removing.
fn remove_new(dir: &Dir, rel: &Path, before: &Scan) -> io::Result<()> {
    let mut first_error = Ok(());
    for item in dir.entries()? {
        let Ok(item) = item else { continue };
        let name = item.file_name();
        let path = rel.join(&name);
        let Ok(meta) = dir.symlink_metadata(&name) else { continue };
        let now = entry_of(&meta);
        let result = match (before.entries.get(&path), now.kind) {
            (Some(old), Kind::Dir) if old.kind == Kind::Dir => {
                dir.open_dir_nofollow(&name).and_then(|sub| remove_new(&sub, &path, before))
            }
            (_, Kind::Dir) => dir.remove_dir_all(&name),
            (Some(old), _) if *old == now => Ok(()),
            _ => dir.remove_file_or_symlink(&name),
        };
        if first_error.is_ok() {
            first_error = result;
        }
    }
    first_error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_session_ids_cannot_escape() {
        for bad in ["../x", "/etc/passwd", "a/../../b", "", "a\0b"] {
            assert!(safe_relative(bad).is_none(), "{bad}");
        }
        assert_eq!(safe_relative("dir/file.csv"), Some(PathBuf::from("dir/file.csv")));
        for bad in ["..", "a/b", "a.b", "", &"x".repeat(129)] {
            assert!(!valid_session_id(bad), "{bad}");
        }
        assert!(valid_session_id("sess_01-A"));
    }

    #[test]
    fn a_live_directory_named_by_another_node_is_reopened_only_beneath_its_tenant() {
        let dir = std::env::temp_dir().join(format!("ptc-files-live-{}", std::process::id()));
        let store = FileStore::new(FilesConfig { dir: dir.clone(), ..FilesConfig::default() }).unwrap();
        let mine = store.open_live("acme").unwrap();
        std::fs::write(mine.path.join("kept.txt"), "x").unwrap();
        // A session record in the shared store names its directory: whatever it says, it is
        // looked for beneath the tenant that asks, and only as a live session's.
        for bad in ["live_../x", "live_a/../../b", "../live_x", "sess_01", "live_/"] {
            assert!(store.reopen_live("acme", bad).is_err(), "{bad}");
        }
        let again = store.reopen_live("acme", &mine.id).unwrap();
        assert_eq!(std::fs::read_to_string(again.path.join("kept.txt")).unwrap(), "x");
        // Another tenant naming it gets a directory of its own, empty.
        let other = store.reopen_live("globex", &mine.id).unwrap();
        assert_ne!(other.path, again.path);
        assert!(!other.path.join("kept.txt").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
