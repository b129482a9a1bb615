//! Server behaviour around executions: auth, tenants, disconnects, shutdown, health, metrics.

use std::time::Duration;

use ptc_server::proto::{self, FailureKind};
use ptc_tests::eventually;
use ptc_tests::grpc::*;
use serde_json::json;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

fn wait_code() -> proto::Start {
    start_message("print('paused')\nawait wait(x=1)\nprint('resumed')", vec![tool("wait", None)])
}

#[tokio::test]
async fn api_keys_are_required_and_checked() {
    let server = serve(config(&["acme:k-acme", "globex:k-globex"])).await;
    let mut client = client(&server).await;
    let err = Stream::open(&mut client, wait_code(), None).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert!(err.message().contains("missing API key"), "{}", err.message());
    let err = Stream::open(&mut client, wait_code(), Some("wrong")).await.err().unwrap();
    assert_eq!((err.code(), err.message()), (tonic::Code::Unauthenticated, "invalid API key"));
    let s = Stream::open(&mut client, start_message("print(1)", vec![]), Some("k-acme")).await.unwrap();
    assert_eq!(completed(s.drive(|_| Ok(json!(null))).await.0).stdout, "1\n");

    // Bearer works too; DescribeTools is authenticated as well.
    let mut req = tonic::Request::new(proto::DescribeToolsRequest::default());
    req.metadata_mut().insert("authorization", "Bearer k-globex".parse().unwrap());
    assert!(client.describe_tools(req).await.is_ok());
    let err = client.describe_tools(proto::DescribeToolsRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
}

#[tokio::test]
async fn per_tenant_limits_are_resource_exhausted_not_a_hang() {
    let mut cfg = config(&["acme:ka", "globex:kg"]);
    cfg.tenant_limits.max_concurrent = Some(2);
    cfg.tenant_limits.max_paused = Some(1);
    let server = serve(cfg).await;
    let mut client = client(&server).await;
    let mut first = Stream::open(&mut client, wait_code(), Some("ka")).await.unwrap();
    first
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    eventually("the first execution is paused", || server.engine.paused_executions() == 1).await;
    let err = tokio::time::timeout(Duration::from_secs(5), Stream::open(&mut client, wait_code(), Some("ka")))
        .await
        .expect("refused at once")
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.message().contains("paused executions (limit 1)"), "{}", err.message());
    // Another tenant is unaffected.
    let s = Stream::open(&mut client, start_message("print(2)", vec![]), Some("kg")).await.unwrap();
    assert_eq!(completed(s.drive(|_| Ok(json!(null))).await.0).stdout, "2\n");
}

#[tokio::test]
async fn duplicate_request_ids_are_refused_while_running() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let mut start = wait_code();
    start.request_id = "req-1".into();
    let mut first = Stream::open(&mut client, start.clone(), None).await.unwrap();
    first
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    let err = Stream::open(&mut client, start, None).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
}

#[tokio::test]
async fn a_client_that_never_answers_hits_the_deadline() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let mut start = wait_code();
    start.limits = Some(proto::Limits { timeout_ms: Some(1000), ..Default::default() });
    let mut s = Stream::open(&mut client, start, None).await.unwrap();
    s.until(|m| match m {
        Msg::ToolCalls(b) => Some(b),
        _ => None,
    })
    .await;
    let f = failed(
        s.until(|m| match m {
            m @ Msg::Failed(_) => Some(m),
            _ => None,
        })
        .await,
    );
    assert_eq!(f.kind, FailureKind::Timeout as i32);
    assert_eq!(f.stdout, "paused\n");
}

#[tokio::test]
async fn shutdown_fails_paused_executions_and_reports_not_serving() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let service = "ptc.v1.Sandbox".to_string();
    let status = health.check(HealthCheckRequest { service: service.clone() }).await.unwrap().into_inner().status;
    assert_eq!(status, ServingStatus::Serving as i32);

    let mut s = Stream::open(&mut client, wait_code(), None).await.unwrap();
    s.until(|m| match m {
        Msg::ToolCalls(b) => Some(b),
        _ => None,
    })
    .await;
    server.shutdown();
    let f = failed(
        s.until(|m| match m {
            m @ Msg::Failed(_) => Some(m),
            _ => None,
        })
        .await,
    );
    assert_eq!(f.kind, FailureKind::Shutdown as i32);
    assert_eq!(f.stdout, "paused\n");
    let engine = server.engine.clone();
    tokio::time::timeout(Duration::from_secs(10), server.wait()).await.expect("shutdown does not hang");
    assert_eq!(engine.live_instances(), 0);
}

#[tokio::test]
async fn health_goes_not_serving_during_the_grace_period() {
    let mut cfg = config(&[]);
    cfg.shutdown_grace = Duration::from_secs(5);
    let server = serve(cfg).await;
    let mut client = client(&server).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let mut s = Stream::open(&mut client, wait_code(), None).await.unwrap();
    let batch = s
        .until(|m| match m {
            Msg::ToolCalls(b) => Some(b),
            _ => None,
        })
        .await;
    server.shutdown();
    let service = "ptc.v1.Sandbox".to_string();
    let mut status = 0;
    for _ in 0..100 {
        status = health.check(HealthCheckRequest { service: service.clone() }).await.unwrap().into_inner().status;
        if status == ServingStatus::NotServing as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, ServingStatus::NotServing as i32);
    let err = Stream::open(&mut client, start_message("pass", vec![]), None).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{}", err.message());
    // The running execution may still finish within the grace period.
    s.send_results(vec![result(&batch.calls[0].id, Ok(json!(1)))]).await;
    assert_eq!(completed(s.drive(|_| Ok(json!(null))).await.0).stdout, "paused\nresumed\n");
    tokio::time::timeout(Duration::from_secs(10), server.wait()).await.expect("shutdown completes");
}

#[tokio::test]
async fn metrics_count_executions_round_trips_and_latency() {
    let server = serve(config(&[])).await;
    let mut client = client(&server).await;
    let s =
        Stream::open(&mut client, start_message("await wait(x=1)\nawait wait(x=2)", vec![tool("wait", None)]), None)
            .await
            .unwrap();
    completed(s.drive(|_| Ok(json!(1))).await.0);
    let text = metrics_text(&server).await;
    for needle in [
        "ptc_executions_total{outcome=\"completed\"}",
        "ptc_round_trips_total",
        "ptc_tool_calls_total",
        "ptc_execution_seconds_bucket",
        "ptc_instantiate_seconds_bucket",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}
