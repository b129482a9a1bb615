"""FastMCP's `CodeMode` with `PtcSandboxProvider`, driven as FastMCP's own tests drive it: an
in-memory `Client` calls the `execute` tool the transform adds; the program calls the server's
tools through `call_tool`, which FastMCP runs on the host."""

import asyncio
import json

import pytest
from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.experimental.transforms.code_mode import CodeMode

from ptc_engine.integrations.fastmcp import PtcSandboxProvider


def server(url, key, **options):
    mcp = FastMCP("shop", transforms=[CodeMode(sandbox_provider=PtcSandboxProvider(url, api_key=key, **options))])
    both_started = {"price": asyncio.Event(), "stock": asyncio.Event()}

    async def meet(me: str) -> None:
        # Each call waits for the other: they finish only when FastMCP runs them at once.
        both_started[me].set()
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in both_started.values())), 10)

    @mcp.tool
    async def price(sku: str) -> float:
        """The price of an item."""
        await meet("price")
        return {"A1": 9.5, "B2": 4.25}[sku]

    @mcp.tool
    async def stock(sku: str) -> dict:
        """How many of an item are left."""
        await meet("stock")
        return {"sku": sku, "left": 3}

    @mcp.tool
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"refused: {reason}")

    return mcp


async def execute(mcp, code):
    async with Client(mcp) as client:
        return await client.call_tool("execute", {"code": code}, raise_on_error=False)


async def test_a_program_gathers_two_tools_and_its_printed_output_comes_back(url, key, sandboxes):
    code = (
        "import asyncio\n"
        "p, s = await asyncio.gather(call_tool('price', {'sku': 'A1'}), call_tool('stock', {'sku': 'A1'}))\n"
        "print(f\"{s['left']} left at {p['result']}\")\n"
    )
    result = await execute(server(url, key), code)
    assert not result.is_error, result
    assert result.content[0].text == "3 left at 9.5\n"
    # Given `sandbox=url`, the integration made its own Sandbox: in this process when `url` is None.
    assert {s.url for s in sandboxes} == {url or "in-process"}, sandboxes


async def test_the_last_expression_is_the_result_as_with_monty(url, key):
    mcp = server(url, key)
    result = await execute(mcp, "import asyncio\nr = await asyncio.gather(call_tool('price', {'sku': 'B2'}), call_tool('stock', {'sku': 'B2'}))\n{'price': r[0]['result'], 'left': r[1]['left']}")
    assert json.loads(result.content[0].text) == {"price": 4.25, "left": 3}
    result = await execute(mcp, "x = 2\nreturn x * 21")
    assert json.loads(result.content[0].text) == 42


async def test_what_monty_refuses_runs_here(url, key):
    # Classes with inheritance, generators, match, the standard library: all CPython.
    code = (
        "import statistics, dataclasses\n"
        "class Base:\n    def name(self): return type(self).__name__\n"
        "@dataclasses.dataclass\nclass Item(Base):\n    sku: str\n"
        "def gen():\n    yield from ('A1', 'B2')\n"
        "match [Item(s) for s in gen()]:\n    case [first, *rest]: n = first.name()\n"
        "[n, statistics.mean([1, 2, 3])]"
    )
    result = await execute(server(url, key), code)
    assert json.loads(result.content[0].text) == ["Item", 2]


async def test_a_failing_tool_reaches_the_program_in_fastmcps_words(url, key):
    code = (
        "try:\n    await call_tool('fail', {'reason': 'closed'})\nexcept Exception as e:\n    first = str(e)\n"
        "try:\n    await call_tool('nope', {})\nexcept Exception as e:\n    second = str(e)\n"
        "[first, second]"
    )
    result = await execute(server(url, key), code)
    first, second = json.loads(result.content[0].text)
    assert first.startswith("call_tool('fail') failed: ") and "refused: closed" in first, first
    assert second == "Unknown tool: nope"


async def test_a_failing_program_is_a_tool_error_with_its_traceback_and_line_numbers(url, key):
    result = await execute(server(url, key), "print('before')\nx = 1\n1 / 0\n")
    assert result.is_error
    text = result.content[0].text
    assert "before" in text and "ZeroDivisionError: division by zero" in text
    assert 'File "<code>", line 3' in text, text


async def test_inputs_are_globals_and_line_numbers_stay_the_models(url, key):
    provider = PtcSandboxProvider(url, api_key=key)
    assert await provider.run("total = a + b['c']\ntotal", inputs={"a": 1, "b": {"c": 2}}) == 3
    with pytest.raises(ToolError) as raised:
        await provider.run("x = a\nraise ValueError(x)", inputs={"a": "line\nbreak"})
    assert 'File "<code>", line 2' in str(raised.value), str(raised.value)


async def test_a_program_gets_the_rounds_fastmcp_budgets_calls_for(url, key):
    # The server's default is 20 rounds; FastMCP counts calls (here: none).
    mcp = FastMCP("loop", transforms=[CodeMode(sandbox_provider=PtcSandboxProvider(url, api_key=key), max_tool_calls=None)])

    @mcp.tool
    def ping() -> str:
        """Pong."""
        return "pong"

    result = await execute(mcp, "n = 0\nfor _ in range(60):\n    n += (await call_tool('ping', {}))['result'] == 'pong'\nn")
    assert json.loads(result.content[0].text) == 60, result


async def test_a_call_never_awaited_is_told_not_passed_off_as_success(url, key):
    result = await execute(server(url, key), "print(call_tool('price', {'sku': 'A1'}))")
    text = result.content[0].text
    assert "<coroutine object" in text and "[stderr]" in text and "never awaited" in text, text


def test_a_timeout_no_server_takes_is_refused_when_made():
    with pytest.raises(ValueError, match="between 1 and 300 seconds"):
        PtcSandboxProvider(timeout=0.1)


async def test_limits_apply_and_the_model_is_told_what_to_do(url, key):
    result = await execute(server(url, key, timeout=1.5), "import time\nwhile True: time.sleep(0.01)")
    assert result.is_error
    assert "Execution timeout after 1500 ms: the deadline counts the time tools take too" in result.content[0].text


async def test_what_the_model_sees_and_what_you_see(url, key):
    # docs/fastmcp.md: a failed program is FastMCP's ToolError, shown whatever the masking; a
    # server that cannot be reached is an exception FastMCP shows the client (and its model)
    # as "Error calling tool 'execute': ..." and logs, or only the first words when it masks.
    nowhere = "http://127.0.0.1:9"
    result = await execute(server(nowhere, key), "1 + 1")
    assert result.is_error
    assert result.content[0].text.startswith(
        "Error calling tool 'execute': cannot reach the ptc-engine server at http://127.0.0.1:9"
    ), result.content[0].text
    masked = FastMCP("m", transforms=[CodeMode(sandbox_provider=PtcSandboxProvider(nowhere))], mask_error_details=True)
    result = await execute(masked, "1 + 1")
    assert result.is_error and result.content[0].text == "Error calling tool 'execute'", result.content[0].text
    masked = FastMCP("m", transforms=[CodeMode(sandbox_provider=PtcSandboxProvider(url, api_key=key))], mask_error_details=True)
    result = await execute(masked, "raise ValueError('boom')")
    assert result.is_error and "ValueError: boom" in result.content[0].text, result.content[0].text
