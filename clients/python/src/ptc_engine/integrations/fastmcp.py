"""FastMCP's code mode on ptc-engine: a `SandboxProvider` for `CodeMode`.

    from fastmcp import FastMCP
    from fastmcp.experimental.transforms.code_mode import CodeMode
    from ptc_engine.integrations.fastmcp import PtcSandboxProvider

    mcp = FastMCP("tools", transforms=[CodeMode(sandbox_provider=PtcSandboxProvider("http://127.0.0.1:50051"))])

FastMCP's contract (`fastmcp/experimental/transforms/code_mode.py`): `run(code, inputs=...,
external_functions=...)` runs `code` with `inputs` as globals and each external function (for
`CodeMode`, `call_tool(tool_name, params)`) callable as `await name(...)`, and returns the
program's `return` value or the value of its last expression. Here the program runs on full
CPython; when it returns nothing but prints, its printed text is the result (Monty would drop
it). A failed program raises FastMCP's `ToolError` with the traceback, which FastMCP shows the
model as the tool's error; an exception an external function raises reaches the program as a
`ToolError` carrying its message unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastmcp.exceptions import ToolError

from .. import Limits, Sandbox
from .._errors import ExecutionError
from .._tools import Tool
from ._common import checked_timeout, limits_with_rounds, passing_messages, sandbox_of
from ._program import failure_text, printed, returning_last_expression, with_globals

__all__ = ["PtcSandboxProvider"]


class PtcSandboxProvider:
    """Runs FastMCP `CodeMode` programs on a ptc-engine server.

    `sandbox`: a `Sandbox`, or the server's URL (default `PTC_ENGINE_URL`, else the engine in
    this process, as `Sandbox()`) with `api_key` (default `PTC_ENGINE_API_KEY`). `timeout` (seconds,
    tool calls included), `limits` and `runtime` (`"python"` or `"python-data"`) apply to every
    program. Programs get up to 1000 rounds of tool calls unless `limits` says otherwise (the
    server's default is 20; FastMCP's own `max_tool_calls` still counts calls)."""

    def __init__(
        self,
        sandbox: Sandbox | str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        runtime: str | None = None,
    ) -> None:
        self.sandbox = sandbox_of(sandbox, api_key)
        self.timeout = checked_timeout(timeout)
        self.limits = limits_with_rounds(limits)
        self.runtime = runtime

    async def run(
        self,
        code: str,
        *,
        inputs: dict[str, Any] | None = None,
        external_functions: dict[str, Callable[..., Any]] | None = None,
    ) -> Any:
        tools = [
            Tool.from_function(passing_messages(fn), name=name) for name, fn in (external_functions or {}).items()
        ]
        program, shift = with_globals(returning_last_expression(code), inputs or {})
        try:
            result = await self.sandbox.run(
                program, tools, timeout=self.timeout, limits=self.limits, runtime=self.runtime
            )
        except ExecutionError as e:
            raise ToolError(failure_text(e, shift)) from None
        if result.return_value is not None:
            return result.return_value
        return printed(result) or None

