//! [`RedisStore`]: the cluster store in Redis, its keys and the [`Store`] calls as commands.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;

use super::circuit::{Circuit, Request, redis_error};
use super::scripts::{ACCOUNTING, CLAIM, FORGET, SAVE, journal_script, key_part};
use super::{COMMAND_TIMEOUT, JournalLimits, Saved, Saving, Segment, Store, StoreError, StoreResult};
use crate::core::token::now_ms;

/// The shared store in Redis. Keys (all under `ptc:`): `j:{id}:h` the journal's header,
/// `j:{id}:s` its segments (a hash by round, and the sealed image under `image`), `j:{id}:o` "owner round"; `c:{id}:{round}` a
/// claimed round; `r:{tenant}:{request id}` "id node"; `u:{tenant}` usage counters (a hash);
/// and the journals' accounting: `jq` (id → expiry, sorted), `jq:b` (id → bytes), `jq:t` (id →
/// tenant), `jq:u` (tenant → bytes), `jq:total`. Every key but the counters and the accounting
/// expires with its execution; expired journals leave the accounting at the next save.
pub struct RedisStore {
    circuit: Circuit,
    limits: JournalLimits,
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
        let store = RedisStore { circuit: Circuit::new(conn), limits };
        metrics::gauge!("ptc_cluster_store_up").set(1.0);
        let ping = redis::cmd("PING");
        if let Err(e) = store.circuit.query::<String>(Request::Cmd(&ping), true).await {
            tracing::warn!("the cluster store does not answer at start ({e}); serving unjournaled until it does");
            store.circuit.trip(&e.to_string());
        }
        Ok(store)
    }
}

impl RedisStore {
    /// What the save script's answer means.
    fn saving(&self, outcome: &str) -> Saving {
        match outcome {
            "ok" => Saving::Saved,
            "tenant" => Saving::Refused(format!(
                "this tenant's journals would pass their bound ({} bytes)",
                self.limits.tenant_bytes
            )),
            _ => Saving::Refused(format!("all journals would pass their bound ({} bytes)", self.limits.total_bytes)),
        }
    }
}

/// The field of a journal's segments that holds its sealed image: the round (4 bytes, big
/// endian), then the image.
const IMAGE_FIELD: &str = "image";

pub(super) fn ttl_ms(ttl: Duration) -> u64 {
    (ttl.as_millis() as u64).max(1)
}

#[async_trait]
impl Store for RedisStore {
    fn durable(&self) -> bool {
        true
    }

    fn available(&self) -> bool {
        self.circuit.available()
    }

    async fn answers(&self) -> bool {
        self.circuit.check_now().await
    }

    async fn save(&self, segment: Segment<'_>, owner: &str, ttl: Duration) -> StoreResult<Saving> {
        let Segment { id, tenant, header, entries, round } = segment;
        let mut cmd = journal_script(SAVE, id);
        cmd.arg(key_part(id)).arg(key_part(tenant)).arg(header.unwrap_or_default()).arg(entries);
        cmd.arg(format!("{round:010}")).arg(format!("{owner} {round}")).arg(ttl_ms(ttl));
        cmd.arg(self.limits.tenant_bytes).arg(self.limits.total_bytes);
        let outcome: String = self.circuit.query(Request::Cmd(&cmd), true).await?;
        Ok(self.saving(&outcome))
    }

    async fn keep_image(
        &self,
        id: &str,
        tenant: &str,
        round: u32,
        image: &[u8],
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<Saving> {
        // In the journal's hash of segments, under a field no round has: its accounting is
        // the journal's, and it goes with it.
        let mut value = round.to_be_bytes().to_vec();
        value.extend_from_slice(image);
        let mut cmd = journal_script(SAVE, id);
        cmd.arg(key_part(id)).arg(key_part(tenant)).arg("").arg(value);
        cmd.arg(IMAGE_FIELD).arg(format!("{owner} {round}")).arg(ttl_ms(ttl));
        cmd.arg(self.limits.tenant_bytes).arg(self.limits.total_bytes);
        let outcome: String = self.circuit.query(Request::Cmd(&cmd), true).await?;
        Ok(self.saving(&outcome))
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
        self.circuit.query(Request::Pipe(&pipe), true).await
    }

    async fn load(&self, id: &str) -> StoreResult<Option<Saved>> {
        let id = key_part(id);
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(format!("ptc:j:{id}:h"));
        pipe.cmd("HGETALL").arg(format!("ptc:j:{id}:s"));
        pipe.cmd("GET").arg(format!("ptc:j:{id}:o"));
        let (header, segments, owner): (Option<Vec<u8>>, Vec<(String, Vec<u8>)>, Option<String>) =
            self.circuit.query(Request::Pipe(&pipe), true).await?;
        let (Some(header), Some(owner)) = (header, owner) else { return Ok(None) };
        let (owner, round) = owner.rsplit_once(' ').ok_or_else(|| StoreError("a malformed owner entry".into()))?;
        let round = round.parse().map_err(|_| StoreError("a malformed owner entry".into()))?;
        let (images, mut segments): (Vec<_>, Vec<_>) = segments.into_iter().partition(|(f, _)| f == IMAGE_FIELD);
        let image = match images.into_iter().next() {
            Some((_, v)) if v.len() >= 4 => Some((u32::from_be_bytes([v[0], v[1], v[2], v[3]]), v[4..].to_vec())),
            Some(_) => return Err(StoreError("a malformed image entry".into())),
            None => None,
        };
        // Rounds are zero-padded: their names sort as their numbers do.
        segments.sort_by(|a, b| a.0.cmp(&b.0));
        let segments = segments.into_iter().map(|(_, segment)| segment).collect();
        Ok(Some(Saved { header, segments, owner: owner.to_string(), round, image }))
    }

    async fn claim(&self, id: &str, round: u32, claimant: &str, ttl: Duration) -> StoreResult<bool> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(CLAIM).arg(1).arg(format!("ptc:c:{}:{round}", key_part(id))).arg(claimant).arg(ttl_ms(ttl));
        let claimed: i64 = self.circuit.query(Request::Cmd(&cmd), true).await?;
        Ok(claimed == 1)
    }

    async fn forget(&self, id: &str) -> StoreResult<()> {
        let mut cmd = journal_script(FORGET, id);
        cmd.arg(key_part(id));
        self.circuit.query::<i64>(Request::Cmd(&cmd), true).await.map(|_| ())
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
        self.circuit.query(Request::Cmd(&cmd), true).await
    }

    async fn request(&self, tenant: &str, request_id: &str) -> StoreResult<Option<(String, String)>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(format!("ptc:r:{}:{}", key_part(tenant), key_part(request_id)));
        let value: Option<String> = self.circuit.query(Request::Cmd(&cmd), true).await?;
        Ok(value.and_then(|v| v.split_once(' ').map(|(id, node)| (id.to_string(), node.to_string()))))
    }

    async fn add_usage(&self, tenant: &str, name: &str, n: u64) -> StoreResult<()> {
        let mut cmd = redis::cmd("HINCRBY");
        cmd.arg(format!("ptc:u:{}", key_part(tenant))).arg(name).arg(n);
        // Not sent again: a count is not worth counting twice.
        self.circuit.query(Request::Cmd(&cmd), false).await
    }

    async fn usage(&self, tenant: &str) -> StoreResult<HashMap<String, u64>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(format!("ptc:u:{}", key_part(tenant)));
        self.circuit.query(Request::Cmd(&cmd), true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_parts_of_keys_cannot_carry_separators() {
        assert_eq!(key_part("a:b*"), "613a622a");
    }
}
