//! Secrets a program can use but never read. The program sees `os.environ[NAME]` as a
//! placeholder; the host puts the value in place of it only in requests to the hosts the
//! operator named for that secret, and only where the operator said (headers by default). A
//! request that carries a placeholder anywhere else is refused. A response that echoes a value
//! back, as itself or in a usual transform of it, has it replaced by its placeholder before
//! the program sees it (`scrub.rs`).
//!
//! A placeholder is not secret: it is `ptc-secret-NAME-` and 12 hex characters of a digest of
//! the tenant and the name, the same in every execution of the tenant, on every server. So it
//! may show wherever the program puts it (its output, a tool call, a journal, a hibernated
//! image) and a replay or a thaw elsewhere sees the same one; the value never leaves the host
//! but in a request to one of its hosts, and no log, error or record holds it.

use sha2::{Digest, Sha256};

use super::policy::{Host, SecretSpec};

/// One secret, ready to use.
#[derive(Clone)]
pub(crate) struct Secret {
    pub(crate) name: String,
    pub(crate) placeholder: String,
    value: Vec<u8>,
    hosts: Vec<Host>,
    headers: bool,
    body: bool,
    url: bool,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret").field("name", &self.name).field("value", &"[not shown]").finish()
    }
}

impl Secret {
    pub(crate) fn compile(tenant: Option<&str>, spec: &SecretSpec) -> Result<Secret, String> {
        let name = &spec.name;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "secret name {name:?}: letters, digits and '_' only (it becomes an environment variable)"
            ));
        }
        let value = match (&spec.value, &spec.value_env) {
            (Some(v), None) => v.clone(),
            (None, Some(var)) => std::env::var(var)
                .map_err(|_| format!("secret {name}: the environment variable {var} is not set (or not UTF-8)"))?,
            _ => return Err(format!("secret {name}: give exactly one of \"value\" and \"value_env\"")),
        };
        if value.len() < 4 {
            // Replacing every echo of "ab" in responses would mangle them, and hide nothing.
            return Err(format!("secret {name}: a value of fewer than 4 bytes cannot be told apart in responses"));
        }
        let hosts = spec.hosts.iter().map(|h| Host::parse(h)).collect::<Result<Vec<_>, _>>()?;
        if hosts.is_empty() {
            return Err(format!("secret {name}: name the hosts it may be sent to"));
        }
        let (mut headers, mut body, mut url) = (false, false, false);
        for place in &spec.places {
            match place.as_str() {
                "headers" => headers = true,
                "body" => body = true,
                "url" => url = true,
                other => return Err(format!("secret {name}: place {other:?} is not headers, body or url")),
            }
        }
        Ok(Secret {
            name: name.clone(),
            placeholder: placeholder(tenant, name),
            value: value.into_bytes(),
            hosts,
            headers,
            body,
            url,
        })
    }

    /// Whether the value may be sent to `host` (so `host` may echo it).
    pub(crate) fn may_go_to(&self, host: &str) -> bool {
        let ip = host.parse().ok();
        self.hosts.iter().any(|h| h.matches(host, ip))
    }

    /// The value and the placeholder that stands for it in what the program sees.
    pub(crate) fn form(&self) -> (&[u8], &str) {
        (&self.value, &self.placeholder)
    }

    fn hosts(&self) -> String {
        self.hosts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// The placeholder of secret `name` for `tenant`.
pub(crate) fn placeholder(tenant: Option<&str>, name: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"ptc-engine secret placeholder\0")
        .chain_update(tenant.unwrap_or("").as_bytes())
        .chain_update(b"\0")
        .chain_update(name.as_bytes())
        .finalize();
    format!("ptc-secret-{name}-{}", &hex::encode(digest)[..12])
}

/// A request's parts, where placeholders are replaced.
pub(crate) struct Parts<'a> {
    pub(crate) url: &'a mut String,
    pub(crate) headers: &'a mut [(String, String)],
    pub(crate) body: &'a mut Vec<u8>,
}

/// Puts each secret's value in place of its placeholder in a request to `host`, where the
/// operator allows it; the refusal, in words for a model, when a placeholder is somewhere it
/// may not be replaced or the request goes to a host the secret is not for.
pub(crate) fn substitute(secrets: &[Secret], host: &str, parts: Parts<'_>) -> Result<(), String> {
    for s in secrets {
        let p = s.placeholder.as_bytes();
        let in_url = contains(parts.url.as_bytes(), p);
        let in_headers = parts.headers.iter().any(|(k, v)| contains(k.as_bytes(), p) || contains(v.as_bytes(), p));
        let in_body = contains(parts.body, p);
        if !(in_url || in_headers || in_body) {
            continue;
        }
        if !s.may_go_to(host) {
            return Err(format!(
                "the request carries secret {}, which may be sent only to {}, not {host}: the request was not made",
                s.name,
                s.hosts()
            ));
        }
        let misplaced =
            [(in_url && !s.url, "the URL"), (in_headers && !s.headers, "headers"), (in_body && !s.body, "the body")];
        if let Some((_, place)) = misplaced.iter().find(|(bad, _)| *bad) {
            return Err(format!(
                "secret {} may not be put in {place} of a request (the operator allows it in: {}): the request was \
                 not made",
                s.name,
                [(s.headers, "headers"), (s.body, "the body"), (s.url, "the URL")]
                    .iter()
                    .filter(|(on, _)| *on)
                    .map(|(_, p)| *p)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let value = String::from_utf8_lossy(&s.value);
        if in_url {
            *parts.url = parts.url.replace(&s.placeholder, &value);
        }
        for (_, v) in parts.headers.iter_mut() {
            if contains(v.as_bytes(), p) {
                *v = v.replace(&s.placeholder, &value);
            }
        }
        if in_body {
            *parts.body = replace(parts.body, p, &s.value);
        }
    }
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = 0;
    for at in memchr::memmem::find_iter(haystack, from) {
        if at < rest {
            continue;
        }
        out.extend_from_slice(&haystack[rest..at]);
        out.extend_from_slice(to);
        rest = at + from.len();
    }
    out.extend_from_slice(&haystack[rest..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(places: &[&str]) -> Secret {
        let spec = SecretSpec {
            name: "TOKEN".into(),
            value: Some("s3cr3t-value".into()),
            value_env: None,
            hosts: vec!["api.example.com".into()],
            places: places.iter().map(|s| s.to_string()).collect(),
        };
        Secret::compile(Some("acme"), &spec).unwrap()
    }

    #[test]
    fn a_placeholder_becomes_the_value_only_for_its_hosts_and_places() {
        let s = secret(&["headers"]);
        assert!(
            s.placeholder.starts_with("ptc-secret-TOKEN-") && s.placeholder.len() == "ptc-secret-TOKEN-".len() + 12
        );
        assert_eq!(s.placeholder, placeholder(Some("acme"), "TOKEN"), "stable");
        assert_ne!(s.placeholder, placeholder(Some("other"), "TOKEN"), "per tenant");
        let (mut url, mut body) = ("https://api.example.com/x".to_string(), Vec::new());
        let mut headers = vec![("authorization".to_string(), format!("Bearer {}", s.placeholder))];
        substitute(
            std::slice::from_ref(&s),
            "api.example.com",
            Parts { url: &mut url, headers: &mut headers, body: &mut body },
        )
        .unwrap();
        assert_eq!(headers[0].1, "Bearer s3cr3t-value");
        let mut headers = vec![("authorization".to_string(), format!("Bearer {}", s.placeholder))];
        let err = substitute(
            std::slice::from_ref(&s),
            "evil.example.org",
            Parts { url: &mut url, headers: &mut headers, body: &mut body },
        )
        .unwrap_err();
        assert!(err.contains("may be sent only to api.example.com") && !err.contains("s3cr3t"), "{err}");
        let mut body = s.placeholder.clone().into_bytes();
        let err = substitute(
            std::slice::from_ref(&s),
            "api.example.com",
            Parts { url: &mut url, headers: &mut [], body: &mut body },
        )
        .unwrap_err();
        assert!(err.contains("may not be put in the body"), "{err}");
        let both = secret(&["headers", "body"]);
        let mut body = format!("{{\"k\": \"{}\"}}", both.placeholder).into_bytes();
        substitute(&[both], "api.example.com", Parts { url: &mut url, headers: &mut [], body: &mut body }).unwrap();
        assert_eq!(body, b"{\"k\": \"s3cr3t-value\"}");
    }

    #[test]
    fn a_secret_shows_no_value_in_debug() {
        let s = secret(&["headers"]);
        assert!(format!("{s:?}").contains("not shown") && !format!("{s:?}").contains("s3cr3t"));
    }
}
