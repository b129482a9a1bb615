# ptc-engine tasks. `just --list` shows them; each is a plain command you can also run by hand.

# Run every test: guest runtime unit tests (host CPython) and end-to-end tests through the component.
test:
    cargo test --workspace

# Only the guest runtime's Python unit tests, on the host's CPython (fast, no wasm).
test-python:
    cd runtime-python-wasm/python && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests -t tests

# Import circles among a crate's files (`crate::`/`super::` paths), e.g. `just circles engine/src`;
# prints nothing when there is none.
circles *DIRS:
    .ci/import-circles {{DIRS}}

# Build everything in release mode.
build:
    cargo build --workspace --release

# The Python package's wheel (`pip install ptc-engine`): the client with its native module, the
# engine in process, for CPython 3.10 and later (abi3), tagged manylinux by maturin's own check;
# into target/wheels, with its size.
wheel:
    ls -l $(benches/python/wheel.sh)

# The container image (OCI), without a Docker daemon: the release binary, the sandbox component
# compiled ahead and the libraries they need, FROM scratch, built with buildah (Debian's
# `buildah`; `podman run` runs it). Prints the tag, localhost/ptc-engine:<version> unless given,
# e.g. `just image registry.example/ptc-engine:0.1.0`.
image *TAG:
    deploy/image.sh {{TAG}}

# Benchmarks: library, gRPC, `python3 -c` and warm CPython side by side; then ptc-engine beside
# Monty and pyeryx from PyPI in one run (`bench-peers`).
bench:
    cargo bench -p ptc-benches
    benches/python/peers.sh

# ptc-engine (Python client, in process and over gRPC), Monty (pydantic-monty 1.4.0) and pyeryx
# 0.11.0 side by side:
# fresh `pass`, `pass` in a session, one tool round, a CPU-bound loop; e.g. `just bench-peers --runs 100`.
bench-peers *ARGS:
    benches/python/peers.sh {{ARGS}}

# A fresh install's first run: the wheel into a new venv, then the first `Sandbox().run_sync`
# with an empty cache, with and without the component compiled ahead, and with the cache
# filled; a CPU-bound loop under both compiled forms; e.g. `just bench-first-run 5`.
bench-first-run ROUNDS="3":
    benches/python/first_run.sh {{ROUNDS}}

# Density harness: N paused executions (100, 500, 1000, 2000, 5000), memory per execution by
# PSS, descriptors, what the server gives back 60 s after the last ends (`--released-after-secs`),
# first-call and round-trip latency, throughput; `--program state` pauses programs with some
# state; table on stdout, JSON in target/density.json.
# Extra harness flags go first, server flags after `--`, e.g. `just density --counts 100,1000`.
density *ARGS:
    cargo run --release -p ptc-benches --bin density -- {{ARGS}}

# Two server binaries' density side by side: N paused programs (`await` or `state`) each, memory
# while they wait, and what the server gives back 60 s after they end, e.g.
# `just density-ab /tmp/ptc-engine-before target/release/ptc-engine 2000 state`.
density-ab OLD NEW N="2000" PROGRAM="state":
    benches/density-ab.sh {{OLD}} {{NEW}} {{N}} {{PROGRAM}}

# Where a fresh execution's time goes: N executions one after another through the library, medians
# of the whole, of the engine's wall time and of instantiation, e.g. `just phases --warm 0 --gap-ms 5`;
# `--grpc URL` drives a running server from this process instead, beside the wire's floors.
phases *ARGS:
    cargo run --release -p ptc-benches --bin phases -- {{ARGS}}

# CPU fairness between tenants: tenant b's trivial run alone and beside 60 busy loops of tenant a
# (release binary, HTTP API). Serve flags go after, e.g. `just fairness --tenant-max-running 0`.
fairness *ARGS:
    benches/fairness.sh {{ARGS}}

# Another tenant's latency under one tenant's attacks (costly schema checks, requests held open),
# release binary, HTTP API. Serve flags go after, e.g. `just attacks --tenant-max-requests 0`.
attacks *ARGS:
    benches/attacks.sh {{ARGS}}

# Tokens a model spends on tool definitions: real servers' JSON definitions against
# execute_code's compact lines and describe_tools' stub (Claude's legacy tokenizer, offline).
signatures:
    python3 -m venv target/bench-venvs/tokens
    target/bench-venvs/tokens/bin/pip install --quiet tokenizers anthropic==0.34.2
    target/bench-venvs/tokens/bin/python benches/signatures/tokens.py

# What a model reads before its first tool call through `ptc-engine mcp`: every tool listed
# against discovery mode (search_tools), for 102 real servers' tools and 510 (release binary).
discovery:
    python3 -m venv target/bench-venvs/discovery
    target/bench-venvs/discovery/bin/pip install --quiet tokenizers anthropic==0.34.2 mcp==2.3.0
    target/bench-venvs/discovery/bin/python benches/signatures/discovery.py

# Python client and FastMCP code mode: the same 10-call program in Monty and in ptc-engine, and the
# client's own cost per tool round against raw grpcio (release binary; medians of alternating runs).
bench-python *ARGS:
    benches/python/run.sh {{ARGS}}
