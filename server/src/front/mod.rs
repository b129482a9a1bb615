//! The front ends, each a protocol over the [`crate::core`]: gRPC (`ptc.v1.Sandbox`), the
//! LibreChat-compatible HTTP Code API, and the code-mode MCP server. They parse requests, drive
//! a run's events over their wire, and word its ending and errors their way; starting and
//! ending a run is the core's.

pub mod grpc;
pub mod http;
pub mod mcp;
