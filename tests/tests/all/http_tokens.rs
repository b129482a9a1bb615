//! Continuation tokens: forged, altered, replayed, cross-tenant and expired tokens are refused,
//! and a refused request does not harm the paused execution.

use ptc_tests::eventually;
use ptc_tests::grpc::{config, serve};
use ptc_tests::http::post;
use serde_json::{Value, json};

const PATH: &str = "/exec/programmatic";

fn results_for(reply: &Value) -> Value {
    let calls = reply["tool_calls"].as_array().unwrap();
    Value::Array(calls.iter().map(|c| json!({"call_id": c["id"], "result": 1, "is_error": false})).collect())
}

#[tokio::test]
async fn forged_replayed_and_cross_tenant_tokens_are_refused_without_harm() {
    let server = serve(config(&["acme:ka", "globex:kg"])).await;
    let addr = server.http_addr;
    let code = "a = await t()\nb = await t()\nprint(a + b)";
    let first = post(addr, PATH, Some("ka"), &json!({"code": code, "tools": [{"name": "t"}]})).await.body;
    assert_eq!(first["status"], "tool_call_required");
    let token = first["continuation_token"].as_str().unwrap().to_string();
    let results = results_for(&first);

    // Alter a byte of the payload, and of the signature.
    for i in [3, token.len() - 3] {
        let mut bytes = token.clone().into_bytes();
        bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
        let forged = String::from_utf8(bytes).unwrap();
        let r = post(addr, PATH, Some("ka"), &json!({"continuation_token": forged, "tool_results": results})).await;
        assert_eq!((r.status, r.body["error"].as_str()), (400, Some("Invalid continuation token")));
    }
    let r = post(addr, PATH, Some("ka"), &json!({"continuation_token": "nonsense", "tool_results": results})).await;
    assert_eq!(r.body["error"], "Invalid continuation token");
    // Another tenant's key with a valid token.
    let r = post(addr, PATH, Some("kg"), &json!({"continuation_token": token, "tool_results": results})).await;
    assert_eq!((r.status, r.body["error"].as_str()), (400, Some("Invalid continuation token")));
    // Unknown call ids and missing results are refused too, and change nothing.
    let r = post(
        addr,
        PATH,
        Some("ka"),
        &json!({"continuation_token": token, "tool_results": [{"call_id": "call_99", "result": 1, "is_error": false}]}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"].as_str().unwrap().starts_with("Unknown call_id \"call_99\""), "{}", r.text);
    let r = post(addr, PATH, Some("ka"), &json!({"continuation_token": token, "tool_results": []})).await;
    assert!(r.body["error"].as_str().unwrap().starts_with("Missing tool results for: call_1"), "{}", r.text);

    // The paused execution is unharmed: the genuine continuation still works.
    let second =
        post(addr, PATH, Some("ka"), &json!({"continuation_token": token, "tool_results": results})).await.body;
    assert_eq!(second["status"], "tool_call_required", "{second}");
    // Replaying round 1's token now is refused; round 2's token finishes the run.
    let r = post(addr, PATH, Some("ka"), &json!({"continuation_token": token, "tool_results": results})).await;
    assert_eq!((r.status, r.body["error"].as_str()), (400, Some("Invalid continuation token")));
    let done = post(
        addr,
        PATH,
        Some("ka"),
        &json!({"continuation_token": second["continuation_token"], "tool_results": results_for(&second)}),
    )
    .await;
    assert_eq!(
        (done.body["status"].as_str(), done.body["stdout"].as_str()),
        (Some("completed"), Some("2\n")),
        "{}",
        done.text
    );
    // And the final token cannot be used again.
    let r = post(
        addr,
        PATH,
        Some("ka"),
        &json!({"continuation_token": second["continuation_token"], "tool_results": results_for(&second)}),
    )
    .await;
    assert_eq!(r.status, 400);
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
}

/// The same continuation sent twice at once (a client's retry): one resumes the program, the
/// other is refused, whichever comes first, and the program runs once.
#[tokio::test]
async fn a_token_sent_twice_at_once_resumes_its_execution_once() {
    let server = serve(config(&["acme:ka"])).await;
    let addr = server.http_addr;
    let code = "import time\na = await t()\ntime.sleep(0.2)\nprint('ran', a)";
    let first = post(addr, PATH, Some("ka"), &json!({"code": code, "tools": [{"name": "t"}]})).await.body;
    assert_eq!(first["status"], "tool_call_required", "{first}");
    let next = json!({"continuation_token": first["continuation_token"], "tool_results": results_for(&first)});
    let (a, b) = tokio::join!(post(addr, PATH, Some("ka"), &next), post(addr, PATH, Some("ka"), &next));
    let mut outcomes =
        [a, b].map(|r| (r.status, r.body["stdout"].as_str().or(r.body["error"].as_str()).map(String::from)));
    outcomes.sort();
    assert_eq!(outcomes, [(200, Some("ran 1\n".to_string())), (400, Some("Invalid continuation token".to_string()))],);
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
}

#[tokio::test]
async fn expired_tokens_and_paused_executions_are_freed() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let first =
        post(addr, PATH, None, &json!({"code": "await t()", "tools": [{"name": "t"}], "timeout": 1000})).await.body;
    assert_eq!(first["status"], "tool_call_required");
    assert_eq!(server.http.paused_count(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let r = post(
        addr,
        PATH,
        None,
        &json!({"continuation_token": first["continuation_token"], "tool_results": results_for(&first)}),
    )
    .await;
    assert_eq!((r.status, r.body["error"].as_str()), (400, Some("Execution expired")));
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
    for _ in 0..300 {
        if server.http.paused_count() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(server.http.paused_count(), 0, "the expired execution is swept");
}

#[tokio::test]
async fn cancel_by_request_id() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let body = json!({"code": "await t()", "tools": [{"name": "t"}]}).to_string();
    let first =
        ptc_tests::http::post_raw(addr, PATH, &[("X-LibreChat-Code-Request-ID", "req-7")], body.as_bytes()).await.body;
    assert_eq!(first["status"], "tool_call_required");
    let r = post(addr, "/exec/programmatic/cancel", None, &json!({"request_id": "req-7"})).await;
    assert_eq!((r.status, r.body["status"].as_str()), (200, Some("cancelled")), "{}", r.text);
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
    let r = post(
        addr,
        PATH,
        None,
        &json!({"continuation_token": first["continuation_token"], "tool_results": results_for(&first)}),
    )
    .await;
    assert_eq!((r.status, r.body["error"].as_str()), (400, Some("Execution expired")));
    let r = post(addr, "/exec/programmatic/cancel", None, &json!({"request_id": "unknown"})).await;
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_do_not_mix() {
    let server = serve(config(&[])).await;
    let addr = server.http_addr;
    let mut tasks = vec![];
    for i in 0..10 {
        tasks.push(tokio::spawn(async move {
            let code = format!("x = await t(n={i})\ny = await t(n=x)\nprint(y)");
            let mut reply = post(addr, PATH, None, &json!({"code": code, "tools": [{"name": "t"}]})).await.body;
            while reply["status"] == "tool_call_required" {
                let results: Vec<Value> = reply["tool_calls"].as_array().unwrap().iter()
                    .map(|c| json!({"call_id": c["id"], "result": c["input"]["n"].as_i64().unwrap() * 10, "is_error": false}))
                    .collect();
                reply = post(addr, PATH, None, &json!({"continuation_token": reply["continuation_token"], "tool_results": results})).await.body;
            }
            reply["stdout"].as_str().unwrap().to_string()
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), format!("{}\n", i * 100));
    }
}

/// Without a shared store, a continuation whose node cannot be reached is refused with what
/// happened and what to do; with peers, tokens name the node that issued them.
#[tokio::test]
async fn a_token_of_an_unreachable_node_without_a_shared_store_says_so() {
    let closed = ptc_tests::binary::free_port();
    let mut cfg = config(&["acme:ka"]);
    cfg.node_id = "a".into();
    cfg.peers =
        ptc_server::cluster::Peers::parse(&format!("a=http://127.0.0.1:1,b=http://127.0.0.1:{closed}")).unwrap();
    cfg.token_secret = Some("shared".into());
    let server = serve(cfg).await;
    let signer = ptc_server::core::token::Signer::new(Some("shared"));

    // Its own tokens name it.
    let first = post(server.http_addr, PATH, Some("ka"), &json!({"code": "await t()", "tools": [{"name": "t"}]})).await;
    let token = first.body["continuation_token"].as_str().unwrap();
    assert_eq!(signer.verify(token, 0).unwrap().node, "a");

    // A token of round 1 of execution e1, held by `node`.
    let token_of = |node: &str| {
        signer.sign(&ptc_server::core::token::Claims {
            execution_id: "e1".into(),
            tenant: "acme".into(),
            session_id: "s".into(),
            round: 1,
            expires_at_ms: ptc_server::core::token::now_ms() + 60_000,
            node: node.into(),
        })
    };
    for (node, why) in [("b", "it cannot be reached"), ("c", "this server has no address for it")] {
        let body = json!({"continuation_token": token_of(node), "tool_results": []});
        let reply = post(server.http_addr, PATH, Some("ka"), &body).await;
        assert_eq!(reply.status, 503, "{}", reply.text);
        let error = reply.body["error"].as_str().unwrap();
        assert!(error.contains(&format!("held by server \"{node}\", and {why}")), "{error}");
        assert!(error.contains("run the program again"), "{error}");
    }

    // A client cannot pass for a node: without the cluster's key, its forwarding header is
    // ignored, and the request is forwarded (and fails) as any other.
    let body = json!({"continuation_token": token_of("b"), "tool_results": []}).to_string();
    let headers = [("X-API-Key", "ka"), ("x-ptc-forwarded-by", "b"), ("x-ptc-forward-key", "00")];
    let reply = ptc_tests::http::post_raw(server.http_addr, PATH, &headers, body.as_bytes()).await;
    assert_eq!(reply.status, 503, "{}", reply.text);
}
