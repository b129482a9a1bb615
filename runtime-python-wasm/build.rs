//! Builds the Python sandbox component with a pinned componentize-py.
//!
//! componentize-py is installed from PyPI into a venv inside the target directory the first
//! time, so a fresh machine needs only `python3` with `venv`. Set `PTC_COMPONENTIZE_PY` to use
//! an existing componentize-py binary instead.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/immortal.rs"]
mod immortal;
#[path = "build/ondemand.rs"]
mod ondemand;
// The library's compressed forms, shared: the build only compresses.
#[expect(dead_code, reason = "inflate is the library's")]
#[path = "src/zst.rs"]
mod zst;
use ptc_guest_wheels as wheels;

const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// IANA time zone data for `zoneinfo` (WASI has no system database); loaded into memory at
/// pre-initialisation, so nothing is read at run time.
const TZDATA_VERSION: &str = "2026.6";

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let wit = manifest.join("wit");
    let python = manifest.join("python");

    println!("cargo:rerun-if-env-changed=PTC_COMPONENTIZE_PY");
    println!("cargo:rerun-if-changed={}", wit.display());
    println!("cargo:rerun-if-changed={}", python.join("app.py").display());
    println!("cargo:rerun-if-changed={}", manifest.join("build").display());
    watch_sources(&python.join("ptc_runtime"));
    // The guest's shared Python, for the data runtime's build script (`DEP_PTC_RUNTIME_PYTHON_SHARED`).
    println!("cargo::metadata=shared={}", python.join("ptc_runtime").display());

    write_runtime_digest(&out, &[&wit, &python.join("app.py"), &python.join("ptc_runtime")]);

    let venv = venv_dir(&out);
    let tool = match std::env::var_os("PTC_COMPONENTIZE_PY") {
        Some(path) => PathBuf::from(path),
        None => install_componentize_py(&venv),
    };
    let deps = install_python_deps(&venv);
    ensure_venv(&venv);
    let on_demand = ondemand::compiled(&tool, COMPONENTIZE_PY_VERSION, &venv, &manifest, &out);

    let component = out.join("ptc-sandbox.wasm");
    let status = Command::new(&tool)
        .arg("-d")
        .arg(&wit)
        .args(["-w", "sandbox", "componentize", "app", "-p"])
        .arg(&python)
        .arg("-p")
        .arg(&deps)
        .arg("-p")
        .arg(&on_demand)
        .arg("-o")
        .arg(&component)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("VIRTUAL_ENV")
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(status.success(), "componentize-py failed to build the sandbox component");

    let mut bytes = std::fs::read(&component).expect("reading the built component");
    immortal::patch(&mut bytes).unwrap_or_else(|e| panic!("making the snapshot's objects immortal: {e}"));
    std::fs::write(&component, &bytes).expect("writing the component");
    compress(&out, &bytes);
}

/// How hard the embedded copy is compressed (with a 128 MiB window): the 32 MB component is
/// 10.8 MB at 12, in ~3 s here (17: 10.2 MB in 13 s; 19: 9.9 MB in ~25 s), against 13.2 MB for
/// zip's deflate in the Python wheel. Inflating it takes ~0.1 s, paid only by a start that has
/// to compile (the cache holds the compiled form).
const ZSTD_LEVEL: i32 = 12;

/// Writes what the crate embeds: the component compressed, and its SHA-256 (the compiled
/// cache's key, which a start that finds the cache then needs without inflating the bytes).
fn compress(out: &Path, bytes: &[u8]) {
    use sha2::{Digest, Sha256};
    std::fs::write(out.join("component-sha256"), Sha256::digest(bytes)).expect("writing the component's digest");
    let packed = zst::compress(bytes, None, ZSTD_LEVEL).expect("compressing the component");
    std::fs::write(out.join("ptc-sandbox.wasm.zst"), packed).expect("writing the compressed component");
}

/// SHA-256 of what the component is built from (the pins, the WIT world, the Python sources):
/// the runtime's version, the same for every build of the same sources (the component's own
/// bytes are not: CPython's pre-initialisation snapshot differs from build to build).
fn write_runtime_digest(out: &Path, inputs: &[&Path]) {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(format!("componentize-py {COMPONENTIZE_PY_VERSION}; tzdata {TZDATA_VERSION}; immortal snapshot\n"));
    hash.update(wheels::pins());
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            for entry in std::fs::read_dir(input).expect("runtime sources") {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "py" || e == "wit") {
                    files.push(path);
                }
            }
        } else {
            files.push(input.to_path_buf());
        }
    }
    let root = inputs[0].parent().expect("the crate directory");
    let mut named: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|p| (p.strip_prefix(root).unwrap_or(&p).to_string_lossy().replace('\\', "/"), p))
        .collect();
    named.sort();
    for (name, path) in named {
        let bytes = std::fs::read(&path).expect("a runtime source");
        hash.update(format!("{name} {}\n", bytes.len()));
        hash.update(&bytes);
    }
    std::fs::write(out.join("runtime-digest"), hash.finalize()).expect("writing the runtime digest");
}

fn watch_sources(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("python sources") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The venv lives next to the profile's build directories (`target/<profile>/componentize-py`)
/// so that it survives `cargo clean -p` and is shared by every build of this crate.
fn venv_dir(out: &Path) -> PathBuf {
    out.ancestors()
        .nth(3)
        .expect("OUT_DIR is target/<profile>/build/<pkg>/out")
        .join(format!("componentize-py-{COMPONENTIZE_PY_VERSION}"))
}

/// Pure-Python packages bundled into the component, installed into their own directory so
/// that nothing else from the venv ends up in the sandbox.
fn install_python_deps(venv: &Path) -> PathBuf {
    let dir = venv.join(format!("guest-deps-tzdata-{TZDATA_VERSION}"));
    if dir.join("tzdata").is_dir() {
        return dir;
    }
    ensure_venv(venv);
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target"])
            .arg(&dir)
            .arg(format!("tzdata=={TZDATA_VERSION}")),
        "install tzdata from PyPI",
    );
    dir
}

fn ensure_venv(venv: &Path) {
    if !venv.join("bin").join("pip").exists() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(&python).args(["-m", "venv"]).arg(venv), "create the componentize-py venv");
    }
}

fn install_componentize_py(venv: &Path) -> PathBuf {
    let tool = venv.join("bin").join("componentize-py");
    if version_of(&tool).as_deref() == Some(COMPONENTIZE_PY_VERSION) {
        return tool;
    }
    ensure_venv(venv);
    run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("componentize-py=={COMPONENTIZE_PY_VERSION}")),
        "install componentize-py from PyPI",
    );
    assert_eq!(version_of(&tool).as_deref(), Some(COMPONENTIZE_PY_VERSION));
    tool
}

fn version_of(tool: &Path) -> Option<String> {
    let out = Command::new(tool).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().nth(1).map(str::to_owned)
}

fn run(cmd: &mut Command, what: &str) {
    let status = cmd.status().unwrap_or_else(|e| panic!("failed to {what}: {e}"));
    assert!(status.success(), "failed to {what}");
}
