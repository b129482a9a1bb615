"""What one more tool round costs the guest runtime's own Python (`ptc_runtime/loop.py`, the
stubs, the runner) on host CPython, with a host that answers at once: the medians of `--runs`
programs of 1 and of 201 sequential `await add(...)` calls, fresh and in a live session, and
(t201 - t1) / 200. The guest runs the same code in the component, some five times slower, and
the host's share of a round (the `wait-for-tools` import, the exchange) comes on top.

`python3 benches/python/guest_round.py [--runs 200]` (any CPython 3.11 or newer; nothing to
install: it imports the guest runtime from `runtime-python-wasm/python`). To compare two
versions of the runtime, run it in two checkouts one after the other, alternating."""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runtime-python-wasm" / "python"))

from ptc_runtime import runner  # noqa: E402

TOOLS = [("add", "Adds.", '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}')]


def answer(calls, timeout_ms):
    return [(c[0], True, "3") for c in calls]


def program(n: int) -> str:
    return f"t = 1\nfor i in range({n}):\n    t = await add(a=t, b=i)\nreturn t"


def timed(code: str, persist: bool) -> float:
    started = time.perf_counter()
    outcome = runner.run_program(code, TOOLS, answer, persist)
    took = time.perf_counter() - started
    assert outcome.ok, (outcome.kind, outcome.message)
    return took


def main(runs: int) -> None:
    runner.prepare()
    print("| | 1 call | 201 calls | one more round |\n| --- | --- | --- | --- |")
    for persist in (False, True):
        one, many = program(1), program(201)
        for _ in range(runs // 4):
            timed(one, persist), timed(many, persist)
        t1 = statistics.median(timed(one, persist) for _ in range(runs))
        t201 = statistics.median(timed(many, persist) for _ in range(runs))
        label = "live session" if persist else "fresh"
        print(f"| {label} | {t1 * 1e6:.1f} µs | {t201 * 1e3:.3f} ms | {(t201 - t1) / 200 * 1e6:.2f} µs |")
    print(f"\nCPython {sys.version.split()[0]}, {runs} runs each.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    main(parser.parse_args().runs)
