//! A client that disconnects while its execution is paused frees the instance at once, and the
//! paused-executions gauge returns to zero; the warm instance it took is made again. Alone in its binary: metrics are process-wide.

use ptc_tests::eventually;
use ptc_tests::grpc::*;

#[tokio::test]
async fn disconnect_mid_pause_frees_the_instance() {
    let server = serve(config(&[])).await;
    eventually("the server has made its warm instances", || server.engine.warm_instances() == 2).await;
    let mut client = client(&server).await;
    let mut s =
        Stream::open(&mut client, start_message("print('paused')\nawait wait(x=1)", vec![tool("wait", None)]), None)
            .await
            .unwrap();
    s.until(|m| match m {
        Msg::ToolCalls(b) => Some(b),
        _ => None,
    })
    .await;
    eventually("the execution is paused", || server.engine.paused_executions() == 1).await;
    assert_eq!(server.engine.warm_instances(), 1, "the execution runs in a warm instance");
    assert!(metrics_text(&server).await.contains("ptc_paused_executions 1"));
    drop(s);
    drop(client);
    eventually("the instance is freed", || server.engine.live_instances() == 0).await;
    assert_eq!(server.engine.paused_executions(), 0);
    let text = metrics_text(&server).await;
    assert!(text.contains("ptc_paused_executions 0"), "{text}");
    assert!(text.contains("ptc_executions_total{outcome=\"cancelled\"}"), "{text}");
    // The server makes the next warm instance once it is idle again.
    eventually("the warm instances are made again", || server.engine.warm_instances() == 2).await;
    let text = metrics_text(&server).await;
    assert!(text.contains("ptc_warm_instances 2") && text.contains("ptc_live_instances 0"), "{text}");
}
