#!/usr/bin/env bash
# Builds the JavaScript guest (../guest) with the probe's knobs, apart from the workspace's build
# (runtime-js-wasm/build.rs): runtime-js-wasm/probe/build.sh [OUT.wasm] (default target/js-probe/js.wasm).
# Needs: rustup target add wasm32-wasip2; apt-get install clang-19 lld-19 llvm-19 wasi-libc
# libclang-rt-19-dev-wasm32. rquickjs-sys would download wasi-sdk without RQUICKJS_SYS_NO_WASI_SDK;
# Debian's wasi-libc gives the C code its headers, and Rust links its own wasip2 libc.
#
# QuickJS-ng (0.16.2 in rquickjs-sys 0.14.0) turns its stack check off when `__wasi__` is
# defined, so a deep recursion runs into wasmtime's 1 MiB native stack and traps the instance.
# `prewasi.h`, included before each C file, undefines it once the libc headers are in; the
# guest then sets a 256 KiB limit, and plain recursion ends in a RangeError.
# Knobs: MAX_STACK=N (PTC_JS_MAX_STACK, 0: none), STOCK=1 (no prewasi.h).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
out="$(realpath -m "${1:-$root/target/js-probe/js.wasm}")"
export RQUICKJS_SYS_NO_WASI_SDK=1
export CC_wasm32_wasip2=clang-19
export AR_wasm32_wasip2=llvm-ar-19
export CFLAGS_wasm32_wasip2="--target=wasm32-wasi -isystem /usr/include/wasm32-wasi -O2"
if [ "${STOCK:-}" != 1 ]; then
    export CFLAGS_wasm32_wasip2="$CFLAGS_wasm32_wasip2 -include $here/../guest/prewasi.h"
fi
export PTC_JS_MAX_STACK="${MAX_STACK-262144}"
export CARGO_TARGET_DIR="$root/target/js-probe"
cd "$here/../guest"
cargo build --release --target wasm32-wasip2 --quiet
mkdir -p "$(dirname "$out")"
cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/ptc_js_guest.wasm" "$out"
ls -l "$out"
