//! `deploy/`: `deploy/validate.sh` passes on the repository's image and manifests (schemas of
//! Kubernetes 1.31 strictly, the settings the cluster relies on, hadolint), and fails, naming
//! each problem, on a copy broken in ways the schemas alone would not catch; and the image,
//! built by `deploy/image.sh` with buildah and run with podman (Debian's packages, which
//! `.ci/run` installs), serves through its published ports.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("deploy")
}

/// Runs `deploy/validate.sh` on `dir` (its own directory if `None`): success and the output.
fn validate(dir: Option<&Path>) -> (bool, String) {
    let out =
        Command::new("bash").arg(deploy().join("validate.sh")).args(dir).output().expect("bash deploy/validate.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_image_and_manifests_validate() {
    let (ok, text) = validate(None);
    assert!(ok, "{text}");
    for stage in ["objects valid", "checks passed", "Containerfile lint clean", "deploy/validate.sh: all checks passed"]
    {
        assert!(text.contains(stage), "{stage:?} missing from:\n{text}");
    }
}

#[test]
fn broken_manifests_fail_validation_with_the_reason() {
    let copy = std::env::temp_dir().join(format!("ptc-deploy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join("k8s")).unwrap();
    std::fs::copy(deploy().join("Containerfile"), copy.join("Containerfile")).unwrap();
    for entry in std::fs::read_dir(deploy().join("k8s")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.join("k8s").join(path.file_name().unwrap())).unwrap();
    }
    let edit = |file: &str, from: &str, to: &str| {
        let path = copy.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has no {from:?}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
    };
    // All but the misspelt field pass the schemas, and each would break the cluster.
    edit("k8s/statefulset.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false");
    edit("k8s/statefulset.yaml", "PTC_SHUTDOWN_GRACE_SECS", "PTC_SHUTDOWN_GRACE_SECONDS");
    edit("k8s/statefulset.yaml", "$(POD_NAMESPACE)", "$(NAMESPACE)");
    edit("k8s/services.yaml", "publishNotReadyAddresses: true", "publishNotReadyAddresses: false");
    edit("k8s/pdb.yaml", "  maxUnavailable: 1", "  maxUnavaliable: 1");
    edit("k8s/kustomization.yaml", "  - pvc.yaml\n", "");
    edit("Containerfile", "\nUSER 10001\n", "\nUSER root\n");

    let (ok, text) = validate(Some(&copy));
    let _ = std::fs::remove_dir_all(&copy);
    assert!(!ok, "{text}");
    for reason in [
        "'maxUnavaliable' was unexpected",
        "readOnlyRootFilesystem is not true",
        "PTC_SHUTDOWN_GRACE_SECONDS is set but ptc-engine does not read it",
        "$(NAMESPACE) is not declared above it",
        "publishNotReadyAddresses is not true",
        "kustomization.yaml does not list pvc.yaml",
        "the last USER is not 10001",
        "DL3002",
        "deploy/validate.sh: FAILED",
    ] {
        assert!(text.contains(reason), "{reason:?} missing from:\n{text}");
    }
}

/// `podman ARGS`, its output.
fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman").args(args).output().expect("podman (Debian's package; .ci/run installs it)")
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// An image or a container, removed when dropped: `podman rmi`, or `podman rm` with its
/// anonymous volumes (the image's VOLUMEs).
struct Removed(&'static str, String);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = match self.0 {
            "rm" => podman(&["rm", "--force", "--volumes", &self.1]),
            _ => podman(&[self.0, "--force", &self.1]),
        };
    }
}

/// What `podman run` needs on this kind of machine, and only there:
/// - runc when it is installed: Debian 12's crun (1.8) refuses this machine's cgroup layout
///   ("cgroups in hybrid mode not supported");
/// - lower limits: podman raises a container's open files and processes to 1048576 by default,
///   which this machine's sandbox refuses ("error setting rlimit type 7: operation not
///   permitted"). Open files up to this process's own hard limit (20000 here) and 4096
///   processes (threads) are what the server needs; the sandbox refused 65536 processes.
fn run_options() -> Vec<String> {
    let mut options = vec![];
    if Command::new("runc").arg("--version").output().is_ok_and(|o| o.status.success()) {
        options.extend(["--runtime".into(), "runc".into()]);
    }
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let hard = |line: &str| -> Option<u64> {
        limits
            .lines()
            .find(|l| l.starts_with(line))
            .and_then(|l| l[line.len()..].split_whitespace().nth(1)?.parse().ok())
    };
    let files = hard("Max open files").unwrap_or(65536).min(65536);
    let processes = hard("Max processes").unwrap_or(4096).min(4096);
    options.extend(["--ulimit".into(), format!("nofile={files}:{files}")]);
    options.extend(["--ulimit".into(), format!("nproc={processes}:{processes}")]);
    options
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_builds_without_a_daemon_and_serves_health_a_tool_call_and_metrics_as_uid_10001_read_only() {
    use ptc_tests::binary::free_port;
    use serde_json::{Value, json};

    let bin = tokio::task::spawn_blocking(ptc_tests::binary::release).await.unwrap();
    let tag = format!("localhost/ptc-engine-test:{}", std::process::id());
    let started = Instant::now();
    let built = Command::new("bash")
        .arg(deploy().join("image.sh"))
        .arg(&tag)
        .env("PTC_ENGINE_BIN", &bin)
        .output()
        .expect("bash deploy/image.sh");
    assert!(built.status.success(), "deploy/image.sh failed:\n{}", text(&built));
    let _image = Removed("rmi", tag.clone());
    let build_time = started.elapsed();

    // What the image holds, from its config.
    let inspect = podman(&["image", "inspect", &tag]);
    assert!(inspect.status.success(), "{}", text(&inspect));
    let image: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let image = &image[0];
    let config = &image["Config"];
    assert_eq!(config["User"], "10001", "{config}");
    assert_eq!(config["Entrypoint"], json!(["/usr/local/bin/ptc-engine"]), "{config}");
    assert_eq!(config["Cmd"], json!(["serve"]), "{config}");
    for port in ["50051/tcp", "8080/tcp", "9090/tcp"] {
        assert!(config["ExposedPorts"].get(port).is_some(), "{port} not exposed: {config}");
    }
    let env: Vec<&str> = config["Env"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(env.contains(&"PTC_AHEAD_DIR=/usr/lib/ptc-engine"), "{env:?}");
    let layers = image["RootFS"]["Layers"].as_array().map_or(0, Vec::len);
    let size = image["Size"].as_u64().unwrap();
    // 91 MB on 2026-11-28, of which the binary is 81.
    assert!(size < 120_000_000, "the image grew to {size} bytes");
    eprintln!(
        "image {tag}: {:.1} MB in {layers} layer(s), built in {:.1} s",
        size as f64 / 1e6,
        build_time.as_secs_f64()
    );

    // Can this machine run a container at all? If not, say why and stop at the image.
    let options = run_options();
    let mut probe: Vec<&str> = vec!["run", "--rm", "--read-only"];
    probe.extend(options.iter().map(String::as_str));
    probe.extend([tag.as_str(), "--version"]);
    let probe = podman(&probe);
    if !probe.status.success() {
        eprintln!(
            "SKIPPED running the image: this machine cannot run a container ({}):\n{}",
            options.join(" "),
            text(&probe)
        );
        return;
    }
    assert!(String::from_utf8_lossy(&probe.stdout).starts_with("ptc-engine "), "{}", text(&probe));

    // As a cluster's pod would run it: read-only root, no capabilities, its own volumes.
    let (http, grpc, metrics) = (free_port(), free_port(), free_port());
    let name = format!("ptc-engine-test-{}", std::process::id());
    let published =
        [format!("127.0.0.1:{http}:8080"), format!("127.0.0.1:{grpc}:50051"), format!("127.0.0.1:{metrics}:9090")];
    let mut run: Vec<&str> = vec!["run", "--detach", "--name", &name, "--read-only", "--cap-drop", "all"];
    run.extend(["--security-opt", "no-new-privileges", "--env", "PTC_API_KEYS=t1:k1"]);
    for p in &published {
        run.extend(["--publish", p.as_str()]);
    }
    run.extend(options.iter().map(String::as_str));
    run.push(&tag);
    let started = Instant::now();
    let out = podman(&run);
    let _container = Removed("rm", name.clone());
    assert!(out.status.success(), "podman run failed:\n{}", text(&out));
    let logs = || text(&podman(&["logs", &name]));
    let metrics_addr: std::net::SocketAddr = ([127, 0, 0, 1], metrics).into();
    loop {
        // Refused until the server listens.
        if tokio::net::TcpStream::connect(metrics_addr).await.is_ok()
            && ptc_tests::http::request(metrics_addr, "GET", "/readyz", &[("Host", "ptc")], b"").await.status == 200
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "not ready within 60 s:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready_in = started.elapsed();
    eprintln!("container {name}: ready {:.2} s after `podman run`", ready_in.as_secs_f64());
    let log = logs();
    assert!(log.contains("loaded the component compiled ahead"), "the first start compiled instead:\n{log}");

    // It runs as uid 10001 (the host sees the container's process).
    let pid = podman(&["inspect", "--format", "{{.State.Pid}}", &name]);
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(uid.split_whitespace().skip(1).collect::<Vec<_>>(), ["10001"; 4], "{uid}");

    // gRPC health through the published port.
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{grpc}")).unwrap().connect().await.unwrap();
    let health = HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await.unwrap();
    assert_eq!(health.into_inner().status(), ServingStatus::Serving);

    // One program with a tool call answered over HTTP, and a session file written to the volume.
    let http_addr: std::net::SocketAddr = ([127, 0, 0, 1], http).into();
    let tools = json!([{"name": "add", "description": "Adds.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]);
    let code = "r = await add(a=2, b=3)\nopen('/mnt/data/sum.txt', 'w').write(str(r))\nprint('sum', r)";
    let first =
        ptc_tests::http::post(http_addr, "/exec/programmatic", Some("k1"), &json!({"code": code, "tools": tools}))
            .await;
    assert_eq!(first.body["status"], "tool_call_required", "{}", first.text);
    let call = &first.body["tool_calls"][0];
    assert_eq!((call["name"].as_str(), &call["input"]), (Some("add"), &json!({"a": 2, "b": 3})));
    let results = json!([{"call_id": call["id"], "result": 5, "is_error": false}]);
    let token = first.body["continuation_token"].clone();
    let done = ptc_tests::http::post(
        http_addr,
        "/exec/programmatic",
        Some("k1"),
        &json!({"continuation_token": token, "tool_results": results}),
    )
    .await;
    assert_eq!(done.body["status"], "completed", "{}\n{}", done.text, logs());
    assert_eq!(done.body["stdout"], "sum 5\n");
    assert!(done.text.contains("sum.txt"), "{}", done.text);

    // Its metrics count what it did.
    let scraped = ptc_tests::http::request(metrics_addr, "GET", "/metrics", &[("Host", "ptc")], b"").await;
    assert_eq!(scraped.status, 200);
    let count = |metric: &str| -> f64 {
        scraped
            .text
            .lines()
            .filter(|l| l.starts_with(metric))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(count("ptc_executions_total") >= 1.0 && count("ptc_tool_calls_total") >= 1.0, "{}", scraped.text);

    // `podman stop` sends SIGTERM: the server drains and exits 0.
    let stop = podman(&["stop", "--time", "30", &name]);
    assert!(stop.status.success(), "{}", text(&stop));
    let code = podman(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
    assert_eq!(String::from_utf8_lossy(&code.stdout).trim(), "0", "{}", logs());
}
