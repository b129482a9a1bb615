#!/usr/bin/env bash
# Another tenant's latency under one tenant's attacks (`just attacks [serve flags]`): tenant b's
# `print(1)` over the HTTP API of the release binary, alone and while tenant a
#   1. sends tool inputs that are costly to check against their schema (two programs, each
#      CALLS (default 20) inputs of ROWS (default 10,000) rows that match none of an `anyOf` of
#      200 objects, then one of 4,000 rows that match its last); and inputs of CHAIN_ROWS
#      (default 20) values against a schema whose checks multiply; keep them small against a
#      server without the bounds;
#   2. holds HTTP requests open (600 at once, each a 30 s busy loop), as 520 MCP streams of
#      one tenant once held every connection.
# Prints medians and maxima for each.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ptc-engine}
HTTP=${HTTP_PORT:-18282}
CALLS=${CALLS:-20}
ROWS=${ROWS:-10000}
CHAIN_ROWS=${CHAIN_ROWS:-20}
[ -x "$BIN" ] || cargo build --release -p ptc-server --bin ptc-engine
PTC_LOG=error "$BIN" serve --grpc-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --http-addr "127.0.0.1:$HTTP" \
    --api-keys a:ka,b:kb "$@" >/dev/null 2>&1 &
server=$!
pids=()
cleanup() { kill "${pids[@]}" "$server" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do curl -s -o /dev/null "localhost:$HTTP/" && break; sleep 0.2; done
run_b() {
    curl -s -o /dev/null -w '%{time_total} %{http_code}\n' -H 'X-API-Key: kb' -H 'content-type: application/json' \
        -d '{"code":"print(1)"}' "localhost:$HTTP/exec"
}
report() {
    python3 - "$1" "$2" <<'PY'
import statistics, sys
rows = [line.split() for line in sys.argv[2].splitlines()]
ms = [float(t) * 1000 for t, _ in rows]
codes = sorted({c for _, c in rows})
print(f"{sys.argv[1]}: tenant b's print(1) median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms, statuses {codes}")
PY
}
report "alone" "$(for _ in $(seq 10); do run_b; done)"

# Two programs of tenant a calling `rows` with `big` CALLS times and `near` once.
attack() {
    for _ in 1 2; do
        curl -s -o /dev/null -H 'X-API-Key: ka' -H 'content-type: application/json' -d "$1" \
            "localhost:$HTTP/exec/programmatic" &
        pids+=($!)
    done
    sleep 0.5
    report "$2" "$(for _ in $(seq 10); do run_b; done)"
    wait "${pids[@]}" 2>/dev/null || true
    pids=()
}
tool_program() {
    SCHEMA=$1 BIG=$2 NEAR=$3 CALLS=$CALLS python3 - <<'PY'
import json, os
code = f"""big = {os.environ['BIG']}
near = {os.environ['NEAR']}
for _ in range({os.environ['CALLS']}):
    try:
        await rows(rows=big)
    except ToolError as e:
        pass
await rows(rows=near)"""
print(json.dumps({"code": code, "tools": [{"name": "rows", "parameters": json.loads(os.environ['SCHEMA'])}]}))
PY
}
anyof=$(python3 -c '
import json
branches = [{"type": "object", "required": [f"k{i}"]} for i in range(200)]
print(json.dumps({"type": "object", "properties": {"rows": {"type": "array", "items": {"anyOf": branches}}}}))')
attack "$(tool_program "$anyof" "[{'none': 1}] * $ROWS" "[{'k199': 1}] * 4_000")" \
    "costly inputs ($CALLS of $ROWS rows a program)"
# 21 `anyOf`s through `$ref`s, each naming the next twice: 2^21 ways to check one value.
chain=$(python3 -c '
import json
defs = {}
for i in range(21):
    nxt = {"type": "string"} if i == 20 else {"$ref": f"#/$defs/d{i + 1}"}
    defs[f"d{i}"] = {"anyOf": [nxt, dict(nxt)]}
print(json.dumps({"$defs": defs, "type": "object", "properties": {"rows": {"type": "array", "items": {"$ref": "#/$defs/d0"}}}}))')
attack "$(tool_program "$chain" "[1] * $CHAIN_ROWS" "[1]")" \
    "a schema whose checks multiply ($CALLS of $CHAIN_ROWS values a program)"

for _ in $(seq 600); do
    curl -s -o /dev/null -H 'X-API-Key: ka' -H 'content-type: application/json' \
        -d '{"code":"while True: pass","timeout":30000}' "localhost:$HTTP/exec" &
    pids+=($!)
done
sleep 3
report "600 requests held" "$(for _ in $(seq 10); do run_b; done)"
