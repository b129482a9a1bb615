"""Code mode side by side: FastMCP's `CodeMode` running the same 10-call program in Monty
(`MontySandboxProvider`, pydantic-monty) and in ptc-engine (`PtcSandboxProvider`), and the
Python client's own cost per tool round against a raw grpcio client of the same server.

`just bench-python` runs it (it starts a release server and makes the venv); by hand:
`python codemode.py --url http://127.0.0.1:50051 [--runs 40]`. Runs of A and B alternate, so
that the machine's noise falls on both; medians and ratios are printed as a Markdown table."""

import argparse
import asyncio
import json
import statistics
import time

import grpc.aio
from fastmcp import Client, FastMCP
from fastmcp.experimental.transforms.code_mode import CodeMode, MontySandboxProvider

from ptc_engine import Limits, Sandbox, Tool
from ptc_engine._wire import tool as _wire
from ptc_engine._proto import sandbox_pb2 as pb
from ptc_engine.integrations.fastmcp import PtcSandboxProvider

# Ten calls: five one after another (five rounds), then five gathered (one round).
PROGRAM = """
total = 0
for i in range(5):
    total += (await call_tool("add", {"a": total, "b": i}))["result"]
rows = await asyncio.gather(*[call_tool("add", {"a": i, "b": i}) for i in range(5)])
return total + sum(r["result"] for r in rows)
"""
PROGRAM_MONTY = "import asyncio\n" + PROGRAM
EXPECTED = 46


def server(provider):
    mcp = FastMCP("bench", transforms=[CodeMode(sandbox_provider=provider)])

    @mcp.tool
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    return mcp


async def timed(fn, runs):
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - start)
    return out


async def alternate(cases, runs, warm=3):
    """{name: [seconds]}, the cases run in turn one at a time, after `warm` runs each."""
    for fn in cases.values():
        for _ in range(warm):
            await fn()
    times = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            times[name] += await timed(fn, 1)
    return times


def ms(seconds):
    return f"{statistics.median(seconds) * 1e3:.2f} ms"


async def fastmcp_cases(url, key):
    monty = server(MontySandboxProvider())
    ptc = server(PtcSandboxProvider(url, api_key=key))
    # No URL (and no PTC_ENGINE_URL, which run.sh unsets): the engine in this process.
    local_provider = PtcSandboxProvider()
    assert local_provider.sandbox.url == "in-process", local_provider.sandbox.url
    local = server(local_provider)
    monty_provider = MontySandboxProvider()
    ptc_provider = PtcSandboxProvider(url, api_key=key)

    async def call_tool(tool_name: str, params: dict) -> dict:
        return {"result": params["a"] + params["b"]}

    async def through(mcp, code):
        async with Client(mcp) as client:
            result = await client.call_tool("execute", {"code": code})
        assert json.loads(result.content[0].text) == EXPECTED, result

    async def provider(p, code):
        assert await p.run(code, external_functions={"call_tool": call_tool}) == EXPECTED

    return {
        "FastMCP execute, Monty": lambda: through(monty, PROGRAM_MONTY),
        "FastMCP execute, ptc-engine": lambda: through(ptc, PROGRAM),
        "FastMCP execute, in process": lambda: through(local, PROGRAM),
        "provider.run, Monty": lambda: provider(monty_provider, PROGRAM_MONTY),
        "provider.run, ptc-engine": lambda: provider(ptc_provider, PROGRAM),
        "provider.run, in process": lambda: provider(local_provider, PROGRAM),
    }


async def raw_run(stub, metadata, code, tools, rounds_answer):
    """A hand-written client: Start (with the very tool definitions the library sends), answer
    every call at once with `rounds_answer`, read to the end."""
    call = stub.Execute(metadata=metadata)
    start = pb.Start(code=code, tools=tools, limits=pb.Limits(max_round_trips=200))
    await call.write(pb.ClientMessage(start=start))
    while True:
        message = await call.read()
        kind = message.WhichOneof("message")
        if kind == "tool_calls":
            results = [pb.ToolResult(call_id=c.id, result_json=rounds_answer) for c in message.tool_calls.calls]
            await call.write(pb.ClientMessage(tool_results=pb.ToolResults(results=results)))
        elif kind in ("completed", "failed"):
            assert kind == "completed", message
            call.cancel()
            return


async def client_cases(url, key):
    target = url.removeprefix("http://")
    channel = grpc.aio.insecure_channel(target)
    # The one method the raw client calls, without generated gRPC stubs (the package has none).
    stub = argparse.Namespace(
        Execute=channel.stream_stream(
            "/ptc.v1.Sandbox/Execute",
            request_serializer=pb.ClientMessage.SerializeToString,
            response_deserializer=pb.ServerMessage.FromString,
        )
    )
    metadata = (("x-api-key", key),) if key else ()
    sb = Sandbox(url, api_key=key)

    async def echo(i: int) -> dict:
        return {"ok": True}

    seq = "for i in range(100):\n    await echo(i=i)"
    limits = Limits(max_round_trips=200)
    tools = [_wire(Tool.from_function(echo))]
    return {
        "pass, raw grpcio": lambda: raw_run(stub, metadata, "pass", tools, '{"ok": true}'),
        "pass, ptc_engine.Sandbox": lambda: sb.run("pass", tools=[echo], limits=limits),
        "100 sequential calls, raw grpcio": lambda: raw_run(stub, metadata, seq, tools, '{"ok": true}'),
        "100 sequential calls, ptc_engine.Sandbox": lambda: sb.run(seq, tools=[echo], limits=limits),
    }


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:50051")
    parser.add_argument("--api-key")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()

    times = await alternate(await fastmcp_cases(args.url, args.api_key), args.runs)
    print(f"### FastMCP CodeMode, 10 tool calls in 6 rounds ({args.runs} runs each, alternating)\n")
    print(
        "| | Monty | ptc-engine in process | ptc-engine over gRPC | in process / Monty | gRPC / Monty |\n"
        "| --- | --- | --- | --- | --- | --- |"
    )
    for what in ("FastMCP execute", "provider.run"):
        m, l, p = times[f"{what}, Monty"], times[f"{what}, in process"], times[f"{what}, ptc-engine"]
        ratios = " | ".join(f"{statistics.median(x) / statistics.median(m):.2f}×" for x in (l, p))
        print(f"| {what} | {ms(m)} | {ms(l)} | {ms(p)} | {ratios} |")

    times = await alternate(await client_cases(args.url, args.api_key), args.runs)
    print(f"\n### The client's own cost ({args.runs} runs each, alternating)\n")
    print("| program | raw grpcio | ptc_engine.Sandbox | difference |\n| --- | --- | --- | --- |")
    for what in ("pass", "100 sequential calls"):
        r, s = times[f"{what}, raw grpcio"], times[f"{what}, ptc_engine.Sandbox"]
        diff = statistics.median(s) - statistics.median(r)
        print(f"| {what} | {ms(r)} | {ms(s)} | {diff * 1e3:+.2f} ms |")
    r = statistics.median(times["100 sequential calls, raw grpcio"]) - statistics.median(times["pass, raw grpcio"])
    s = statistics.median(times["100 sequential calls, ptc_engine.Sandbox"]) - statistics.median(times["pass, ptc_engine.Sandbox"])
    print(f"\nPer tool round: raw grpcio {r * 1e4:.0f} µs, ptc_engine.Sandbox {s * 1e4:.0f} µs "
          f"(the library's own: {(s - r) * 1e4:+.0f} µs).")


if __name__ == "__main__":
    asyncio.run(main())
