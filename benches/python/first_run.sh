#!/usr/bin/env bash
# The first run of a fresh install (`just bench-first-run`): the wheel built now and installed
# into a new venv (its `pip install` timed), then `Sandbox().run_sync("pass")` in a new process,
# from `import ptc_engine` to the result, ROUNDS times (default 3) in turn: with an empty cache
# and the component the wheel ships compiled ahead; with an empty cache and `_ahead/` removed
# (compiled here); with the cache filled. Then a CPU-bound program's median, with the component
# compiled ahead (x86-64-v2) and compiled for this CPU, in turn. Prints one line per measurement.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
WHEEL=$(benches/python/wheel.sh)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
start=$(date +%s%N)
"$WORK/venv/bin/pip" install --quiet --disable-pip-version-check "$WHEEL"
echo "pip install (dependencies from PyPI): $(( ($(date +%s%N) - start) / 1000000 )) ms"
PY="$WORK/venv/bin/python"
AHEAD=$("$PY" -c 'import os, ptc_engine; print(os.path.join(os.path.dirname(ptc_engine.__file__), "_ahead"))')
first() { env -u PTC_ENGINE_URL XDG_CACHE_HOME="$1" "$PY" - <<'PY'
import time
started = time.perf_counter()
from ptc_engine import Sandbox
Sandbox().run_sync("pass")
print(f"{time.perf_counter() - started:.2f} s")
PY
}
for round in $(seq "$ROUNDS"); do
    rm -rf "$WORK/ahead" "$WORK/native"
    echo "round $round: empty cache, compiled ahead: $(first "$WORK/ahead")"
    echo "round $round: cache filled: $(first "$WORK/ahead")"
    mv "$AHEAD" "$AHEAD.off"
    echo "round $round: empty cache, no _ahead/: $(first "$WORK/native")"
    mv "$AHEAD.off" "$AHEAD"
done
loop() { env -u PTC_ENGINE_URL XDG_CACHE_HOME="$1" "$PY" - <<'PY'
import statistics, time
from ptc_engine import Sandbox
sb = Sandbox()
sb.run_sync("pass")
code = "t = 0\nfor i in range(300000):\n    t += i * i % 7\nprint(t)"
took = []
for _ in range(15):
    started = time.perf_counter()
    sb.run_sync(code)
    took.append(time.perf_counter() - started)
print(f"{statistics.median(took) * 1000:.1f} ms")
PY
}
for round in $(seq "$ROUNDS"); do
    echo "round $round: CPU-bound loop, compiled ahead (x86-64-v2): $(loop "$WORK/ahead")"
    echo "round $round: CPU-bound loop, compiled for this CPU: $(loop "$WORK/native")"
done
