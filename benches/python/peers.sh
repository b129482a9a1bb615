#!/usr/bin/env bash
# ptc-engine side by side with Monty (pydantic-monty 1.4.0) and eryx (pyeryx 0.11.0)
# (benches/python/peers.py): in process (the package's wheel, built now) and against the release
# binary on GRPC_PORT (default 18352), in the venv target/bench-venvs/peers. Extra arguments go
# to peers.py (e.g. `--runs 100`).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The server of this checkout, built now (a stale binary would measure an older engine), unless
# BIN names another.
if [ -z "${BIN:-}" ]; then cargo build --quiet --release -p ptc-server --bin ptc-engine; fi
BIN=${BIN:-target/release/ptc-engine}
GRPC=${GRPC_PORT:-18352}
VENV=target/bench-venvs/peers
# pyeryx 0.11.0 has wheels for CPython 3.12 and newer only (cp312-abi3): with an older python3
# pip would try to build it from source. PYTHON chooses the interpreter; else the newest found.
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for candidate in python3.14 python3.13 python3.12 python3 \
        $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do
        if new_enough "$candidate"; then PY=$candidate; break; fi
    done
fi
[ -n "$PY" ] || { echo "peers.sh: pyeryx needs Python 3.12 or newer: set PYTHON" >&2; exit 1; }
if ! new_enough "$VENV/bin/python"; then rm -rf "$VENV"; "$PY" -m venv "$VENV"; fi
WHEEL=$(benches/python/wheel.sh)
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$WHEEL" "pydantic-monty==1.4.0" "pyeryx==0.11.0"
# The wheel's version stays the same from build to build: reinstall it.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
. benches/python/serve.sh
env -u PTC_ENGINE_URL "$VENV/bin/python" benches/python/peers.py --url "http://127.0.0.1:$GRPC" "$@"
