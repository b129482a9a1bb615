//! Outbound HTTP for programs, off unless the operator's network policy allows it.
//!
//! A program uses the standard library (`urllib.request`, `http.client`, and in the data
//! runtime `pandas.read_csv("https://...")`): the guest's `http.client` connections hand each
//! request to the host (`ptc_runtime/net.py`), which checks it against the execution's policy
//! (`policy.rs`: hosts, schemes, ports, methods), puts secrets in place of their placeholders
//! (`secrets.rs`), resolves the name itself and connects only to addresses the policy allows
//! (so a name cannot be rebound to another between the check and the connection), makes the
//! request with TLS verified against the platform's roots and the operator's, and returns the
//! whole response, bounded, decoded (the host asks for and decodes gzip, deflate and zstd
//! itself), with echoed secrets scrubbed in every form `scrub.rs` lists. Redirects come back
//! to the program, whose `urllib` follows them as new requests, each checked again.

mod policy;
mod scrub;
mod secrets;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use policy::{Host, Rules};
pub use policy::{NetworkPolicy, SecretSpec};
use scrub::Scrubber;
use secrets::Secret;

/// How long resolving a name may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers the host sets itself (from the URL and the body, and the encodings it decodes), or
/// that belong to one hop. A program's own `Accept-Encoding` would let a host answer in an
/// encoding the host cannot decode, and so cannot look into for an echoed secret.
const HOP_HEADERS: &[&str] = &[
    "host",
    "accept-encoding",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// What a program is told when its execution has no network.
pub(crate) const NO_NETWORK: &str = "this sandbox has no network access: programs reach the outside world only \
through the tools they are given; use those (or print what you need, and ask)";

/// A tenant's network policy, compiled: what its executions may reach, and the client that
/// reaches it (one per policy, so that a connection made under one tenant's address rules is
/// never reused under another's).
pub struct Network {
    tenant: Option<String>,
    rules: Rules,
    policy: NetworkPolicy,
    secrets: Vec<Secret>,
    /// Every form of every secret's value, to scrub from responses.
    scrubber: Arc<Scrubber>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network").field("tenant", &self.tenant).field("allow", &self.policy.allow).finish()
    }
}

/// What narrowed copies of a policy share with it.
struct Shared {
    client: reqwest::Client,
    /// Requests of the tenant in flight (`max_concurrent`).
    in_flight: tokio::sync::Semaphore,
}

/// Makes ring the process's TLS crypto provider, once, unless one is installed already:
/// every HTTPS client of the process (programs' requests, the MCP front end's downstream
/// servers, the OTLP exporter, a cluster's forwarding) builds its TLS on the process's default.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

impl Network {
    /// `tenant`'s policy, compiled: its patterns and ranges checked, its certificate files
    /// read, its secrets' values taken (from the policy or the environment).
    pub fn new(tenant: Option<&str>, policy: &NetworkPolicy) -> Result<Arc<Network>, String> {
        let rules = Rules::compile(policy)?;
        let secrets = policy.secrets.iter().map(|s| Secret::compile(tenant, s)).collect::<Result<Vec<_>, _>>()?;
        let scrubber = Arc::new(Scrubber::new(secrets.iter().map(Secret::form)));
        install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(Resolver { rules: rules.clone() }))
            .connect_timeout(Duration::from_millis(policy.timeout_ms.max(1)))
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(4);
        let mut certs = Vec::new();
        for file in &policy.ca_files {
            let pem = std::fs::read(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            certs.extend(
                reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| format!("{}: not PEM certificates: {e}", file.display()))?,
            );
        }
        if !certs.is_empty() {
            builder = builder.tls_certs_merge(certs);
        }
        let client = builder.build().map_err(|e| format!("making the HTTP client: {e}"))?;
        let shared =
            Arc::new(Shared { client, in_flight: tokio::sync::Semaphore::new(policy.max_concurrent.max(1) as usize) });
        Ok(Arc::new(Network {
            tenant: tenant.map(str::to_string),
            rules,
            policy: policy.clone(),
            secrets,
            scrubber,
            shared,
        }))
    }

    /// This policy for a request that asks for less: only `hosts`, each of which this policy
    /// must allow already (a request never widens its tenant's policy).
    pub fn narrow(&self, hosts: &[String]) -> Result<Arc<Network>, String> {
        let asked = hosts.iter().map(|h| Host::parse(h)).collect::<Result<Vec<_>, _>>()?;
        if let Some(wider) = asked.iter().find(|h| !self.rules.hosts.iter().any(|p| h.within(p))) {
            return Err(format!(
                "the request asks for host {wider}, which this tenant's network policy does not allow (it allows: {})",
                self.rules.hosts.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        let mut rules = self.rules.clone();
        rules.hosts = asked;
        let mut policy = self.policy.clone();
        policy.allow = hosts.to_vec();
        Ok(Arc::new(Network {
            tenant: self.tenant.clone(),
            rules,
            policy,
            secrets: self.secrets.clone(),
            scrubber: self.scrubber.clone(),
            shared: self.shared.clone(),
        }))
    }

    /// The environment a program of this policy sees: each secret's name and placeholder.
    pub fn environment(&self) -> Vec<(String, String)> {
        self.secrets.iter().map(|s| (s.name.clone(), s.placeholder.clone())).collect()
    }

    /// The hosts it allows, as written.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.policy.allow
    }
}

/// Resolves names for the client: the system's resolver, then only the addresses the policy
/// allows, which are what the client connects to.
struct Resolver {
    rules: Rules,
}

/// A name that resolves only to addresses the policy refuses.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let rules = self.rules.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host.as_str(), 0)))
                .await
                .map_err(|_| {
                    Box::new(Refused(format!("resolving {host} timed out"))) as Box<dyn std::error::Error + Send + Sync>
                })??;
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .filter(|a| match rules.refuse_address(&host, a.ip()) {
                    None => true,
                    Some(why) => {
                        refused.get_or_insert(why);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some(why)) => Err(Box::new(Refused(why)) as Box<dyn std::error::Error + Send + Sync>),
                (true, None) => Err(Box::new(Refused(format!("{host} has no address"))) as _),
                (false, _) => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// One request as the program makes it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) method: String,
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// The program's own timeout (`urlopen(..., timeout=)`), within the policy's.
    pub(crate) timeout: Option<Duration>,
}

/// The whole response, as the program gets it (secrets scrubbed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) reason: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// Why a request got no response, in words for a model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Failure {
    /// The policy refused it (the program should stop retrying).
    Refused(String),
    /// It was made and failed (connection, TLS, a response past the limit).
    Failed(String),
    TimedOut(String),
}

/// One execution's side of the network: its policy, how many requests it made, and its
/// deadline (no request outlives it).
pub(crate) struct NetSide {
    network: Option<Arc<Network>>,
    made: u32,
    deadline: Option<tokio::time::Instant>,
}

impl NetSide {
    pub(crate) fn new(network: Option<Arc<Network>>, deadline: Option<tokio::time::Instant>) -> Self {
        NetSide { network, made: 0, deadline }
    }

    /// Requests it made so far (a sealed image keeps the count).
    pub(crate) fn made(&self) -> u32 {
        self.made
    }

    /// It goes on from an image whose execution had made `made` requests.
    pub(crate) fn made_before(mut self, made: u32) -> Self {
        self.made = made;
        self
    }

    /// What remains of the execution's deadline.
    pub(crate) fn left(&self) -> Duration {
        self.deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(tokio::time::Instant::now()))
    }

    /// The environment the program sees (secrets' placeholders).
    pub(crate) fn environment(&self) -> Vec<(String, String)> {
        self.network.as_ref().map(|n| n.environment()).unwrap_or_default()
    }

    /// Makes `request` under the policy; `left`, what remains of the execution's deadline.
    pub(crate) async fn fetch(&mut self, mut request: Request, left: Duration) -> Result<Response, Failure> {
        let Some(net) = self.network.clone() else { return Err(Failure::Refused(NO_NETWORK.into())) };
        let tenant = net.tenant.clone().unwrap_or_default();
        let outcome = self.fetch_with(&net, &mut request, left).await;
        let label = match &outcome {
            Ok(_) => "ok",
            Err(Failure::Refused(_)) => "refused",
            Err(Failure::Failed(_)) => "failed",
            Err(Failure::TimedOut(_)) => "timeout",
        };
        metrics::counter!("ptc_network_requests_total", "tenant" => tenant.clone(), "outcome" => label).increment(1);
        if let Ok(response) = &outcome {
            metrics::counter!("ptc_network_bytes_total", "tenant" => tenant.clone(), "direction" => "sent")
                .increment(request.body.len() as u64);
            metrics::counter!("ptc_network_bytes_total", "tenant" => tenant, "direction" => "received")
                .increment(response.body.len() as u64);
        }
        outcome
    }

    async fn fetch_with(&mut self, net: &Network, request: &mut Request, left: Duration) -> Result<Response, Failure> {
        let policy = &net.policy;
        let refused = |why: String| Err(Failure::Refused(why));
        let url = match reqwest::Url::parse(&request.url) {
            Ok(url) => url,
            Err(e) => return refused(format!("{:?} is not a URL: {e}", cut(&request.url))),
        };
        let scheme = url.scheme().to_string();
        let Some(host) = url.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase())
        else {
            return refused(format!("{} has no host", cut(&request.url)));
        };
        let port = url.port_or_known_default().unwrap_or(0);
        let method = request.method.to_ascii_uppercase();
        if let Some(why) = net.rules.refuse(&method, &scheme, &host, port) {
            return refused(why);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return refused("credentials in a URL are not sent; put them in a header (a secret's placeholder)".into());
        }
        self.made += 1;
        if self.made > policy.max_requests {
            return refused(format!(
                "this execution made its {} requests (the network policy's limit per execution); do the rest in \
                 another run",
                policy.max_requests
            ));
        }
        request.headers.retain(|(k, _)| !HOP_HEADERS.contains(&k.to_ascii_lowercase().as_str()));
        let size = request.url.len()
            + request.body.len()
            + request.headers.iter().map(|(k, v)| k.len() + v.len() + 4).sum::<usize>();
        if size as u64 > policy.max_request_bytes {
            return refused(format!(
                "the request is {size} bytes; the network policy allows {} per request: send less at once",
                policy.max_request_bytes
            ));
        }
        let mut url_text = request.url.clone();
        let parts = secrets::Parts { url: &mut url_text, headers: &mut request.headers, body: &mut request.body };
        secrets::substitute(&net.secrets, &host, parts).map_err(Failure::Refused)?;
        let timeout = Duration::from_millis(policy.timeout_ms).min(left).min(request.timeout.unwrap_or(Duration::MAX));
        let shown = format!("{method} {scheme}://{host}:{port}{}", url.path());
        let work = async {
            let _permit =
                net.shared.in_flight.acquire().await.map_err(|_| Failure::Failed("the network is closed".into()))?;
            self.send(net, (&method, &host), &url_text, request, &shown).await
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::TimedOut(format!(
                "{shown} did not answer within {} ms (the request's time, within the network policy's {} ms and the \
                 execution's deadline)",
                timeout.as_millis(),
                policy.timeout_ms
            ))),
        }
    }

    async fn send(
        &self,
        net: &Network,
        (method, host): (&str, &str),
        url: &str,
        request: &mut Request,
        shown: &str,
    ) -> Result<Response, Failure> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| Failure::Refused(format!("{method:?} is not an HTTP method")))?;
        let mut builder = net.shared.client.request(method, url);
        for (k, v) in &request.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        if !request.body.is_empty() {
            builder = builder.body(std::mem::take(&mut request.body));
        }
        let mut response = builder.send().await.map_err(|e| failure(&net.scrubber, shown, &e))?;
        // The client decoded what it asked for (and took the header away): an encoding left is
        // one it did not ask for, whose bytes no scrubbing can look into.
        if let Some(encoding) = response.headers().get(reqwest::header::CONTENT_ENCODING)
            && !encoding.as_bytes().eq_ignore_ascii_case(b"identity")
            && net.secrets.iter().any(|s| s.may_go_to(host))
        {
            return Err(Failure::Failed(format!(
                "{shown} answered in an encoding the host did not ask for ({}), which it cannot check for echoed \
                 secrets: the response was withheld. Ask without Accept-Encoding (the host asks for gzip, deflate \
                 and zstd itself and decodes them)",
                net.scrubber.scrub_text(&String::from_utf8_lossy(encoding.as_bytes()))
            )));
        }
        let max = net.policy.max_response_bytes;
        let mut size: u64 = 0;
        let mut headers = Vec::with_capacity(response.headers().len());
        for (k, v) in response.headers() {
            let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
            size += (k.as_str().len() + v.len() + 4) as u64;
            // A name can carry the value too (`x-leak-bearer<value>`).
            headers.push((net.scrubber.scrub_text(k.as_str()), net.scrubber.scrub_text(&v)));
        }
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failure(&net.scrubber, shown, &e))? {
            size += chunk.len() as u64;
            if size > max {
                return Err(Failure::Failed(format!(
                    "the response of {shown} is larger than {max} bytes (the network policy's limit); ask for less \
                     (a filter, a page, a range)"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        net.scrubber.scrub(&mut body);
        let reason = status.canonical_reason().unwrap_or("").to_string();
        Ok(Response { status: status.as_u16(), reason, headers, body })
    }
}

/// A failed request in words: the policy's refusal of what a name resolved to, or what went
/// wrong (never a secret's value: it is scrubbed from the message).
fn failure(scrubber: &Scrubber, shown: &str, e: &reqwest::Error) -> Failure {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut chain = Vec::new();
    while let Some(err) = source {
        if let Some(Refused(why)) = err.downcast_ref::<Refused>() {
            return Failure::Refused(why.clone());
        }
        chain.push(err.to_string());
        source = err.source();
    }
    chain.dedup();
    let mut text = scrubber.scrub_text(&chain.join(": "));
    if text.contains("certificate") {
        text.push_str(
            " (if this host's certificate is signed by a private certificate authority, the operator adds that \
             authority's PEM file to the tenant's network policy, under \"ca_files\")",
        );
    }
    if e.is_timeout() {
        Failure::TimedOut(format!("{shown} timed out: {text}"))
    } else {
        Failure::Failed(format!("{shown} failed: {text}"))
    }
}

/// At most 200 characters of `text`.
fn cut(text: &str) -> String {
    if text.chars().count() > 200 {
        format!("{}…", text.chars().take(200).collect::<String>())
    } else {
        text.to_string()
    }
}
