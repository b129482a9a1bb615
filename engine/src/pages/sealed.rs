//! A hibernated execution as bytes another server can thaw: its pages (`Frozen`) and the
//! host state that lived beside the instance (tool exchange, call log, output, fuel, the
//! monotonic clock's reading), sealed with an HMAC-SHA256 under the engine's
//! [`crate::api::config::EngineConfig::seal_key`] and bound to its tenant, its runtime's digest and its
//! execution id. An execution whose request has a [`crate::api::keeper::Keeper`] hands it these bytes at each
//! hibernation; [`crate::engine::Engine::thaw`] takes them back.
//!
//! The layout: `PTCH`, a version byte, the body (postcard), and the 32-byte MAC of all that
//! precedes it. Opening checks, in this order, that a refusal names the first thing wrong:
//! the size bound, the format, the MAC (altered, or sealed under another key), then the
//! binding (another tenant, another runtime version, another execution). Sizes and offsets
//! inside are checked again against the runtime's memory at the thaw (`thaw` in `mod.rs`).

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::Frozen;
use crate::api::events::ToolCallRecord;

const MAGIC: &[u8; 4] = b"PTCH";
/// 2: the pages are compressed with zstd (1: zlib). 3: calls held for approval are kept. 4:
/// the outbound requests it made are kept (a thaw elsewhere went on counting from 0).
const VERSION: u8 = 4;
const MAC_LEN: usize = 32;

/// What a thaw on any server needs besides the request.
#[derive(Serialize, Deserialize)]
pub(crate) struct Body {
    pub(crate) tenant: Option<String>,
    pub(crate) runtime: [u8; 32],
    pub(crate) execution: String,
    pub(crate) round: u32,
    pub(crate) frozen: Frozen,
    pub(crate) host: Host,
}

/// The host state of a hibernated execution.
#[derive(Serialize, Deserialize)]
pub(crate) struct Host {
    /// Fuel left, and the fuel it started with.
    pub(crate) fuel: Option<u64>,
    pub(crate) fuel_initial: Option<u64>,
    /// The monotonic clock's reading when it hibernated, in nanoseconds.
    pub(crate) monotonic: u64,
    /// How long it had run, in milliseconds (its stats' wall time goes on from there).
    pub(crate) elapsed_ms: u64,
    /// How long until the timer its last wait was bounded by is due, in milliseconds.
    pub(crate) timer_ms: Option<u64>,
    pub(crate) rounds: u32,
    pub(crate) calls: u32,
    pub(crate) log: Vec<ToolCallRecord>,
    pub(crate) log_room: u64,
    /// Calls handed out and not answered, held for a decision, or not told about yet.
    pub(crate) exchange: crate::calls::exchange::Kept,
    /// What its calls' ids end with (`approval.rs`).
    pub(crate) suffix: String,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) truncated: bool,
    pub(crate) peak_memory: u64,
    /// Outbound HTTP requests it made, counted against its policy's `max_requests`.
    pub(crate) requests: u32,
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

/// The sealed bytes of `body`.
pub(crate) fn seal(key: &[u8], body: &Body) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(VERSION);
    let out = postcard::to_extend(body, out).expect("a body serialises");
    let mut m = mac(key);
    m.update(&out);
    let mut out = out;
    out.extend_from_slice(&m.finalize().into_bytes());
    out
}

/// What is expected of an image: who thaws it, with which runtime, as which execution.
pub(crate) struct Binding<'a> {
    pub(crate) tenant: Option<&'a str>,
    pub(crate) runtime: [u8; 32],
    pub(crate) execution: &'a str,
}

/// Opens sealed bytes, or says why they are refused (see the module's header for the order).
pub(crate) fn open(key: &[u8], bytes: &[u8], max_bytes: usize, expected: &Binding<'_>) -> Result<Body, String> {
    if bytes.len() > max_bytes {
        return Err(format!("it is {} bytes, over this server's bound of {max_bytes}", bytes.len()));
    }
    if bytes.len() < MAGIC.len() + 1 + MAC_LEN || &bytes[..MAGIC.len()] != MAGIC {
        return Err("these bytes are not a hibernated execution".into());
    }
    if bytes[MAGIC.len()] != VERSION {
        return Err(format!("it is of format version {}, this server reads {VERSION}", bytes[MAGIC.len()]));
    }
    let (signed, tag) = bytes.split_at(bytes.len() - MAC_LEN);
    let mut m = mac(key);
    m.update(signed);
    m.verify_slice(tag).map_err(|_| "it was altered, or sealed by a server with another key".to_string())?;
    let body: Body = postcard::from_bytes(&signed[MAGIC.len() + 1..]).map_err(|e| format!("it is malformed: {e}"))?;
    if body.tenant.as_deref() != expected.tenant {
        return Err("it belongs to another tenant".into());
    }
    if body.runtime != expected.runtime {
        return Err(
            "it was made by another version of the runtime (a server with another sandbox build); run the program \
             again"
                .into(),
        );
    }
    if body.execution != expected.execution {
        return Err("it is another execution's".into());
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> Body {
        Body {
            tenant: Some("acme".into()),
            runtime: [7; 32],
            execution: "e1".into(),
            round: 2,
            frozen: Frozen { len: 4096, pages: vec![0], packed: vec![1, 2, 3], handles: 2 },
            host: Host {
                fuel: Some(5),
                fuel_initial: Some(9),
                monotonic: 42,
                elapsed_ms: 10,
                timer_ms: None,
                rounds: 2,
                calls: 3,
                log: Vec::new(),
                log_room: 100,
                exchange: crate::calls::exchange::Kept {
                    pending: vec![("c1".into(), "get".into(), 2)],
                    ..Default::default()
                },
                suffix: "_0123456789abcdef".into(),
                stdout: b"hi\n".to_vec(),
                stderr: Vec::new(),
                truncated: false,
                peak_memory: 1 << 20,
                requests: 7,
            },
        }
    }

    const KEY: &[u8] = b"key";

    fn binding(tenant: Option<&str>) -> Binding<'_> {
        Binding { tenant, runtime: [7; 32], execution: "e1" }
    }

    #[test]
    fn sealed_bytes_open_under_the_same_key_and_binding() {
        let sealed = seal(KEY, &body());
        let opened = open(KEY, &sealed, 1 << 20, &binding(Some("acme"))).unwrap();
        assert_eq!(opened.host.exchange.pending, vec![("c1".to_string(), "get".to_string(), 2)]);
        assert_eq!(opened.frozen.packed, vec![1, 2, 3]);
        assert_eq!(opened.round, 2);
    }

    #[test]
    fn every_refusal_names_what_is_wrong() {
        let sealed = seal(KEY, &body());
        let refused = |bytes: &[u8], key: &[u8], max: usize, b: &Binding<'_>| open(key, bytes, max, b).err().unwrap();
        assert!(refused(&sealed, KEY, 10, &binding(Some("acme"))).contains("over this server's bound of 10"));
        assert!(refused(b"hello", KEY, 1 << 20, &binding(Some("acme"))).contains("not a hibernated execution"));
        let mut other_version = sealed.clone();
        other_version[4] = 9;
        assert!(refused(&other_version, KEY, 1 << 20, &binding(Some("acme"))).contains("format version 9"));
        // Any byte of the body or the tag changed.
        for i in [5, sealed.len() / 2, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[i] ^= 1;
            assert!(refused(&altered, KEY, 1 << 20, &binding(Some("acme"))).contains("altered"), "byte {i}");
        }
        assert!(refused(&sealed, b"other", 1 << 20, &binding(Some("acme"))).contains("another key"));
        assert!(refused(&sealed, KEY, 1 << 20, &binding(Some("globex"))).contains("another tenant"));
        assert!(refused(&sealed, KEY, 1 << 20, &binding(None)).contains("another tenant"));
        let other_runtime = Binding { tenant: Some("acme"), runtime: [8; 32], execution: "e1" };
        assert!(refused(&sealed, KEY, 1 << 20, &other_runtime).contains("another version of the runtime"));
        let other_execution = Binding { tenant: Some("acme"), runtime: [7; 32], execution: "e2" };
        assert!(refused(&sealed, KEY, 1 << 20, &other_execution).contains("another execution"));
    }
}
