//! One run's session files (`/mnt/data`): prepared before it starts, watched against the
//! tenant's quota while it runs, and settled exactly once however it ends. An HTTP run's
//! directory is its session id's; an execution in a live session (gRPC) uses the session's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptc_engine::Control;
use tokio_util::task::TaskTracker;

use super::files::{FileRef, FileStore, FilesError, Import, Scan, ScanEntry, SessionDir};

/// How often a running execution's session directory is checked against the file quota
/// (also once at every pause and at the end). Between two checks a program can write past
/// the quota by what it writes in this time; then it is stopped and what it wrote is removed.
const QUOTA_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The session directory of one run, what it held before the program started, and how the
/// run's files were settled once it ended (by whichever of the request or the watcher saw
/// the end first).
pub(crate) struct RunFiles {
    pub store: Arc<FileStore>,
    pub session: Arc<SessionDir>,
    before: Scan,
    /// Whether the directory is removed once the run is over (an execution's own
    /// `/mnt/data`): when the last holder (the stream, the watcher) lets go.
    remove: bool,
    /// Set when a check found the tenant over quota (the execution was cancelled for it).
    over_quota: Mutex<Option<String>>,
    settled: Mutex<Option<Result<Vec<FileRef>, FilesError>>>,
}

impl RunFiles {
    /// The session directory, with `imports` from earlier sessions of the tenant copied in.
    pub(crate) async fn prepare(
        files: &Arc<FileStore>,
        tenant: &str,
        session_id: &str,
        imports: Vec<Import>,
    ) -> Result<Arc<Self>, FilesError> {
        let (files, tenant, session_id) = (files.clone(), tenant.to_string(), session_id.to_string());
        tokio::task::spawn_blocking(move || {
            let session = files.open_session(&tenant, &session_id)?;
            files.import(&session, &imports)?;
            let before = files.scan(&session)?;
            Ok(Self::new(&files, Arc::new(session), before))
        })
        .await
        .unwrap_or_else(|e| Err(FilesError::Io(format!("preparing files: {e}"))))
    }

    /// The session directory of a run being replayed, put back as it was when the run first
    /// started (`before`, kept in its journal).
    pub(crate) async fn rewind(
        files: &Arc<FileStore>,
        tenant: &str,
        session_id: &str,
        before: Vec<ScanEntry>,
    ) -> Result<Arc<Self>, String> {
        Self::again(files, tenant, session_id, move |files, session| files.rewind(session, &before)).await
    }

    /// Session directory `session_id` as it is, for a run thawed from its image: `before`
    /// is what it held when the program first started.
    pub(crate) async fn reopen(
        files: &Arc<FileStore>,
        tenant: &str,
        session_id: &str,
        before: Vec<ScanEntry>,
    ) -> Result<Arc<Self>, String> {
        Self::again(files, tenant, session_id, move |files, session| files.reopen(session, &before)).await
    }

    /// Session directory `session_id` for a run that started elsewhere, with what it held
    /// before as `before_of` finds it (off the async workers: it walks the directory).
    async fn again(
        files: &Arc<FileStore>,
        tenant: &str,
        session_id: &str,
        before_of: impl FnOnce(&FileStore, &SessionDir) -> Result<Scan, String> + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        let (files, tenant, session_id) = (files.clone(), tenant.to_string(), session_id.to_string());
        tokio::task::spawn_blocking(move || {
            let session = files.open_session(&tenant, &session_id).map_err(|e| e.message().to_string())?;
            let before = before_of(&files, &session)?;
            Ok(Self::new(&files, Arc::new(session), before))
        })
        .await
        .unwrap_or_else(|e| Err(format!("preparing files: {e}")))
    }

    /// What the directory held before the program started.
    pub(crate) fn before(&self) -> &Scan {
        &self.before
    }

    /// The next run in a live session's directory (which holds what earlier runs left).
    pub(crate) async fn resume(files: &Arc<FileStore>, session: &Arc<SessionDir>) -> Result<Arc<Self>, FilesError> {
        if let Some(before) = files.scan_small(session) {
            return Ok(Self::new(files, session.clone(), before));
        }
        let (files, session) = (files.clone(), session.clone());
        tokio::task::spawn_blocking(move || Ok(Self::new(&files, session.clone(), files.scan(&session)?)))
            .await
            .unwrap_or_else(|e| Err(FilesError::Io(format!("preparing files: {e}"))))
    }

    /// A `/mnt/data` for one execution outside any session, holding `inputs` (name, bytes),
    /// under the tenant's quota, deleted when the run is over and its files were read.
    pub(crate) async fn own(
        files: &Arc<FileStore>,
        tenant: &str,
        inputs: Vec<(String, Vec<u8>)>,
    ) -> Result<Arc<Self>, FilesError> {
        let (store, tenant) = (files.clone(), tenant.to_string());
        tokio::task::spawn_blocking(move || {
            let session = store.open_live(&tenant)?;
            if let Err(e) = store.put(&session, &inputs) {
                store.remove_live(&session);
                return Err(e);
            }
            let before = if inputs.is_empty() { Scan::default() } else { store.scan(&session)? };
            Ok(Arc::new(Self::fields(store, Arc::new(session), before, true)))
        })
        .await
        .unwrap_or_else(|e| Err(FilesError::Io(format!("preparing files: {e}"))))
    }

    /// Writes `inputs` (name, bytes) into a live session's `/mnt/data` before its next run.
    pub(crate) async fn put(
        files: &Arc<FileStore>,
        session: &Arc<SessionDir>,
        inputs: Vec<(String, Vec<u8>)>,
    ) -> Result<(), FilesError> {
        if inputs.is_empty() {
            return Ok(());
        }
        let (store, session) = (files.clone(), session.clone());
        tokio::task::spawn_blocking(move || store.put(&session, &inputs))
            .await
            .unwrap_or_else(|e| Err(FilesError::Io(format!("writing files: {e}"))))
    }

    fn new(store: &Arc<FileStore>, session: Arc<SessionDir>, before: Scan) -> Arc<Self> {
        Arc::new(Self::fields(store.clone(), session, before, false))
    }

    fn fields(store: Arc<FileStore>, session: Arc<SessionDir>, before: Scan, remove: bool) -> Self {
        RunFiles { store, session, before, remove, over_quota: Mutex::new(None), settled: Mutex::new(None) }
    }

    /// The bytes of the files the run created or changed (once settled), within `max_bytes`.
    pub(crate) async fn read(
        self: &Arc<Self>,
        changed: Vec<FileRef>,
        max_bytes: u64,
    ) -> Vec<(FileRef, Option<Vec<u8>>)> {
        if changed.is_empty() {
            return Vec::new();
        }
        let (run, files) = (self.clone(), self.store.clone());
        tokio::task::spawn_blocking(move || files.read(&run.session, &changed, max_bytes)).await.unwrap_or_default()
    }

    /// The run's files once it has ended: checked against the quota exactly once.
    pub(crate) async fn settle(self: &Arc<Self>) -> Result<Vec<FileRef>, FilesError> {
        let files = &self.store;
        {
            let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(done) = settled.as_ref() {
                return done.clone();
            }
            if let Some(after) = files.scan_small(&self.session) {
                return settled.insert(files.settle_with(&self.session, &self.before, after)).clone();
            }
        }
        let (run, files) = (self.clone(), files.clone());
        tokio::task::spawn_blocking(move || {
            let mut settled = run.settled.lock().unwrap_or_else(|e| e.into_inner());
            settled.get_or_insert_with(|| files.settle(&run.session, &run.before)).clone()
        })
        .await
        .unwrap_or_else(|e| Err(FilesError::Io(format!("settling files: {e}"))))
    }

    /// Why the run was stopped for the quota, if it was.
    pub(crate) fn over_quota(&self) -> Option<String> {
        self.over_quota.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Why the run broke the tenant's file quota, if it did: while running (it was stopped;
    /// the flag is true) or at its end (`settled`, what [`RunFiles::settle`] returned).
    pub(crate) fn quota_breach(&self, settled: &Result<Vec<FileRef>, FilesError>) -> Option<(String, bool)> {
        if let Some(why) = self.over_quota() {
            return Some((why, true));
        }
        match settled {
            Err(FilesError::Quota(m)) => Some((m.clone(), false)),
            _ => None,
        }
    }

    /// Checks the quota now; over it, the execution is cancelled and the reason kept.
    pub(crate) async fn check(self: &Arc<Self>, control: &Control) -> bool {
        let (run, files) = (self.clone(), self.store.clone());
        let result = tokio::task::spawn_blocking(move || files.check(&run.session)).await;
        if let Ok(Err(FilesError::Quota(message))) = result {
            *self.over_quota.lock().unwrap_or_else(|e| e.into_inner()) = Some(message);
            control.cancel();
            return false;
        }
        true
    }

    /// Watches the run's files until it ends, then settles them, so that the quota holds on
    /// every ending, also one no request sees (expired or cancelled while paused).
    pub(crate) fn watch(self: &Arc<Self>, control: Control, tasks: &TaskTracker) {
        let run = self.clone();
        tasks.spawn(async move {
            // The first check one interval in: a program that ends sooner is settled at its end
            // anyway (and most do: a live session's `pass` takes ~0.2 ms).
            let first = tokio::time::Instant::now() + QUOTA_CHECK_INTERVAL;
            let mut tick = tokio::time::interval_at(first, QUOTA_CHECK_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut checked_while_paused = false;
            loop {
                tick.tick().await;
                if control.is_finished() {
                    break;
                }
                // A paused program writes nothing: one check per pause is enough.
                let paused = control.is_paused();
                if paused && checked_while_paused {
                    continue;
                }
                checked_while_paused = paused;
                if !run.check(&control).await {
                    break;
                }
            }
            while !control.is_finished() {
                tick.tick().await;
            }
            let _ = run.settle().await;
        });
    }
}

impl Drop for RunFiles {
    fn drop(&mut self) {
        if !self.remove {
            return;
        }
        let (store, session) = (self.store.clone(), self.session.clone());
        let remove = move || store.remove_live(&session);
        // Removing a tree is blocking I/O: off the async threads when there are some.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}
