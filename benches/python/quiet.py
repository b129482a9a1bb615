"""What quiet costs the in-process engine: a live session's `pass` through `Sandbox()`, timed
after a pause of each length, once with the caller's thread asleep in the pause
(`asyncio.sleep`, as an agent between two requests) and once with it kept busy (a spin), so that
the difference is what waking idle threads and CPUs costs. Medians of the whole call and, in
brackets, of the engine's own time (`result.stats.wall_time_s`).

Run it in a venv with the package's wheel (`just wheel`), e.g. the peers bench's:
`target/bench-venvs/peers/bin/python benches/python/quiet.py [--runs 150]`."""

import argparse
import asyncio
import statistics
import time

from ptc_engine import Sandbox

PAUSES_MS = (0, 0.2, 1, 2, 5)


async def main(runs: int) -> None:
    async with Sandbox().session() as session:
        await session.run("x = 1")
        print("| pause | caller asleep | caller busy |\n| --- | --- | --- |")
        for pause_ms in PAUSES_MS:
            cells = []
            for asleep in (True, False):
                whole, engine = [], []
                for _ in range(runs):
                    if pause_ms and asleep:
                        await asyncio.sleep(pause_ms / 1000)
                    elif pause_ms:
                        end = time.perf_counter() + pause_ms / 1000
                        while time.perf_counter() < end:
                            pass
                    started = time.perf_counter()
                    result = await session.run("pass")
                    whole.append(time.perf_counter() - started)
                    engine.append(result.stats.wall_time_s)
                cells.append(f"{statistics.median(whole) * 1e6:.0f} µs ({statistics.median(engine) * 1e6:.0f} µs)")
            print(f"| {pause_ms} ms | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=150, help="timed calls per pause and way of pausing")
    asyncio.run(main(parser.parse_args().runs))
