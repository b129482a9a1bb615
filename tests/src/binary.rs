//! The `ptc-engine` binary as an operator runs it, and the processes tests start beside it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/release/ptc-engine`, built (or found up to date) by cargo. Tests in several binaries
/// use it; cargo's lock keeps their builds from overlapping.
pub fn release() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["build", "--release", "-p", "ptc-server", "--bin", "ptc-engine"])
        .current_dir(&root)
        .status()
        .expect("cargo")
        .success();
    assert!(ok, "building the release binary");
    root.join("target").join("release").join("ptc-engine")
}

/// A free port on 127.0.0.1 (for a process that binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A child process, killed (and reaped) when dropped.
pub struct Process(pub std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
