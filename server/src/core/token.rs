//! Continuation tokens: `base64url(payload).base64url(HMAC-SHA256(payload))`.
//!
//! The payload names the execution, tenant, session, round and expiry. A token is accepted
//! only with a valid signature (constant-time check), before its expiry, for its own tenant;
//! single use is enforced by the caller, which keeps the round each paused execution expects.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The number a pause of the engine's round `round` goes by, in tokens (`Claims::round`), the
/// journal's segments, claims and kept images: a round whose calls wait for a person's
/// decision pauses first for the decisions (`2r - 1`), then for the results (`2r`). Pauses come
/// in that order, each once.
pub fn pause_of(round: u32, asking: bool) -> u32 {
    round.saturating_mul(2).saturating_sub(u32::from(asking))
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Claims {
    #[serde(rename = "e")]
    pub execution_id: String,
    #[serde(rename = "t")]
    pub tenant: String,
    #[serde(rename = "s")]
    pub session_id: String,
    /// The pause it resumes ([`pause_of`]).
    #[serde(rename = "r")]
    pub round: u32,
    /// Unix time in milliseconds.
    #[serde(rename = "x")]
    pub expires_at_ms: u64,
    /// The node holding the paused execution (empty: a single server's token).
    #[serde(rename = "n", default, skip_serializing_if = "String::is_empty")]
    pub node: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    Invalid,
    Expired,
}

#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl Signer {
    /// `secret` from config, or 32 random bytes (tokens then die with the process, as do the
    /// paused executions they point at).
    pub fn new(secret: Option<&str>) -> Self {
        let key = match secret {
            Some(s) if !s.is_empty() => s.as_bytes().to_vec(),
            _ => {
                let mut key = vec![0; 32];
                getrandom::fill(&mut key).expect("the OS random source");
                key
            }
        };
        Signer { key }
    }

    /// A key for another purpose, derived from this one: HMAC-SHA256(key, `label`).
    pub fn derive(&self, label: &[u8]) -> Vec<u8> {
        let mut mac = self.mac();
        mac.update(label);
        mac.finalize().into_bytes().to_vec()
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length")
    }

    pub fn sign(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialise");
        let mut mac = self.mac();
        mac.update(&payload);
        format!("{}.{}", B64.encode(&payload), B64.encode(mac.finalize().into_bytes()))
    }

    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Claims, TokenError> {
        let (payload, signature) = token.split_once('.').ok_or(TokenError::Invalid)?;
        let payload = B64.decode(payload).map_err(|_| TokenError::Invalid)?;
        let signature = B64.decode(signature).map_err(|_| TokenError::Invalid)?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&signature).map_err(|_| TokenError::Invalid)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::Invalid)?;
        if claims.expires_at_ms <= now_ms {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The time left until `expires_at_ms` (at least 1 ms): how long a store entry of something
/// that expires then is kept.
pub fn ttl_until(expires_at_ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis(expires_at_ms.saturating_sub(now_ms()).max(1))
}

/// `N` bytes from the OS's random source, as hex: ids and handles a client must not guess.
pub fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the OS random source");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            execution_id: "e1".into(),
            tenant: "t".into(),
            session_id: "s".into(),
            round: 2,
            expires_at_ms: 2_000,
            node: String::new(),
        }
    }

    #[test]
    fn round_trips_and_rejects_tampering() {
        let signer = Signer::new(Some("k"));
        let token = signer.sign(&claims());
        assert_eq!(signer.verify(&token, 1_000), Ok(claims()));
        assert_eq!(signer.verify(&token, 2_000), Err(TokenError::Expired));
        assert_eq!(Signer::new(Some("other")).verify(&token, 1_000), Err(TokenError::Invalid));
        // Flip every character in turn: no altered token is accepted.
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).unwrap();
            if altered != token {
                assert!(signer.verify(&altered, 1_000).is_err(), "accepted a token altered at byte {i}");
            }
        }
        assert_eq!(signer.verify("garbage", 0), Err(TokenError::Invalid));
    }
}
