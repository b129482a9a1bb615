//! `/mnt/data` for programs: the host functions behind the global `fs` (`runtime.js`), a
//! promise API shaped like Node's `fs/promises`. Each opens, does its work and closes, so no
//! file stays open across a wait (a hibernated instance may hold only the handles every
//! instance takes, `prime`). WASI confines them to the preopened directory; the host's
//! quota counts what they write.

use std::io::ErrorKind;
use std::path::PathBuf;

use rquickjs::{Ctx, Exception, Object, Result, TypedArray, Value};

/// Where a relative path is: the only directory a program can reach.
const DATA: &str = "/mnt/data";

/// The functions `runtime.js` makes `fs` of, in one object.
pub(crate) fn host<'js>(ctx: &Ctx<'js>) -> Result<Object<'js>> {
    use rquickjs::function::Func;
    let host = Object::new(ctx.clone())?;
    host.set(
        "readText",
        Func::from(|ctx: Ctx<'js>, path: String| read(&ctx, &path).map(|b| String::from_utf8_lossy(&b).into_owned())),
    )?;
    host.set(
        "readBytes",
        Func::from(|ctx: Ctx<'js>, path: String| read(&ctx, &path).and_then(|b| TypedArray::<u8>::new(ctx.clone(), b))),
    )?;
    host.set(
        "write",
        Func::from(|ctx: Ctx<'js>, path: String, data: Value<'js>, append: bool| write(&ctx, &path, data, append)),
    )?;
    host.set("readdir", Func::from(|ctx: Ctx<'js>, path: String| readdir(&ctx, &path)))?;
    host.set(
        "mkdir",
        Func::from(|ctx: Ctx<'js>, path: String, recursive: bool| {
            let p = resolve(&path);
            let made = if recursive { std::fs::create_dir_all(&p) } else { std::fs::create_dir(&p) };
            made.map_err(|e| thrown(&ctx, e, "mkdir", &path))
        }),
    )?;
    host.set(
        "rm",
        Func::from(|ctx: Ctx<'js>, path: String, recursive: bool, force: bool| rm(&ctx, &path, recursive, force)),
    )?;
    host.set("stat", Func::from(|ctx: Ctx<'js>, path: String| stat(&ctx, &path)))?;
    host.set(
        "rename",
        Func::from(|ctx: Ctx<'js>, from: String, to: String| {
            std::fs::rename(resolve(&from), resolve(&to)).map_err(|e| thrown(&ctx, e, "rename", &from))
        }),
    )?;
    Ok(host)
}

/// Takes the preopened directory's handle, as every instance does first (`prime`): any path
/// makes wasi-libc list the preopens, which takes a handle for each.
pub(crate) fn take_preopens() {
    let _ = std::fs::metadata(DATA);
}

fn resolve(path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    if p.is_absolute() { p } else { PathBuf::from(DATA).join(p) }
}

fn read(ctx: &Ctx<'_>, path: &str) -> Result<Vec<u8>> {
    std::fs::read(resolve(path)).map_err(|e| thrown(ctx, e, "open", path))
}

/// A string's UTF-8 bytes, or a `Uint8Array`'s (what `runtime.js` hands over as data);
/// `undefined` or `null`: none.
pub(crate) fn bytes_of<'js>(ctx: &Ctx<'js>, data: Value<'js>) -> Result<Vec<u8>> {
    if data.is_undefined() || data.is_null() {
        Ok(Vec::new())
    } else if let Some(s) = data.as_string() {
        Ok(s.to_string()?.into_bytes())
    } else if let Ok(array) = TypedArray::<u8>::from_value(data.clone()) {
        // SAFETY: the slice is copied at once; no JavaScript runs while it is alive.
        Ok(unsafe { array.as_bytes() }.map(<[u8]>::to_vec).unwrap_or_default())
    } else {
        Err(Exception::throw_type(ctx, "data must be a string or a Uint8Array"))
    }
}

fn write<'js>(ctx: &Ctx<'js>, path: &str, data: Value<'js>, append: bool) -> Result<()> {
    use std::io::Write;
    let bytes = bytes_of(ctx, data)?;
    let mut options = std::fs::OpenOptions::new();
    options.create(true);
    if append {
        options.append(true)
    } else {
        options.write(true).truncate(true)
    };
    let mut file = options.open(resolve(path)).map_err(|e| thrown(ctx, e, "open", path))?;
    file.write_all(&bytes).map_err(|e| thrown(ctx, e, "write", path))
}

fn readdir(ctx: &Ctx<'_>, path: &str) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(resolve(path)).map_err(|e| thrown(ctx, e, "scandir", path))?;
    let mut names: Vec<String> = entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    Ok(names)
}

fn rm(ctx: &Ctx<'_>, path: &str, recursive: bool, force: bool) -> Result<()> {
    let p = resolve(path);
    let removed = match std::fs::symlink_metadata(&p) {
        Ok(m) if m.is_dir() && recursive => std::fs::remove_dir_all(&p),
        Ok(m) if m.is_dir() => std::fs::remove_dir(&p),
        Ok(_) => std::fs::remove_file(&p),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if force && e.kind() == ErrorKind::NotFound => Ok(()),
        other => other.map_err(|e| thrown(ctx, e, "rm", path)),
    }
}

fn stat<'js>(ctx: &Ctx<'js>, path: &str) -> Result<Object<'js>> {
    let m = std::fs::metadata(resolve(path)).map_err(|e| thrown(ctx, e, "stat", path))?;
    let stat = Object::new(ctx.clone())?;
    stat.set("size", m.len() as f64)?;
    stat.set("file", m.is_file())?;
    stat.set("directory", m.is_dir())?;
    let mtime = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    stat.set("mtimeMs", mtime.map_or(0.0, |d| d.as_secs_f64() * 1000.0))?;
    Ok(stat)
}

/// `e` as Node words it: an `Error` with `code` (`ENOENT`, ...), `syscall` and `path`.
fn thrown(ctx: &Ctx<'_>, e: std::io::Error, syscall: &str, path: &str) -> rquickjs::Error {
    let (code, words) = match e.kind() {
        ErrorKind::NotFound => ("ENOENT", "no such file or directory"),
        ErrorKind::PermissionDenied => ("EACCES", "permission denied (only /mnt/data can be reached)"),
        ErrorKind::AlreadyExists => ("EEXIST", "file already exists"),
        ErrorKind::IsADirectory => ("EISDIR", "illegal operation on a directory"),
        ErrorKind::NotADirectory => ("ENOTDIR", "not a directory"),
        ErrorKind::DirectoryNotEmpty => ("ENOTEMPTY", "directory not empty"),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => ("ENOSPC", "no space left (the file quota)"),
        _ => ("EIO", "i/o error"),
    };
    let message = format!("{code}: {words}, {syscall} '{path}'");
    let made = Exception::from_message(ctx.clone(), &message).and_then(|error| {
        error.set("code", code)?;
        error.set("syscall", syscall)?;
        error.set("path", path)?;
        Ok(error)
    });
    match made {
        Ok(error) => ctx.throw(error.into_value()),
        Err(e) => e,
    }
}
