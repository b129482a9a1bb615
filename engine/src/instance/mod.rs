//! One Store and its imports: the host state ([`host`]) with the tool broker behind
//! `wait-for-tools` ([`broker`]), the memory limiter ([`limiter`]), captured output
//! ([`output`]), the monotonic clock ([`clock`]), the WIT bindings ([`bindings`]) and the tool
//! lists handed to the guest ([`tool_lists`]), WASI wiring ([`wiring`]), wasmtime's config and
//! compiled-component cache ([`wasm`]), the data runtime ([`data`]), and the two runtimes behind
//! one face ([`guest`]). Below it: [`crate::calls`], [`crate::api`], [`crate::net`].

pub(crate) mod bindings;
pub(crate) mod broker;
pub(crate) mod clock;
pub(crate) mod data;
pub(crate) mod guest;
pub(crate) mod host;
pub(crate) mod limiter;
pub(crate) mod outbound;
pub(crate) mod output;
pub(crate) mod tool_lists;
pub(crate) mod wasm;
pub(crate) mod wiring;
