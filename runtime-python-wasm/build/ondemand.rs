//! The packages programs import on demand (`requests`, `httpx`): unpacked from the pinned
//! wheels (`ptc-guest-wheels`), compiled by the sandbox's own CPython in a pre-initialisation of
//! their own (`ondemand_app.py`, whose component is thrown away), and handed to the
//! component's pre-initialisation as one file, which it keeps as one bytes object
//! (`ptc_runtime/ondemand.py`).
//!
//! Compiling in the component's own pre-initialisation made it 7.6 MB larger (38.3 MB against
//! 30.7): the memory compiling touches (about 18 MB for `idna.uts46data` alone) stays in the
//! snapshot's image, freed or not. The compiled file is cached beside the packages, keyed by
//! everything it depends on, so this step (about 20 s) runs again only when one of them changes.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::wheels;

/// What the compiled file depends on: the step's own files and the guest's modules it loads.
const INPUTS: &[&str] = &[
    "build/ondemand_app.py",
    "build/none.wit",
    "python/ptc_runtime/ondemand.py",
    "python/ptc_runtime/ondemand_collect.py",
    "python/ptc_runtime/netclients.py",
    "python/ptc_runtime/net.py",
    "python/ptc_runtime/stdlib.py",
];

/// The file name `ondemand_app.py` writes and the component's pre-initialisation reads
/// (`ondemand.BLOB`).
const BLOB: &str = "ptc-on-demand.bin";

/// A directory holding only the compiled packages, for the component's Python path.
pub fn compiled(tool: &Path, tool_version: &str, venv: &Path, manifest: &Path, out: &Path) -> PathBuf {
    let site = unpacked(venv);
    let mut hash = Sha256::new();
    hash.update(format!("componentize-py {tool_version} {}\n", tool.display()));
    hash.update(wheels::pins());
    for input in INPUTS {
        let bytes = std::fs::read(manifest.join(input)).unwrap_or_else(|e| panic!("reading {input}: {e}"));
        hash.update(format!("{input} {}\n", bytes.len()));
        hash.update(&bytes);
    }
    let key: String = hash.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let cached = site.join(format!("compiled-{key}.bin"));
    if !cached.exists() {
        compile(tool, manifest, &site, out);
        std::fs::rename(site.join(BLOB), &cached).expect("keeping the compiled packages");
    }
    let dir = out.join("on-demand");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the compiled packages' directory");
    std::fs::copy(&cached, dir.join(BLOB)).expect("copying the compiled packages");
    dir
}

/// The packages, unpacked once per set of pins.
fn unpacked(venv: &Path) -> PathBuf {
    let pins: String = Sha256::digest(wheels::pins()).iter().take(6).map(|b| format!("{b:02x}")).collect();
    let dir = venv.join(format!("guest-on-demand-{pins}"));
    if !dir.join(wheels::MARKER).exists() {
        let cache = venv.parent().expect("target/<profile>").join("guest-wheels");
        wheels::unpack(&venv.join("bin").join("pip"), &cache, &dir, &[]);
    }
    dir
}

fn compile(tool: &Path, manifest: &Path, site: &Path, out: &Path) {
    let throwaway = out.join("on-demand-compile.wasm");
    let status = Command::new(tool)
        .arg("-d")
        .arg(manifest.join("build/none.wit"))
        .args(["-w", "none", "componentize", "ondemand_app", "-p"])
        .arg(manifest.join("build"))
        .arg("-p")
        .arg(manifest.join("python"))
        .arg("-p")
        .arg(site)
        .arg("-o")
        .arg(&throwaway)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("VIRTUAL_ENV")
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    assert!(status.success(), "componentize-py failed to compile the on-demand packages (build/ondemand_app.py)");
    let _ = std::fs::remove_file(throwaway);
}
