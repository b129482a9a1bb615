//! Outbound HTTP for programs, through the real component, against loopback servers the test
//! starts (`ptc_tests::web`: HTTP, and HTTPS with a test CA the policy trusts): the policy's
//! hosts, schemes, ports, methods and addresses; redirects checked hop by hop; names that
//! resolve to refused addresses; size limits; the deadline; secrets used but never seen.

use std::sync::Arc;
use std::time::Duration;

use ptc_engine::{ExecutionRequest, Limits, Network, NetworkPolicy, SecretSpec};
use ptc_tests::web::Web;
use ptc_tests::*;

fn network(p: &NetworkPolicy) -> Arc<Network> {
    Network::new(Some("acme"), p).expect("a valid policy")
}

async fn run(code: &str, network: Option<Arc<Network>>) -> Run {
    let mut request = ExecutionRequest::new(code);
    request.network = network;
    drive(engine().start(request).await.unwrap(), echo).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_reaches_allowed_hosts_with_the_standard_library() {
    let web = Web::start().await;
    let net = network(&web.policy());
    let code = format!(
        r#"
import urllib.request, http.client, json
print(urllib.request.urlopen("{http}").read().decode())
with urllib.request.urlopen("{https}") as r:
    print(r.status, r.read().decode())
req = urllib.request.Request("{echo}", data=b'{{"a": 1}}', headers={{"Content-Type": "application/json"}}, method="POST")
echoed = json.loads(urllib.request.urlopen(req).read())
print(echoed["method"], echoed["body"], echoed["headers"]["content-type"])
c = http.client.HTTPSConnection("localhost", {port})
c.request("GET", "/data.csv")
r = c.getresponse()
print(r.status, r.getheader("content-type"), r.read().decode().splitlines()[1])
"#,
        http = web.http_url("/hello"),
        https = web.https_url("/hello"),
        echo = web.https_url("/echo"),
        port = web.https.port(),
    );
    let done = run(&code, Some(net)).await.completed();
    assert_eq!(done.stdout, "hello\n200 hello\nPOST {\"a\": 1} application/json\n200 text/csv Oslo,4\n");
}

/// What a program prints for each URL: the body's start, or the exception's type and words.
fn fetch_each(urls: &[String]) -> String {
    let list = urls.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", ");
    format!(
        r#"
import urllib.request, urllib.error
for url in [{list}]:
    try:
        print("ok", urllib.request.urlopen(url, timeout=20).read()[:20].decode())
    except urllib.error.URLError as e:
        print(type(e.reason).__name__, e.reason)
    except OSError as e:
        print(type(e).__name__, e)
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_policy_does_not_name_is_refused_in_words_and_never_reached() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.allow = vec!["127.0.0.1".into()];
    p.schemes = vec!["http".into()];
    p.ports = vec![web.http.port()];
    let net = network(&p);
    let urls = [
        web.https_url("/hello"),                                 // host localhost: not named
        format!("https://127.0.0.1:{}/hello", web.https.port()), // scheme https: not named
        format!("http://127.0.0.1:{}/hello", web.https.port()),  // port: not named
        web.http_url(&format!("/redirect?to=http://localhost:{}/hello", web.http.port())), // hop 2 refused
        "http://metadata.google.internal/".into(),               // not named
    ];
    let out = run(&fetch_each(&urls), Some(net.clone())).await.completed().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0]
            .starts_with("Refused host localhost is not in this sandbox's network policy (allowed hosts: 127.0.0.1)"),
        "{out}"
    );
    assert!(lines[1].starts_with("Refused https is not allowed by the network policy"), "{out}");
    assert!(lines[2].starts_with(&format!("Refused port {} is not allowed", web.https.port())), "{out}");
    assert!(lines[3].starts_with("Refused host localhost is not in"), "the redirect's hop is checked too: {out}");
    assert!(lines[4].starts_with("Refused host metadata.google.internal"), "{out}");
    // Only the redirect's first hop reached a server.
    let seen: Vec<String> = web.seen().iter().map(|s| s.path.clone()).collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("/redirect"), "{seen:?}");

    // A method the policy does not name.
    let code = format!(
        "import urllib.request\ntry:\n    urllib.request.urlopen(urllib.request.Request({:?}, method='PUT'))\nexcept Exception as e:\n    print(e)",
        web.http_url("/echo")
    );
    let out = run(&code, Some(net)).await.completed().stdout;
    assert!(out.contains("method PUT is not allowed by the network policy (allowed: GET, HEAD, POST)"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn loopback_and_private_addresses_are_refused_unless_the_operator_lists_them() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.allow_addresses = vec![];
    let urls = [web.http_url("/hello"), web.https_url("/hello")];
    let out = run(&fetch_each(&urls), Some(network(&p))).await.completed().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("Refused 127.0.0.1 is a loopback address, which this sandbox never reaches unless the operator lists it in allow_addresses"), "{out}");
    // A name the policy allows, which resolves to a refused address: checked after resolving,
    // and the connection goes only where the check allowed.
    assert!(lines[1].starts_with("Refused localhost resolves to 127.0.0.1, a loopback address"), "{out}");
    assert!(web.seen().is_empty(), "{:?}", web.seen());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_policy_every_request_is_refused_saying_there_is_no_network() {
    let code = fetch_each(&["https://example.com/".into()]);
    let out = run(&code, None).await.completed().stdout;
    assert!(out.starts_with("Refused this sandbox has no network access"), "{out}");
    assert!(out.contains("use those"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sizes_counts_and_time_are_bounded() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.max_response_bytes = 100_000;
    p.max_request_bytes = 50_000;
    p.max_requests = 4;
    p.timeout_ms = 800;
    let code = format!(
        r#"
import urllib.request
def go(req):
    try:
        return "ok " + str(len(urllib.request.urlopen(req).read()))
    except Exception as e:
        return f"{{type(getattr(e, 'reason', e)).__name__}}: {{getattr(e, 'reason', e)}}"
print(go({small:?}))
print(go({big:?}))
print(go(urllib.request.Request({echo:?}, data=b"x" * 60_000)))
print(go({slow:?}))
print(go({small:?}))
"#,
        small = web.http_url("/big?n=1000"),
        big = web.http_url("/big?n=200000"),
        echo = web.http_url("/echo"),
        slow = web.http_url("/slow"),
    );
    let out = run(&code, Some(network(&p))).await.completed().stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "ok 1000", "{out}");
    assert!(
        lines[1].starts_with("ConnectionError: the response of GET http://127.0.0.1")
            && lines[1].contains("larger than 100000 bytes"),
        "{out}"
    );
    assert!(lines[2].starts_with("Refused: the request is") && lines[2].contains("allows 50000 per request"), "{out}");
    assert!(
        lines[3].starts_with("TimeoutError: GET http://127.0.0.1") && lines[3].contains("did not answer within 800 ms"),
        "{out}"
    );
    assert!(lines[4].starts_with("Refused: this execution made its 4 requests"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_requests_in_flight_are_bounded() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.max_concurrent = 1;
    let net = network(&p);
    let code =
        format!("import urllib.request\nprint(urllib.request.urlopen({:?}).read())", web.http_url("/sleep?ms=400"));
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(run(&code, Some(net.clone())), run(&code, Some(net.clone())));
    assert_eq!((a.completed().stdout, b.completed().stdout), ("b'slept'\n".into(), "b'slept'\n".into()));
    // One at a time: the second waited for the first.
    assert!(started.elapsed() >= Duration::from_millis(800), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_is_used_for_its_hosts_scrubbed_from_echoes_and_never_seen() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-42", &["localhost"])];
    let net = network(&p);
    let code = format!(
        r#"
import os, json, urllib.request
token = os.environ["TOKEN"]
print(token.startswith("ptc-secret-TOKEN-"))
req = urllib.request.Request({echo:?}, headers={{"Authorization": "Bearer " + token}})
echoed = json.loads(urllib.request.urlopen(req).read())
print(echoed["headers"]["authorization"] == "Bearer " + token)
try:
    urllib.request.urlopen(urllib.request.Request({other:?}, headers={{"X-Key": token}}))
except Exception as e:
    print(e.reason)
try:
    urllib.request.urlopen(urllib.request.Request({echo:?}, data=token.encode()))
except Exception as e:
    print(e.reason)
kept = echoed
"#,
        echo = web.https_url("/echo"),
        other = web.http_url("/echo"),
    );
    let session = engine().open_session(ptc_engine::SessionRequest::new()).await.unwrap().0;
    let mut request = ExecutionRequest::new(code);
    request.network = Some(net);
    let done = drive(engine().execute_in(&session, request).await.unwrap(), echo).await.completed();
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(&lines[..2], ["True", "True"], "{}", done.stdout);
    assert!(
        lines[2].contains("carries secret TOKEN, which may be sent only to localhost, not 127.0.0.1"),
        "{}",
        done.stdout
    );
    assert!(lines[3].contains("secret TOKEN may not be put in the body"), "{}", done.stdout);
    // The server got the value, once; the program, its output and its session never did.
    let seen = web.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].headers.contains(&("authorization".into(), "Bearer s3cr3t-VALUE-42".into())), "{seen:?}");
    assert!(!done.stdout.contains("s3cr3t") && !done.stderr.contains("s3cr3t"));
    let state = session.snapshot(1 << 20).await.unwrap();
    assert!(state.kept.contains(&"kept".to_string()), "{:?}", state.kept);
    assert!(!contains(&state.data, b"s3cr3t-VALUE-42"), "the session's state holds the secret");
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_journaled_execution_replays_its_requests_from_the_journal_without_making_them() {
    let web = Web::start().await;
    let net = network(&web.policy());
    let code = format!(
        "import urllib.request\nr = urllib.request.urlopen({:?}).read()\nx = await echo_tool(n=len(r))\nprint(r, x)",
        web.https_url("/hello")
    );
    let journal = ptc_engine::Journal::new();
    let seed = journal.seed;
    let tools = vec![ptc_engine::ToolDef::new("echo_tool")];
    let mut request = ExecutionRequest::new(&code).with_tools(tools.clone()).with_journal(journal);
    request.network = Some(net.clone());
    let first = engine().start(request).await.unwrap();
    let control = first.control();
    let done = drive(first, echo).await.completed();
    let entries = control.take_journal().unwrap().entries;
    assert!(entries.iter().any(|e| matches!(e, ptc_engine::Entry::Http(_))), "{entries:?}");
    assert_eq!(web.seen().len(), 1);
    let mut request =
        ExecutionRequest::new(&code).with_tools(tools).with_journal(ptc_engine::Journal::replay(seed, entries));
    request.network = Some(net);
    let again = drive(engine().start(request).await.unwrap(), echo).await.completed();
    assert_eq!(again.stdout, done.stdout);
    assert_eq!(web.seen().len(), 1, "the replay made no request");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_data_runtime_reads_a_csv_over_https_into_pandas() {
    let web = Web::start().await;
    let code = format!(
        "import pandas as pd\ndf = pd.read_csv({:?})\nprint(df['temp'].sum(), list(df['city']))",
        web.https_url("/data.csv")
    );
    let mut request = ExecutionRequest::new(code).with_runtime(ptc_engine::Runtime::PythonData);
    request.network = Some(network(&web.policy()));
    request.limits = Some(Limits::default().with_timeout(Duration::from_secs(60)));
    let done = drive(data_engine().start(request).await.unwrap(), echo).await.completed();
    assert_eq!(done.stdout, "35 ['Oslo', 'Cairo']\n");
}

/// Everything the engine and the server log, at every level, while the tests of this binary
/// run (this test installs the subscriber; no other does).
static LOG: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The server: tenant `a` has the test's policy (with a secret), narrowed by requests at
/// will; tenant `b` none, so its programs have no network; through gRPC, the HTTP API and
/// MCP alike. Nothing logged, at any level, holds the secret's value.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_policy_holds_over_grpc_http_and_mcp_and_is_counted_per_tenant() {
    use ptc_server::proto;
    use ptc_tests::grpc::{self, Stream};
    let installed = tracing_subscriber::fmt()
        .with_env_filter("ptc_engine=debug,ptc_server=debug")
        .with_writer(|| LogWriter)
        .try_init();
    assert!(installed.is_ok(), "another subscriber was installed first");
    let web = Web::start().await;
    let mut config = grpc::config(&["a:key-a", "b:key-b"]);
    let mut a = web.policy();
    a.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-44", &["localhost"])];
    config.network = ptc_server::core::network::NetworkPolicies([("a".to_string(), a)].into());
    config.mcp = ptc_server::front::mcp::McpConfig::default();
    let server = grpc::serve(config).await;
    let code = format!(
        "import urllib.request\ntry:\n    print(urllib.request.urlopen({:?}).read().decode())\nexcept Exception as e:\n    print(e.reason)",
        web.https_url("/hello")
    );
    let grpc_run = |key: &'static str, narrow: Vec<String>| {
        let code = code.clone();
        let addr = server.grpc_addr;
        async move {
            let mut client = proto::sandbox_client::SandboxClient::connect(format!("http://{addr}")).await.unwrap();
            let start = proto::Start { network_allow: narrow, ..grpc::start_message(&code, vec![]) };
            let (end, _) =
                Stream::open(&mut client, start, Some(key)).await.unwrap().drive(|_| Ok(serde_json::json!(null))).await;
            grpc::completed(end).stdout
        }
    };
    assert_eq!(grpc_run("key-a", vec![]).await, "hello\n");
    let narrowed = grpc_run("key-a", vec!["127.0.0.1".into()]).await;
    assert!(
        narrowed.contains("host localhost is not in this sandbox's network policy (allowed hosts: 127.0.0.1)"),
        "{narrowed}"
    );
    assert!(grpc_run("key-b", vec![]).await.contains("this sandbox has no network access"));
    // A request cannot widen its tenant's policy.
    let mut client =
        proto::sandbox_client::SandboxClient::connect(format!("http://{}", server.grpc_addr)).await.unwrap();
    let start = proto::Start { network_allow: vec!["example.com".into()], ..grpc::start_message("pass", vec![]) };
    let refused = Stream::open(&mut client, start, Some("key-a")).await.err().expect("refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("asks for host example.com, which this tenant's network policy does not allow"));

    let reply =
        ptc_tests::http::post(server.http_addr, "/exec", Some("key-a"), &serde_json::json!({"code": code})).await;
    assert_eq!(reply.body["stdout"], "hello\n", "{}", reply.text);
    let reply =
        ptc_tests::http::post(server.http_addr, "/exec", Some("key-b"), &serde_json::json!({"code": code})).await;
    assert!(reply.body["stdout"].as_str().unwrap().contains("no network access"), "{}", reply.text);

    let client = crate::mcp::older_client(server.http_addr, "key-a").await;
    assert_eq!(crate::mcp::stdout(&crate::mcp::execute(&client, &code).await), "hello\n");
    client.cancel().await.unwrap();

    // The secret, sent where it may go and where it may not, then echoed back.
    let code_with_secret = format!(
        "import os, urllib.request\n\
for url in [{:?}, {:?}]:\n    \
try:\n        print(urllib.request.urlopen(urllib.request.Request(url, headers={{'A': os.environ['TOKEN']}})).read())\n    \
except Exception as e:\n        print(e.reason)",
        web.https_url("/echo"),
        web.http_url("/echo")
    );
    let reply =
        ptc_tests::http::post(server.http_addr, "/exec", Some("key-a"), &serde_json::json!({"code": code_with_secret}))
            .await;
    let stdout = reply.body["stdout"].as_str().unwrap();
    assert!(stdout.contains("ptc-secret-TOKEN-") && stdout.contains("may be sent only to localhost"), "{}", reply.text);
    assert!(!reply.text.contains("s3cr3t"), "{}", reply.text);

    let metrics = grpc::metrics_text(&server).await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("ptc_network_requests_total") && l.contains("tenant=\"a\"") && l.contains("outcome=\"ok\"")
        })
        .unwrap_or_else(|| panic!("no count of tenant a's requests:\n{metrics}"));
    assert!(line.ends_with(" 4"), "{line}");
    assert!(metrics.contains("ptc_network_requests_total{tenant=\"a\",outcome=\"refused\"}"), "{metrics}");
    server.shutdown();
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
    assert!(log.contains("http execution started"), "nothing was logged: {log}");
    assert!(!log.contains("s3cr3t-VALUE"), "a secret's value was logged");
}

/// A program that used a secret, echoed back, then waits for a tool: its hibernated image
/// (its memory's changes, its output and call log, sealed) and its journal hold the
/// placeholder it printed, never the value.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_is_in_no_journal_and_no_hibernated_image() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-43", &["localhost"])];
    let engine = engine_with(|c| c.hibernate_after = Some(Duration::from_millis(50)));
    let kept = Arc::new(crate::hibernation::Kept::default());
    let code = format!(
        r#"
import os, urllib.request
req = urllib.request.Request({echo:?}, headers={{"Authorization": os.environ["TOKEN"]}})
echoed = urllib.request.urlopen(req).read().decode()
print(echoed)
await echo_tool(seen=echoed)
"#,
        echo = web.https_url("/echo")
    );
    let mut request = ExecutionRequest::new(code)
        .with_tools(vec![ptc_engine::ToolDef::new("echo_tool")])
        .with_keeper(kept.clone())
        .with_journal(ptc_engine::Journal::new());
    request.network = Some(network(&p));
    let mut exec = engine.start(request).await.unwrap();
    let calls = loop {
        if let Some(ptc_engine::Event::ToolCalls { calls, .. }) = exec.next_event().await {
            break calls;
        }
    };
    assert!(calls[0].input.contains("ptc-secret-TOKEN-"), "{}", calls[0].input);
    eventually("it hibernates", || kept.count() == 1).await;
    assert!(!contains(&kept.last().bytes, b"s3cr3t-VALUE-43"), "the image holds the value");
    let journal = serde_json::to_vec(&exec.control().take_journal().unwrap().entries).unwrap();
    assert!(contains(&journal, b"ptc-secret-TOKEN-") && !contains(&journal, b"s3cr3t-VALUE-43"));
    assert!(web.seen()[0].headers.iter().any(|(_, v)| v == "s3cr3t-VALUE-43"), "the server got the value");
    exec.submit(vec![ptc_engine::ToolResult::ok(&calls[0].id, &serde_json::json!(1))]).unwrap();
    let done = drive(exec, echo).await.completed();
    assert!(!done.stdout.contains("s3cr3t") && done.stdout.contains("ptc-secret-TOKEN-"), "{}", done.stdout);
}

/// A host a secret may go to reflects it back in every transform `web::reflect` knows (each a
/// form `net/scrub.rs` lists), through the real server's HTTP API: the program undoes each
/// transform it can think of, and no undoing shows the value. An encoding the host did not ask
/// for (`br` here) is withheld in words rather than handed over unchecked.
#[tokio::test(flavor = "multi_thread")]
async fn a_reflected_secret_is_unreadable_in_every_listed_transform() {
    use ptc_tests::grpc;
    let web = Web::start().await;
    // A tenant of its own: the network metrics are the process's, and another test counts "a"'s.
    let mut config = grpc::config(&["reflected:key-r"]);
    let mut a = web.policy();
    a.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-45xyz", &["localhost"])];
    config.network = ptc_server::core::network::NetworkPolicies([("reflected".to_string(), a)].into());
    let server = grpc::serve(config).await;
    let forms: Vec<&str> = ptc_tests::web::REFLECTIONS.iter().copied().chain(["br"]).collect();
    let code = format!(
        r#"
import os, urllib.request, base64, binascii, json, gzip, zlib, html, urllib.parse
tok = os.environ["TOKEN"]
def undo(b):
    out = [b]
    for f in (base64.b64decode, base64.urlsafe_b64decode, binascii.unhexlify, gzip.decompress, zlib.decompress,
              lambda b: b[::-1], lambda b: json.dumps(json.loads(b), ensure_ascii=False).encode(),
              urllib.parse.unquote_to_bytes, lambda b: html.unescape(b.decode()).encode()):
        for x in list(out):
            try:
                out.append(f(x + b"=" * (-len(x) % 4)) if f in (base64.b64decode, base64.urlsafe_b64decode) else f(x))
            except Exception:
                pass
    return out
for form in {forms:?}:
    req = urllib.request.Request({url:?} + "?as=" + form, headers={{"Authorization": "Bearer " + tok, "Accept-Encoding": "gzip, deflate, br"}})
    try:
        r = urllib.request.urlopen(req)
    except Exception as e:
        print(form, "refused:", e.reason)
        continue
    body = r.read()
    heads = [k.encode() + b": " + v.encode() for k, v in r.getheaders()]
    seen = [x for b in [body] + heads for x in undo(b)] + [x for h in heads for x in undo(h.split(b": ", 1)[1])]
    print(form, "ok", repr(b" | ".join(seen)))
"#,
        url = web.https_url("/reflect"),
    );
    let reply =
        ptc_tests::http::post(server.http_addr, "/exec", Some("key-r"), &serde_json::json!({"code": code})).await;
    let stdout = reply.body["stdout"].as_str().unwrap_or_else(|| panic!("{}", reply.text)).to_string();
    // The host got the value each time: what came back had it to give.
    let seen = web.seen();
    let sent = seen
        .iter()
        .filter(|s| s.headers.contains(&("authorization".into(), "Bearer s3cr3t-VALUE-45xyz".into())))
        .count();
    assert_eq!(sent, forms.len(), "{:?}", seen.iter().map(|s| &s.path).collect::<Vec<_>>());
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), forms.len(), "{}", reply.text);
    for (form, line) in forms.iter().zip(&lines) {
        if *form == "br" {
            assert!(
                line.contains("br refused: ") && line.contains("an encoding the host did not ask for (br)"),
                "{line}"
            );
        } else {
            assert!(line.starts_with(&format!("{form} ok ")), "{line}");
        }
        assert!(!line.to_lowercase().contains("s3cr3t-value-45xyz"), "the value shows through {form}: {line}");
        assert!(!line.to_lowercase().contains("zyx54-eulav-t3rc3s"), "the value shows through {form}: {line}");
    }
    // What scrubbing leaves is the placeholder, where the program can see it was a secret.
    assert!(lines[0].contains("ptc-secret-TOKEN-"), "{}", lines[0]);
    assert!(!reply.text.to_lowercase().contains("s3cr3t-value"), "{}", reply.text);
    server.shutdown();
}

/// A host whose certificate the platform's roots do not sign: the failure names the policy's
/// `ca_files`, where the operator would trust its authority.
#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_certificate_names_the_policys_ca_files() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.ca_files = vec![];
    let out = run(&fetch_each(&[web.https_url("/hello")]), Some(network(&p))).await.completed().stdout;
    assert!(out.contains("certificate") && out.contains("under \"ca_files\""), "{out}");
    assert!(web.seen().is_empty(), "{:?}", web.seen());
}

/// The requests an execution made are in its sealed image: thawed on another engine (its
/// server restarted), it goes on counting them against `max_requests` from where it was, not
/// from 0 (a held-out run made 40 of 20 that way).
#[tokio::test(flavor = "multi_thread")]
async fn a_thawed_execution_goes_on_counting_its_requests() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.max_requests = 2;
    let net = network(&p);
    let code = format!(
        "import urllib.request\nfor _ in range(2):\n    urllib.request.urlopen({url:?}).read()\n\
r = await add(a=1, b=2)\n\
try:\n    urllib.request.urlopen({url:?}).read()\n    print('a third request was made')\n\
except Exception as e:\n    print(e.reason)",
        url = web.http_url("/hello")
    );
    let sealing = |after: Option<Duration>| {
        engine_with(move |c| {
            c.hibernate_after = after;
            c.seal_key = Some(b"cluster key".to_vec());
        })
    };
    let kept = Arc::new(crate::hibernation::Kept::default());
    let request = || {
        let mut r = ExecutionRequest::new(&code).with_tools(standard_tools()).with_keeper(kept.clone());
        r.network = Some(net.clone());
        r
    };
    let first = sealing(Some(Duration::from_millis(30)));
    let mut exec = first.start(request()).await.unwrap();
    let call = loop {
        match exec.next_event().await.expect("an event") {
            ptc_engine::Event::ToolCalls { calls, .. } => break calls[0].clone(),
            ptc_engine::Event::Output { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    };
    eventually("its image is kept", || kept.count() >= 1).await;
    let (id, image) = (exec.id().to_string(), kept.last());
    drop(exec);
    drop(first);
    let second = sealing(None);
    let thawed = second.thaw(&id, &image.bytes, request()).await.unwrap();
    thawed.submit(vec![ptc_engine::ToolResult::ok(&call.id, &serde_json::json!(3))]).unwrap();
    let done = drive(thawed, standard_handler).await.completed();
    assert!(done.stdout.contains("this execution made its 2 requests"), "{}", done.stdout);
    assert_eq!(web.seen().len(), 2, "no third request reached the host");
}

/// JavaScript's `fetch` goes through the same host function and policy: a GET and a POST over
/// HTTP and HTTPS, a redirect followed hop by hop, a refused host in words, and a secret's
/// placeholder in `process.env` put in by the host.
#[tokio::test(flavor = "multi_thread")]
async fn javascript_fetch_is_under_the_same_policy() {
    let web = Web::start().await;
    let mut p = web.policy();
    p.secrets = vec![SecretSpec::new("TOKEN", "s3cr3t-VALUE-42", &["localhost"])];
    let code = format!(
        r#"
const hello = await fetch({http:?});
console.log(hello.status, hello.ok, await hello.text());
const token = process.env.TOKEN;
const r = await fetch({echo:?}, {{ method: "POST", body: JSON.stringify({{ a: 1 }}),
    headers: {{ "Content-Type": "application/json", Authorization: `Bearer ${{token}}` }} }});
const echoed = await r.json();
console.log(echoed.method, echoed.body, echoed.headers["content-type"], echoed.headers.authorization === `Bearer ${{token}}`);
const moved = await fetch({redirect:?});
console.log(moved.redirected, moved.url === {https:?}, await moved.text());
try {{ await fetch("https://example.com/"); }} catch (e) {{ console.log(e.name, e.cause.code, e.message); }}
token.startsWith("ptc-secret-TOKEN-")
"#,
        http = web.http_url("/hello"),
        https = web.https_url("/hello"),
        echo = web.https_url("/echo"),
        redirect = web.https_url(&format!("/redirect?to={}", web.https_url("/hello"))),
    );
    let mut request = ExecutionRequest::new(code).with_runtime(ptc_engine::Runtime::Javascript);
    request.network = Some(network(&p));
    let done = drive(engine().start(request).await.unwrap(), echo).await.completed();
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert_eq!(
        lines[..3],
        ["200 true hello", "POST {\"a\":1} application/json true", "true true hello"],
        "{}",
        done.stderr
    );
    assert!(
        lines[3]
            .starts_with("TypeError refused fetch failed: host example.com is not in this sandbox's network policy"),
        "{}",
        lines[3]
    );
    assert_eq!(done.return_value, "true");
    // The server got the secret's value; the program's output never did.
    assert!(web.seen().iter().any(|s| s.headers.contains(&("authorization".into(), "Bearer s3cr3t-VALUE-42".into()))));
    assert!(!done.stdout.contains("s3cr3t"));
}
