//! The path rules: how the host reaches a name inside a session directory without following
//! anything a program made. A name is relative with plain components only; every component is
//! opened from a directory handle, never by joining paths, and refused if it is a link; files
//! are opened for reading only if they are regular files with one link.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use cap_fs_ext::{DirExt, FollowSymlinks, MetadataExt, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

/// Linux's "too many levels of symbolic links": what opening a link with `O_NOFOLLOW` gives
/// (`io::ErrorKind::FilesystemLoop` is not stable yet).
pub(super) const ELOOP: i32 = 40;

/// A relative path with plain components only (no `..`, no root, no empty names).
pub(super) fn safe_relative(name: &str) -> Option<PathBuf> {
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

/// Opens the directory `rel` beneath `root` one component at a time, refusing links.
pub(super) fn open_dir_beneath(root: &Dir, rel: &Path) -> io::Result<Dir> {
    let mut dir = root.try_clone()?;
    for part in rel.iter() {
        dir = dir.open_dir_nofollow(part)?;
    }
    Ok(dir)
}

/// Like [`open_dir_beneath`], creating missing directories on the way.
pub(super) fn create_dir_beneath(root: &Dir, rel: &Path) -> io::Result<Dir> {
    let mut dir = root.try_clone()?;
    for part in rel.iter() {
        match dir.create_dir(part) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        dir = dir.open_dir_nofollow(part)?;
    }
    Ok(dir)
}

/// Splits `rel` (validated by `safe_relative`) into its parent directory and file name.
pub(super) fn split(rel: &Path) -> (&Path, &std::ffi::OsStr) {
    (rel.parent().unwrap_or(Path::new("")), rel.file_name().expect("a relative path with a file name"))
}

/// Linux's `O_NONBLOCK`: opening a FIFO a program made for reading would otherwise wait for a
/// writer that never comes (regular files ignore it).
pub(super) const O_NONBLOCK: i32 = 0o4000;

/// Options that open a name for reading without following a link at it, and without waiting
/// on a FIFO; the caller then checks the opened file's metadata.
pub(super) fn read_nofollow() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No).custom_flags(O_NONBLOCK);
    options
}

/// `rel` beneath `dir` opened for reading, and its length, if it is a regular file with one
/// link, reached without following any link.
pub(super) fn open_regular(dir: &Dir, rel: &Path) -> Option<(cap_std::fs::File, u64)> {
    let (parent, file_name) = split(rel);
    let dir = open_dir_beneath(dir, parent).ok()?;
    let file = dir.open_with(file_name, &read_nofollow()).ok()?;
    // The metadata of the opened file, not of the name: nothing can be swapped in between.
    let meta = file.metadata().ok()?;
    (entry_of(&meta).kind == Kind::File).then(|| (file, meta.len()))
}

/// What an entry is, as the host treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    /// A regular file with a single link: the only thing the host reads, copies or returns.
    File,
    /// Links, hard-linked files, FIFOs, sockets, devices: counted, never followed or copied.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scanned {
    pub(super) kind: Kind,
    pub(super) size: u64,
    pub(super) modified: Option<SystemTime>,
}

/// What `meta` says an entry is: only a regular file with one link is a file.
pub(super) fn entry_of(meta: &cap_std::fs::Metadata) -> Scanned {
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        Kind::Dir
    } else if ft.is_file() && meta.nlink() == 1 {
        Kind::File
    } else {
        Kind::Other
    };
    Scanned {
        kind,
        size: if kind == Kind::Dir { 0 } else { meta.len() },
        modified: meta.modified().ok().map(|t| t.into_std()),
    }
}
