//! The JavaScript sandbox component (QuickJS-ng through rquickjs), built by `build.rs` from
//! `guest/` for `wasm32-wasip2`, on the same WIT world as the Python one.
//!
//! The bytes are embedded, compressed (1.47 MB of component in 0.44 MB), so the engine needs
//! no files at run time; they are inflated only to be compiled.

/// The WebAssembly component, zstd-compressed ([`component`] inflates it).
static COMPONENT_ZST: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ptc-js.wasm.zst"));

/// The WebAssembly component (inflated now: a few milliseconds).
pub fn component() -> Vec<u8> {
    // The build wrote the frame with its content size, a few MB.
    zstd::bulk::decompress(COMPONENT_ZST, 16 << 20).expect("the embedded component inflates")
}

/// SHA-256 of the component's bytes: the compiled cache's key, and what its sealed images are
/// bound to.
pub static COMPONENT_SHA256: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/component-sha256"));

/// SHA-256 of the sources the component is built from (the guest crate with its lock file,
/// the declarations crate, the WIT world): the runtime's version, which session snapshots
/// record.
pub static RUNTIME_DIGEST: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime-digest"));
