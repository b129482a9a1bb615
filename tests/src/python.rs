//! A venv under `target/` with packages from PyPI, for tests that drive Python clients.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// `target/test-venvs/<name>` with `packages` installed (once); returns the venv directory.
/// A package may be a local directory (`/path/to/project[extra]`): it is installed as pip
/// installs a project (built, not editable), and again whenever a file in it changes.
pub fn venv(name: &str, packages: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("test-venvs");
    let dir = root.join(name);
    let stamp = dir.join(".installed");
    let wanted = packages.iter().map(|p| stamped(p)).collect::<Vec<_>>().join(" ");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return dir;
    }
    // Tests in one binary may race here; a lock file keeps one installer at a time.
    std::fs::create_dir_all(&root).unwrap();
    let lock = root.join(format!("{name}.lock"));
    let _guard = FileLock::acquire(&lock);
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return dir;
    }
    // Made afresh: pip keeps an installed package of the same version (a rebuilt wheel) as it is.
    let _ = std::fs::remove_dir_all(&dir);
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python).args(["-m", "venv"]).arg(&dir).status().expect("python3 -m venv").success();
    assert!(ok, "creating venv {}", dir.display());
    let ok = Command::new(dir.join("bin").join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status()
        .expect("pip")
        .success();
    assert!(ok, "pip install {wanted}");
    std::fs::write(&stamp, &wanted).unwrap();
    dir
}

/// The maturin that builds the client's wheel (`clients/python/pyproject.toml` pins the same).
const MATURIN: &str = "maturin==1.16.0";

/// The client's wheel, with its native module (`python-ext`), built once per test process into
/// `target/wheels` as `just wheel` builds it: what the Python tests install, as a user would.
pub fn wheel() -> PathBuf {
    static WHEEL: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    WHEEL
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
            let maturin = venv("maturin", &[MATURIN]).join("bin").join("maturin");
            let out = root.join("target").join("wheels");
            let lock = root.join("target").join("wheels.lock");
            let _guard = FileLock::acquire(&lock);
            let _ = std::fs::remove_dir_all(&out);
            // The component compiled ahead, which the wheel ships (as `benches/python/wheel.sh`).
            let ahead = root.join("clients").join("python").join("src").join("ptc_engine").join("_ahead");
            // Python's only: the JavaScript component is compiled at an engine's first JavaScript
            // program (the wheel stays within 40 MB).
            let ok = Command::new(crate::binary::release())
                .args(["compile", "--without-javascript", "--out"])
                .arg(&ahead)
                .status();
            assert!(ok.expect("ptc-engine compile").success(), "compiling the component ahead");
            let ok = Command::new(maturin)
                .args(["build", "--release", "--quiet", "--out"])
                .arg(&out)
                .current_dir(root.join("clients").join("python"))
                .status()
                .expect("maturin")
                .success();
            assert!(ok, "building the client's wheel");
            let wheel = std::fs::read_dir(&out)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "whl"));
            wheel.expect("a wheel in target/wheels")
        })
        .clone()
}

/// `package`, and for a local directory or file a digest of its files, so that a change
/// reinstalls it.
fn stamped(package: &str) -> String {
    let path = Path::new(package.split('[').next().unwrap_or(package));
    if path.is_file() {
        return format!("{package}#{:x}", Sha256::digest(std::fs::read(path).unwrap()));
    }
    if !path.is_dir() {
        return package.to_string();
    }
    let mut files = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = entry.file_name();
            let skip =
                matches!(name.to_str(), Some("__pycache__" | ".mypy_cache" | ".pytest_cache" | "build" | "dist"));
            match entry.file_type() {
                Ok(t) if t.is_dir() && !skip => stack.push(entry.path()),
                Ok(t) if t.is_file() => files.push(entry.path()),
                _ => {}
            }
        }
    }
    files.sort();
    let mut digest = Sha256::new();
    for file in files {
        digest.update(file.strip_prefix(path).unwrap().to_string_lossy().as_bytes());
        digest.update(std::fs::read(&file).unwrap());
    }
    format!("{package}#{:x}", digest.finalize())
}

pub(crate) struct FileLock(PathBuf);

impl FileLock {
    pub(crate) fn acquire(path: &Path) -> FileLock {
        for _ in 0..6000 {
            if std::fs::OpenOptions::new().write(true).create_new(true).open(path).is_ok() {
                return FileLock(path.to_path_buf());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("timed out waiting for {}", path.display());
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
