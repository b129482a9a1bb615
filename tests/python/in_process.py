"""The engine in this process (`ptc_engine._native`), driven as a user drives it: `Sandbox()`
with no URL. Run by tests/tests/all/python_client.rs in a venv with the client's wheel and no
Rust toolchain on PATH; prints `ok` at the end, and fails with an assertion saying what broke
otherwise.
"""

import asyncio
import os
import socket
import time

from ptc_engine import ExecutionTimeout, Limits, MemoryLimitError, PtcError, Sandbox, ToolFailure


def sockets() -> set[int]:
    """The inodes of this process's TCP and UDP sockets (its asyncio self-pipe is AF_UNIX)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(int(target[len("socket:[") : -1]))
    inet = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"/proc/self/net/{table}") as f:
            for line in f.readlines()[1:]:
                inet.add(int(line.split()[9]))
    return mine & inet


def children() -> list[str]:
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            found += f.read().split()
    return found


def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


async def double(x: int) -> int:
    """Doubles `x`, after a while."""
    await asyncio.sleep(0.05)
    return 2 * x


def broken(x: int) -> int:
    """Always fails."""
    raise ToolFailure(f"no luck with {x}")


async def main() -> None:
    sb = Sandbox()
    assert sb.url == "in-process", sb.url

    # The first run, with an empty cache of its own (the test gives this process one): the
    # engine loads the component the wheel ships compiled ahead, instead of compiling it.
    started = time.perf_counter()
    assert (await sb.run("print('first')")).stdout == "first\n"
    took = time.perf_counter() - started
    cache = os.path.join(os.environ["XDG_CACHE_HOME"], "ptc-engine")
    compiled = [name for name in os.listdir(cache) if name.startswith("sandbox-")]
    assert len(compiled) == 1 and "-ahead-" in compiled[0], f"the cache after the first run: {compiled}"
    print(f"the first run with an empty cache took {took:.2f} s")

    # Tools, and a gather of three calls answered concurrently in one round.
    code = "import asyncio\nprint(await add(a=1, b=2))\nprint(await asyncio.gather(*[double(x=i) for i in range(3)]))"
    result = await sb.run(code, tools=[add, double])
    assert result.stdout == "3\n[0, 2, 4]\n", result.stdout
    assert result.stats.round_trips == 2, result.stats
    assert [c.name for c in result.tool_calls].count("double") == 3

    # A tool that raises: the program gets a ToolError with its message.
    result = await sb.run(
        "try:\n    await broken(x=7)\nexcept ToolError as e:\n    print('caught', e)", tools=[broken]
    )
    assert "caught no luck with 7" in result.stdout, result.stdout

    # A runaway program, and one past its memory limit: clear errors, and the process goes on.
    try:
        await sb.run("while True:\n    pass", timeout=1.0)
        raise AssertionError("a runaway program ended")
    except ExecutionTimeout as e:
        assert "time" in str(e).lower(), e
    try:
        await sb.run("x = bytearray(400 * 1024 * 1024)", limits=Limits(max_memory_bytes=64 << 20))
        raise AssertionError("a program past its memory limit ended")
    except MemoryLimitError as e:
        assert "memory" in str(e).lower(), e

    # A program that traps the sandbox (C's abort) fails with an error; this process goes on.
    try:
        await sb.run("import os\nos.abort()")
        raise AssertionError("an aborted program ended")
    except PtcError as e:
        assert "trapped" in str(e), e

    # A cancelled caller task cancels the execution; the engine keeps working.
    task = asyncio.ensure_future(sb.run("import time\nwhile True:\n    time.sleep(0.01)", timeout=30.0))
    await asyncio.sleep(0.5)
    task.cancel()
    try:
        await task
        raise AssertionError("the cancelled run ended")
    except asyncio.CancelledError:
        pass

    # A live session keeps its globals.
    async with sb.session() as session:
        await session.run("n = 41")
        assert (await session.run("print(n + 1)")).stdout == "42\n"

    # In process means in process: no other process, and no TCP or UDP socket.
    assert children() == [], children()
    assert sockets() == set(), sockets()
    # The check can see one: a socket this process opens shows.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        probe.listen()
        assert sockets(), "a listening socket is invisible to the check"


asyncio.run(main())

# The blocking twin, from code without an event loop.
with Sandbox() as sb:
    assert sb.run_sync("print(await add(a=2, b=3))", tools=[add]).stdout == "5\n"
print("ok")
