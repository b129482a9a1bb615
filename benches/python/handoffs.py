"""Where a run through the in-process engine (`Sandbox()`) spends its time between the caller's
thread and the lane that runs it, each run after 5 ms of quiet (an agent's requests come
spaced). Two reports:

- `mix` (the default): a fresh `pass`, a live session's `pass`, a fresh program of one tool
  call and one of ten, one after another in every round; medians of the whole call and, in
  brackets, of the engine's own time (`result.stats.wall_time_s`).
- `phases`: a fresh ten-call program alone, cut at each message between the two threads:
  its `Start` to the first call read, the second round (an answer sent to the next call read),
  rounds three to ten together, the caller's own handling of calls two to ten (a call read to
  its answer sent), and the last answer to the result read; and the TLB shootdowns the machine
  took per run (`/proc/interrupts`, every CPU: the lane's copies on write reach any CPU where
  a thread of this process runs).

The process's first run is a `pass`, as in `peers.py`. `--hold split` keeps the lanes (and the runtime's other threads) on CPU 0 and this thread on
CPU 1, `--hold same` all of them on CPU 1 (`sched_setaffinity`, after the first run): the two
ways the scheduler may place them, which otherwise changes from one process to the next.

Run it in a venv with the package's wheel (`just wheel`), e.g. the peers bench's:
`target/bench-venvs/peers/bin/python benches/python/handoffs.py [phases] [--runs 60] [--hold split]`
(`--case fresh` for the fresh `pass` alone)."""

import argparse
import asyncio
import os
import statistics
import time

from ptc_engine import Sandbox, Tool
from ptc_engine import _transport


async def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


ADD = Tool.from_function(add)
QUIET = 0.005


def program(n: int) -> str:
    return f"t = 1\nfor i in range({n}):\n    t = await add(a=t, b=i)\nreturn t"


def hold(how: str) -> None:
    """Holds the lanes and the runtime's threads on CPU 0 (`split`) or 1 (`same`), and this
    thread on CPU 1."""
    me = os.getpid()
    for tid in os.listdir(f"/proc/{me}/task"):
        with open(f"/proc/{me}/task/{tid}/comm") as f:
            name = f.read().strip()
        if name.startswith(("ptc-lane", "tokio-rt")):
            os.sched_setaffinity(int(tid), {0} if how == "split" else {1})
    os.sched_setaffinity(0, {1})


def shootdowns() -> int:
    with open("/proc/interrupts") as f:
        for line in f:
            if line.strip().startswith("TLB:"):
                return sum(int(n) for n in line.split()[1:] if n.isdigit())
    return 0


async def mix(sandbox: Sandbox, runs: int, only: list[str]) -> None:
    async with sandbox.session() as session:
        cases = {
            "fresh `pass`": lambda: sandbox.run("pass"),
            "session `pass`": lambda: session.run("pass"),
            "1 call, fresh": lambda: sandbox.run(program(1), tools=[ADD]),
            "10 calls, fresh": lambda: sandbox.run(program(10), tools=[ADD]),
        }
        cases = {name: run for name, run in cases.items() if not only or name.startswith(tuple(only))}
        whole = {name: [] for name in cases}
        engine = {name: [] for name in cases}
        for _ in range(runs):
            for name, run in cases.items():
                await asyncio.sleep(QUIET)
                started = time.perf_counter()
                result = await run()
                whole[name].append(time.perf_counter() - started)
                engine[name].append(result.stats.wall_time_s)
        print("| " + " | ".join(cases) + " |\n|" + " --- |" * len(cases))
        cells = [f"{statistics.median(whole[n]) * 1e6:.0f} µs ({statistics.median(engine[n]) * 1e6:.0f})" for n in cases]
        print("| " + " | ".join(cells) + " |")


async def phases(sandbox: Sandbox, runs: int) -> None:
    marks: list[tuple[str, float]] = []
    read, send = _transport.NativeCall.read, _transport.NativeCall.send

    async def marked_read(self, idle=False):
        message = await read(self, idle)
        marks.append(("read", time.perf_counter()))
        return message

    def marked_send(self, message):
        marks.append(("sent", time.perf_counter()))
        return send(self, message)

    _transport.NativeCall.read, _transport.NativeCall.send = marked_read, marked_send
    code = program(10)
    cut: dict[str, list[float]] = {k: [] for k in ("first", "second", "rest", "caller", "end", "tlb")}
    for _ in range(runs):
        await asyncio.sleep(QUIET)
        marks.clear()
        before = shootdowns()
        result = await sandbox.run(code, tools=[ADD])
        cut["tlb"].append(shootdowns() - before)
        assert result.return_value == 46, result
        reads = [t for k, t in marks if k == "read"]  # started, 10 calls, completed
        sends = [t for k, t in marks if k == "sent"]  # the start, 10 answers
        cut["first"].append(reads[1] - sends[0])
        cut["second"].append(reads[2] - sends[1])
        cut["rest"].append(sum(reads[i + 1] - sends[i] for i in range(2, 10)))
        cut["caller"].append(sum(sends[i] - reads[i] for i in range(2, 11)))
        cut["end"].append(reads[11] - sends[10])
    _transport.NativeCall.read, _transport.NativeCall.send = read, send
    m = {k: statistics.median(v) for k, v in cut.items()}
    print("| start to 1st call | 2nd round | rounds 3-10 | caller's handling, calls 2-10 | last answer to result | TLB shootdowns |")
    print("| --- | --- | --- | --- | --- | --- |")
    us = [f"{m[k] * 1e6:.0f} µs" for k in ("first", "second", "rest", "caller", "end")]
    print("| " + " | ".join(us) + f" | {m['tlb']:.0f} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", choices=("mix", "phases"), default="mix")
    parser.add_argument("--runs", type=int, default=60, help="timed runs of each case")
    parser.add_argument("--hold", choices=("split", "same"), help="hold the threads on two CPUs or one")
    parser.add_argument("--case", action="append", default=[], help="`mix`: only the cases named so (a prefix)")
    args = parser.parse_args()
    async with Sandbox() as sandbox:
        # The process's first fresh run, as in `peers.py`: warm instances copy ahead the pages
        # of the programs they learn from, the first among them.
        await sandbox.run("pass")
        if args.hold:
            hold(args.hold)
        if args.report == "mix":
            await mix(sandbox, args.runs, args.case)
        else:
            await phases(sandbox, args.runs)


if __name__ == "__main__":
    asyncio.run(main())
