//! Builds the JavaScript sandbox component: `guest/` (rquickjs, wit-bindgen) compiled for
//! `wasm32-wasip2` by a nested cargo into a target directory of its own
//! (`target/js-guest`, shared by every profile of the outer build).
//!
//! QuickJS's C code is compiled by Debian's clang-19 against Debian's wasi-libc headers
//! (`RQUICKJS_SYS_NO_WASI_SDK`: rquickjs-sys would otherwise download wasi-sdk), with
//! `guest/prewasi.h` included first: QuickJS-ng turns its stack check off when `__wasi__` is
//! defined, and without it a deep recursion traps the instance instead of throwing a
//! `RangeError`. Rust links its own wasip2 libc.
//!
//! Needs `rustup target add wasm32-wasip2` and `apt-get install clang-19 lld-19 llvm-19
//! wasi-libc libclang-rt-19-dev-wasm32` (`.ci/run` installs them). `PTC_JS_CC` and
//! `PTC_JS_AR` name another clang and llvm-ar; `PTC_WASI_SYSROOT_INCLUDE` another header
//! directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";
/// What to install when the build cannot find its tools.
const NEEDS: &str = "the JavaScript runtime is built for wasm32-wasip2 with Debian's clang-19: run \
     `rustup target add wasm32-wasip2` and `apt-get install clang-19 lld-19 llvm-19 wasi-libc libclang-rt-19-dev-wasm32`";

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let guest = manifest.join("guest");
    let wit = manifest.join("../runtime-python-wasm/wit");
    let declarations = manifest.join("declarations");
    for input in ["src", "Cargo.toml", "Cargo.lock", "prewasi.h"] {
        println!("cargo:rerun-if-changed={}", guest.join(input).display());
    }
    for input in ["src", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", declarations.join(input).display());
    }
    println!("cargo:rerun-if-changed={}", wit.display());
    for var in ["PTC_JS_CC", "PTC_JS_AR", "PTC_WASI_SYSROOT_INCLUDE", "PTC_JS_MAX_STACK"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let cc = std::env::var("PTC_JS_CC").unwrap_or_else(|_| "clang-19".into());
    let ar = std::env::var("PTC_JS_AR").unwrap_or_else(|_| "llvm-ar-19".into());
    let include = std::env::var("PTC_WASI_SYSROOT_INCLUDE").unwrap_or_else(|_| "/usr/include/wasm32-wasi".into());
    check_tools(&cc, &ar, Path::new(&include));

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out.ancestors().nth(4).expect("OUT_DIR is target/<profile>/build/<pkg>/out").join("js-guest");
    let cflags = format!("--target=wasm32-wasi -isystem {include} -O2 -include {}", guest.join("prewasi.h").display());
    let mut build = Command::new(&cargo);
    build
        .args(["build", "--release", "--locked", "--target", TARGET, "--manifest-path"])
        .arg(guest.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    clear_outer_build(&mut build);
    build
        .env("RQUICKJS_SYS_NO_WASI_SDK", "1")
        .env("CC_wasm32_wasip2", &cc)
        .env("AR_wasm32_wasip2", &ar)
        .env("CFLAGS_wasm32_wasip2", cflags);
    let status = build.status().unwrap_or_else(|e| panic!("running cargo for the JavaScript guest: {e}"));
    assert!(status.success(), "building the JavaScript guest failed: its errors are above");

    let built = target_dir.join(TARGET).join("release").join("ptc_js_guest.wasm");
    let bytes = std::fs::read(&built).unwrap_or_else(|e| panic!("reading {}: {e}", built.display()));
    use sha2::{Digest, Sha256};
    // Embedded compressed: 1.47 MB of component in 0.44 MB of the binaries (and of the wheel).
    let packed = zstd::bulk::compress(&bytes, 19).expect("compressing the component");
    std::fs::write(out.join("ptc-js.wasm.zst"), packed).expect("writing the component");
    std::fs::write(out.join("component-sha256"), Sha256::digest(&bytes)).expect("writing the component's digest");
    write_runtime_digest(&out, &guest, &declarations, &wit);
}

/// Stops with what to install when the wasm32-wasip2 target or the C tools are missing.
fn check_tools(cc: &str, ar: &str, include: &Path) {
    let sysroot = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let missing = [
        (!sysroot.is_some_and(|dir| dir.is_dir())).then(|| "the wasm32-wasip2 target".to_string()),
        Command::new(cc).arg("--version").output().is_err().then(|| cc.to_string()),
        Command::new(ar).arg("--version").output().is_err().then(|| ar.to_string()),
        (!include.join("stdlib.h").is_file()).then(|| format!("wasi-libc's headers ({})", include.display())),
    ];
    let missing: Vec<String> = missing.into_iter().flatten().collect();
    assert!(missing.is_empty(), "missing {}: {NEEDS}", missing.join(", "));
}

/// What cargo tells this build script about the outer build (its target, profile, features,
/// wrappers such as clippy's) would steer the nested one: it gets only what it needs.
fn clear_outer_build(cmd: &mut Command) {
    const KEEP: [&str; 3] = ["CARGO_HOME", "CARGO_MAKEFLAGS", "CARGO_NET_OFFLINE"];
    const OUTER: [&str; 12] = [
        "TARGET",
        "HOST",
        "OPT_LEVEL",
        "PROFILE",
        "DEBUG",
        "NUM_JOBS",
        "OUT_DIR",
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
    ];
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        let outer = (text.starts_with("CARGO_") && !KEEP.contains(&text.as_ref()))
            || OUTER.contains(&text.as_ref())
            || text.starts_with("RUSTC_LINKER");
        if outer {
            cmd.env_remove::<OsString>(name);
        }
    }
}

/// SHA-256 of what the component is built from: the guest crate (sources, manifest, lock
/// file, the C header), the declarations crate it shares with the engine, and the WIT world.
fn write_runtime_digest(out: &Path, guest: &Path, declarations: &Path, wit: &Path) {
    use sha2::{Digest, Sha256};
    let mut files = Vec::new();
    for dir in [guest.join("src"), declarations.join("src"), wit.to_path_buf()] {
        for entry in std::fs::read_dir(&dir).expect("runtime sources") {
            files.push(entry.unwrap().path());
        }
    }
    for file in ["Cargo.toml", "Cargo.lock", "prewasi.h"] {
        files.push(guest.join(file));
    }
    files.push(declarations.join("Cargo.toml"));
    files.sort();
    let mut hash = Sha256::new();
    for path in files.iter().filter(|p| p.is_file()) {
        let bytes = std::fs::read(path).expect("a runtime source");
        let name = path.file_name().unwrap().to_string_lossy();
        hash.update(format!("{name} {}\n", bytes.len()));
        hash.update(&bytes);
    }
    std::fs::write(out.join("runtime-digest"), hash.finalize()).expect("writing the runtime digest");
}
