#!/usr/bin/env bash
# Density of two server binaries side by side (`just density-ab OLD NEW [N] [PROGRAM]`): for
# each binary in turn, a fresh `serve`, N gRPC executions of PROGRAM (`await` or `state`)
# paused and hibernated, memory read while all N wait, all resumed and checked, and the
# server's memory read again 60 s after the last ended (what it gave back). The density
# harness (`target/release/density`, this tree's) measures both through `--connect`; each
# binary's table goes to stdout, its JSON to target/density-ab-<label>.json. Build an older
# binary with `git worktree add` and a target directory of its own (one shared with this tree
# lets cargo take one for the other's crates).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: density-ab.sh OLD_BIN NEW_BIN [N] [PROGRAM]}
NEW=${2:?usage: density-ab.sh OLD_BIN NEW_BIN [N] [PROGRAM]}
N=${3:-2000}
PROGRAM=${4:-state}
RELEASED=${RELEASED_AFTER_SECS:-60}
cargo build --release -p ptc-benches --bin density
# A paused execution holds no descriptor once hibernated; live ones and connections do.
ulimit -n "$(ulimit -Hn)"
run() {
    local bin=$1 label=$2 port=$((20000 + RANDOM % 9000))
    local files log
    files=$(mktemp -d) log=$(mktemp)
    PTC_LOG=warn "$bin" serve --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$((port + 1))" \
        --metrics-addr "127.0.0.1:$((port + 2))" --files-dir "$files" --max-concurrent $((N + 64)) 2>"$log" &
    local server=$!
    for _ in $(seq 150); do grep -q serving "$log" && break; sleep 0.2; done
    echo "== $label: $bin, N = $N, program $PROGRAM"
    target/release/density --connect "http://127.0.0.1:$port" --pid "$server" --metrics-addr "127.0.0.1:$((port + 2))" \
        --counts "$N" --program "$PROGRAM" --throughput-secs 0 --idle-sessions 0 \
        --released-after-secs "$RELEASED" --json "target/density-ab-$label.json" 2>/dev/null || true
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$files" "$log"
}
run "$OLD" old
run "$NEW" new
