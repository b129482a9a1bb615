"""What the pre-run check of a program's tool calls (`ptc_runtime/check.py`) costs on host
CPython, for a one-call program in live sessions with few and with many globals: medians of
`--runs` checks, in µs. The guest runs the same code in the component, some five times slower.

`python3 benches/python/guest_check.py [--runs 3000]` (any CPython 3.10 or newer; nothing to
install: it imports the guest runtime from `runtime-python-wasm/python`)."""

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runtime-python-wasm" / "python"))

from ptc_runtime import runner  # noqa: E402

TOOLS = [("add", "Adds.", '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}')]
CODE = "return await add(a=1, b=2)"


def answer(calls, timeout_ms):
    return [(c[0], True, "3") for c in calls]


def main(runs: int) -> None:
    runner.prepare()
    assert runner.run_program(CODE, TOOLS, answer, True).ok
    live = runner.live_session()
    specs, _ = live.tools_for(TOOLS, runner.parse_tools, runner._bind)
    tree = ast.parse(CODE)
    print("| session globals | check |\n| --- | --- |")
    for more in (0, 1000):
        if more:
            assert runner.run_program("\n".join(f"v{i} = {i}" for i in range(more)), TOOLS, answer, True).ok
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            assert runner._checked(tree, specs, live.globals) == []
            took.append(time.perf_counter() - started)
        print(f"| {len(live.globals)} | {statistics.median(took) * 1e6:.1f} µs |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000, help="checks timed per row")
    main(parser.parse_args().runs)
