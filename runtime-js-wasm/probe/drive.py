"""Drives the probe guest through a server, with the Python client: the programs below, each
with what it printed, its value or its error, its rounds and its time. Start the server with
the probe first (`build.sh`, then `ptc-engine serve --component target/js-probe/js.wasm`), and
run this in a venv with the package's wheel:

    python runtime-js-wasm/probe/drive.py [http://127.0.0.1:50051]

Which of them hibernated the server's log says (`PTC_LOG=ptc_engine=debug`), and its metrics
(`ptc_hibernate_seconds_count`, `ptc_thaw_seconds_count`)."""

import asyncio
import sys
import time

from ptc_engine import Sandbox, ToolFailure

PROGRAMS = [
    "1+1",
    "const [a, b, c] = await Promise.all([add({a: 1, b: 2}), add({a: 3, b: 4}), add({a: 5, b: 6})]);\n"
    "console.log('sum', a + b + c); a + b + c",
    "let t = 0; for (let i = 0; i < 10; i++) t = await add({a: t, b: i}); return t",
    "try { await boom({reason: 'x'}) } catch (e) { console.log(e.name, e.message, e instanceof ToolError) }; 'caught'",
    "await boom({reason: 'uncaught'})",
    "const x = ;",
    "throw new TypeError('mine')",
    "await new Promise(() => {})",
    "const t0 = Date.now(); await new Promise(r => setTimeout(r, 300)); Date.now() - t0 >= 290",
    "const id = setTimeout(() => console.log('never'), 50); clearTimeout(id); await slow({s: 0.2}); 'cleared'",
    "setTimeout(() => { throw new RangeError('in a timer') }, 10); await slow({s: 0.3}); 'not reached'",
    # Past the server's --hibernate-after-ms (1 s by default): a pending call, then a timer too.
    "console.log('before'); const r = await slow({s: 2.5}); console.log('after', r); r",
    "const t0 = Date.now(); setTimeout((x) => console.log('timer', x, Date.now() - t0), 3000, 'a');\n"
    "const r = await slow({s: 5}); console.log(r, Date.now() - t0); 'done'",
]


async def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def slow(s: float) -> str:
    """Answers after `s` seconds."""
    await asyncio.sleep(s)
    return f"slept {s}"


def boom(reason: str) -> str:
    """Fails, saying why."""
    raise ToolFailure(f"no: {reason}")


async def main(url: str) -> None:
    sandbox = Sandbox(url)
    for code in PROGRAMS:
        started = time.perf_counter()
        shown = code.replace("\n", " ")[:60]
        try:
            r = await sandbox.run(code, [add, slow, boom])
            took = (time.perf_counter() - started) * 1e3
            out = r.stdout.strip().replace("\n", " / ")
            print(f"{shown!r} -> {r.return_value!r} | printed: {out!r} | rounds {r.stats.round_trips} | {took:.0f} ms")
        except Exception as e:
            print(f"{shown!r} => {type(e).__name__}: {str(e)[:200]!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:50051"))
