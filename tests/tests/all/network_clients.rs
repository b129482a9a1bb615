//! `requests`, `httpx` and `urllib3` in programs, through the real server's HTTP API, against
//! the loopback servers of `ptc_tests::web` under a tenant's network policy: they are importable
//! (on demand, not at start-up), reach allowed hosts through the host's fetch, fail in their
//! own exception types with the policy's words, and carry a secret's placeholder that the host
//! fills in only for its hosts. Also `urllib`'s other schemes (`ftp:`, `file:`), refused in
//! words rather than with a missing module.

use ptc_engine::{NetworkPolicy, SecretSpec};
use ptc_server::RunningServer;
use ptc_tests::grpc;
use ptc_tests::web::Web;
use serde_json::json;

/// A server where `tenant` (key `key-a`) has `policy` and tenant `b` (key `key-b`) none. The
/// metrics are the process's, shared by every test of this binary: each test that counts has a
/// tenant of its own.
async fn server(tenant: &str, policy: NetworkPolicy) -> RunningServer {
    let mut config = grpc::config(&[&format!("{tenant}:key-a"), "b:key-b"]);
    config.network = ptc_server::core::network::NetworkPolicies([(tenant.to_string(), policy)].into());
    grpc::serve(config).await
}

/// What `code` printed, run by `key`'s tenant through the HTTP API.
async fn exec(server: &RunningServer, key: &str, code: &str) -> String {
    exec_in(server, key, code, "python").await
}

/// The same in `runtime` (`python` or `python-data`).
async fn exec_in(server: &RunningServer, key: &str, code: &str, runtime: &str) -> String {
    let body = json!({"code": code, "runtime": runtime});
    let reply = ptc_tests::http::post(server.http_addr, "/exec", Some(key), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let stderr = reply.body["stderr"].as_str().unwrap_or_default();
    assert!(!stderr.contains("Traceback"), "the program failed: {}", reply.text);
    reply.body["stdout"].as_str().unwrap_or_else(|| panic!("no stdout: {}", reply.text)).to_string()
}

/// The count of `tenant`'s requests that ended as `outcome`, from the server's metrics.
async fn requests_counted(server: &RunningServer, tenant: &str, outcome: &str) -> u64 {
    let metrics = grpc::metrics_text(server).await;
    metrics
        .lines()
        .find(|l| {
            l.starts_with("ptc_network_requests_total")
                && l.contains(&format!("tenant=\"{tenant}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_and_httpx_reach_allowed_hosts_through_the_hosts_fetch() {
    let web = Web::start().await;
    let server = server("clients-ok", web.policy()).await;
    let code = r#"
import sys
print("requests" in sys.modules, "httpx" in sys.modules, "urllib3" in sys.modules)
import asyncio, requests, httpx
r = requests.get("ECHO", params={"q": "1"})
print(r.status_code, r.json()["method"], r.headers["content-type"])
e = requests.post("ECHO", json={"a": 1}).json()
print(e["method"], e["body"], e["headers"]["content-type"])
r = requests.get("REDIRECT")
print(r.text, len(r.history))
print(httpx.get("PLAIN").text)
print(httpx.post("ECHO", json={"b": 2}).json()["body"])
async def main():
    async with httpx.AsyncClient() as client:
        replies = await asyncio.gather(*(client.get("PLAIN", params={"n": i}) for i in range(3)))
    return [r.text for r in replies]
print(await main())
"#
    .replace("ECHO", &web.https_url("/echo"))
    .replace("REDIRECT", &web.https_url(&format!("/redirect?to=http://127.0.0.1:{}/hello", web.http.port())))
    .replace("PLAIN", &web.http_url("/hello"));
    let out = exec(&server, "key-a", &code).await;
    assert_eq!(
        out,
        "False False False\n200 GET application/json\nPOST {\"a\": 1} application/json\nhello 1\nhello\n{\"b\":2}\n\
         ['hello', 'hello', 'hello']\n"
    );
    let paths: Vec<String> = web.seen().iter().map(|s| format!("{} {}", s.method, s.path)).collect();
    assert_eq!(paths.len(), 9, "{paths:?}");
    for n in 0..3 {
        assert!(paths.contains(&format!("GET /hello?n={n}")), "{paths:?}");
    }
    assert_eq!(requests_counted(&server, "clients-ok", "ok").await, 9);
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_host_raises_each_librarys_own_error_in_the_policys_words_once() {
    let web = Web::start().await;
    let server = server("clients-refused", web.policy()).await;
    let code = r#"
import requests, httpx, urllib3
calls = [
    ("requests", lambda: requests.get("https://example.org/x"), requests.exceptions.ConnectionError),
    ("httpx", lambda: httpx.get("https://example.org/x"), httpx.ConnectError),
    ("urllib3", lambda: urllib3.request("GET", "https://example.org/x"), urllib3.exceptions.HTTPError),
]
for name, call, kind in calls:
    try:
        call()
    except kind as e:
        print(name, type(e).__name__, e)
"#;
    let out = exec(&server, "key-a", code).await;
    let words = "host example.org is not in this sandbox's network policy (allowed hosts: localhost, 127.0.0.1); \
                 the operator would have to allow it";
    assert_eq!(
        out,
        format!("requests ConnectionError {words}\nhttpx ConnectError {words}\nurllib3 RefusedByPolicy {words}\n")
    );
    // Each refusal reached the host once: urllib3's retries (three by default) never repeat one.
    assert_eq!(requests_counted(&server, "clients-refused", "refused").await, 3);
    assert!(web.seen().is_empty());

    // Without a policy, the same types say there is no network.
    let out = exec(&server, "key-b", code).await;
    assert_eq!(out.matches("this sandbox has no network access").count(), 3, "{out}");
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_and_a_failure_keep_the_hosts_words_in_the_librarys_types() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.ports.push(1); // nothing listens there
    let server = server("clients-slow", p).await;
    let code = r#"
import requests, httpx
try:
    requests.get("SLOW", timeout=0.3)
except requests.exceptions.ReadTimeout as e:
    print("requests", type(e).__name__, e)
try:
    httpx.get("SLOW", timeout=0.3)
except httpx.ReadTimeout as e:
    print("httpx", type(e).__name__, e)
try:
    requests.get("http://127.0.0.1:1/")
except requests.exceptions.ConnectionError as e:
    print("requests", type(e).__name__, "Max retries" in str(e))
try:
    httpx.get("http://127.0.0.1:1/")
except httpx.ConnectError as e:
    print("httpx", type(e).__name__)
"#
    .replace("SLOW", &web.http_url("/sleep?ms=5000"));
    let out = exec(&server, "key-a", &code).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    for (line, name) in lines[..2].iter().zip(["requests ReadTimeout", "httpx ReadTimeout"]) {
        assert!(line.starts_with(name) && line.contains("did not answer within 300 ms"), "{out}");
    }
    assert_eq!(&lines[2..], ["requests ConnectionError False", "httpx ConnectError"], "{out}");
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secrets_placeholder_in_a_header_is_filled_in_only_for_its_host() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-51", &["localhost"])];
    let server = server("clients-secret", p).await;
    let code = r#"
import os, requests, httpx
token = os.environ["TOKEN"]
echoed = requests.get("ECHO", headers={"Authorization": "Bearer " + token}).json()
print(echoed["headers"]["authorization"] == "Bearer " + token)
echoed = httpx.get("ECHO", headers={"X-Key": token}).json()
print(echoed["headers"]["x-key"] == token)
for send in (lambda: requests.get("ELSEWHERE", headers={"Authorization": token}),
             lambda: httpx.get("ELSEWHERE", headers={"X-Key": token})):
    try:
        send()
    except (requests.exceptions.ConnectionError, httpx.ConnectError) as e:
        print(type(e).__name__, e)
"#
    .replace("ECHO", &web.https_url("/echo"))
    .replace("ELSEWHERE", &web.http_url("/echo"));
    let out = exec(&server, "key-a", &code).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..2], ["True", "True"], "{out}");
    let words = "carries secret TOKEN, which may be sent only to localhost, not 127.0.0.1";
    assert!(lines[2].starts_with("ConnectionError") && lines[2].contains(words), "{out}");
    assert!(lines[3].starts_with("ConnectError") && lines[3].contains(words), "{out}");
    assert!(!out.contains("s3cr3t"), "{out}");
    // The value reached its host, once per library, and nothing reached the other.
    let seen = web.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].headers.contains(&("authorization".into(), "Bearer s3cr3t-VALUE-51".into())), "{seen:?}");
    assert!(seen[1].headers.contains(&("x-key".into(), "s3cr3t-VALUE-51".into())), "{seen:?}");
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn urllibs_other_schemes_are_refused_in_words_not_with_a_missing_module() {
    let web = Web::start().await;
    let server = server("clients-schemes", web.policy()).await;
    let code = r#"
import urllib.request, urllib.error
for url in ["ftp://example.org/file.txt", "file:///etc/passwd", "gopher://example.org/", "data:,still%20works"]:
    try:
        print(urllib.request.urlopen(url).read().decode())
    except urllib.error.URLError as e:
        print(type(e.reason).__name__, e.reason)
"#;
    for key in ["key-a", "key-b"] {
        let out = exec(&server, key, code).await;
        assert_eq!(
            out,
            "Refused ftp: is not allowed by the network policy: programs reach only http:// and https:// URLs (and \
             only the hosts the policy allows)\n\
             Refused file: URLs are not opened through urllib in this sandbox; read a file with open(path) instead\n\
             Refused gopher: is not allowed by the network policy: programs reach only http:// and https:// URLs \
             (and only the hosts the policy allows)\n\
             still works\n",
            "tenant {key}"
        );
    }
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_runtime_has_requests_and_httpx_too() {
    let web = Web::start().await;
    let mut config = grpc::data_config(&["clients-data:key-a"]);
    config.network = ptc_server::core::network::NetworkPolicies([("clients-data".to_string(), web.policy())].into());
    let server = grpc::serve(config).await;
    let code = r#"
import io, sys
import pandas as pd
print("requests" in sys.modules, "httpx" in sys.modules)
import requests, httpx
df = pd.read_csv(io.StringIO(requests.get("CSV").text))
print(df["temp"].sum(), list(df["city"]))
print(httpx.get("CSV").text.splitlines()[1])
try:
    requests.get("https://example.org/")
except requests.exceptions.ConnectionError as e:
    print(e)
"#
    .replace("CSV", &web.https_url("/data.csv"));
    let out = exec_in(&server, "key-a", &code, "python-data").await;
    assert_eq!(
        out,
        "False False\n35 ['Oslo', 'Cairo']\nOslo,4\nhost example.org is not in this sandbox's network policy (allowed \
         hosts: localhost, 127.0.0.1); the operator would have to allow it\n"
    );
    server.shutdown();
}
