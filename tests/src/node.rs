//! A Node.js project under `target/` with packages from the npm registry, for tests that drive
//! JavaScript clients (LibreChat's `@librechat/agents`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::python::FileLock;

/// Copies `tests/<name>/` (a `package.json` and scripts) to `target/test-node/<name>` and runs
/// `npm install` there once per `package.json`; returns that directory.
pub fn project(name: &str) -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = tests.join(name);
    let root = tests.join("..").join("target").join("test-node");
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let _guard = FileLock::acquire(&root.join(format!("{name}.lock")));
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let wanted = std::fs::read_to_string(source.join("package.json")).unwrap();
    let stamp = dir.join(".installed");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let ok = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .expect("npm (Node.js) is needed for this test")
            .success();
        assert!(ok, "npm install in {}", dir.display());
        std::fs::write(&stamp, &wanted).unwrap();
    }
    dir
}
