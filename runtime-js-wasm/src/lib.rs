//! The JavaScript sandbox component (QuickJS-ng through rquickjs), built by `build.rs` from
//! `guest/` for `wasm32-wasip2`, on the same WIT world as the Python one.
//!
//! The bytes are embedded (1.2 MB) so the engine needs no files at run time.

/// The WebAssembly component.
pub static COMPONENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ptc-js.wasm"));

/// SHA-256 of [`COMPONENT`]: the compiled cache's key, and what its sealed images are bound to.
pub static COMPONENT_SHA256: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/component-sha256"));

/// SHA-256 of the sources the component is built from (the guest crate with its lock file,
/// the WIT world): the runtime's version, which session snapshots record.
pub static RUNTIME_DIGEST: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime-digest"));
