//! Walking one session directory: what it holds (`Scan`, bounded), as entries that can be
//! kept in a journal (`ScanEntry`) and compared after a run to find what the run changed.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use cap_std::fs::Dir;

use super::paths::{Kind, Scanned, entry_of, open_dir_beneath};

/// Bytes and entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub files: u64,
}

impl Usage {
    pub(super) fn add(self, other: Usage) -> Usage {
        Usage { bytes: self.bytes.saturating_add(other.bytes), files: self.files.saturating_add(other.files) }
    }
}

/// One entry of a [`Scan`], as a journal keeps it (`Scan::export`, `FileStore::rewind`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanEntry {
    pub path: String,
    /// 0 directory, 1 file, 2 anything else.
    pub kind: u8,
    pub size: u64,
    pub modified_ns: Option<u64>,
}

/// What a bounded walk of one session directory saw.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub(super) entries: HashMap<PathBuf, Scanned>,
    pub usage: Usage,
    /// False when the walk stopped at its entry bound (the session holds more than that).
    pub complete: bool,
}

impl Scan {
    /// A scan as kept beside a journal ([`Scan::export`]).
    pub(super) fn of(entries: &[ScanEntry]) -> Scan {
        let mut scan = Scan { complete: true, ..Scan::default() };
        for e in entries {
            let kind = match e.kind {
                0 => Kind::Dir,
                1 => Kind::File,
                _ => Kind::Other,
            };
            let modified = e.modified_ns.map(|ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns));
            scan.entries.insert(PathBuf::from(&e.path), Scanned { kind, size: e.size, modified });
        }
        scan
    }

    /// Its entries, to keep beside a journal.
    pub fn export(&self) -> Vec<ScanEntry> {
        self.entries
            .iter()
            .map(|(path, e)| ScanEntry {
                path: path.to_string_lossy().into_owned(),
                kind: match e.kind {
                    Kind::Dir => 0,
                    Kind::File => 1,
                    Kind::Other => 2,
                },
                size: e.size,
                modified_ns: e
                    .modified
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos() as u64),
            })
            .collect()
    }
}

/// Sessions with at most this many entries are walked on the async thread that needs the
/// walk (a live session's next run, its settling): an empty one takes a few µs, far less than
/// the two thread hand-offs of the blocking pool. Larger ones go to the blocking pool.
pub const INLINE_WALK_ENTRIES: u64 = 64;

/// Walks `root` without following links, stopping after `limit` entries.
pub(super) fn walk(root: &Dir, limit: u64) -> io::Result<Scan> {
    let mut scan = Scan { complete: true, ..Scan::default() };
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        // A directory swapped for a link since it was listed is skipped, not followed.
        let Ok(dir) = open_dir_beneath(root, &rel) else { continue };
        for item in dir.entries()? {
            let name = item?.file_name();
            let Ok(meta) = dir.symlink_metadata(&name) else { continue };
            if scan.usage.files >= limit {
                scan.complete = false;
                return Ok(scan);
            }
            let entry = entry_of(&meta);
            scan.usage = scan.usage.add(Usage { bytes: entry.size, files: 1 });
            let path = rel.join(&name);
            if entry.kind == Kind::Dir {
                pending.push(path.clone());
            }
            scan.entries.insert(path, entry);
        }
    }
    Ok(scan)
}
