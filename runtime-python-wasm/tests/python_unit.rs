//! Runs the guest runtime's unit tests (`python/tests`) on the host's CPython: the name
//! normalisation, stub generation and batching loop are plain Python and need no wasm.

use std::process::Command;

#[test]
fn guest_runtime_unit_tests_pass_on_host_python() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/python");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .args(["-m", "unittest", "discover", "-s", "tests", "-t", "tests"])
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 is needed for the guest runtime's unit tests");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python unit tests failed:\n{stderr}");
    assert!(stderr.contains("OK"), "unexpected unittest output:\n{stderr}");
    eprintln!("{stderr}");
}
