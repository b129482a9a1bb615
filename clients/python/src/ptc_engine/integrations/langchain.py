"""LangChain (and LangGraph) on ptc-engine: `ptc_code_tool(tools)`, one LangChain tool that
runs the model's Python program with `tools` as `async` functions, the contract of
LibreChat's `run_tools_with_code`.

    from langchain.agents import create_agent
    from ptc_engine.integrations.langchain import ptc_code_tool

    agent = create_agent(model, tools=[ptc_code_tool([search, fetch], sandbox="http://127.0.0.1:50051")])

In the program each tool is `await name(arg=value)` (names normalised: `get-weather` is
`get_weather`); its input is checked against the tool's schema before it leaves the sandbox;
the tool runs on the host through `ainvoke` with the outer call's callbacks; its result
arrives decoded (a dict or list if it is JSON text, else the text). Only what the program
prints comes back (and stderr, if it wrote any); a failed program is a `ToolException`, which
the tool hands the model as an error `ToolMessage`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from .. import Limits, Sandbox
from .._errors import ExecutionError
from .._tools import Tool, ToolFailure
from ._common import checked_timeout, limits_with_rounds, sandbox_of
from ._program import failure_text, printed

__all__ = ["ptc_code_tool"]

DEFAULT_NAME = "run_tools_with_code"

DEFAULT_DESCRIPTION = """Run tools via Python code: the tools are async functions, and the code runs in an async context, so use `await` directly (no main(), no asyncio.run()).

Each call is a fresh Python interpreter (CPython 3.14, the whole standard library, no network): do the whole workflow in one block, query -> process -> output.

Rules:
- Tools are pre-defined: do not write function definitions for them
- Call tools with keyword arguments: `await tool(arg=value)`
- Tool results are decoded Python values (dict/list/str); a failed tool raises ToolError
- Only print() output returns to you
- Tool names are normalised: hyphens become underscores

Example (parallel calls):
  sf, ny = await asyncio.gather(get_weather(city="SF"), get_weather(city="NY"))
  print(f"SF: {sf}, NY: {ny}")"""


def _decoded(output: Any) -> Any:
    """A tool's output as the program gets it: JSON text (an object or array) decoded."""
    if isinstance(output, str) and output[:1] in "[{":
        with contextlib.suppress(ValueError):
            return json.loads(output)
    content = getattr(output, "content", None)  # a ToolMessage, from a tool returning one
    return _decoded(content) if content is not None else output


def _parameters(tool_obj: BaseTool) -> dict[str, Any]:
    parameters = convert_to_openai_tool(tool_obj)["function"].get("parameters") or {}
    return dict(parameters)


def ptc_code_tool(
    tools: Sequence[BaseTool],
    *,
    sandbox: Sandbox | str | None = None,
    api_key: str | None = None,
    name: str = DEFAULT_NAME,
    description: str = DEFAULT_DESCRIPTION,
    timeout: float | None = None,
    limits: Limits | None = None,
    runtime: str | None = None,
) -> StructuredTool:
    """A LangChain tool running the model's program on ptc-engine over `tools`.

    `sandbox`: a `Sandbox`, or the server's URL (default `PTC_ENGINE_URL`, else the engine in
    this process, as `Sandbox()`) with `api_key` (default `PTC_ENGINE_API_KEY`). `timeout`
    (seconds for the whole program, tool calls included), `limits`, `runtime` (`"python"` or
    `"python-data"`)."""
    server = sandbox_of(sandbox, api_key)
    timeout = checked_timeout(timeout)
    limits = limits_with_rounds(limits)
    offered = list(tools)
    names = [t.name for t in offered]
    if len(set(names)) != len(names):
        raise ValueError(f"two tools share a name: {sorted(n for n in set(names) if names.count(n) > 1)}")

    def handler(tool_obj: BaseTool, config: RunnableConfig | None) -> Any:
        async def call(**kwargs: Any) -> Any:
            try:
                return _decoded(await tool_obj.ainvoke(kwargs, config=config))
            except Exception as e:
                raise ToolFailure(str(e) or type(e).__name__) from e

        return call

    async def run_tools_with_code(code: str, config: RunnableConfig) -> str:
        wired = [
            Tool(name=t.name, handler=handler(t, config), description=t.description, parameters=_parameters(t))
            for t in offered
        ]
        try:
            result = await server.run(code, wired, timeout=timeout, limits=limits, runtime=runtime)
        except ExecutionError as e:
            raise ToolException(failure_text(e)) from None
        return printed(result) or "(no output)"

    return StructuredTool.from_function(
        coroutine=run_tools_with_code,
        name=name,
        description=description,
        handle_tool_error=True,
    )
