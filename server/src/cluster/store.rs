//! What the nodes of a cluster share: the journals of paused executions, which round of each
//! has been resumed (tokens are single use across nodes), which node runs a request id, and
//! per-tenant usage counters.
//!
//! [`Store`] is the small interface; [`MemoryStore`] keeps it in this process (one node, no
//! service: nothing survives the node, so it journals nothing), [`RedisStore`] in Redis, which
//! LibreChat-style deployments already run.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

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

    /// Appends `segment`, what execution `id` (of `tenant`) recorded up to `round`, to its
    /// journal (with `header` the first time), names `owner` and `round`, and keeps it all for
    /// `ttl` (the execution's deadline). Saving a round again replaces its segment.
    async fn save(
        &self,
        id: &str,
        tenant: &str,
        header: Option<&[u8]>,
        segment: &[u8],
        owner: &str,
        round: u32,
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

/// The single-node store: a map in this process, entries dropped at their expiry.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    journals: HashMap<String, (Saved, Instant)>,
    claims: HashMap<(String, u32), Instant>,
    requests: HashMap<(String, String), (String, String, Instant)>,
    usage: HashMap<String, HashMap<String, u64>>,
}

impl MemoryStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        m.journals.retain(|_, (_, until)| *until > now);
        m.claims.retain(|_, until| *until > now);
        m.requests.retain(|_, (_, _, until)| *until > now);
        m
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn durable(&self) -> bool {
        false
    }

    async fn save(
        &self,
        id: &str,
        _tenant: &str,
        header: Option<&[u8]>,
        segment: &[u8],
        owner: &str,
        round: u32,
        ttl: Duration,
    ) -> StoreResult<Saving> {
        let mut m = self.lock();
        let until = Instant::now() + ttl;
        let entry = m.journals.entry(id.to_string()).or_insert_with(|| {
            (Saved { header: Vec::new(), segments: Vec::new(), owner: String::new(), round: 0 }, until)
        });
        if let Some(header) = header {
            entry.0.header = header.to_vec();
        }
        entry.0.segments.push(segment.to_vec());
        entry.0.owner = owner.to_string();
        entry.0.round = round;
        entry.1 = until;
        Ok(Saving::Saved)
    }

    async fn set_owner(&self, id: &str, owner: &str, round: u32, ttl: Duration) -> StoreResult<()> {
        if let Some(entry) = self.lock().journals.get_mut(id) {
            entry.0.owner = owner.to_string();
            entry.0.round = round;
            entry.1 = Instant::now() + ttl;
        }
        Ok(())
    }

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>> {
        Ok(self.lock().journals.get(id).map(|(saved, _)| saved.clone()))
    }

    async fn claim(&self, id: &str, round: u32, _claimant: &str, ttl: Duration) -> StoreResult<bool> {
        let mut m = self.lock();
        let key = (id.to_string(), round);
        if m.claims.contains_key(&key) {
            return Ok(false);
        }
        m.claims.insert(key, Instant::now() + ttl);
        Ok(true)
    }

    async fn forget(&self, id: &str) -> StoreResult<()> {
        self.lock().journals.remove(id);
        Ok(())
    }

    async fn set_request(
        &self,
        tenant: &str,
        request_id: &str,
        id: &str,
        node: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let until = Instant::now() + ttl;
        self.lock().requests.insert((tenant.into(), request_id.into()), (id.into(), node.into(), until));
        Ok(())
    }

    async fn request(&self, tenant: &str, request_id: &str) -> StoreResult<Option<(String, String)>> {
        let m = self.lock();
        Ok(m.requests
            .get(&(tenant.to_string(), request_id.to_string()))
            .map(|(id, node, _)| (id.clone(), node.clone())))
    }

    async fn add_usage(&self, tenant: &str, name: &str, n: u64) -> StoreResult<()> {
        *self.lock().usage.entry(tenant.into()).or_default().entry(name.into()).or_default() += n;
        Ok(())
    }

    async fn usage(&self, tenant: &str) -> StoreResult<HashMap<String, u64>> {
        Ok(self.lock().usage.get(tenant).cloned().unwrap_or_default())
    }
}

/// The shared store in Redis. Keys (all under `ptc:`): `j:{id}:h` the journal's header,
/// `j:{id}:s` its segments (a hash by round), `j:{id}:o` "owner round"; `c:{id}:{round}` a
/// claimed round; `r:{tenant}:{request id}` "id node"; `u:{tenant}` usage counters (a hash);
/// and the journals' accounting: `jq` (id → expiry, sorted), `jq:b` (id → bytes), `jq:t` (id →
/// tenant), `jq:u` (tenant → bytes), `jq:total`. Every key but the counters and the accounting
/// expires with its execution; expired journals leave the accounting at the next save.
pub struct RedisStore {
    conn: redis::aio::ConnectionManager,
    health: Arc<Health>,
    limits: JournalLimits,
}

/// The circuit: whether the store answers, and whether a check is under way.
#[derive(Default)]
struct Health {
    down: AtomicBool,
    checking: AtomicBool,
}

fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError(format!("Redis: {e}"))
}

/// A failure of the connection (not of a command), which opens the circuit.
fn connection_failed(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// Tenant names and request ids are the client's: hex-encoded in keys, so no separator or
/// pattern character of theirs can reach another tenant's keys.
fn key_part(s: &str) -> String {
    hex::encode(s.as_bytes())
}

/// One command or a pipeline, sent through [`RedisStore::query`].
#[derive(Clone, Copy)]
enum Request<'a> {
    Cmd(&'a redis::Cmd),
    Pipe(&'a redis::Pipeline),
}

impl RedisStore {
    /// The store at `url` (`redis://host:port/db`), which reconnects by itself after a drop.
    /// `Err` only for a URL that is not one: a Redis that does not answer yet is tried again in
    /// the background while the node serves unjournaled (a warning says so).
    pub async fn connect(url: &str, limits: JournalLimits) -> StoreResult<Self> {
        let client = redis::Client::open(url).map_err(redis_error)?;
        // Reconnecting is quick and tried once: the circuit, not the client, waits for Redis.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(COMMAND_TIMEOUT);
        let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, config).map_err(redis_error)?;
        let store = RedisStore { conn, health: Arc::default(), limits };
        metrics::gauge!("ptc_cluster_store_up").set(1.0);
        let ping = redis::cmd("PING");
        if let Err(e) = store.query::<String>(Request::Cmd(&ping), true).await {
            tracing::warn!("the cluster store does not answer at start ({e}); serving unjournaled until it does");
            store.trip(&e.to_string());
        }
        Ok(store)
    }

    /// Sends `request` (again once, after a dropped connection, when it is `idempotent`), within
    /// [`COMMAND_TIMEOUT`]; fails at once while the circuit is open.
    async fn query<T: redis::FromRedisValue>(&self, request: Request<'_>, idempotent: bool) -> StoreResult<T> {
        if self.health.down.load(Ordering::Acquire) {
            return Err(StoreError("unreachable (tried again every second)".into()));
        }
        let mut tries = if idempotent { 2 } else { 1 };
        loop {
            tries -= 1;
            let mut conn = self.conn.clone();
            let sent = async {
                match request {
                    Request::Cmd(cmd) => cmd.query_async::<T>(&mut conn).await,
                    Request::Pipe(pipe) => pipe.query_async::<T>(&mut conn).await,
                }
            };
            match tokio::time::timeout(COMMAND_TIMEOUT, sent).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if connection_failed(&e) && tries > 0 => {
                    tracing::info!("the cluster store dropped the connection ({e}); sending once more");
                }
                Ok(Err(e)) if connection_failed(&e) => {
                    // A command not sent again that met a connection dropped since its last use
                    // (Redis restarted) fails alone: the client reconnects for the next one.
                    if idempotent || !e.is_connection_dropped() {
                        self.trip(&e.to_string());
                    }
                    return Err(redis_error(e));
                }
                Ok(Err(e)) => return Err(redis_error(e)),
                Err(_) => {
                    let why = format!("no answer within {} ms", COMMAND_TIMEOUT.as_millis());
                    self.trip(&why);
                    return Err(StoreError(why));
                }
            }
        }
    }

    /// Opens the circuit and checks the store again in the background until it answers.
    fn trip(&self, why: &str) {
        if !self.health.down.swap(true, Ordering::AcqRel) {
            tracing::warn!("the cluster store is unreachable ({why}): executions run unjournaled until it answers");
            metrics::gauge!("ptc_cluster_store_up").set(0.0);
        }
        if self.health.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let (health, conn) = (self.health.clone(), self.conn.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECHECK_EVERY).await;
                let (mut conn, ping) = (conn.clone(), redis::cmd("PING"));
                if let Ok(Ok(_)) = tokio::time::timeout(COMMAND_TIMEOUT, ping.query_async::<String>(&mut conn)).await {
                    break;
                }
            }
            health.down.store(false, Ordering::Release);
            health.checking.store(false, Ordering::Release);
            tracing::info!("the cluster store answers again: executions are journaled again");
            metrics::gauge!("ptc_cluster_store_up").set(1.0);
        });
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The journals' accounting keys, after the journal's own three (`KEYS[4..8]` of the scripts).
const ACCOUNTING: [&str; 5] = ["ptc:jq", "ptc:jq:b", "ptc:jq:t", "ptc:jq:u", "ptc:jq:total"];

/// Drops expired journals from the accounting (at most 64 a call): the body both scripts share.
const PRUNE: &str = r#"
local function release(id)
  local b = tonumber(redis.call('HGET', KEYS[5], id) or '0')
  local t = redis.call('HGET', KEYS[6], id)
  if t and redis.call('HINCRBY', KEYS[7], t, -b) <= 0 then redis.call('HDEL', KEYS[7], t) end
  if b > 0 then redis.call('DECRBY', KEYS[8], b) end
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
  redis.call('ZREM', KEYS[4], id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[1], 'LIMIT', 0, 64)) do release(id) end
"#;

/// ARGV: now, id, tenant, header ("" for none), segment, round field, "owner round", ttl ms,
/// tenant bound, total bound. Returns "ok", "tenant" or "total".
const SAVE: &str = r#"
local id, tenant = ARGV[2], ARGV[3]
local add = string.len(ARGV[5])
local old = redis.call('HGET', KEYS[2], ARGV[6])
if old then add = add - string.len(old) end
if ARGV[4] ~= '' and redis.call('EXISTS', KEYS[1]) == 0 then add = add + string.len(ARGV[4]) end
local mine = tonumber(redis.call('HGET', KEYS[7], tenant) or '0')
local all = tonumber(redis.call('GET', KEYS[8]) or '0')
if add > 0 and mine + add > tonumber(ARGV[9]) then return 'tenant' end
if add > 0 and all + add > tonumber(ARGV[10]) then return 'total' end
if ARGV[4] ~= '' then redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[8]) else redis.call('PEXPIRE', KEYS[1], ARGV[8]) end
redis.call('HSET', KEYS[2], ARGV[6], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[8])
redis.call('HINCRBY', KEYS[5], id, add)
redis.call('HSET', KEYS[6], id, tenant)
redis.call('HINCRBY', KEYS[7], tenant, add)
redis.call('INCRBY', KEYS[8], add)
redis.call('ZADD', KEYS[4], tonumber(ARGV[1]) + tonumber(ARGV[8]), id)
return 'ok'
"#;

/// ARGV: now, id.
const FORGET: &str = r#"
release(ARGV[2])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
"#;

/// KEYS: the claim; ARGV: claimant, ttl ms. 1 if the round is (now, or already) this claimant's.
const CLAIM: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"#;

/// A script over one journal's keys and the accounting.
fn journal_script(body: &str, id: &str) -> redis::Cmd {
    let id = key_part(id);
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(format!("{PRUNE}{body}")).arg(8);
    cmd.arg(format!("ptc:j:{id}:h")).arg(format!("ptc:j:{id}:s")).arg(format!("ptc:j:{id}:o"));
    for key in ACCOUNTING {
        cmd.arg(key);
    }
    cmd.arg(now_ms());
    cmd
}

#[async_trait]
impl Store for RedisStore {
    fn durable(&self) -> bool {
        true
    }

    fn available(&self) -> bool {
        !self.health.down.load(Ordering::Acquire)
    }

    async fn save(
        &self,
        id: &str,
        tenant: &str,
        header: Option<&[u8]>,
        segment: &[u8],
        owner: &str,
        round: u32,
        ttl: Duration,
    ) -> StoreResult<Saving> {
        let mut cmd = journal_script(SAVE, id);
        cmd.arg(key_part(id)).arg(key_part(tenant)).arg(header.unwrap_or_default()).arg(segment);
        cmd.arg(format!("{round:010}")).arg(format!("{owner} {round}")).arg(ttl_ms(ttl));
        cmd.arg(self.limits.tenant_bytes).arg(self.limits.total_bytes);
        let outcome: String = self.query(Request::Cmd(&cmd), true).await?;
        Ok(match outcome.as_str() {
            "ok" => Saving::Saved,
            "tenant" => Saving::Refused(format!(
                "this tenant's journals would pass their bound ({} bytes)",
                self.limits.tenant_bytes
            )),
            _ => Saving::Refused(format!("all journals would pass their bound ({} bytes)", self.limits.total_bytes)),
        })
    }

    async fn set_owner(&self, id: &str, owner: &str, round: u32, ttl: Duration) -> StoreResult<()> {
        let ms = ttl_ms(ttl);
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("SET")
            .arg(format!("ptc:j:{}:o", key_part(id)))
            .arg(format!("{owner} {round}"))
            .arg("PX")
            .arg(ms)
            .arg("XX")
            .ignore();
        pipe.cmd("ZADD").arg(ACCOUNTING[0]).arg("XX").arg(now_ms() + ms).arg(key_part(id)).ignore();
        self.query(Request::Pipe(&pipe), true).await
    }

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>> {
        let id = key_part(id);
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(format!("ptc:j:{id}:h"));
        pipe.cmd("HGETALL").arg(format!("ptc:j:{id}:s"));
        pipe.cmd("GET").arg(format!("ptc:j:{id}:o"));
        let (header, segments, owner): (Option<Vec<u8>>, Vec<(String, Vec<u8>)>, Option<String>) =
            self.query(Request::Pipe(&pipe), true).await?;
        let (Some(header), Some(owner)) = (header, owner) else { return Ok(None) };
        let (owner, round) = owner.rsplit_once(' ').ok_or_else(|| StoreError("a malformed owner entry".into()))?;
        let round = round.parse().map_err(|_| StoreError("a malformed owner entry".into()))?;
        // Rounds are zero-padded: their names sort as their numbers do.
        let mut segments = segments;
        segments.sort_by(|a, b| a.0.cmp(&b.0));
        let segments = segments.into_iter().map(|(_, segment)| segment).collect();
        Ok(Some(Saved { header, segments, owner: owner.to_string(), round }))
    }

    async fn claim(&self, id: &str, round: u32, claimant: &str, ttl: Duration) -> StoreResult<bool> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CLAIM).arg(1).arg(format!("ptc:c:{}:{round}", key_part(id))).arg(claimant).arg(ttl_ms(ttl));
        let claimed: i64 = self.query(Request::Cmd(&cmd), true).await?;
        Ok(claimed == 1)
    }

    async fn forget(&self, id: &str) -> StoreResult<()> {
        let mut cmd = journal_script(FORGET, id);
        cmd.arg(key_part(id));
        self.query::<i64>(Request::Cmd(&cmd), true).await.map(|_| ())
    }

    async fn set_request(
        &self,
        tenant: &str,
        request_id: &str,
        id: &str,
        node: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(format!("ptc:r:{}:{}", key_part(tenant), key_part(request_id)))
            .arg(format!("{id} {node}"))
            .arg("PX")
            .arg(ttl_ms(ttl));
        self.query(Request::Cmd(&cmd), true).await
    }

    async fn request(&self, tenant: &str, request_id: &str) -> StoreResult<Option<(String, String)>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(format!("ptc:r:{}:{}", key_part(tenant), key_part(request_id)));
        let value: Option<String> = self.query(Request::Cmd(&cmd), true).await?;
        Ok(value.and_then(|v| v.split_once(' ').map(|(id, node)| (id.to_string(), node.to_string()))))
    }

    async fn add_usage(&self, tenant: &str, name: &str, n: u64) -> StoreResult<()> {
        let mut cmd = redis::cmd("HINCRBY");
        cmd.arg(format!("ptc:u:{}", key_part(tenant))).arg(name).arg(n);
        // Not sent again: a count is not worth counting twice.
        self.query(Request::Cmd(&cmd), false).await
    }

    async fn usage(&self, tenant: &str) -> StoreResult<HashMap<String, u64>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(format!("ptc:u:{}", key_part(tenant)));
        self.query(Request::Cmd(&cmd), true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_memory_store_keeps_journals_until_their_expiry_and_claims_a_round_once() {
        let store = MemoryStore::default();
        let ttl = Duration::from_secs(60);
        assert!(!store.durable());
        store.save("e", "t", Some(b"h"), b"s1", "n1", 1, ttl).await.unwrap();
        store.save("e", "t", None, b"s2", "n1", 2, ttl).await.unwrap();
        let saved = store.load("e").await.unwrap().unwrap();
        assert_eq!(
            (saved.header, saved.segments, saved.owner, saved.round),
            (b"h".to_vec(), vec![b"s1".to_vec(), b"s2".to_vec()], "n1".into(), 2)
        );
        store.set_owner("e", "n2", 2, ttl).await.unwrap();
        assert_eq!(store.load("e").await.unwrap().unwrap().owner, "n2");
        assert!(store.claim("e", 2, "n2", ttl).await.unwrap());
        assert!(!store.claim("e", 2, "n3", ttl).await.unwrap());
        assert!(store.claim("e", 3, "n3", ttl).await.unwrap());
        store.forget("e").await.unwrap();
        assert_eq!(store.load("e").await.unwrap(), None);

        store.save("short", "t", Some(b"h"), b"s", "n1", 1, Duration::from_millis(1)).await.unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.load("short").await.unwrap(), None);

        store.set_request("t", "r1", "e", "n1", ttl).await.unwrap();
        assert_eq!(store.request("t", "r1").await.unwrap(), Some(("e".into(), "n1".into())));
        assert_eq!(store.request("other", "r1").await.unwrap(), None);
        store.add_usage("t", "executions", 2).await.unwrap();
        store.add_usage("t", "executions", 1).await.unwrap();
        assert_eq!(store.usage("t").await.unwrap().get("executions"), Some(&3));
    }

    #[test]
    fn tenant_parts_of_keys_cannot_carry_separators() {
        assert_eq!(key_part("a:b*"), "613a622a");
    }
}
