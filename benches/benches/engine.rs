//! Instantiation, start-up, tool round trips and CPU work: the library, gRPC on loopback, `python3 -c`, and
//! `exec` in a warm CPython, side by side in one run (`cargo bench -p ptc-benches`); and the two
//! runtimes (`python`, `python-data`) side by side.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ptc_benches::*;
use ptc_engine::{Engine, Runtime, SessionRequest};
use ptc_server::{ServerConfig, start};

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut config = ServerConfig::ephemeral();
    config.engine.python_data = Some(ptc_engine::python_data_artifacts());
    // As `serve` runs by default: nothing here waits long enough to hibernate, so this measures
    // what having it on costs the fast path.
    config.engine.hibernate_after = Some(Duration::from_secs(1));
    let server = rt.block_on(start(config)).unwrap();
    let engine = Engine::new(server.engine.config().clone()).unwrap();
    let url = format!("http://{}", server.grpc_addr);
    let client = rt.block_on(ptc_server::proto::sandbox_client::SandboxClient::connect(url)).unwrap();
    let mut warm = WarmPython::start();
    // The same engine and server without warm instances, for the side-by-side rows below.
    let mut cold_config = ServerConfig::ephemeral();
    cold_config.engine.warm_instances = 0;
    let cold_server = rt.block_on(start(cold_config)).unwrap();
    let cold = Engine::new(cold_server.engine.config().clone()).unwrap();
    let cold_client = rt
        .block_on(ptc_server::proto::sandbox_client::SandboxClient::connect(format!(
            "http://{}",
            cold_server.grpc_addr
        )))
        .unwrap();

    let mut group = c.benchmark_group("instantiate");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    group.bench_function("library", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let engine = cold.clone();
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

    // A fresh `pass` as an agent's requests arrive: each after 5 ms of quiet (not timed), so
    // the engine has made its warm instances; beside the same without them.
    let mut group = c.benchmark_group("fresh");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    for (name, engine) in [("warm", &engine), ("cold", &cold)] {
        group.bench_function(format!("pass_library/{name}"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let engine = engine.clone();
                async move { spaced(iters, || run_library(&engine, "pass")).await }
            })
        });
    }
    for (name, client) in [("warm", &client), ("cold", &cold_client)] {
        group.bench_function(format!("pass_grpc/{name}"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let client = client.clone();
                async move {
                    spaced(iters, || {
                        let mut client = client.clone();
                        async move { run_grpc(&mut client, "pass").await }
                    })
                    .await
                }
            })
        });
    }
    group.finish();

    // The runtimes side by side: a fresh `pass`, one tool call, and (python-data only) the
    // issue's pandas program, through the library and over gRPC.
    let mut group = c.benchmark_group("runtime");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    let pandas = "import numpy as np, pandas as pd\nprint(pd.DataFrame(np.arange(6).reshape(2,3)).sum().sum())";
    let programs = [("pass", "pass"), ("one_call", "print(await add(a=1, b=2))"), ("pandas", pandas)];
    for runtime in [Runtime::Python, Runtime::PythonData] {
        for (name, code) in programs {
            if name == "pandas" && runtime == Runtime::Python {
                continue;
            }
            group.bench_function(format!("{name}_library/{}", runtime.as_str()), |b| {
                b.to_async(&rt).iter(|| run_library_in(&engine, runtime, code))
            });
            group.bench_function(format!("{name}_grpc/{}", runtime.as_str()), |b| {
                b.to_async(&rt).iter(|| {
                    let mut client = client.clone();
                    async move { run_grpc_in(&mut client, runtime, code).await }
                })
            });
        }
    }
    group.finish();

    // A live session: `pass` and one tool call without instantiating, beside a fresh `pass`;
    // then a snapshot of a small state and a restore of it into a new session.
    let session = rt.block_on(engine.open_session(SessionRequest::new().with_limits(limits()))).unwrap().0;
    let mut group = c.benchmark_group("session");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    group.bench_function("pass_library", |b| b.to_async(&rt).iter(|| run_in_session(&engine, &session, "pass")));
    // The same from a task of the runtime, as a server calls the library (the line above
    // calls from outside it, so each execution also wakes a thread across).
    group.bench_function("pass_library_in_task", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (engine, session) = (engine.clone(), session.clone());
            async move {
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    for _ in 0..iters {
                        run_in_session(&engine, &session, "pass").await;
                    }
                    started.elapsed()
                })
                .await
                .unwrap()
            }
        })
    });
    group.bench_function("sequential_1_library", |b| {
        b.to_async(&rt).iter(|| run_in_session(&engine, &session, "print(await add(a=1, b=2))"))
    });
    group.bench_function("fresh_pass_library", |b| b.to_async(&rt).iter(|| run_library(&engine, "pass")));
    let grpc_session = {
        let mut client = client.clone();
        let request = ptc_server::proto::OpenSessionRequest::default();
        rt.block_on(client.open_session(request)).unwrap().into_inner().session_id
    };
    group.bench_function("pass_grpc", |b| {
        b.to_async(&rt).iter(|| {
            let (mut client, id) = (client.clone(), grpc_session.clone());
            async move { run_grpc_in_session(&mut client, &id, "pass").await }
        })
    });
    group.bench_function("pass_grpc_in_task", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (mut client, id) = (client.clone(), grpc_session.clone());
            async move {
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    for _ in 0..iters {
                        run_grpc_in_session(&mut client, &id, "pass").await;
                    }
                    started.elapsed()
                })
                .await
                .unwrap()
            }
        })
    });
    // gRPC's own cost: an Execute stream the server refuses at Start (an unknown session), so
    // no engine work at all.
    group.bench_function("refused_at_start_grpc", |b| {
        b.to_async(&rt).iter(|| {
            let mut client = client.clone();
            async move { refused_at_start(&mut client).await }
        })
    });
    group.bench_function("fresh_pass_grpc", |b| {
        b.to_async(&rt).iter(|| {
            let mut client = client.clone();
            async move { run_grpc(&mut client, "pass").await }
        })
    });
    let state_code = "rows = [{'id': i, 'name': f'row {i}', 'tags': ['a', 'b']} for i in range(1000)]\n\
                      def by_id(i):\n    return rows[i]\nimport statistics";
    rt.block_on(run_in_session(&engine, &session, state_code));
    let state = rt.block_on(session.snapshot(64 << 20)).unwrap();
    eprintln!("session snapshot of 1,000 small dicts, a function and a module: {} bytes", state.data.len());
    group.bench_function("snapshot_1000_rows", |b| {
        b.to_async(&rt).iter(|| async { session.snapshot(64 << 20).await.unwrap() })
    });
    group.bench_function("restore_1000_rows", |b| {
        b.to_async(&rt).iter(|| async {
            let request = SessionRequest::new().with_restore(state.data.clone());
            engine.open_session(request).await.unwrap().0.close();
        })
    });
    group.bench_function("open_close", |b| {
        b.to_async(&rt).iter(|| async { engine.open_session(SessionRequest::new()).await.unwrap().0.close() })
    });
    group.finish();
    session.close();

    // A paused execution resumed on another node by replaying its journal (n recorded rounds,
    // then the live one), against the same program reaching the same round live.
    let mut group = c.benchmark_group("replay");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    for n in [1, 10, 100] {
        let (code, journal) = rt.block_on(recorded(&engine, n));
        group.bench_function(format!("{n}_rounds"), |b| {
            b.to_async(&rt).iter(|| to_live_round(&engine, &code, Some(journal.clone()), n))
        });
        group.bench_function(format!("{n}_rounds_live"), |b| {
            b.to_async(&rt).iter(|| to_live_round(&engine, &code, None, n))
        });
        group.bench_function(format!("{n}_rounds_live_recording"), |b| {
            b.to_async(&rt).iter(|| to_live_round(&engine, &code, Some(ptc_engine::Journal::new()), n))
        });
    }
    group.finish();

    // Tracing's cost: the same engine settings without a tracer and with one (the SDK's batch
    // processor, as `--otlp-endpoint` sets it up, over an exporter that discards what it gets).
    let mut traced_config = cold.config().clone();
    traced_config.warm_instances = engine.config().warm_instances;
    let untraced = Engine::new(traced_config.clone()).unwrap();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(opentelemetry_sdk::trace::BatchSpanProcessor::builder(Discard).build())
        .build();
    traced_config.tracer =
        Some(ptc_engine::Tracer::new(opentelemetry::trace::TracerProvider::tracer(&provider, "bench")));
    let traced = Engine::new(traced_config).unwrap();
    let mut group = c.benchmark_group("tracing");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    let sequential_100 = workloads().into_iter().find(|w| w.name == "sequential_100").unwrap().code;
    for (name, code) in [("pass", "pass"), ("sequential_100", sequential_100.as_str())] {
        for (tracing, engine) in [("off", &untraced), ("on", &traced)] {
            group.bench_function(format!("{name}_library/{tracing}"), |b| {
                b.to_async(&rt).iter(|| run_library(engine, code))
            });
        }
    }
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

/// Runs `run` `iters` times, each after 5 ms of quiet; returns the time the runs took.
async fn spaced<F: std::future::Future<Output = ()>>(iters: u64, run: impl Fn() -> F) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let started = std::time::Instant::now();
        run().await;
        total += started.elapsed();
    }
    total
}

/// An exporter that drops what it is given: the `tracing` rows measure making and batching
/// spans, not a collector.
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(&self, _: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

criterion_group!(all, benches);
criterion_main!(all);
