//! The engine's first floor above outbound HTTP ([`crate::net`]): what callers hand in and get
//! back, with no wasmtime in it. Settings and limits ([`config`]), the one error ([`error`]),
//! what an execution reports ([`events`]), what a client asks for ([`request`]), journals
//! ([`journal`]), the trait a caller's store of hibernated images implements ([`keeper`]) and
//! where spans go ([`trace`]).

pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod journal;
pub(crate) mod keeper;
pub(crate) mod request;
pub(crate) mod trace;
