"""PSS per paused live execution: N programs held waiting on a tool against a running server,
the server's PSS (`/proc/PID/smaps_rollup`) before and while they wait. Start the server with
hibernation off (`ptc-engine serve --hibernate-after-ms 0`, with `--component
target/js-probe/js.wasm` for the probe), then:

    python runtime-js-wasm/probe/paused_pss.py URL N SERVER_PID PROGRAM [RUNTIME]

where PROGRAM awaits `hold` once, e.g. `const x = 'state'.repeat(100); return await
hold({i: 1}) + x.length`, or for the Python component `x = "state" * 100` and `return await
hold(i=1) + len(x)` on two lines; RUNTIME (`javascript`) names the server's embedded
JavaScript runtime instead of its default."""

import asyncio
import sys


def pss(pid: str) -> int:
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError("no Pss line")


async def main(url: str, n: int, pid: str, code: str, runtime: str | None) -> None:
    from ptc_engine import Sandbox

    sandbox = Sandbox(url)
    gate = asyncio.Event()
    arrived = [0]

    async def hold(i: int) -> int:
        """Answers `i` once the measurement is taken."""
        arrived[0] += 1
        await gate.wait()
        return i

    gate.set()
    await sandbox.run(code, [hold], runtime=runtime)  # the server's first instance and compiled code
    await asyncio.sleep(0.5)
    gate.clear()
    arrived[0] = 0
    before = pss(pid)
    runs = [asyncio.create_task(sandbox.run(code, [hold], runtime=runtime)) for _ in range(n)]
    while arrived[0] < n:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    held = pss(pid)
    gate.set()
    results = await asyncio.gather(*runs)
    ok = all(r.return_value is not None for r in results)
    print(f"N={n} PSS before {before} KiB, paused {held} KiB: {(held - before) / n:.0f} KiB per paused execution; all ended right: {ok}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None))
