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

/// A free port on 127.0.0.1 (for a process that binds it next), below the kernel's ephemeral
/// range (32768-60999 by default), which every outgoing connection and every bind to port 0
/// draws from: a port from that range could be taken by one of them before the server binds it
/// (a run of the cluster tests saw "Address already in use"). Ports are handed out in turn, from a
/// start that differs between processes.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(u32::MAX, std::process::id() * 97 % COUNT, Ordering::Relaxed, Ordering::Relaxed);
    loop {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Starts `command` (a `ptc-engine serve`) with its log on a pipe, waits until it logs that it
/// is serving, and then keeps reading the log so it never blocks on a full pipe. Panics with the
/// log if the process exits first.
pub fn serving(command: &mut Command) -> Process {
    use std::io::{BufRead, BufReader};
    let mut child =
        command.env("PTC_LOG", "info").stderr(std::process::Stdio::piped()).spawn().expect("the release binary starts");
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("serving") {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "server exited:\n{seen}");
        seen.push_str(&line);
    }
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    Process(child)
}

/// A child process, killed (and reaped) when dropped.
pub struct Process(pub std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
