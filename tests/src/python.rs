//! A venv under `target/` with packages from PyPI, for tests that drive Python clients.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/test-venvs/<name>` with `packages` installed (once); returns the venv directory.
pub fn venv(name: &str, packages: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("test-venvs");
    let dir = root.join(name);
    let stamp = dir.join(".installed");
    let wanted = packages.join(" ");
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
