//! Compiles `proto/ptc/v1/*.proto` in pure Rust (protox; no protoc needed) into tonic code,
//! and keeps the encoded descriptor set for gRPC server reflection.

use std::path::PathBuf;

use protox::prost::Message;

fn main() {
    let protos = ["ptc/v1/sandbox.proto"];
    let includes = ["../proto"];
    println!("cargo:rerun-if-changed=../proto");
    let fds = protox::compile(protos, includes).expect("compiling the protos");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    std::fs::write(out.join("ptc_descriptor.bin"), fds.encode_to_vec()).expect("writing the descriptor set");
    tonic_prost_build::configure().compile_fds(fds).expect("generating gRPC code");
}
