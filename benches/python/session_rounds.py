"""A session through the Python client, the way the transports' A/Bs in docs/benchmarks.md
measured it: `pass` and a 10-call program, alternating, 150 times each in one live session;
prints their medians and the per-round cost ((10 calls - pass) / 10). With a URL, a server's
session; without one, the engine in this process. Run it with two clients' venvs (or one venv
whose package files are swapped between runs), alternating processes, to compare them:

    target/release/ptc-engine serve --api-keys t1:k1 &
    VENV/bin/python benches/python/session_rounds.py http://127.0.0.1:50051 k1
    VENV/bin/python benches/python/session_rounds.py          # in process
"""

import asyncio
import statistics
import sys
import time

from ptc_engine import Sandbox

RUNS = 150
PROGRAM = "s = 0\nfor i in range(10):\n    s = await add(a=s, b=i)\nreturn s"


async def add(a: int, b: int) -> int:
    return a + b


async def main(url: str | None, key: str | None) -> None:
    sandbox = Sandbox(url, api_key=key) if url else Sandbox()
    async with sandbox as sb, sb.session() as session:
        times: dict[str, list[float]] = {"pass": [], "10 calls": []}
        for _ in range(RUNS):
            for name, code, tools in (("pass", "pass", []), ("10 calls", PROGRAM, [add])):
                began = time.perf_counter()
                await session.run(code, tools=tools)
                times[name].append(time.perf_counter() - began)
        p, t = (statistics.median(times[k]) for k in ("pass", "10 calls"))
        print(f"session pass {p * 1e3:.3f} ms, 10 calls {t * 1e3:.3f} ms, per round {(t - p) * 1e2:.3f} ms")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2] if len(sys.argv) > 2 else None))
