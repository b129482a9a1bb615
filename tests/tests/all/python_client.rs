//! The example Python client (examples/python, grpcio) against a real server.

use std::path::Path;
use std::process::Command;

use ptc_tests::grpc::{config, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_python_client_runs_a_program_with_python_tools() {
    let venv = tokio::task::spawn_blocking(|| {
        ptc_tests::python::venv("grpc-example", &["grpcio==1.85.1", "grpcio-tools==1.85.1"])
    })
    .await
    .unwrap();
    let server = serve(config(&["acme:secret"])).await;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python");
    let addr = server.grpc_addr.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv.join("bin").join("python"))
            .arg("example.py")
            .args(["--server", &addr, "--api-key", "secret"])
            .current_dir(dir)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(
        stdout,
        "tool: get_weather(city: str)\n\
         tool: convert_temp(celsius: float, unit?: \"F\"|\"K\")\n\
         skipped: KeyError: 'unknown city Atlantis'\n\
         warmest: Cairo at 87.8 F\n\
         return value: {\"warmest\": \"Cairo\", \"fahrenheit\": 87.8}\n\
         round trips: 2\n"
    );
}
