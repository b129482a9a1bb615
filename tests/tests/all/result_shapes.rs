//! What a tool returns, shown after its signature: declared (gRPC `returns_json`, HTTP
//! `returns`, MCP `outputSchema`), or the shape earlier results had, per tenant, marked
//! observed and never carrying a value; an operator can turn observing off. Through the real
//! server: gRPC's `DescribeTools`, the HTTP API's programs (`search_tools`), and MCP's
//! `execute_code` description with rmcp's client against the SDK-written notes server.

use ptc_server::front::mcp::McpConfig;
use ptc_server::proto;
use ptc_server::proto::sandbox_client::SandboxClient;
use ptc_tests::grpc::{self, Stream};
use ptc_tests::http;
use serde_json::{Value, json};

use crate::mcp::{execute, older_client, stdout};

fn issue_tool() -> proto::Tool {
    grpc::tool(
        "get_issue",
        Some(json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})),
    )
}

/// The issue every call returns: field names a model needs, values it must not see in a signature.
fn issue(n: i64) -> Value {
    match n {
        1 => json!({"id": 7, "title": "launch codes 0000", "labels": ["urgent"], "body": "secret"}),
        _ => json!({"id": 8, "title": "second", "labels": [], "body": null, "milestone": {"due": "2027-01-01"}}),
    }
}

async fn signature(
    client: &mut SandboxClient<tonic::transport::Channel>,
    key: &str,
    tools: Vec<proto::Tool>,
) -> (String, String) {
    let mut request = tonic::Request::new(proto::DescribeToolsRequest { tools, ..Default::default() });
    request.metadata_mut().insert("x-api-key", key.parse().unwrap());
    let d = client.describe_tools(request).await.unwrap().into_inner();
    (d.tools[0].signature.clone(), d.stub)
}

async fn call_issues(client: &mut SandboxClient<tonic::transport::Channel>, key: &str, code: &str) -> String {
    let s = Stream::open(client, grpc::start_message(code, vec![issue_tool()]), Some(key)).await.unwrap();
    let (end, _) = s.drive(|call| Ok(issue(grpc::input(call)["n"].as_i64().unwrap()))).await;
    grpc::completed(end).stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn observed_shapes_appear_after_a_call_for_that_tenant_only_and_never_carry_values() {
    let server = grpc::serve(grpc::config(&["acme:acme-key", "other:other-key"])).await;
    let mut client = grpc::client(&server).await;
    let (before, _) = signature(&mut client, "acme-key", vec![issue_tool()]).await;
    assert_eq!(before, "get_issue(n: int)");

    let code = "a, b = await asyncio.gather(get_issue(n=1), get_issue(n=2))\nprint(a['id'] + b['id'])";
    assert_eq!(call_issues(&mut client, "acme-key", code).await, "15\n");
    let (after, stub) = signature(&mut client, "acme-key", vec![issue_tool()]).await;
    assert_eq!(
        after,
        "get_issue(n: int) -> {id: int, title: str, labels: list[str], body: str | None, milestone?: {due: str}} (observed)"
    );
    assert!(stub.contains("async def get_issue(n: int) -> {\"id\": int, \"title\": str, \"labels\": list[str], \"body\": str | None, \"milestone?\": {\"due\": str}}:  # result shape observed in earlier calls"), "{stub}");
    for value in ["launch", "0000", "urgent", "secret", "second", "2027"] {
        assert!(!after.contains(value) && !stub.contains(value), "{value} leaked: {after}\n{stub}");
    }
    // Another tenant has seen nothing.
    assert_eq!(signature(&mut client, "other-key", vec![issue_tool()]).await.0, "get_issue(n: int)");
    // A declared shape wins, unmarked.
    let mut declared = issue_tool();
    declared.returns_json =
        json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}).to_string();
    assert_eq!(signature(&mut client, "acme-key", vec![declared]).await.0, "get_issue(n: int) -> {id: int}");
    // A refusal before the run shows the shape with the signature, and programs find it.
    let s = Stream::open(&mut client, grpc::start_message("await get_issue()", vec![issue_tool()]), Some("acme-key"))
        .await
        .unwrap();
    let (end, _) = s.drive(|_| Ok(json!(null))).await;
    let message = grpc::failed(end).message;
    assert!(
        message.contains("get_issue() is missing the required argument 'n': get_issue(n: int) -> {id: int,"),
        "{message}"
    );

    // Over the HTTP API, the same tenant's programs see it in search_tools.
    let body = json!({"code": "print(search_tools('issue'))", "tools": [{"name": "get_issue", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}]});
    let reply = http::post(server.http_addr, "/exec/programmatic", Some("acme-key"), &body).await;
    assert_eq!(reply.body["stdout"], format!("{after}\n"), "{}", reply.text);
    server.shutdown();

    // An operator can turn observing off.
    let mut config = grpc::config(&["acme:acme-key"]);
    config.engine.observe_result_shapes = false;
    let server = grpc::serve(config).await;
    let mut client = grpc::client(&server).await;
    assert_eq!(call_issues(&mut client, "acme-key", code).await, "15\n");
    assert_eq!(signature(&mut client, "acme-key", vec![issue_tool()]).await.0, "get_issue(n: int)");
    server.shutdown();
}

/// MCP: a downstream tool's `outputSchema` is its declared shape; one without shows what its
/// first result had in `execute_code`'s description, once it returned.
#[tokio::test(flavor = "multi_thread")]
async fn over_mcp_the_description_shows_declared_and_observed_result_shapes() {
    let setup = tokio::task::spawn_blocking(|| crate::mcp::downstream("shapes")).await.unwrap();
    let mut config = grpc::config(&["acme:acme-key"]);
    config.mcp = McpConfig::load(&setup.config).unwrap();
    let server = grpc::serve(config).await;
    let client = older_client(server.http_addr, "acme-key").await;
    let line = |description: &str, tool: &str| {
        description
            .lines()
            .find(|l| l.starts_with(tool))
            .unwrap_or_else(|| panic!("no {tool}: {description}"))
            .to_string()
    };
    let description = |tools: Vec<rmcp::model::Tool>| {
        tools.into_iter().find(|t| t.name == "execute_code").and_then(|t| t.description).unwrap().to_string()
    };
    let before = description(client.list_all_tools().await.unwrap());
    assert_eq!(line(&before, "notes.note_stats("), "notes.note_stats()  # Counts, as JSON text.");
    assert!(
        line(&before, "notes.search_notes(").starts_with("notes.search_notes(query: str) -> {result: list[dict]}  #")
    );

    let r = execute(&client, "s = await notes.note_stats()\nprint(s['count'])").await;
    assert_eq!(stdout(&r), "3\n", "{r:?}");
    let after = description(client.list_all_tools().await.unwrap());
    assert_eq!(
        line(&after, "notes.note_stats("),
        "notes.note_stats() -> {count: int, titles: list[str]} (observed)  # Counts, as JSON text."
    );
    assert!(!after.contains("rust tips"), "a value leaked: {after}");
    client.cancel().await.unwrap();
    server.shutdown();
    server.wait().await;
}
