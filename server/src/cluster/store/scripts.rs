//! The Lua scripts [`RedisStore`](super::RedisStore) runs: a journal's save and removal,
//! which keep the journals' accounting (bytes per tenant and in total) in step with them, and
//! the claim of a round.

use crate::core::token::now_ms;

/// Tenant names and request ids are the client's: hex-encoded in keys, so no separator or
/// pattern character of theirs can reach another tenant's keys.
pub(super) fn key_part(s: &str) -> String {
    hex::encode(s.as_bytes())
}

/// The journals' accounting keys, after the journal's own three (`KEYS[4..8]` of the scripts).
pub(super) const ACCOUNTING: [&str; 5] = ["ptc:jq", "ptc:jq:b", "ptc:jq:t", "ptc:jq:u", "ptc:jq:total"];

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
pub(super) const SAVE: &str = r#"
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
pub(super) const FORGET: &str = r#"
release(ARGV[2])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
"#;

/// KEYS: the claim; ARGV: claimant, ttl ms. 1 if the round is (now, or already) this claimant's.
pub(super) const CLAIM: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"#;

/// A script over one journal's keys and the accounting.
pub(super) fn journal_script(body: &str, id: &str) -> redis::Cmd {
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
