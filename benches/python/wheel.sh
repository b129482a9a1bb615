#!/usr/bin/env bash
# The Python package's wheel for this checkout (`just wheel`, and the Python benches before they
# install it): the component compiled ahead (`ptc-engine compile`), then the package built with
# the pinned maturin in target/test-venvs/maturin, release mode, into target/wheels; prints its
# path. cargo rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/../.."
MATURIN=target/test-venvs/maturin
[ -x "$MATURIN/bin/maturin" ] || {
    python3 -m venv "$MATURIN"
    "$MATURIN/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0
}
# The component compiled ahead for a baseline CPU, which the wheel ships (`_ahead/`): a fresh
# install's first run loads it instead of compiling.
# Python's only: the JavaScript component is compiled at an engine's first start (the wheel stays
# within 40 MB).
cargo run --release --quiet -p ptc-server --bin ptc-engine -- compile --without-javascript --out clients/python/src/ptc_engine/_ahead >&2
(cd clients/python && "../../$MATURIN/bin/maturin" build --release --quiet --out ../../target/wheels >&2)
ls -t target/wheels/ptc_engine-*.whl | head -1
