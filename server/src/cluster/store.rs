//! What the nodes of a cluster share: the journals of paused executions, which round of each
//! has been resumed (tokens are single use across nodes), which node runs a request id, and
//! per-tenant usage counters.
//!
//! [`Store`] is the small interface; [`MemoryStore`] keeps it in this process (one node, no
//! service: nothing survives the node, so it journals nothing), [`RedisStore`] in Redis, which
//! LibreChat-style deployments already run.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

/// A store that could not be reached or answered nonsense.
#[derive(Debug, thiserror::Error)]
#[error("the cluster store: {0}")]
pub struct StoreError(pub String);

pub type StoreResult<T> = Result<T, StoreError>;

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

    /// Appends `segment` to execution `id`'s journal (with `header` the first time), names
    /// `owner` and `round`, and keeps it all for `ttl` (the execution's deadline).
    async fn save(
        &self,
        id: &str,
        header: Option<&[u8]>,
        segment: &[u8],
        owner: &str,
        round: u32,
        ttl: Duration,
    ) -> StoreResult<()>;

    /// Names a new owner (a node that resumed the execution by replay) for the same round.
    async fn set_owner(&self, id: &str, owner: &str, round: u32, ttl: Duration) -> StoreResult<()>;

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>>;

    /// Claims `round` of `id` for `node`: true for the first claim only (a token resumes once,
    /// whichever node it reaches).
    async fn claim(&self, id: &str, round: u32, node: &str, ttl: Duration) -> StoreResult<bool>;

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
        header: Option<&[u8]>,
        segment: &[u8],
        owner: &str,
        round: u32,
        ttl: Duration,
    ) -> StoreResult<()> {
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
        Ok(())
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

    async fn claim(&self, id: &str, round: u32, _node: &str, ttl: Duration) -> StoreResult<bool> {
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
/// `j:{id}:s` its segments (a list), `j:{id}:o` "owner round"; `c:{id}:{round}` a claimed
/// round; `r:{tenant}:{request id}` "id node"; `u:{tenant}` usage counters (a hash). Every key
/// but the counters expires with its execution.
pub struct RedisStore {
    conn: redis::aio::ConnectionManager,
}

fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError(format!("Redis: {e}"))
}

/// Tenant names and request ids are the client's: hex-encoded in keys, so no separator or
/// pattern character of theirs can reach another tenant's keys.
fn key_part(s: &str) -> String {
    hex::encode(s.as_bytes())
}

impl RedisStore {
    /// Connects to `url` (`redis://host:port/db`); reconnects by itself after a drop.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let client = redis::Client::open(url).map_err(redis_error)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        let conn = redis::aio::ConnectionManager::new_with_config(client, config).await.map_err(redis_error)?;
        Ok(RedisStore { conn })
    }
}

fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

#[async_trait]
impl Store for RedisStore {
    fn durable(&self) -> bool {
        true
    }

    async fn save(
        &self,
        id: &str,
        header: Option<&[u8]>,
        segment: &[u8],
        owner: &str,
        round: u32,
        ttl: Duration,
    ) -> StoreResult<()> {
        let (id, ms) = (key_part(id), ttl_ms(ttl));
        let mut pipe = redis::pipe();
        pipe.atomic();
        if let Some(header) = header {
            pipe.cmd("SET").arg(format!("ptc:j:{id}:h")).arg(header).arg("PX").arg(ms).ignore();
        } else {
            pipe.cmd("PEXPIRE").arg(format!("ptc:j:{id}:h")).arg(ms).ignore();
        }
        pipe.cmd("RPUSH").arg(format!("ptc:j:{id}:s")).arg(segment).ignore();
        pipe.cmd("PEXPIRE").arg(format!("ptc:j:{id}:s")).arg(ms).ignore();
        pipe.cmd("SET").arg(format!("ptc:j:{id}:o")).arg(format!("{owner} {round}")).arg("PX").arg(ms).ignore();
        pipe.query_async::<()>(&mut self.conn.clone()).await.map_err(redis_error)
    }

    async fn set_owner(&self, id: &str, owner: &str, round: u32, ttl: Duration) -> StoreResult<()> {
        let key = format!("ptc:j:{}:o", key_part(id));
        redis::cmd("SET")
            .arg(key)
            .arg(format!("{owner} {round}"))
            .arg("PX")
            .arg(ttl_ms(ttl))
            .arg("XX")
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(redis_error)
    }

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>> {
        let id = key_part(id);
        let (header, segments, owner): (Option<Vec<u8>>, Vec<Vec<u8>>, Option<String>) = redis::pipe()
            .cmd("GET")
            .arg(format!("ptc:j:{id}:h"))
            .cmd("LRANGE")
            .arg(format!("ptc:j:{id}:s"))
            .arg(0)
            .arg(-1)
            .cmd("GET")
            .arg(format!("ptc:j:{id}:o"))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error)?;
        let (Some(header), Some(owner)) = (header, owner) else { return Ok(None) };
        let (owner, round) = owner.rsplit_once(' ').ok_or_else(|| StoreError("a malformed owner entry".into()))?;
        let round = round.parse().map_err(|_| StoreError("a malformed owner entry".into()))?;
        Ok(Some(Saved { header, segments, owner: owner.to_string(), round }))
    }

    async fn claim(&self, id: &str, round: u32, node: &str, ttl: Duration) -> StoreResult<bool> {
        let reply: Option<String> = redis::cmd("SET")
            .arg(format!("ptc:c:{}:{round}", key_part(id)))
            .arg(node)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms(ttl))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error)?;
        Ok(reply.is_some())
    }

    async fn forget(&self, id: &str) -> StoreResult<()> {
        let id = key_part(id);
        redis::cmd("DEL")
            .arg(format!("ptc:j:{id}:h"))
            .arg(format!("ptc:j:{id}:s"))
            .arg(format!("ptc:j:{id}:o"))
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(redis_error)
    }

    async fn set_request(
        &self,
        tenant: &str,
        request_id: &str,
        id: &str,
        node: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        redis::cmd("SET")
            .arg(format!("ptc:r:{}:{}", key_part(tenant), key_part(request_id)))
            .arg(format!("{id} {node}"))
            .arg("PX")
            .arg(ttl_ms(ttl))
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(redis_error)
    }

    async fn request(&self, tenant: &str, request_id: &str) -> StoreResult<Option<(String, String)>> {
        let value: Option<String> = redis::cmd("GET")
            .arg(format!("ptc:r:{}:{}", key_part(tenant), key_part(request_id)))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error)?;
        Ok(value.and_then(|v| v.split_once(' ').map(|(id, node)| (id.to_string(), node.to_string()))))
    }

    async fn add_usage(&self, tenant: &str, name: &str, n: u64) -> StoreResult<()> {
        redis::cmd("HINCRBY")
            .arg(format!("ptc:u:{}", key_part(tenant)))
            .arg(name)
            .arg(n)
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(redis_error)
    }

    async fn usage(&self, tenant: &str) -> StoreResult<HashMap<String, u64>> {
        redis::cmd("HGETALL")
            .arg(format!("ptc:u:{}", key_part(tenant)))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error)
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
        store.save("e", Some(b"h"), b"s1", "n1", 1, ttl).await.unwrap();
        store.save("e", None, b"s2", "n1", 2, ttl).await.unwrap();
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

        store.save("short", Some(b"h"), b"s", "n1", 1, Duration::from_millis(1)).await.unwrap();
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
