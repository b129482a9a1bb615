"""ptc-engine side by side with its peers: Monty (pydantic-monty 1.4.0, a Python subset
interpreted in Rust) and eryx (pyeryx 0.11.0, CPython 3.14 on wasmtime, like ptc-engine), with
native CPython's `exec` in this process as the floor. ptc-engine is driven by its Python client
(`ptc_engine.Sandbox`) both ways a user runs it: with the engine in this process (`Sandbox()`,
the wheel's native module) and over gRPC (`Sandbox(url)`); the peers by their own Python
packages, each the cheapest idiomatic way its documentation gives.

`benches/python/peers.sh` runs it (it builds the release server if missing, starts it and makes
the venv); by hand: `python peers.py --url http://127.0.0.1:50051 [--runs 200]`. Every case runs
on every engine in turn, in an order shuffled each round, so that the machine's noise (and any
engine's background work) falls on all; each timed run comes after 5 ms of quiet (an agent's
requests come spaced, and both wasm engines make their next instances in idle time), but in the
back-to-back row, where it comes straight after three untimed runs of the same engine. Medians
are printed as a Markdown table, with each ptc-engine column's ratio to Monty's (below 1:
ptc-engine is faster) and, in brackets, the engine's own time (`result.stats.wall_time_s`), the
rest being the client (and over gRPC the wire and the two processes waking each other).

What "fresh" means for each (every program runs on state no earlier program touched):
- ptc-engine: one `Execute` stream (`Sandbox.run`); the server takes a warm instance of the
  pre-initialised CPython snapshot (made ahead in idle time, `--warm-instances`) or makes one.
- Monty: `AsyncMonty` 1.4 executes only in worker subprocesses (there is no in-process
  `Monty(code).run()` any more): a pool is started once and each program is a new REPL session,
  `pool.checkout()` + `feed_run`, served by an already running worker process (the same pid
  each time) that starts the session with empty state.
- pyeryx: `Sandbox.execute` runs each program in a new wasm instance of the pre-initialised
  CPython snapshot embedded in the wheel; a process-wide pool instantiates the next one in the
  background after each execution, so one long-lived `Sandbox` is reused (dropping a `Sandbox`
  costs about 2 ms, so `eryx.Sandbox().execute(...)` each time is dearer). Its first
  `Sandbox()` in a process loads the embedded compiled runtime once: printed below. Callbacks
  given to `Sandbox(callbacks=...)` are set up anew in every execution (about 4 ms, even for
  `pass`); `SandboxFactory(callbacks=...)` bakes them into its own snapshot (a one-off
  pre-initialisation of many seconds, printed below) and its sandboxes skip that, so the tool
  rows use a factory's sandbox, and the plain `Sandbox(callbacks=...)` is reported after the
  table.

Tools are host callbacks in each engine's own mechanism, answered at once: a ptc-engine tool
(an async function; the client validates each call's input with pydantic), a Monty external
function (`external_lookup`; a sync function, Monty's cheapest), a pyeryx callback (a sync
function, its cheapest). The program is the same loop for all, `t = add(a=t, b=i)` n times,
with `await` where the engine's calls are coroutines (ptc-engine, pyeryx), and `t` handed back
each engine's way (`return t`, a last expression, `result = t`). Each call is counted, and every
case checks its program's result, so a failure cannot pass for a fast run."""

import argparse
import asyncio
import contextlib
import datetime
import importlib.metadata
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import eryx
import pydantic_monty

from ptc_engine import Sandbox, Tool

EXTRA = "pyeryx, Sandbox(callbacks=...)"
LOCAL = "ptc-engine in process"
SQUARES = "sum(i*i for i in range(10**6))"
SQUARES_VALUE = sum(i * i for i in range(10**6))

CALLS = [0]
"""Every host callback of every engine counts itself here."""


async def add_async(a: int, b: int) -> int:
    """Adds two integers."""
    CALLS[0] += 1
    return a + b


def add_sync(a: int, b: int) -> int:
    """Adds two integers."""
    CALLS[0] += 1
    return a + b


ADD_TOOL = Tool.from_function(add_async, name="add")


def program(n, *, awaited, end):
    """`n` tool calls one after another, each awaiting the last; `end` hands back `t`."""
    call = "await add(a=t, b=i)" if awaited else "add(a=t, b=i)"
    return f"t = 1\nfor i in range({n}):\n    t = {call}\n{end}"


def expected(n):
    return 1 + n * (n - 1) // 2


@contextlib.contextmanager
def counting(n):
    before = CALLS[0]
    yield
    assert CALLS[0] - before == n, f"{CALLS[0] - before} host calls, expected {n}"


def stopwatch():
    """A function returning the seconds since it was made."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


class Engines:
    """Every engine's long-lived objects, made once (their one-off costs are kept in `setup`)."""

    async def open(self, stack, url):
        self.setup = {}
        cbs = [{"name": "add", "fn": add_sync, "description": "Adds two integers."}]

        # ptc-engine in this process: the engine starts at the first run.
        self.local = Sandbox()
        assert self.local.url == "in-process", f"no in-process engine here (url {self.local.url!r})"
        stack.push_async_callback(self.local.aclose)
        took = stopwatch()
        await self.local.run("pass")
        self.setup["ptc-engine in process: the first `run` (loads the engine)"] = took()
        self.local_session = await stack.enter_async_context(self.local.session())

        # ptc-engine over gRPC: one client (one HTTP/2 connection), one live session.
        self.ptc = Sandbox(url)
        stack.push_async_callback(self.ptc.aclose)
        took = stopwatch()
        await self.ptc.run("pass")
        self.setup["ptc-engine: the first `run` over a new connection"] = took()
        self.ptc_session = await stack.enter_async_context(self.ptc.session())

        # Monty: one pool of worker processes, one REPL session checked out of it for good.
        took = stopwatch()
        self.monty = await stack.enter_async_context(pydantic_monty.AsyncMonty())
        self.setup["Monty: `AsyncMonty()` started (spawns its first worker process)"] = took()
        self.monty_session = await stack.enter_async_context(self.monty.checkout())

        # pyeryx: a sandbox (each execute a new instance), a session, and for tools a factory's
        # sandbox with the callback baked in (and the plain way, for the note).
        took = stopwatch()
        self.eryx = eryx.Sandbox()
        self.eryx.execute("pass")
        self.setup["pyeryx: the first `Sandbox()` + `execute` in the process"] = took()
        self.eryx_session = eryx.Session()
        took = stopwatch()
        factory = eryx.SandboxFactory(callbacks=cbs)
        self.setup["pyeryx: `SandboxFactory(callbacks=...)` built (pre-initialisation)"] = took()
        self.eryx_tools = factory.create_sandbox()
        self.eryx_plain_tools = eryx.Sandbox(callbacks=cbs)

        self.native_session = {}

        # The sessions are sessions: state set in one program is there in the next.
        for session in (self.ptc_session, self.local_session):
            await session.run("x = 41")
            assert (await session.run("return x + 1")).return_value == 42
        await self.monty_session.feed_run("x = 41")
        assert await self.monty_session.feed_run("x + 1") == 42
        self.eryx_session.execute("x = 41")
        assert self.eryx_session.execute("result = x + 1").result == 42
        return self

    # ------------------------------------------------------------------ one program each

    async def ptc_fresh(self, code, tools=(), calls=0, value=None, sandbox=None):
        """Runs `code` in a new execution (over gRPC, or on `sandbox`); the engine's own time
        for it (`stats.wall_time_s`)."""
        with counting(calls):
            result = await (sandbox or self.ptc).run(code, tools=tools)
        assert result.return_value == value, result
        assert result.stats.tool_calls == calls, result.stats
        return result.stats.wall_time_s

    async def monty_fresh(self, code, calls=0, value=None, lookup=None):
        with counting(calls):
            async with self.monty.checkout() as session:
                result = await session.feed_run(code, external_lookup=lookup)
        assert result == value, result

    def eryx_run(self, sandbox, code, calls=0, value=None):
        with counting(calls):
            result = sandbox.execute(code)
        assert result.result == value and not result.stderr, (result.result, result.stderr_text)
        assert result.callback_invocations == calls, result.callback_invocations

    def native(self, code, g=None, calls=0, value=None):
        g = {"add": add_sync} if g is None else g
        with counting(calls):
            exec(code, g)
        assert g.get("result") == value, g.get("result")

    # ------------------------------------------------------------------ the cases

    def fresh_pass(self):
        async def ptc():
            return await self.ptc_fresh("pass")

        async def local():
            return await self.ptc_fresh("pass", sandbox=self.local)

        async def monty():
            await self.monty_fresh("pass")

        async def eryx_():
            self.eryx_run(self.eryx, "pass")

        async def native():
            self.native("pass", {})

        return {"ptc-engine": ptc, LOCAL: local, "Monty": monty, "pyeryx": eryx_, "CPython exec": native}

    def session_pass(self):
        async def ptc():
            result = await self.ptc_session.run("pass")
            assert result.return_value is None
            return result.stats.wall_time_s

        async def local():
            result = await self.local_session.run("pass")
            assert result.return_value is None
            return result.stats.wall_time_s

        async def monty():
            assert await self.monty_session.feed_run("pass") is None

        async def eryx_():
            self.eryx_run(self.eryx_session, "pass")

        async def native():
            self.native("pass", self.native_session)

        return {"ptc-engine": ptc, LOCAL: local, "Monty": monty, "pyeryx": eryx_, "CPython exec": native}

    def tool_calls(self, n):
        value = expected(n)
        ptc_code = program(n, awaited=True, end="return t")
        monty_code = program(n, awaited=False, end="t")
        eryx_code = program(n, awaited=True, end="result = t")
        native_code = program(n, awaited=False, end="result = t")

        async def ptc():
            return await self.ptc_fresh(ptc_code, tools=[ADD_TOOL], calls=n, value=value)

        async def local():
            return await self.ptc_fresh(ptc_code, tools=[ADD_TOOL], calls=n, value=value, sandbox=self.local)

        async def monty():
            await self.monty_fresh(monty_code, calls=n, value=value, lookup={"add": add_sync})

        async def eryx_():
            self.eryx_run(self.eryx_tools, eryx_code, calls=n, value=value)

        async def eryx_plain():
            self.eryx_run(self.eryx_plain_tools, eryx_code, calls=n, value=value)

        async def native():
            self.native(native_code, calls=n, value=value)

        return {
            "ptc-engine": ptc,
            LOCAL: local,
            "Monty": monty,
            "pyeryx": eryx_,
            "CPython exec": native,
            EXTRA: eryx_plain,
        }

    def squares(self):
        async def ptc():
            return await self.ptc_fresh(f"return {SQUARES}", value=SQUARES_VALUE)

        async def local():
            return await self.ptc_fresh(f"return {SQUARES}", value=SQUARES_VALUE, sandbox=self.local)

        async def monty():
            await self.monty_fresh(SQUARES, value=SQUARES_VALUE)

        async def eryx_():
            self.eryx_run(self.eryx, f"result = {SQUARES}", value=SQUARES_VALUE)

        async def native():
            self.native(f"result = {SQUARES}", {}, value=SQUARES_VALUE)

        return {"ptc-engine": ptc, LOCAL: local, "Monty": monty, "pyeryx": eryx_, "CPython exec": native}


async def measure(case, runs, *, quiet, back_to_back=0, warm=3):
    """({engine: median seconds}, {engine: median of what its timed runs returned, where they
    returned something}): `runs` rounds, each timing one run per engine, in an order shuffled
    each round (so that no engine always follows the same one, whose background work may spill
    over); each timed run after `quiet` seconds of sleep, or straight after `back_to_back`
    untimed runs of the same engine, one after another."""
    for fn in case.values():
        for _ in range(warm):
            await fn()
    order = random.Random(1)
    times = {name: [] for name in case}
    returned = {name: [] for name in case}
    for _ in range(runs):
        names = list(case)
        order.shuffle(names)
        for name in names:
            for _ in range(back_to_back):
                await case[name]()
            if not back_to_back:
                await asyncio.sleep(quiet)
            start = time.perf_counter()
            out = await case[name]()
            times[name].append(time.perf_counter() - start)
            if out is not None:
                returned[name].append(out)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return medians, {name: statistics.median(r) for name, r in returned.items() if r}


def fmt(seconds):
    """Two or three significant digits, in µs, ms or s."""
    if seconds is None:
        return "—"
    for unit, scale in (("µs", 1e6), ("ms", 1e3), ("s", 1)):
        if seconds * scale < 1000 or unit == "s":
            value = seconds * scale
            return f"{value:.3g} {unit}" if value >= 1 else f"{value:.2f} {unit}"


def ratio(ptc, monty):
    if ptc is None or monty <= 0:
        return "—"
    r = ptc / monty
    return f"{r:.2g}×" if r < 10 else f"{r:.0f}×"


def commit():
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:50051", help="the ptc-engine server (gRPC)")
    parser.add_argument("--runs", type=int, default=200, help="timed runs per engine of each small case")
    parser.add_argument("--cpu-runs", type=int, default=7, help="timed runs per engine of the CPU-bound case")
    parser.add_argument("--quiet-ms", type=float, default=5.0, help="quiet before each timed run")
    args = parser.parse_args()
    quiet = args.quiet_ms / 1e3

    async with contextlib.AsyncExitStack() as stack:
        e = await Engines().open(stack, args.url)
        rows = []  # (label, {engine: seconds}, {engine: ptc-engine's server time}, native meaningful)
        spaced = await measure(e.fresh_pass(), args.runs, quiet=quiet)
        rows.append((f"fresh `pass`, after {args.quiet_ms:g} ms of quiet", *spaced, True))
        # The fourth of four in a row: the instances made ahead (ptc-engine keeps 2, pyeryx 1) are
        # used up, and both make more only in idle time.
        b2b = await measure(e.fresh_pass(), args.runs, quiet=quiet, back_to_back=3)
        rows.append(("fresh `pass`, back to back (4th in a row)", *b2b, False))
        rows.append(("`pass` in a live session", *await measure(e.session_pass(), args.runs, quiet=quiet), True))
        one, one_server = await measure(e.tool_calls(1), args.runs, quiet=quiet)
        ten, ten_server = await measure(e.tool_calls(10), args.runs, quiet=quiet)
        rows.append(("1 tool call (`add`), fresh", one, one_server, True))
        rows.append(("10 sequential tool calls, fresh", ten, ten_server, True))
        per_round = {name: (ten[name] - one[name]) / 9 for name in one}
        per_round_server = {name: (ten_server[name] - one_server[name]) / 9 for name in one_server}
        rows.append(("**per tool round**, (t10 − t1) / 9", per_round, per_round_server, True))
        squares = await measure(e.squares(), args.cpu_runs, quiet=quiet, warm=1)
        rows.append((f"CPU-bound `{SQUARES}` ({args.cpu_runs} runs)", *squares, True))

    print(f"### ptc-engine, Monty and pyeryx side by side ({args.runs} runs each, alternating; medians)\n")
    print(
        "| case | ptc-engine in process (engine) | ptc-engine over gRPC (server) | Monty (worker process) "
        "| pyeryx (in process) | CPython `exec` (floor) | in process / Monty | gRPC / Monty |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, t, server, native in rows:
        local, ptc = t[LOCAL], t["ptc-engine"]
        cells = [
            f"{fmt(local)} ({fmt(server.get(LOCAL))})",
            f"{fmt(ptc)} ({fmt(server.get('ptc-engine'))})",
            fmt(t["Monty"]),
            fmt(t["pyeryx"]),
            fmt(t["CPython exec"] if native else None),
        ]
        print(f"| {label} | {' | '.join(cells)} | {ratio(local, t['Monty'])} | {ratio(ptc, t['Monty'])} |")

    print(
        "\nIn brackets: the engine's own time for the execution (`result.stats.wall_time_s`); the rest "
        "is the Python client (over gRPC: and the wire on loopback and the wake-ups between the two processes)."
    )
    print(
        f"\npyeryx with a plain `Sandbox(callbacks=...)` instead of a `SandboxFactory`'s sandbox: "
        f"1 call {fmt(one[EXTRA])}, 10 calls {fmt(ten[EXTRA])}, per round {fmt(per_round[EXTRA])}."
    )
    once = "; ".join(f"{what} {fmt(seconds)}" for what, seconds in e.setup.items())
    print(f"\nOne-off costs (once per process, not in the table): {once}.")
    versions = ", ".join(
        f"{dist} {importlib.metadata.version(dist)}" for dist in ("pydantic-monty", "pyeryx", "ptc-engine")
    )
    print(
        f"\n{datetime.date.today().isoformat()}, host Python {platform.python_version()}, {versions} "
        f"(client; server at {args.url}, checkout {commit()}), {os.cpu_count()} cores, {platform.machine()}."
    )


if __name__ == "__main__":
    asyncio.run(main())
    # pydantic-monty 1.4.0's AsyncMonty aborts the interpreter as it finalises (SIGABRT in its
    # native teardown, even after a clean `async with`): leave without finalising, so that the
    # exit status is the bench's own.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
