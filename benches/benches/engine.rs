//! Instantiation, start-up, tool round trips and CPU work: the library, gRPC on loopback, `python3 -c`, and
//! `exec` in a warm CPython, side by side in one run (`cargo bench -p ptc-benches`).

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ptc_benches::*;
use ptc_engine::Engine;
use ptc_server::{ServerConfig, start};

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(start(ServerConfig::ephemeral())).unwrap();
    let engine = Engine::new(server.engine.config().clone()).unwrap();
    let url = format!("http://{}", server.grpc_addr);
    let client = rt.block_on(ptc_server::proto::sandbox_client::SandboxClient::connect(url)).unwrap();
    let mut warm = WarmPython::start();

    let mut group = c.benchmark_group("instantiate");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    group.bench_function("library", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let engine = engine.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += instantiate_once(&engine).await;
                }
                total
            }
        })
    });
    group.finish();

    for w in workloads() {
        let mut group = c.benchmark_group(w.name);
        group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
        group.bench_function("library", |b| b.to_async(&rt).iter(|| run_library(&engine, &w.code)));
        group.bench_function("grpc", |b| {
            b.to_async(&rt).iter(|| {
                let mut client = client.clone();
                let code = w.code.clone();
                async move { run_grpc(&mut client, &code).await }
            })
        });
        group.bench_function("python3_subprocess", |b| b.iter(|| run_subprocess(&w.native)));
        group.bench_function("warm_cpython_exec", |b| b.iter(|| warm.exec(&w.native)));
        group.finish();
    }
}

criterion_group!(all, benches);
criterion_main!(all);
