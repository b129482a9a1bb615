//! One node of several: which node holds a paused execution, how to reach it, and what the
//! nodes share (`store`).
//!
//! A continuation token names the node that holds its paused execution. A node that receives
//! another node's token forwards the request there, once (a forwarded request is never
//! forwarded again), with the client's own credentials. When the owner cannot be reached, the
//! node resumes the execution itself by replaying its journal from the shared store (see
//! `ptc_engine::Journal`); without a journal, the client is told the execution is lost.

mod keeper;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

pub use keeper::{SessionHeader, SessionKeeper, StoreKeeper, session_record};
pub use store::{JournalLimits, MemoryStore, RedisStore, Saved, Saving, Segment, Store, StoreError};

/// Set on a forwarded request, naming the node that forwarded it.
pub const FORWARDED_HEADER: &str = "x-ptc-forwarded-by";
/// Proves a forwarded request comes from a node: a key derived from the token secret, which
/// only the nodes hold. Without it the forwarding header is ignored.
pub const FORWARD_KEY_HEADER: &str = "x-ptc-forward-key";

/// How long to wait for a peer's TCP connection: a node that is gone refuses at once (its port
/// or its address is closed); one that does not answer within this is treated as gone.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How this node finds the others.
#[derive(Debug, Clone, Default)]
pub enum Peers {
    /// Single node: nobody to forward to.
    #[default]
    None,
    /// A URL with `{node}` in it, e.g. `http://{node}.ptc-engine-headless:8080` over a
    /// Kubernetes headless Service.
    Template(String),
    /// node=URL pairs.
    List(Vec<(String, String)>),
}

impl Peers {
    /// `--peers`: `node=url,node=url`, or a template with `{node}`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Peers::None);
        }
        if s.contains("{node}") {
            return Ok(Peers::Template(s.trim_end_matches('/').to_string()));
        }
        let mut list = Vec::new();
        for pair in s.split(',') {
            let (node, url) = pair
                .split_once('=')
                .ok_or_else(|| format!("peer {pair:?} is not node=url (or give a URL template with {{node}})"))?;
            check_node_id(node.trim())?;
            list.push((node.trim().to_string(), url.trim().trim_end_matches('/').to_string()));
        }
        Ok(Peers::List(list))
    }

    fn url(&self, node: &str) -> Option<String> {
        match self {
            Peers::None => None,
            Peers::Template(t) => Some(t.replace("{node}", node)),
            Peers::List(list) => list.iter().find(|(n, _)| n == node).map(|(_, url)| url.clone()),
        }
    }
}

/// Node ids go into tokens, keys and URLs: letters, digits, `.`, `-`, `_`; 1 to 63 of them.
pub fn check_node_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok { Ok(()) } else { Err(format!("node id {id:?}: use 1 to 63 letters, digits, '.', '-' or '_'")) }
}

/// The node's own id: `PTC_NODE_ID`, or the host name (which a StatefulSet keeps stable).
pub fn default_node_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| check_node_id(h).is_ok())
        .unwrap_or_else(|| "node-0".into())
}

/// What a node knows of its cluster.
pub struct Cluster {
    pub node: String,
    peers: Peers,
    pub store: Arc<dyn Store>,
    client: reqwest::Client,
    /// Hex of the key that marks this cluster's forwarded requests (`FORWARD_KEY_HEADER`).
    forward_key: String,
}

/// Why a forward did not get the owner's answer.
#[derive(Debug)]
pub enum ForwardError {
    /// No address is known for the node.
    Unknown,
    /// The node did not take the connection (gone, or not answering).
    Unreachable(String),
}

impl Cluster {
    /// `forward_key`: derived from the token secret every node shares.
    pub fn new(node: String, peers: Peers, store: Arc<dyn Store>, forward_key: &[u8]) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .no_proxy()
            .build()
            .expect("a plain HTTP client builds");
        Cluster { node, peers, store, client, forward_key: hex::encode(forward_key) }
    }

    /// Claims `round` of `key` for this node (a claimant of its own each time, so that a
    /// second claim of the same round, here too, loses); `Ok(false)`: another claim won.
    pub async fn claim(&self, key: &str, round: u32, ttl: Duration) -> store::StoreResult<bool> {
        let claimant = format!("{} {}", self.node, crate::core::token::random_hex::<8>());
        self.store.claim(key, round, &claimant, ttl).await
    }

    /// Whether `headers` are those of a request another node of this cluster forwarded (then
    /// it is not forwarded again). A client cannot pass for a node: it lacks the key.
    pub fn forwarded(&self, headers: &HeaderMap) -> bool {
        use subtle::ConstantTimeEq;
        headers.contains_key(FORWARDED_HEADER)
            && headers.get(FORWARD_KEY_HEADER).is_some_and(|k| k.as_bytes().ct_eq(self.forward_key.as_bytes()).into())
    }

    /// One server on its own (no peers, nothing shared): tokens name no node.
    pub fn is_single(&self) -> bool {
        matches!(self.peers, Peers::None) && !self.durable()
    }

    /// Whether paused executions are journaled (the store outlives this node).
    pub fn durable(&self) -> bool {
        self.store.durable()
    }

    /// Whether a new execution is journaled now: the store outlives this node and answers
    /// (while it does not, executions run unjournaled rather than wait for it; a store marked
    /// unreachable is asked again here when it was last tried over 100 ms ago).
    pub async fn journaling(&self) -> bool {
        self.store.durable() && self.store.answers().await
    }

    /// Whether `node` takes a connection now: one that is gone refuses it, or does not answer
    /// within `CONNECT_TIMEOUT`. A node with no known address is not.
    pub async fn reachable(&self, node: &str) -> bool {
        let Some(url) = self.peers.url(node) else { return false };
        self.client.get(format!("{url}/")).send().await.is_ok()
    }

    /// POSTs `body` (JSON) to `path` on `node`, with the client's credentials from `headers`,
    /// and returns the owner's answer as it is.
    pub async fn forward(
        &self,
        node: &str,
        path: &str,
        headers: &HeaderMap,
        body: Vec<u8>,
    ) -> Result<Response, ForwardError> {
        let url = self.peers.url(node).ok_or(ForwardError::Unknown)?;
        let mut request = self
            .client
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .header(FORWARDED_HEADER, &self.node)
            .header(FORWARD_KEY_HEADER, &self.forward_key)
            .body(body);
        for name in ["x-api-key", "authorization", "x-librechat-code-request-id"] {
            if let Some(v) = headers.get(name) {
                request = request.header(name, v.as_bytes());
            }
        }
        let answer = request.send().await.map_err(|e| ForwardError::Unreachable(e.to_string()))?;
        let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let content_type = answer.headers().get("content-type").map(|v| v.as_bytes().to_vec());
        let bytes = answer.bytes().await.map_err(|e| ForwardError::Unreachable(e.to_string()))?;
        let mut response = (status, bytes).into_response();
        if let Some(ct) = content_type.and_then(|ct| HeaderValue::from_bytes(&ct).ok()) {
            response.headers_mut().insert("content-type", ct);
        }
        Ok(response)
    }
}

/// What a journal's header keeps of the request that started the execution: enough to start
/// it again anywhere.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JournalHeader {
    pub code: String,
    pub tools: Vec<ptc_engine::ToolDef>,
    pub tenant: String,
    pub session_id: String,
    pub runtime: String,
    /// Hex of the seed of the sandbox's random sources.
    pub seed: String,
    /// The execution's deadline, Unix milliseconds.
    pub expires_at_ms: u64,
    /// What `/mnt/data` held when it started, to put it back so for a replay (and to refuse
    /// one when a file it started with has changed since).
    pub files: Vec<crate::core::files::ScanEntry>,
    /// The hosts the request narrowed its tenant's network policy to (empty: all of it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_allow: Vec<String>,
    /// The span its execution's span is under (W3C `traceparent`; empty: none), so that a
    /// replay or a thaw on another node stays in the caller's trace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traceparent: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_a_template_or_a_list_and_node_ids_are_plain() {
        assert!(matches!(Peers::parse("").unwrap(), Peers::None));
        let t = Peers::parse("http://{node}.svc:8080/").unwrap();
        assert_eq!(t.url("n-1").as_deref(), Some("http://n-1.svc:8080"));
        let l = Peers::parse("a=http://10.0.0.1:8080, b=http://10.0.0.2:8080").unwrap();
        assert_eq!(l.url("b").as_deref(), Some("http://10.0.0.2:8080"));
        assert_eq!(l.url("c"), None);
        assert!(Peers::parse("http://10.0.0.1:8080").unwrap_err().contains("node=url"));
        assert!(Peers::parse("a b=http://x").is_err());
        for bad in ["", "a b", "a/b", "a:b", &"x".repeat(64)] {
            assert!(check_node_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_node_id("ptc-engine-0.local_1").is_ok());
    }
}
