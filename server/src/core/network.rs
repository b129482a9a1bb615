//! What each tenant's programs may reach over HTTP: the operator's policy file
//! (`--network-policy FILE`), one [`NetworkPolicy`] per tenant name and `"*"` for every other
//! tenant (and for MCP on stdio, which has none). Without a file, or for a tenant it does not
//! cover, programs have no network. Each tenant's policy is compiled once, at its first run
//! (`ptc_engine::Network`: its secrets' placeholders are the tenant's), and a request may only
//! narrow it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use ptc_engine::{Network, NetworkPolicy};

use super::error::{Error, ErrorKind};

/// The policy file as written: tenant name (or `"*"`) → policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkPolicies(pub BTreeMap<String, NetworkPolicy>);

impl NetworkPolicies {
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The file's text, each policy checked (compiled once for nobody) so that a mistake stops
    /// the server at start rather than a program later.
    pub fn parse(text: &str) -> Result<Self, String> {
        let policies: BTreeMap<String, NetworkPolicy> =
            serde_json::from_str(text).map_err(|e| format!("not a valid network policy file: {e}"))?;
        for (tenant, policy) in &policies {
            Network::new(Some(tenant), policy).map_err(|e| format!("tenant {tenant:?}: {e}"))?;
        }
        Ok(NetworkPolicies(policies))
    }
}

/// The compiled policies, per tenant, made on first use.
#[derive(Default)]
pub struct Networks {
    policies: NetworkPolicies,
    compiled: Mutex<HashMap<Option<String>, Option<Arc<Network>>>>,
}

impl Networks {
    pub fn new(policies: NetworkPolicies) -> Self {
        Networks { policies, compiled: Mutex::new(HashMap::new()) }
    }

    /// The network a run of `tenant` gets: its policy (or `"*"`'s), narrowed to `hosts` when
    /// the request names some; `None`: no network.
    pub fn for_run(&self, tenant: Option<&str>, hosts: &[String]) -> Result<Option<Arc<Network>>, Error> {
        let network = self.of(tenant)?;
        match (network, hosts.is_empty()) {
            (network, true) => Ok(network),
            (Some(network), false) => network.narrow(hosts).map(Some).map_err(|e| Error::new(ErrorKind::Invalid, e)),
            (None, false) => Err(Error::new(
                ErrorKind::Invalid,
                "the request names hosts to reach, but this server gives this key's programs no network",
            )),
        }
    }

    /// `tenant`'s policy as the operator wrote it (or `"*"`'s); `None`: no network.
    pub fn policy(&self, tenant: Option<&str>) -> Option<&NetworkPolicy> {
        tenant.and_then(|t| self.policies.0.get(t)).or_else(|| self.policies.0.get("*"))
    }

    fn of(&self, tenant: Option<&str>) -> Result<Option<Arc<Network>>, Error> {
        let key = tenant.map(str::to_string);
        if let Some(kept) = self.compiled.lock().unwrap().get(&key) {
            return Ok(kept.clone());
        }
        let network = match self.policy(tenant) {
            None => None,
            // Checked at start: a failure now is a secret's environment variable gone since.
            Some(p) => Some(Network::new(tenant, p).map_err(|e| {
                tracing::error!(tenant = tenant.unwrap_or("-"), "network policy: {e}");
                Error::new(ErrorKind::Internal, "this server's network policy cannot be used now; try again later")
            })?),
        };
        self.compiled.lock().unwrap().insert(key, network.clone());
        Ok(network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_get_their_own_policy_or_the_default_and_requests_only_narrow_it() {
        let policies = NetworkPolicies::parse(
            r#"{"*": {"allow": ["api.example.com"]},
                "acme": {"allow": ["*.acme.test", "api.example.com"], "methods": ["GET", "POST"]}}"#,
        )
        .unwrap();
        let networks = Networks::new(policies);
        let acme = networks.for_run(Some("acme"), &[]).unwrap().unwrap();
        assert_eq!(acme.allowed_hosts(), ["*.acme.test", "api.example.com"]);
        let other = networks.for_run(Some("other"), &[]).unwrap().unwrap();
        assert_eq!(other.allowed_hosts(), ["api.example.com"]);
        let narrowed = networks.for_run(Some("acme"), &["db.acme.test".into()]).unwrap().unwrap();
        assert_eq!(narrowed.allowed_hosts(), ["db.acme.test"]);
        let wider = networks.for_run(Some("other"), &["db.acme.test".into()]).unwrap_err();
        assert!(wider.message().contains("does not allow"), "{wider}");
        let none = Networks::default();
        assert!(none.for_run(Some("x"), &[]).unwrap().is_none());
        assert!(none.for_run(Some("x"), &["a.test".into()]).unwrap_err().message().contains("no network"));
    }

    #[test]
    fn mistakes_stop_the_server_at_start() {
        let err = |t: &str| NetworkPolicies::parse(t).unwrap_err();
        assert!(err(r#"{"*": {"alow": []}}"#).contains("unknown field `alow`"));
        assert!(err(r#"{"*": {"allow": ["a b"]}}"#).contains("is not a host name"));
        assert!(err(r#"{"*": {"schemes": ["ftp"]}}"#).contains("http and https"));
        let no_env = r#"{"*": {"secrets": [{"name": "T", "value_env": "PTC_TEST_NO_SUCH_VAR", "hosts": ["a.test"]}]}}"#;
        assert!(err(no_env).contains("PTC_TEST_NO_SUCH_VAR is not set"));
    }
}
