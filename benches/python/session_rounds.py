"""A session through the Python client, the way the transports' A/Bs in docs/benchmarks.md
measured it: `pass`, and programs of 10 and 19 sequential calls of an async tool and of a sync
one, alternating, 150 times each in one live session; prints their medians, the per-round cost
the old way ((10 calls - pass) / 10, which also holds the longer program's own start) and the
marginal one ((19 calls - 10 calls) / 9: one more round, as `peers.py` counts it). With a URL,
a server's session; without one, the engine in this process. Run it with two clients' venvs
(or one venv whose package files are swapped between runs), alternating processes, to compare
them:

    target/release/ptc-engine serve --api-keys t1:k1 &
    VENV/bin/python benches/python/session_rounds.py http://127.0.0.1:50051 k1
    VENV/bin/python benches/python/session_rounds.py          # in process
"""

import asyncio
import statistics
import sys
import time

from ptc_engine import Limits, Sandbox, Tool

RUNS = 150


def program(n: int) -> str:
    return f"s = 0\nfor i in range({n}):\n    s = await add(a=s, b=i)\nreturn s"


async def add(a: int, b: int) -> int:
    return a + b


def add_sync(a: int, b: int) -> int:
    return a + b


async def main(url: str | None, key: str | None) -> None:
    sandbox = Sandbox(url, api_key=key) if url else Sandbox()
    tools = {"async": [Tool.from_function(add)], "sync": [Tool.from_function(add_sync, name="add")]}
    cases = [("pass", "pass", [])] + [
        (f"{n} {kind}", program(n), tools[kind]) for kind in ("async", "sync") for n in (10, 19)
    ]
    async with sandbox as sb, sb.session(limits=Limits(max_round_trips=100)) as session:
        times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        for _ in range(RUNS):
            for name, code, offered in cases:
                began = time.perf_counter()
                await session.run(code, tools=offered)
                times[name].append(time.perf_counter() - began)
        m = {name: statistics.median(t) for name, t in times.items()}
        print(f"session pass {m['pass'] * 1e3:.3f} ms")
        for kind in ("async", "sync"):
            ten, nineteen = m[f"10 {kind}"], m[f"19 {kind}"]
            print(
                f"{kind} tool: 10 calls {ten * 1e3:.3f} ms, per round {(ten - m['pass']) * 1e2:.3f} ms; "
                f"one more round {(nineteen - ten) / 9 * 1e6:.0f} µs"
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2] if len(sys.argv) > 2 else None))
