//! The pure-Python packages a program may import on demand, `requests` and `httpx` and what
//! they need, from PyPI: wheels pinned by file name and SHA-256, downloaded once into a cache
//! under the target directory, checked, and unpacked into a directory the guest compiles them
//! from at pre-initialisation (`ptc_runtime/ondemand.py`).
//!
//! A build dependency of both runtimes (`runtime-python-wasm`, `runtime-python-data`), so both
//! bundle the same releases. Set `PTC_GUEST_WHEELS` to a directory holding the wheels to build
//! offline; they are checked the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Each wheel: (file name, SHA-256). The pure-Python builds: charset-normalizer also publishes
/// compiled wheels for the build machine's CPython, which the sandbox's could not load.
pub const WHEELS: &[(&str, &str)] = &[
    ("requests-2.34.2-py3-none-any.whl", "2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0"),
    ("urllib3-2.8.0-py3-none-any.whl", "0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3"),
    ("idna-3.20-py3-none-any.whl", "ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c"),
    ("charset_normalizer-3.5.3-py3-none-any.whl", "96e268b0cbda016ac519513294fcd17032264085b600abaac58b93049477e132"),
    ("certifi-2026.10.19.post1-py3-none-any.whl", "1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2"),
    ("httpx-0.28.1-py3-none-any.whl", "d909fcccc110f8c7faf814ca82a9a4d816bc5a6dbfea25d6591d6985b8ba59ad"),
];

/// The file the guest finds the unpacked packages by: their top-level names, one a line.
pub const MARKER: &str = "ptc-on-demand.txt";

/// What the pins are, for a runtime's digest.
pub fn pins() -> String {
    WHEELS.iter().map(|(name, sha)| format!("{name} {sha}\n")).collect()
}

/// Unpacks the packages of every pinned wheel except those of `leave_out` (top-level names)
/// into `dest`, made afresh, with the marker; `pip` downloads what the cache lacks.
pub fn unpack(pip: &Path, cache: &Path, dest: &Path, leave_out: &[&str]) {
    println!("cargo:rerun-if-env-changed=PTC_GUEST_WHEELS");
    let wheels: Vec<PathBuf> = WHEELS.iter().map(|(name, sha)| checked(pip, cache, name, sha)).collect();
    let _ = std::fs::remove_dir_all(dest);
    std::fs::create_dir_all(dest).expect("creating the on-demand packages' directory");
    let script = r#"
import os, sys, zipfile
dest, marker, leave_out, wheels = sys.argv[1], sys.argv[2], set(sys.argv[3].split(",")) - {""}, sys.argv[4:]
tops = set()
for wheel in wheels:
    with zipfile.ZipFile(wheel) as w:
        for name in w.namelist():
            parts = name.split("/")
            top = parts[0][:-3] if len(parts) == 1 else parts[0]
            if not name.endswith(".py") or top.endswith(".dist-info") or top in leave_out:
                continue
            if ".." in parts or name.startswith("/"):
                raise SystemExit(f"unsafe member {name!r} in {wheel}")
            tops.add(top)
            path = os.path.join(dest, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(w.read(name))
with open(os.path.join(dest, marker), "w") as f:
    f.write("".join(t + "\n" for t in sorted(tops)))
"#;
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(dest)
        .arg(MARKER)
        .arg(leave_out.join(","))
        .args(&wheels)
        .status()
        .unwrap_or_else(|e| panic!("unpacking the on-demand packages: {e}"));
    assert!(status.success(), "failed to unpack the on-demand packages");
}

/// The wheel `name`, from `PTC_GUEST_WHEELS` or the cache (downloaded by pip when absent),
/// checked against its SHA-256.
fn checked(pip: &Path, cache: &Path, name: &str, sha: &str) -> PathBuf {
    let path = match std::env::var_os("PTC_GUEST_WHEELS") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => {
            let path = cache.join(name);
            if !path.exists() {
                download(pip, cache, name);
            }
            path
        }
    };
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, sha, "{} is not the pinned wheel (SHA-256 {digest}, pinned {sha})", path.display());
    path
}

fn download(pip: &Path, cache: &Path, name: &str) {
    // "requests-2.34.2-py3-none-any.whl" -> "requests==2.34.2"
    let mut parts = name.splitn(3, '-');
    let (project, version) = (parts.next().unwrap(), parts.next().unwrap());
    std::fs::create_dir_all(cache).expect("creating the wheel cache");
    let status = Command::new(pip)
        .args(["download", "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"])
        .args(["--platform", "any", "--implementation", "py", "--python-version", "3.14", "-d"])
        .arg(cache)
        .arg(format!("{project}=={version}"))
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", pip.display()));
    assert!(status.success(), "failed to download {name} from PyPI");
}
