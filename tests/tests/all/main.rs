//! The end-to-end tests, one module per behaviour, in one binary: each test binary links
//! wasmtime, tonic and axum, so one binary instead of twenty saves link time and disk.
//! Tests that need process-wide state run in binaries of their own (`grpc_disconnect.rs`
//! reads process-wide metrics; `release_binary.rs` builds and drives the release binary).

mod approvals;
mod batching;
mod bounds;
mod cluster_store;
mod contained;
mod data_dir;
mod deploy;
mod grpc_execute;
mod grpc_service;
mod grpc_sessions;
mod grpcurl;
mod hibernation;
mod host_files;
mod http_files;
mod http_programmatic;
mod http_tokens;
mod http_vanish;
mod javascript;
mod journal;
mod librechat;
mod librechat_files;
mod lifecycle;
mod limits;
mod mcp;
mod mcp_tenants;
mod names;
mod network;
mod network_clients;
mod python_client;
mod python_data;
mod reservation;
mod result_shapes;
mod session_edges;
mod sessions;
mod stdlib;
mod tenant_bounds;
mod tool_calls;
mod tool_errors;
mod traces;
