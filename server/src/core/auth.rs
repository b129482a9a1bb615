//! API keys → tenants. Keys come from `--api-keys` (`tenant:key,...` or `@file` with one
//! `tenant:key` per line); with no keys the server runs in local development mode where every
//! caller is tenant `local`.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

pub const LOCAL_TENANT: &str = "local";

#[derive(Clone, Debug, Default)]
pub struct ApiKeys {
    /// SHA-256 of the key → tenant. Hashing first means the lookup's timing depends on the
    /// digest, not on how many leading bytes of a real key a guess got right.
    by_digest: HashMap<[u8; 32], String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    Missing,
    Invalid,
}

impl AuthError {
    pub fn message(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing API key: send `x-api-key: <key>` or `authorization: Bearer <key>`",
            AuthError::Invalid => "invalid API key",
        }
    }
}

impl ApiKeys {
    /// Parses `tenant:key` pairs; an entry `@path` reads more pairs from a file.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut keys = ApiKeys::default();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if let Some(path) = entry.strip_prefix('@') {
                let text = std::fs::read_to_string(path).map_err(|e| format!("reading API keys file {path}: {e}"))?;
                for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
                    keys.add(line)?;
                }
            } else {
                keys.add(entry)?;
            }
        }
        Ok(keys)
    }

    fn add(&mut self, pair: &str) -> Result<(), String> {
        let (tenant, key) = pair
            .split_once(':')
            .filter(|(t, k)| !t.trim().is_empty() && !k.trim().is_empty())
            .ok_or_else(|| "API keys must look like tenant:key".to_string())?;
        self.by_digest.insert(Sha256::digest(key.trim().as_bytes()).into(), tenant.trim().to_string());
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    pub fn tenants(&self) -> usize {
        self.by_digest.values().collect::<std::collections::HashSet<_>>().len()
    }

    /// The tenant for a presented key (`None`: no key was sent).
    pub fn tenant(&self, key: Option<&str>) -> Result<String, AuthError> {
        if self.is_empty() {
            return Ok(LOCAL_TENANT.to_string());
        }
        let key = key.map(str::trim).filter(|k| !k.is_empty()).ok_or(AuthError::Missing)?;
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.by_digest.get(&digest).cloned().ok_or(AuthError::Invalid)
    }
}

/// The key from `x-api-key`, or from `authorization: Bearer <key>` / `ApiKey <key>`.
pub fn presented_key<'a>(x_api_key: Option<&'a str>, authorization: Option<&'a str>) -> Option<&'a str> {
    if let Some(k) = x_api_key {
        return Some(k);
    }
    let auth = authorization?.trim();
    let (scheme, rest) = auth.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("apikey")).then_some(rest.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_maps_keys_to_tenants() {
        let keys = ApiKeys::parse(&["acme:k1".into(), " globex : k2 ".into()]).unwrap();
        assert_eq!(keys.tenant(Some("k1")), Ok("acme".into()));
        assert_eq!(keys.tenant(Some("k2")), Ok("globex".into()));
        assert_eq!(keys.tenant(Some("k3")), Err(AuthError::Invalid));
        assert_eq!(keys.tenant(None), Err(AuthError::Missing));
        assert!(ApiKeys::parse(&["nocolon".into()]).is_err());
    }

    #[test]
    fn no_keys_is_local_mode() {
        assert_eq!(ApiKeys::default().tenant(None), Ok(LOCAL_TENANT.into()));
    }

    #[test]
    fn reads_key_files() {
        let path = std::env::temp_dir().join(format!("ptc-keys-{}", std::process::id()));
        std::fs::write(&path, "# comment\nacme:k1\n\nglobex:k2\n").unwrap();
        let keys = ApiKeys::parse(&[format!("@{}", path.display())]).unwrap();
        assert_eq!(keys.tenant(Some("k2")), Ok("globex".into()));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn key_headers() {
        assert_eq!(presented_key(Some("a"), Some("Bearer b")), Some("a"));
        assert_eq!(presented_key(None, Some("Bearer b")), Some("b"));
        assert_eq!(presented_key(None, Some("ApiKey c")), Some("c"));
        assert_eq!(presented_key(None, Some("Basic d")), None);
    }
}
