//! The Python sandbox component, built by `build.rs` from `wit/` and `python/`.
//!
//! The bytes are embedded so the engine needs no files at run time; `WIT_DIR` is where the
//! world lives for host bindings.

mod zst;

pub use zst::{compress, inflate};

/// The WebAssembly component, zstd-compressed ([`compress`]): CPython 3.14 (componentize-py 0.25.1) with the
/// ptc runtime, pre-initialised with the supported standard library imported. [`component`]
/// inflates it; a start that finds the compiled form in its cache never does.
pub static COMPONENT_ZST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ptc-sandbox.wasm.zst"));

/// SHA-256 of the component's bytes (what [`component`] returns): the compiled cache's key.
pub static COMPONENT_SHA256: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/component-sha256"));

/// The component's bytes (32 MB, inflated in ~0.1 s).
pub fn component() -> Vec<u8> {
    inflate(COMPONENT_ZST, None).expect("the embedded component inflates")
}

/// Absolute path of the WIT directory the component was built from.
pub const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/wit");

/// SHA-256 of the sources the component is built from (pins, WIT world, Python runtime): the
/// same for every build of the same sources, unlike the component's bytes.
pub static RUNTIME_DIGEST: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime-digest"));
