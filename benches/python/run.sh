#!/usr/bin/env bash
# `just bench-python`: the Python client and FastMCP's code mode, Monty against ptc-engine
# (benches/python/codemode.py), in process (the package's wheel, built now) and against the
# release binary on GRPC_PORT (default 18351), in a venv under target/bench-venvs. Extra arguments go to codemode.py (e.g. `--runs 100`).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/ptc-engine}
GRPC=${GRPC_PORT:-18351}
VENV=target/bench-venvs/python
[ -x "$BIN" ] || cargo build --release -p ptc-server --bin ptc-engine
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
WHEEL=$(benches/python/wheel.sh)
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
    "$WHEEL[fastmcp]" "fastmcp[code-mode]==4.1.6" "pydantic-monty==1.4.0" "grpcio==1.85.1"
# The wheel's version stays the same from build to build: reinstall it.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
. benches/python/serve.sh
env -u PTC_ENGINE_URL "$VENV/bin/python" benches/python/codemode.py --url "http://127.0.0.1:$GRPC" "$@"
