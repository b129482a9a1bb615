//! The Python sandbox component, built by `build.rs` from `wit/` and `python/`.
//!
//! The bytes are embedded so the engine needs no files at run time; `WIT_DIR` is where the
//! world lives for host bindings.

/// The WebAssembly component: CPython 3.14 (componentize-py 0.25.1) with the ptc runtime,
/// pre-initialised with the supported standard library imported.
pub static COMPONENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ptc-sandbox.wasm"));

/// Absolute path of the WIT directory the component was built from.
pub const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wit");

/// SHA-256 of the sources the component is built from (pins, WIT world, Python runtime): the
/// same for every build of the same sources, unlike the component's bytes.
pub static RUNTIME_DIGEST: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime-digest"));
