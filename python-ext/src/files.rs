//! This process's session files: a directory of its own under the temporary directory,
//! `ptc-engine-files-<pid>`, which `Local.close` removes at the process's exit. A process that
//! never gets there (killed, or ended with `os._exit`, as the peers benchmark does) would leave
//! it behind for good: 12 were left in /tmp in one afternoon of benchmarks. So the process holds
//! an exclusive lock on the directory's `.owner` file for its whole life, and every engine that
//! starts removes the directories whose lock it can take: their owners are gone. A lock, unlike
//! a pid, is right across pid namespaces sharing one /tmp, and after a pid is reused.
//!
//! A directory is made under a name of its own and renamed into place once its lock is held,
//! so a directory under the final name is never seen unlocked while its owner lives.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

const PREFIX: &str = "ptc-engine-files-";
const OWNER: &str = ".owner";

/// This process's directory, locked until the process ends.
pub struct Owned {
    pub dir: PathBuf,
    /// Held (its lock with it) for the process's life.
    _owner: File,
}

/// This process's directory under `root` (made and locked), once the directories there whose
/// owners are gone have been removed.
pub fn claim(root: &Path) -> io::Result<Owned> {
    let pid = std::process::id();
    sweep(root, pid);
    let dir = root.join(format!("{PREFIX}{pid}"));
    let making = root.join(format!(".{PREFIX}{pid}.new"));
    let _ = std::fs::remove_dir_all(&making);
    std::fs::create_dir_all(&making)?;
    let owner = File::create(making.join(OWNER))?;
    owner.try_lock().map_err(io::Error::from)?;
    // A directory left under this pid by an earlier process (its lock is free, or this
    // process's own from an earlier start) makes way.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&making, &dir)?;
    Ok(Owned { dir, _owner: owner })
}

/// Removes the directories under `root` whose owner is gone (their lock can be taken), but
/// this process's own (`pid`). A directory without an owner file (one from before there were
/// any) is left as it is.
fn sweep(root: &Path, pid: u32) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    let ours = format!("{PREFIX}{pid}");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(PREFIX) || name == ours {
            continue;
        }
        let dir = entry.path();
        let Ok(owner) = File::open(dir.join(OWNER)) else { continue };
        if owner.try_lock().is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
