//! What the nodes of a cluster share: the journals of paused executions, which round of each
//! has been resumed (tokens are single use across nodes), which node runs a request id, and
//! per-tenant usage counters.
//!
//! [`Store`] is the small interface; [`MemoryStore`] keeps it in this process (one node, no
//! service: nothing survives the node, so it journals nothing), [`RedisStore`] in Redis, which
//! LibreChat-style deployments already run.
//!
//! **Hibernated executions.** The sealed image of an execution's last hibernation is kept
//! beside its journal ([`Store::keep_image`]), counted with it, and loaded with it: a node
//! that finds the owner gone thaws it rather than replaying the journal, when its round is
//! the token's.
//!
//! **Bounded.** Journals are counted per tenant and in total ([`JournalLimits`]): 20 paused
//! executions reading the clock 600,000 times each once took Redis from 1 to 337 MiB, and with
//! the recommended `noeviction` a full Redis fails every tenant. A save past a bound is
//! refused ([`Saving::Refused`]); the execution runs on unjournaled.
//!
//! **Down.** With Redis unreachable, a new execution once waited 18.9 s for the client's
//! reconnect attempts (a 2 s connect timeout, retried, twice per start). Now each command has
//! [`COMMAND_TIMEOUT`], and the first one that fails for the connection opens a circuit: every
//! later call fails at once ("unreachable") while a background task pings every
//! [`RECHECK_EVERY`] and closes it again. Meanwhile executions run unjournaled (`ptc_cluster_store_up`
//! is 0, and the log says so). An idempotent command that fails for a dropped connection (the
//! first one after Redis restarted: "broken pipe") is sent once more on a fresh connection.
//!
//! Beside this interface: `memory` ([`MemoryStore`]), `redis_store` ([`RedisStore`]: its keys
//! and commands), `circuit` (how it meets an unreachable Redis), `scripts` (its Lua scripts,
//! which keep the journals' accounting).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;

mod circuit;
mod memory;
mod redis_store;
mod scripts;

pub use memory::MemoryStore;
pub use redis_store::RedisStore;

/// A store that could not be reached or answered nonsense.
#[derive(Debug, thiserror::Error)]
#[error("the cluster store: {0}")]
pub struct StoreError(pub String);

pub type StoreResult<T> = Result<T, StoreError>;

/// Bounds on the journals a store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JournalLimits {
    /// Bytes of journals of one tenant's paused executions. Default 64 MiB.
    pub tenant_bytes: u64,
    /// Bytes of journals of all tenants. Default 1 GiB.
    pub total_bytes: u64,
}

impl Default for JournalLimits {
    fn default() -> Self {
        JournalLimits { tenant_bytes: 64 << 20, total_bytes: 1 << 30 }
    }
}

/// What became of a journal's save.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Saving {
    Saved,
    /// Past a bound (the reason says which): nothing of it was written.
    Refused(String),
}

/// How long one command may take before the store counts as unreachable.
pub const COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
/// How often an unreachable store is tried again, off the request path.
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// A paused execution's journal as saved: the header written at its first pause, the
/// segments of entries appended at each pause since, and who holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub header: Vec<u8>,
    pub segments: Vec<Vec<u8>>,
    /// The node holding the live instance.
    pub owner: String,
    /// The round its current token resumes.
    pub round: u32,
    /// The execution's sealed image from its last hibernation, and the round it waited on
    /// then ([`Store::keep_image`]).
    pub image: Option<(u32, Vec<u8>)>,
}

/// What execution `id` (of `tenant`) recorded up to `round` (`entries`, serialised), with the
/// journal's `header` the first time.
#[derive(Debug, Clone, Copy)]
pub struct Segment<'a> {
    pub id: &'a str,
    pub tenant: &'a str,
    pub header: Option<&'a [u8]>,
    pub entries: &'a [u8],
    pub round: u32,
}

#[async_trait]
pub trait Store: Send + Sync {
    /// Whether what it keeps outlives this node (journals are written only then).
    fn durable(&self) -> bool;

    /// Whether it can be reached now (a store whose circuit is open answers every call with
    /// an error at once).
    fn available(&self) -> bool {
        true
    }

    /// Whether it can be reached now, checked on the caller's path if it has not been lately
    /// (bounded by [`COMMAND_TIMEOUT`]): what a request deciding whether to journal asks.
    async fn answers(&self) -> bool {
        self.available()
    }

    /// Appends `segment` to its execution's journal, names `owner` and the segment's round,
    /// and keeps it all for `ttl` (the execution's deadline). Saving a round again replaces its
    /// segment.
    async fn save(&self, segment: Segment<'_>, owner: &str, ttl: Duration) -> StoreResult<Saving>;

    /// Keeps the sealed image of execution `id` (of `tenant`), hibernated at `round` on
    /// `owner`, in place of any earlier one, counted with its journal against the same
    /// bounds; it names `owner` and `round` as [`Store::save`] does, and keeps it all for `ttl`.
    async fn keep_image(
        &self,
        id: &str,
        tenant: &str,
        round: u32,
        image: &[u8],
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<Saving>;

    /// Names a new owner (a node that resumed the execution by replay) for the same round.
    async fn set_owner(&self, id: &str, owner: &str, round: u32, ttl: Duration) -> StoreResult<()>;

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>>;

    /// Claims `round` of `id` for `node`: true for the first claim only (a token resumes once,
    /// whichever node it reaches). `claimant` is unique per attempt, so that a claim sent
    /// again after a dropped connection knows its own first success.
    async fn claim(&self, id: &str, round: u32, claimant: &str, ttl: Duration) -> StoreResult<bool>;

    /// The execution has ended (or was cancelled): nobody may resume it.
    async fn forget(&self, id: &str) -> StoreResult<()>;

    /// Request id `request_id` of `tenant` is execution `id` on `node`, for `ttl`.
    async fn set_request(&self, tenant: &str, request_id: &str, id: &str, node: &str, ttl: Duration)
    -> StoreResult<()>;

    /// (execution id, node) of a request id.
    async fn request(&self, tenant: &str, request_id: &str) -> StoreResult<Option<(String, String)>>;

    /// Adds `n` to `tenant`'s counter `name` (executions, tool calls, replays), across nodes.
    async fn add_usage(&self, tenant: &str, name: &str, n: u64) -> StoreResult<()>;

    async fn usage(&self, tenant: &str) -> StoreResult<HashMap<String, u64>>;
}
