#!/usr/bin/env bash
# CPU fairness between tenants (`just fairness [serve flags]`): tenant b's trivial run, alone and
# while tenant a has BUSY (default 60) busy loops running, over the HTTP API of the release
# binary. Prints medians and maxima; compare flags side by side, e.g.
#   just fairness --tenant-max-running 0     # no run slots
#   just fairness                            # the default
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ptc-engine}
BUSY=${BUSY:-60}
HTTP=${HTTP_PORT:-18181}
METRICS=${METRICS_PORT:-19191}
[ -x "$BIN" ] || cargo build --release -p ptc-server --bin ptc-engine
PTC_LOG=error "$BIN" serve --grpc-addr 127.0.0.1:0 --metrics-addr "127.0.0.1:$METRICS" --http-addr "127.0.0.1:$HTTP" \
    --api-keys a:ka,b:kb "$@" >/dev/null 2>&1 &
server=$!
busy=()
cleanup() { kill "${busy[@]}" "$server" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do curl -s -o /dev/null "localhost:$HTTP/" && break; sleep 0.2; done
run_b() {
    curl -s -o /dev/null -w '%{time_total}\n' -H 'X-API-Key: kb' -H 'content-type: application/json' \
        -d '{"code":"print(1)"}' "localhost:$HTTP/exec"
}
alone=$(for _ in $(seq 10); do run_b; done)
for _ in $(seq "$BUSY"); do
    curl -s -o /dev/null -H 'X-API-Key: ka' -H 'content-type: application/json' \
        -d '{"code":"while True: pass","timeout":30000}' "localhost:$HTTP/exec" &
    busy+=($!)
done
sleep 2
live=$(curl -s "localhost:$METRICS/metrics" | awk '/^ptc_live_instances/ {print $2}')
loaded=$(for _ in $(seq 20); do run_b; done)
python3 - "$alone" "$loaded" "$live" "$*" <<'PY'
import statistics, sys
alone = [float(x) * 1000 for x in sys.argv[1].split()]
loaded = [float(x) * 1000 for x in sys.argv[2].split()]
print(f"flags [{sys.argv[4]}]: tenant b alone median {statistics.median(alone):.1f} ms; "
      f"with {sys.argv[3]} executions of tenant a live: median {statistics.median(loaded):.1f} ms, max {max(loaded):.1f} ms")
PY
