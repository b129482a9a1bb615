//! Session files for the HTTP API: `/mnt/data` inside the sandbox is a per-session directory
//! on the host, `<files_dir>/<tenant digest>/<session id>/`.
//!
//! Files named in a request's `files` (from an earlier session of the same tenant) are copied
//! in before the program runs; files the program creates or changes are returned. A tenant's
//! files are capped in bytes and count: a run that leaves the tenant over quota has its new
//! files removed. Sessions untouched for `ttl` are deleted.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

#[derive(Debug, Clone)]
pub struct FilesConfig {
    pub dir: PathBuf,
    pub ttl: Duration,
    pub quota_bytes: u64,
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

/// A file of a session, as the API names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileRef {
    pub id: String,
    pub name: String,
    pub session_id: String,
    pub size: u64,
}

pub type Snapshot = HashMap<String, (u64, Option<SystemTime>)>;

pub struct FileStore {
    config: FilesConfig,
}

fn tenant_dir_name(tenant: &str) -> String {
    hex::encode(&Sha256::digest(tenant.as_bytes())[..12])
}

fn file_id(session_id: &str, name: &str) -> String {
    hex::encode(&Sha256::digest(format!("{session_id}/{name}").as_bytes())[..12])
}

/// Session ids become directory names: only `[A-Za-z0-9_-]`, 1–128 characters.
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A relative path with plain components only (no `..`, no root, no empty names).
fn safe_relative(name: &str) -> Option<PathBuf> {
    let path = Path::new(name);
    if name.is_empty() || name.len() > 1024 || name.contains('\0') {
        return None;
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

impl FileStore {
    pub fn new(config: FilesConfig) -> Self {
        FileStore { config }
    }

    fn tenant_root(&self, tenant: &str) -> PathBuf {
        self.config.dir.join(tenant_dir_name(tenant))
    }

    /// The session's directory, created if needed.
    pub fn session_dir(&self, tenant: &str, session_id: &str) -> Result<PathBuf, String> {
        if !valid_session_id(session_id) {
            return Err("session_id may only contain letters, digits, '-' and '_' (at most 128)".into());
        }
        let dir = self.tenant_root(tenant).join(session_id);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the session directory: {e}"))?;
        Ok(dir)
    }

    /// Copies `files` (name + session id of an earlier session of this tenant) into `dir`.
    pub fn import(&self, tenant: &str, dir: &Path, files: &[(String, String)]) -> Result<(), String> {
        for (name, session_id) in files {
            let rel = safe_relative(name).ok_or_else(|| format!("invalid file name {name:?}"))?;
            if !valid_session_id(session_id) {
                return Err(format!("invalid session_id {session_id:?} for file {name:?}"));
            }
            let src = self.tenant_root(tenant).join(session_id).join(&rel);
            let dst = dir.join(&rel);
            if src == dst {
                continue;
            }
            // symlink_metadata: a link planted in a session directory is never followed.
            let meta = std::fs::symlink_metadata(&src).map_err(|_| format!("file {name:?} not found in session {session_id:?}"))?;
            if !meta.is_file() {
                return Err(format!("file {name:?} in session {session_id:?} is not a regular file"));
            }
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            std::fs::copy(&src, &dst).map_err(|e| format!("cannot copy {name:?}: {e}"))?;
        }
        Ok(())
    }

    /// Regular files under `dir` with size and modification time.
    pub fn snapshot(dir: &Path) -> Snapshot {
        let mut out = HashMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for entry in entries.flatten() {
                let Ok(meta) = entry.path().symlink_metadata() else { continue };
                if meta.is_dir() {
                    stack.push(entry.path());
                } else if meta.is_file()
                    && let Ok(rel) = entry.path().strip_prefix(dir)
                {
                    out.insert(rel.to_string_lossy().into_owned(), (meta.len(), meta.modified().ok()));
                }
            }
        }
        out
    }

    /// Files created or changed since `before`, sorted by name.
    pub fn changed(dir: &Path, session_id: &str, before: &Snapshot) -> Vec<FileRef> {
        let mut out: Vec<FileRef> = Self::snapshot(dir)
            .into_iter()
            .filter(|(name, meta)| before.get(name) != Some(meta))
            .map(|(name, (size, _))| FileRef { id: file_id(session_id, &name), session_id: session_id.into(), name, size })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Bytes and files the tenant keeps.
    pub fn usage(&self, tenant: &str) -> (u64, u64) {
        let root = self.tenant_root(tenant);
        let snap = Self::snapshot(&root);
        (snap.values().map(|(s, _)| s).sum(), snap.len() as u64)
    }

    /// Enforces the quota after a run: if the tenant is over it, the run's new files go.
    pub fn enforce_quota(&self, tenant: &str, dir: &Path, new_files: &[FileRef]) -> Result<(), String> {
        let (bytes, count) = self.usage(tenant);
        if bytes <= self.config.quota_bytes && count <= self.config.quota_files {
            return Ok(());
        }
        for f in new_files {
            let _ = std::fs::remove_file(dir.join(&f.name));
        }
        Err(format!(
            "File quota exceeded: tenants may keep {} bytes in {} files (this run would leave {bytes} bytes in {count} files); the files it wrote were removed",
            self.config.quota_bytes, self.config.quota_files
        ))
    }

    /// Deletes sessions not modified for the retention period.
    pub fn sweep(&self) {
        let Ok(tenants) = std::fs::read_dir(&self.config.dir) else { return };
        let now = SystemTime::now();
        for tenant in tenants.flatten() {
            let Ok(sessions) = std::fs::read_dir(tenant.path()) else { continue };
            for session in sessions.flatten() {
                let newest = Self::snapshot(&session.path())
                    .values()
                    .filter_map(|(_, m)| *m)
                    .chain(session.metadata().and_then(|m| m.modified()).ok())
                    .max();
                if newest.is_some_and(|t| now.duration_since(t).unwrap_or_default() > self.config.ttl) {
                    let _ = std::fs::remove_dir_all(session.path());
                }
            }
        }
    }
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
}
