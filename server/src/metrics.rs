//! Prometheus metrics on their own port (`GET /metrics`), beside the probes: `GET /livez`
//! (the process serves) and `GET /readyz` (it takes new work: 503 once it drains).
//!
//! The engine records through the `metrics` facade: `ptc_executions_total{outcome}`,
//! `ptc_round_trips_total`, `ptc_tool_calls_total`, `ptc_paused_executions`,
//! `ptc_live_instances`, `ptc_execution_seconds`, `ptc_instantiate_seconds`, and for
//! hibernation `ptc_hibernated`, `ptc_hibernated_bytes`, `ptc_hibernate_seconds`,
//! `ptc_thaw_seconds`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process-wide recorder (installed once, however many servers a test starts).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0,
                ])
                .expect("static buckets")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics may be empty");
            }
            handle
        })
        .clone()
}

/// `/metrics`, `/livez`, and `/readyz`, which fails once `draining` is cancelled (a shutdown
/// signal): the load balancer stops sending new work while paused executions finish.
pub fn router(draining: tokio_util::sync::CancellationToken) -> axum::Router {
    let handle = handle();
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let handle = handle.clone();
                async move { handle.render() }
            }),
        )
        .route("/livez", axum::routing::get(|| async { "ok" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let draining = draining.is_cancelled();
                async move {
                    if draining {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "draining")
                    } else {
                        (axum::http::StatusCode::OK, "ready")
                    }
                }
            }),
        )
}
