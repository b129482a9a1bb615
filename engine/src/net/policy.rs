//! What a program may reach: the operator's network policy as written (`NetworkPolicy`, a
//! tenant's part of the server's policy file), and its checks (hosts, schemes, ports, methods,
//! addresses), compiled once (`Rules`). The path rules of the network, in one place.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// One tenant's network policy, as the operator writes it. Nothing is allowed that it does not
/// name; an empty `allow` reaches nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct NetworkPolicy {
    /// Hosts programs may reach: exact names (`api.example.com`), any subdomain of a domain
    /// (`*.example.com`, not the domain itself), or IP literals.
    pub allow: Vec<String>,
    /// Schemes: `https`, `http`. Default `["https"]`.
    pub schemes: Vec<String>,
    /// Ports. Default `[443]` (with `http`, list 80 too).
    pub ports: Vec<u16>,
    /// Methods. Default `["GET", "HEAD"]`.
    pub methods: Vec<String>,
    /// Addresses that are refused unless listed here, as CIDR ranges (`127.0.0.1/32`):
    /// loopback, private, link-local (cloud metadata among them), shared, unspecified,
    /// multicast and documentation ranges, for IPv4 and IPv6.
    pub allow_addresses: Vec<String>,
    /// Requests one execution may make. Default 100.
    pub max_requests: u32,
    /// Requests the tenant's executions may have in flight at once. Default 8.
    pub max_concurrent: u32,
    /// Bytes of one request (URL, headers and body). Default 1 MiB.
    pub max_request_bytes: u64,
    /// Bytes of one response (headers and body). Default 10 MiB.
    pub max_response_bytes: u64,
    /// Milliseconds one request may take, within the execution's own deadline. Default 30,000.
    pub timeout_ms: u64,
    /// Certificate authorities trusted beside the platform's (PEM files).
    pub ca_files: Vec<PathBuf>,
    /// Values programs can use but never read (`secrets.rs`).
    pub secrets: Vec<SecretSpec>,
}

impl Default for NetworkPolicy {
    fn default() -> Self {
        NetworkPolicy {
            allow: Vec::new(),
            schemes: vec!["https".into()],
            ports: vec![443],
            methods: vec!["GET".into(), "HEAD".into()],
            allow_addresses: Vec::new(),
            max_requests: 100,
            max_concurrent: 8,
            max_request_bytes: 1 << 20,
            max_response_bytes: 10 << 20,
            timeout_ms: 30_000,
            ca_files: Vec::new(),
            secrets: Vec::new(),
        }
    }
}

/// A secret as the operator writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SecretSpec {
    /// What the program reads it as: `os.environ[NAME]` (a placeholder).
    pub name: String,
    /// The value, or (`value_env`) the server's environment variable that holds it.
    #[serde(default, skip_serializing)]
    pub value: Option<String>,
    #[serde(default)]
    pub value_env: Option<String>,
    /// Hosts it may be sent to (the patterns of `allow`).
    pub hosts: Vec<String>,
    /// Where in a request the placeholder is replaced: `headers` (the default), `body`, `url`.
    #[serde(default = "headers_only")]
    pub places: Vec<String>,
}

impl SecretSpec {
    /// Secret `name` with `value`, for `hosts`, put in headers only.
    pub fn new(name: impl Into<String>, value: impl Into<String>, hosts: &[&str]) -> Self {
        SecretSpec {
            name: name.into(),
            value: Some(value.into()),
            value_env: None,
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            places: headers_only(),
        }
    }

    /// Where the placeholder is replaced: `headers`, `body`, `url`.
    pub fn with_places(mut self, places: &[&str]) -> Self {
        self.places = places.iter().map(|p| p.to_string()).collect();
        self
    }
}

fn headers_only() -> Vec<String> {
    vec!["headers".into()]
}

/// A host pattern: `api.example.com`, `*.example.com`, or an address.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Host {
    Exact(String),
    /// Any subdomain of this (lower-case, without the leading dot).
    Under(String),
    Address(IpAddr),
}

impl Host {
    pub(crate) fn parse(pattern: &str) -> Result<Host, String> {
        let p = pattern.trim().trim_end_matches('.').to_ascii_lowercase();
        if let Ok(ip) = p.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(Host::Address(ip));
        }
        let (under, name) = match p.strip_prefix("*.") {
            Some(rest) => (true, rest.to_string()),
            None => (false, p.clone()),
        };
        let valid = !name.is_empty()
            && name
                .split('.')
                .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        if !valid {
            return Err(format!("{pattern:?} is not a host name, `*.domain` or an IP address"));
        }
        Ok(if under { Host::Under(name) } else { Host::Exact(name) })
    }

    /// Whether `host` (lower-case, as a URL has it) matches.
    pub(crate) fn matches(&self, host: &str, ip: Option<IpAddr>) -> bool {
        match self {
            Host::Exact(name) => name == host,
            Host::Under(domain) => {
                host.len() > domain.len() + 1 && host.ends_with(domain.as_str()) && {
                    host.as_bytes()[host.len() - domain.len() - 1] == b'.'
                }
            }
            Host::Address(a) => ip == Some(*a),
        }
    }

    /// Whether every host this matches, `wider` matches too (a request's narrowing).
    pub(crate) fn within(&self, wider: &Host) -> bool {
        match (self, wider) {
            (Host::Under(d), Host::Under(w)) => Host::Under(w.clone()).matches(d, None) || d == w,
            (Host::Under(_), _) => false,
            (Host::Exact(h), w) => w.matches(h, None),
            (Host::Address(a), w) => w.matches(&a.to_string(), Some(*a)),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Exact(name) => f.write_str(name),
            Host::Under(domain) => write!(f, "*.{domain}"),
            Host::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// A policy's checks, compiled.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    pub(crate) hosts: Vec<Host>,
    pub(crate) schemes: Vec<String>,
    pub(crate) ports: Vec<u16>,
    pub(crate) methods: Vec<String>,
    pub(crate) addresses: Vec<IpNet>,
}

impl Rules {
    pub(crate) fn compile(p: &NetworkPolicy) -> Result<Rules, String> {
        let hosts = p.allow.iter().map(|h| Host::parse(h)).collect::<Result<Vec<_>, _>>()?;
        let schemes: Vec<String> = p.schemes.iter().map(|s| s.to_ascii_lowercase()).collect();
        if let Some(s) = schemes.iter().find(|s| !matches!(s.as_str(), "http" | "https")) {
            return Err(format!("scheme {s:?}: programs reach only http and https"));
        }
        let methods = p.methods.iter().map(|m| m.to_ascii_uppercase()).collect();
        let addresses = p
            .allow_addresses
            .iter()
            .map(|a| {
                let a = a.trim();
                a.parse::<IpNet>()
                    .or_else(|_| a.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{a:?} in allow_addresses is not an address or a CIDR range"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rules { hosts, schemes, ports: p.ports.clone(), methods, addresses })
    }

    /// Why `method scheme://host:port` is refused, in words for a model (what the operator
    /// would have to allow); `None` when the policy allows it.
    pub(crate) fn refuse(&self, method: &str, scheme: &str, host: &str, port: u16) -> Option<String> {
        let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
        if !self.hosts.iter().any(|h| h.matches(host, ip)) {
            let allowed = if self.hosts.is_empty() {
                "none".to_string()
            } else {
                self.hosts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            };
            return Some(format!(
                "host {host} is not in this sandbox's network policy (allowed hosts: {allowed}); the operator would \
                 have to allow it"
            ));
        }
        if !self.schemes.iter().any(|s| s == scheme) {
            return Some(format!(
                "{scheme} is not allowed by the network policy (allowed: {}); use {}",
                self.schemes.join(", "),
                self.schemes.first().map(String::as_str).unwrap_or("nothing")
            ));
        }
        if !self.ports.contains(&port) {
            let ports: Vec<String> = self.ports.iter().map(ToString::to_string).collect();
            return Some(format!("port {port} is not allowed by the network policy (allowed: {})", ports.join(", ")));
        }
        if !self.methods.iter().any(|m| m == method) {
            return Some(format!(
                "method {method} is not allowed by the network policy (allowed: {}); the operator would have to \
                 allow it",
                self.methods.join(", ")
            ));
        }
        if let Some(ip) = ip {
            return self.refuse_address(host, ip);
        }
        None
    }

    /// Why `ip` (what `host` is, or resolves to) may not be reached; `None` if it may.
    pub(crate) fn refuse_address(&self, host: &str, ip: IpAddr) -> Option<String> {
        let ip = canonical(ip);
        if self.addresses.iter().any(|n| n.contains(&ip)) {
            return None;
        }
        let kind = special(ip)?;
        let is = if host == ip.to_string() { "is".to_string() } else { format!("resolves to {ip},") };
        Some(format!(
            "{host} {is} a {kind} address, which this sandbox never reaches unless the operator lists it in \
             allow_addresses"
        ))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What kind of address `ip` is, if it is one programs never reach by default.
fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_private() {
                Some("private")
            } else if v4.is_link_local() {
                Some("link-local (cloud metadata)")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("shared (carrier-grade NAT)")
            } else if v4.is_unspecified() || o[0] == 0 {
                Some("unspecified")
            } else if v4.is_multicast() || v4.is_broadcast() || o[0] >= 240 {
                Some("multicast or reserved")
            } else if v4.is_documentation()
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
            {
                Some("special-purpose")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if (s[0] & 0xfe00) == 0xfc00 {
                Some("private (unique local)")
            } else if (s[0] & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 {
                Some("documentation")
            } else if s[0] == 0x64 && s[1] == 0xff9b {
                // NAT64 maps IPv4 into this prefix: a private IPv4 could hide behind it.
                Some("NAT64")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str]) -> Rules {
        let policy = NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            schemes: vec!["https".into(), "http".into()],
            ports: vec![443, 80],
            ..NetworkPolicy::default()
        };
        Rules::compile(&policy).unwrap()
    }

    #[test]
    fn hosts_match_exactly_or_below_a_domain() {
        let r = rules(&["api.example.com", "*.github.com"]);
        assert!(r.refuse("GET", "https", "api.example.com", 443).is_none());
        assert!(r.refuse("GET", "https", "raw.github.com", 443).is_none());
        assert!(r.refuse("GET", "https", "a.b.github.com", 443).is_none());
        let no = r.refuse("GET", "https", "github.com", 443).unwrap();
        assert!(no.contains("not in this sandbox's network policy") && no.contains("*.github.com"), "{no}");
        assert!(r.refuse("GET", "https", "evilgithub.com", 443).is_some());
        assert!(r.refuse("GET", "https", "example.com", 443).is_some());
        assert!(r.refuse("POST", "https", "api.example.com", 443).unwrap().contains("method POST"));
        assert!(r.refuse("GET", "https", "api.example.com", 8443).unwrap().contains("port 8443"));
        assert!(Host::parse("*.").is_err() && Host::parse("a b").is_err());
    }

    #[test]
    fn special_addresses_are_refused_unless_listed() {
        let r = rules(&["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "8.8.8.8"]);
        for host in ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1"] {
            let no = r.refuse("GET", "http", host, 80).unwrap();
            assert!(no.contains("allow_addresses"), "{no}");
        }
        assert!(r.refuse("GET", "http", "8.8.8.8", 80).is_none());
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(r.refuse_address("x", mapped).unwrap().contains("private"));
        let listed = Rules { addresses: vec!["127.0.0.0/8".parse().unwrap()], ..rules(&["127.0.0.1"]) };
        assert!(listed.refuse("GET", "http", "127.0.0.1", 80).is_none());
        assert!(listed.refuse_address("localhost", "127.0.0.1".parse().unwrap()).is_none());
        assert!(
            r.refuse_address("db.local", "192.168.1.4".parse().unwrap()).unwrap().contains("resolves to 192.168.1.4")
        );
    }

    #[test]
    fn a_narrower_host_is_within_a_wider_one() {
        let wide = Host::parse("*.example.com").unwrap();
        assert!(Host::parse("api.example.com").unwrap().within(&wide));
        assert!(Host::parse("*.api.example.com").unwrap().within(&wide));
        assert!(!Host::parse("example.com").unwrap().within(&wide));
        assert!(!Host::parse("*.com").unwrap().within(&wide));
        assert!(!Host::parse("*.example.com").unwrap().within(&Host::parse("api.example.com").unwrap()));
    }
}
