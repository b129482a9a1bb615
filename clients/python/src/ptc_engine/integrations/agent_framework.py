"""Microsoft Agent Framework's CodeAct on ptc-engine: `PtcCodeActProvider` (a `ContextProvider`,
as `agent-framework-monty`'s `MontyCodeActProvider`) and `PtcExecuteCodeTool` (the
`execute_code` `FunctionTool` it injects, usable on its own).

    from agent_framework import Agent
    from ptc_engine.integrations.agent_framework import PtcCodeActProvider

    codeact = PtcCodeActProvider(tools=[get_weather, search], sandbox="http://127.0.0.1:50051")
    agent = Agent(client=client, context_providers=[codeact])

The model gets one tool, `execute_code`; in its program the provider's tools are `async`
functions (`await get_weather(city=...)`, or `await call_tool("get_weather", city=...)`), run
by Agent Framework on the host (`FunctionTool.invoke`, with its validation). The result is as
Monty's: the printed text, then the JSON of the last expression's value (or "Code executed
successfully without output."); a failed program is an error `Content` with the traceback.
The program is full CPython 3.14 (no type check before it runs: the server validates each
call's arguments against the tool's schema instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agent_framework import AgentSession, Content, ContextProvider, FunctionTool, SessionContext
from agent_framework._tools import ApprovalMode, normalize_tools

from .. import Limits, Sandbox
from .._errors import ExecutionError
from .._result import Result
from .._tools import Tool, ToolFailure
from ._common import checked_timeout, limits_with_rounds, passing_messages, sandbox_of
from ._program import failure_text, printed, returning_last_expression

__all__ = ["PtcCodeActProvider", "PtcExecuteCodeTool"]

EXECUTE_CODE_TOOL_NAME = "execute_code"

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python code to execute in the ptc-engine sandbox."}},
    "required": ["code"],
}

ToolInput = FunctionTool | Callable[..., Any]


def _collect(*groups: ToolInput | Sequence[ToolInput] | None) -> list[FunctionTool]:
    """The tools of `groups`, later ones replacing earlier ones of the same name, without
    `execute_code` itself."""
    by_name: dict[str, FunctionTool] = {}
    for group in groups:
        if group is None:
            continue
        for tool_obj in normalize_tools(group):
            if isinstance(tool_obj, FunctionTool) and tool_obj.name != EXECUTE_CODE_TOOL_NAME:
                by_name.pop(tool_obj.name, None)
                by_name[tool_obj.name] = tool_obj
    return list(by_name.values())


def _summaries(tools: Sequence[FunctionTool]) -> str:
    if not tools:
        return "- No tools are currently registered."
    lines = []
    for tool_obj in tools:
        description = str(tool_obj.description or "").strip() or "No description provided."
        lines.append(f"- `{tool_obj.name}`: {description}")
        lines.append(f"  Parameters (JSON Schema): `{json.dumps(tool_obj.parameters(), ensure_ascii=False)}`")
    return "\n".join(lines)


_HOW = """Inside `execute_code`, call registered tools directly as async functions:
`result = await tool_name(param=value)`. Always use `await`. `await call_tool('name', **kwargs)`
also works. A call whose arguments do not fit the tool's parameters raises `ToolError` before the
tool runs; a tool that fails raises `ToolError` with its message.

For fan-out, use `asyncio.gather`:
`results = await asyncio.gather(tool_a(...), tool_b(...))`.

The code runs in CPython 3.14 with the whole standard library (classes, generators, `match`,
dataclasses, statistics, ...) in a sandbox without network; files written to `/mnt/data` last
for the call only.

Surface results via `print(...)` (captured and returned as text) or by ending the code with an
expression whose value is JSON-encodable: the value of the final expression is returned after
the captured stdout."""


class PtcExecuteCodeTool(FunctionTool):
    """`execute_code`: runs the model's Python on ptc-engine with `tools` as `async` functions.

    `sandbox`: a `Sandbox`, or the server's URL (default `PTC_ENGINE_URL`, else the engine in
    this process, as `Sandbox()`) with `api_key` (default `PTC_ENGINE_API_KEY`); `timeout`
    (seconds, tool calls included), `limits` and `runtime` apply to every program. The tool
    needs approval when `approval_mode="always_require"` or any of its tools does."""

    def __init__(
        self,
        *,
        tools: ToolInput | Sequence[ToolInput] | None = None,
        approval_mode: ApprovalMode | None = None,
        sandbox: Sandbox | str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        runtime: str | None = None,
    ) -> None:
        super().__init__(
            name=EXECUTE_CODE_TOOL_NAME,
            description="Execute Python in a ptc-engine sandbox.",
            approval_mode="never_require",
            func=self._run_code,
            input_model=_INPUT_SCHEMA,
        )
        self._default_approval_mode: ApprovalMode = approval_mode or "never_require"
        self._managed_tools: list[FunctionTool] = []
        self.sandbox = sandbox_of(sandbox, api_key)
        self.timeout = checked_timeout(timeout)
        self.limits = limits_with_rounds(limits)
        self.runtime = runtime
        if tools is not None:
            self.add_tools(tools)

    @property
    def description(self) -> str:
        if not hasattr(self, "_managed_tools"):  # during FunctionTool.__init__
            return str(self.__dict__.get("description", ""))
        return (
            "Execute Python code in a ptc-engine sandbox.\n\n"
            f"{_HOW}\n\nRegistered tools:\n{_summaries(self._managed_tools)}\n"
        )

    @description.setter
    def description(self, value: str) -> None:
        self.__dict__["description"] = value

    def add_tools(self, tools: ToolInput | Sequence[ToolInput]) -> None:
        """Adds tools the program may call (replacing any of the same name)."""
        self._managed_tools = _collect(self._managed_tools, tools)
        self._refresh_approval_mode()

    def get_tools(self) -> list[FunctionTool]:
        return list(self._managed_tools)

    def remove_tool(self, name: str) -> None:
        remaining = [t for t in self._managed_tools if t.name != name]
        if len(remaining) == len(self._managed_tools):
            raise KeyError(f"No managed tool named {name!r} is registered.")
        self._managed_tools = remaining
        self._refresh_approval_mode()

    def clear_tools(self) -> None:
        self._managed_tools = []
        self._refresh_approval_mode()

    def build_instructions(self, *, tools_visible_to_model: bool) -> str:
        """CodeAct instructions for the model: how to use `execute_code`, and the tools."""
        usage = (
            "Some tools may also appear directly, but prefer `execute_code` whenever you need to combine "
            "Python control flow with tool calls."
            if tools_visible_to_model
            else "The tools are not exposed separately; use `execute_code` when you need them."
        )
        return (
            f"You have one primary tool: `execute_code`.\n\n{_HOW}\n\nRegistered tools:\n"
            f"{_summaries(self._managed_tools)}\n\nPrefer a single `execute_code` call per request when "
            f"possible, combining multiple tool calls with Python control flow.\n\n{usage}\n"
        )

    def create_run_tool(self) -> PtcExecuteCodeTool:
        """A copy for one agent run (the tools as they are now)."""
        return PtcExecuteCodeTool(
            tools=self.get_tools(),
            approval_mode=self._default_approval_mode,
            sandbox=self.sandbox,
            timeout=self.timeout,
            limits=self.limits,
            runtime=self.runtime,
        )

    def _refresh_approval_mode(self) -> None:
        needs = self._default_approval_mode == "always_require" or any(
            t.approval_mode == "always_require" for t in self._managed_tools
        )
        self.approval_mode = "always_require" if needs else "never_require"

    def _sandbox_tools(self) -> list[Tool]:
        tools = [
            Tool(
                name=t.name,
                handler=passing_messages(_invoker(t)),
                description=str(t.description or ""),
                parameters=t.parameters(),
            )
            for t in self._managed_tools
        ]
        by_name = {t.name: t for t in self._managed_tools}
        if "call_tool" not in by_name:

            async def call_tool(name: str, **kwargs: Any) -> Any:
                if name not in by_name:
                    raise ToolFailure(f"Unknown tool {name!r}; the tools are: {', '.join(sorted(by_name)) or 'none'}")
                return await by_name[name].invoke(skip_parsing=True, **kwargs)

            tools.append(
                Tool(
                    name="call_tool",
                    handler=passing_messages(call_tool),
                    description="Calls the registered tool `name` with keyword arguments.",
                    parameters={
                        "type": "object",
                        "properties": {"name": {"type": "string", "enum": sorted(by_name)}},
                        "required": ["name"],
                        "additionalProperties": True,
                    },
                )
            )
        return tools

    async def _run_code(self, *, code: str) -> list[Content]:
        try:
            result = await self.sandbox.run(
                returning_last_expression(code),
                self._sandbox_tools(),
                timeout=self.timeout,
                limits=self.limits,
                runtime=self.runtime,
            )
        except ExecutionError as e:
            return [Content.from_error(message="Execution error", error_details=failure_text(e))]
        return _contents(result)


def _invoker(tool_obj: FunctionTool) -> Callable[..., Any]:
    async def invoke(**kwargs: Any) -> Any:
        return await tool_obj.invoke(skip_parsing=True, **kwargs)

    return invoke


def _contents(result: Result) -> list[Content]:
    """As Monty's CodeAct: the printed text, then the final expression's value as JSON."""
    contents = []
    stdout = printed(result).replace("\r\n", "\n")
    if stdout or result.stats.output_truncated:
        contents.append(Content.from_text(f"{stdout}\n\n[stdout truncated]" if result.stats.output_truncated else stdout))
    if result.return_value is not None:
        contents.append(Content.from_text(json.dumps(result.return_value, ensure_ascii=False)))
    return contents or [Content.from_text("Code executed successfully without output.")]


class PtcCodeActProvider(ContextProvider):
    """Injects CodeAct backed by ptc-engine before each run: instructions, and a run-scoped
    `execute_code` tool whose programs call `tools`. Options as `PtcExecuteCodeTool`."""

    DEFAULT_SOURCE_ID = "ptc_codeact"

    def __init__(
        self,
        source_id: str = DEFAULT_SOURCE_ID,
        *,
        tools: ToolInput | Sequence[ToolInput] | None = None,
        approval_mode: ApprovalMode | None = None,
        sandbox: Sandbox | str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        runtime: str | None = None,
    ) -> None:
        super().__init__(source_id)
        self._execute_code_tool = PtcExecuteCodeTool(
            tools=tools,
            approval_mode=approval_mode,
            sandbox=sandbox,
            api_key=api_key,
            timeout=timeout,
            limits=limits,
            runtime=runtime,
        )

    def add_tools(self, tools: ToolInput | Sequence[ToolInput]) -> None:
        self._execute_code_tool.add_tools(tools)

    def get_tools(self) -> list[FunctionTool]:
        return self._execute_code_tool.get_tools()

    def remove_tool(self, name: str) -> None:
        self._execute_code_tool.remove_tool(name)

    def clear_tools(self) -> None:
        self._execute_code_tool.clear_tools()

    async def before_run(
        self,
        *,
        agent: Any,
        session: AgentSession | None,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        run_tool = self._execute_code_tool.create_run_tool()
        context.extend_instructions(self.source_id, run_tool.build_instructions(tools_visible_to_model=False))
        context.extend_tools(self.source_id, [run_tool])
