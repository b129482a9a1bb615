//! Files in and out of a session directory: imports from the tenant's earlier sessions,
//! uploads and writes within the quota, listings, downloads and exports.

use super::*;

impl FileStore {
    /// The session's regular files (links and special files are never read), name and bytes,
    /// sorted by name; refused if together they exceed `max_bytes`.
    pub fn export(&self, session: &SessionDir, max_bytes: u64) -> Result<Vec<(String, Vec<u8>)>, FilesError> {
        let scan = self.scan(session)?;
        let mut names: Vec<&PathBuf> =
            scan.entries.iter().filter(|(_, e)| e.kind == Kind::File).map(|(path, _)| path).collect();
        names.sort();
        let too_large = || {
            FilesError::Quota(format!(
                "the session's files are larger than the {max_bytes} bytes a snapshot may hold with its state; delete \
                 files you no longer need from /mnt/data, or take the snapshot without files"
            ))
        };
        let mut out = Vec::with_capacity(names.len());
        let mut total = 0u64;
        let session_dir = session.dir().map_err(io_error("cannot open the session directory"))?;
        for rel in names {
            let Some(name) = rel.to_str() else { continue };
            // Swapped for a link or removed since the walk: skipped, never followed.
            let Some((file, _)) = open_regular(&session_dir, rel) else { continue };
            let left = max_bytes.saturating_sub(total);
            let mut bytes = Vec::new();
            // One byte past what is left tells a file that grew past it.
            file.take(left.saturating_add(1))
                .read_to_end(&mut bytes)
                .map_err(io_error("cannot read a session file"))?;
            total += bytes.len() as u64;
            if total > max_bytes {
                return Err(too_large());
            }
            out.push((name.to_string(), bytes));
        }
        Ok(out)
    }

    /// The bytes of `wanted` (files of `session`, e.g. those a run changed), each in order if
    /// it fits in what is left of `max_bytes`; a file that does not fit, or is no longer a
    /// regular file, comes back without content.
    pub fn read(&self, session: &SessionDir, wanted: &[FileRef], max_bytes: u64) -> Vec<(FileRef, Option<Vec<u8>>)> {
        let mut left = max_bytes;
        let mut out = Vec::with_capacity(wanted.len());
        let session_dir = session.dir().ok();
        for file_ref in wanted {
            let content = safe_relative(&file_ref.name)
                .zip(session_dir.as_ref())
                .and_then(|(rel, dir)| open_regular(dir, &rel))
                .filter(|(_, len)| *len <= left)
                .and_then(|(file, len)| {
                    let mut bytes = Vec::new();
                    // At most the size seen, even if the file grows meanwhile.
                    file.take(len).read_to_end(&mut bytes).ok()?;
                    Some(bytes)
                });
            let size = content.as_ref().map_or(file_ref.size, |b| b.len() as u64);
            left -= content.as_ref().map_or(0, |b| b.len() as u64);
            out.push((FileRef { size, ..file_ref.clone() }, content));
        }
        out
    }

    /// Writes `files` (name, bytes) into `session`, checked against the tenant's quota first;
    /// names are relative paths beneath it (no `..`, no absolute paths).
    pub fn write(&self, session: &SessionDir, files: &[(String, Vec<u8>)]) -> Result<(), FilesError> {
        if files.is_empty() {
            return Ok(());
        }
        let mut needed = Usage::default();
        let mut dirs = HashSet::new();
        let mut targets = Vec::with_capacity(files.len());
        for (name, bytes) in files {
            let rel = safe_relative(name).ok_or_else(|| FilesError::Invalid(format!("invalid file name {name:?}")))?;
            needed = needed.add(Usage { bytes: bytes.len() as u64, files: 1 });
            dirs.extend(rel.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()).map(Path::to_path_buf));
            targets.push((rel, bytes));
        }
        needed.files += dirs.len() as u64;
        self.check_room(session, needed, "these files")?;
        let session_dir = session.dir().map_err(io_error("cannot open the session directory"))?;
        for (rel, bytes) in targets {
            let (parent, file_name) = split(&rel);
            let invalid = |e: io::Error| FilesError::Invalid(format!("cannot write {}: {e}", rel.display()));
            let dir = create_dir_beneath(&session_dir, parent).map_err(invalid)?;
            let mut options = OpenOptions::new();
            options.write(true).create_new(true).follow(FollowSymlinks::No);
            let mut file = dir.open_with(file_name, &options).map_err(invalid)?;
            file.write_all(bytes).map_err(io_error("cannot write a file"))?;
        }
        let usage = self.scan(session)?.usage;
        self.record(&session.tenant, &session.id, usage);
        Ok(())
    }

    /// Copies `files` (an earlier session of this tenant's file, to a name) into `session`.
    /// Only regular files with one link are copied; the whole request is checked against the
    /// quota before anything is written.
    pub fn import(&self, session: &SessionDir, files: &[Import]) -> Result<(), FilesError> {
        let mut sources = Vec::with_capacity(files.len());
        let mut needed = Usage::default();
        let tenant_dir = session.tenant_dir().map_err(io_error("cannot open the tenant directory"))?;
        for Import { name, session_id, id } in files {
            let rel = safe_relative(name).ok_or_else(|| FilesError::Invalid(format!("invalid file name {name:?}")))?;
            if !valid_session_id(session_id) {
                return Err(FilesError::Invalid(format!("invalid session_id {session_id:?} for file {name:?}")));
            }
            let not_found = || FilesError::Invalid(format!("file {name:?} not found in session {session_id:?}"));
            // By id when it names a file of that session (the upload's name may differ from the
            // one the model is shown), else by name.
            let source = match id.as_deref().filter(|id| !id.is_empty()) {
                Some(id) => self.find_in(&tenant_dir, session_id, id).unwrap_or_else(|| rel.clone()),
                None => rel.clone(),
            };
            if *session_id == session.id && source == rel {
                continue; // already there
            }
            let (parent, file_name) = split(&source);
            let src_dir =
                open_dir_beneath(&tenant_dir, &Path::new(session_id).join(parent)).map_err(|_| not_found())?;
            let file = src_dir.open_with(file_name, &read_nofollow()).map_err(|_| not_found())?;
            // The metadata of the opened file, not of the name: nothing can be swapped in between.
            let meta = file.metadata().map_err(io_error("cannot read file metadata"))?;
            if entry_of(&meta).kind != Kind::File {
                return Err(FilesError::Invalid(format!(
                    "file {name:?} in session {session_id:?} is not a regular file (links and special files are never copied)"
                )));
            }
            needed = needed.add(Usage { bytes: meta.len(), files: 1 });
            sources.push((rel, file, meta.len()));
        }
        if sources.is_empty() {
            return Ok(());
        }
        self.check_room(session, needed, "importing these files")?;
        let session_dir = session.dir().map_err(io_error("cannot open the session directory"))?;
        for (rel, src, len) in sources {
            let (parent, file_name) = split(&rel);
            let dst_dir = create_dir_beneath(&session_dir, parent).map_err(|e| {
                // Something the program made stands in the way (a file, or a link, which is
                // never followed): the request's to change. Anything else is the host's failure.
                let message = format!("cannot import {}: {e}", rel.display());
                if matches!(e.kind(), io::ErrorKind::NotADirectory | io::ErrorKind::AlreadyExists)
                    || e.raw_os_error() == Some(ELOOP)
                {
                    FilesError::Invalid(message)
                } else {
                    FilesError::Io(message)
                }
            })?;
            // Whatever stands at the destination (a file, or a link the program planted) is
            // replaced, never written through.
            match dst_dir.symlink_metadata(file_name) {
                Ok(meta) if meta.is_dir() => {
                    return Err(FilesError::Invalid(format!(
                        "cannot import {}: a directory has that name",
                        rel.display()
                    )));
                }
                Ok(_) => dst_dir.remove_file_or_symlink(file_name).map_err(io_error("cannot replace a file"))?,
                Err(_) => {}
            }
            let mut options = OpenOptions::new();
            options.write(true).create_new(true).follow(FollowSymlinks::No);
            let mut dst = dst_dir.open_with(file_name, &options).map_err(io_error("cannot create a file"))?;
            // At most the size checked against the quota, even if the source grows meanwhile.
            io::copy(&mut src.take(len), &mut dst).map_err(io_error("cannot copy a file"))?;
        }
        let usage = self.scan(session)?.usage;
        self.record(&session.tenant, &session.id, usage);
        Ok(())
    }

    /// The path (beneath session `session_id` of the tenant whose directory is `tenant_dir`) of
    /// the regular file whose id is `id`.
    fn find_in(&self, tenant_dir: &Dir, session_id: &str, id: &str) -> Option<PathBuf> {
        let dir = tenant_dir.open_dir_nofollow(session_id).ok()?;
        let scan = walk(&dir, self.walk_limit()).ok()?;
        scan.entries
            .iter()
            .filter(|(_, e)| e.kind == Kind::File)
            .find(|(path, _)| path.to_str().is_some_and(|name| file_id(session_id, name) == id))
            .map(|(path, _)| path.clone())
    }

    /// The session's regular files (never links or special files), sorted by name.
    pub fn list(&self, session: &SessionDir) -> Result<Vec<Listed>, FilesError> {
        let scan = self.scan(session)?;
        let mut out: Vec<Listed> = scan
            .entries
            .iter()
            .filter(|(_, e)| e.kind == Kind::File)
            .filter_map(|(path, e)| {
                let name = path.to_str()?.to_string();
                Some(Listed { id: file_id(&session.id, &name), name, size: e.size, modified: e.modified })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The regular file of `session` whose id is `id`, opened for reading (without following a
    /// link anywhere on its path), with its listing.
    pub fn open_by_id(&self, session: &SessionDir, id: &str) -> Option<(std::fs::File, Listed)> {
        let rel = self.find_in(&session.tenant_dir().ok()?, &session.id, id)?;
        let (file, size) = open_regular(&session.dir().ok()?, &rel)?;
        let modified = file.metadata().ok().and_then(|m| m.modified().ok()).map(|t| t.into_std());
        let name = rel.to_str()?.to_string();
        Some((file.into_std(), Listed { id: id.to_string(), name, size, modified }))
    }

    /// How many more bytes, and whether one more file, `session` may take within the tenant's
    /// quota now.
    pub fn room(&self, session: &SessionDir) -> Result<(u64, bool), FilesError> {
        let scan = self.scan(session)?;
        let usage = self.tenant_usage_with(&session.tenant, &session.id, scan.usage);
        Ok((self.config.quota_bytes.saturating_sub(usage.bytes), usage.files < self.config.quota_files))
    }

    /// A new file `name` in `session` for an upload to write (whatever stood there, a link
    /// included, is replaced, never written through); `Err` names a bad name or what is in
    /// the way.
    pub fn create(&self, session: &SessionDir, name: &str) -> Result<std::fs::File, FilesError> {
        let rel = safe_relative(name).ok_or_else(|| FilesError::Invalid(format!("invalid file name {name:?}")))?;
        let (parent, file_name) = split(&rel);
        let invalid = |e: io::Error| FilesError::Invalid(format!("cannot write {}: {e}", rel.display()));
        let session_dir = session.dir().map_err(io_error("cannot open the session directory"))?;
        let dir = create_dir_beneath(&session_dir, parent).map_err(invalid)?;
        match dir.symlink_metadata(file_name) {
            Ok(meta) if meta.is_dir() => {
                return Err(FilesError::Invalid(format!("cannot write {}: a directory has that name", rel.display())));
            }
            Ok(_) => dir.remove_file_or_symlink(file_name).map_err(io_error("cannot replace a file"))?,
            Err(_) => {}
        }
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).follow(FollowSymlinks::No);
        Ok(dir.open_with(file_name, &options).map_err(invalid)?.into_std())
    }

    /// Writes `files` (name, bytes) into `session`, replacing files of those names (never
    /// writing through a link), after checking the tenant's quota for all of them together.
    pub fn put(&self, session: &SessionDir, files: &[(String, Vec<u8>)]) -> Result<(), FilesError> {
        if files.is_empty() {
            return Ok(());
        }
        let bytes = files.iter().map(|(_, b)| b.len() as u64).sum();
        self.check_room(session, Usage { bytes, files: files.len() as u64 }, "these files")?;
        for (name, content) in files {
            let mut file = self.create(session, name)?;
            file.write_all(content).map_err(io_error("cannot write a file"))?;
        }
        let usage = self.scan(session)?.usage;
        self.record(&session.tenant, &session.id, usage);
        Ok(())
    }

    /// Removes file `name` of `session` (an upload that broke a bound), if it is there.
    pub fn remove(&self, session: &SessionDir, name: &str) {
        let Some(rel) = safe_relative(name) else { return };
        let (parent, file_name) = split(&rel);
        if let Ok(dir) = session.dir().and_then(|d| open_dir_beneath(&d, parent)) {
            let _ = dir.remove_file_or_symlink(file_name);
        }
    }
}
