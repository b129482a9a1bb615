"""Pydantic AI's code mode on ptc-engine: `PtcCodeMode`, the harness' `CodeMode` capability
with its programs run by a ptc-engine server instead of Monty.

    from pydantic_ai import Agent
    from ptc_engine.integrations.pydantic_ai import PtcCodeMode

    agent = Agent("openai:gpt-5", capabilities=[PtcCodeMode(sandbox="http://127.0.0.1:50051")])

Everything else is `pydantic-ai-harness`' own: which tools are sandboxed (`tools=`), the
`run_code` tool and its arguments (`code`, `restart`), nested calls going through the agent's
`ToolManager` (validation, capability hooks, approvals, usage limits, `max_tool_calls`), the
result's shape (the last expression's value, `{"output": ..., "result": ...}` with printed
text) and the message history of nested calls. What changes: the program is full CPython 3.14
(classes, generators, `match`, the standard library; numpy and pandas with
`runtime="python-data"`), its REPL state lives in a ptc-engine session (kept across `run_code`
calls of one agent run, reset by `restart: true`), and its limits are ptc-engine's (`timeout`,
`limits`). Monty-only options (`os_access`, `mount`, `eager`, `speculate`, `monty_sandbox`,
`repl_store`, `resource_limits`) are refused.

The harness has no executor interface: this subclasses `CodeModeToolset` and replaces its
`_execute_code`, so it is pinned to the harness version it was written against (0.62).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry, UserError
from pydantic_ai.function_signature import FunctionSignature
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import AgentDepsT, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai_harness.code_mode import CodeMode, CodeModeToolset
from pydantic_ai_harness.code_mode import _toolset as harness
from pydantic_ai_harness.code_mode._parts import RUN_CODE_TOOL_NAME

from .. import Limits, Sandbox, Session
from .._errors import ExecutionError, PtcError, SessionNotFound
from .._tools import Tool, ToolFailure
from ._common import checked_timeout, limits_with_rounds, sandbox_of
from ._program import failure_text, printed, returning_last_expression

__all__ = ["PtcCodeMode", "PtcCodeModeToolset"]

# Failures after which the server has ended the session (see the proto's OpenSession).
_ENDS_SESSION = {"timeout", "memory", "fuel", "round_trips", "tool_calls", "cancelled", "shutdown", "file_quota"}


def _description_head(runtime: str | None) -> str:
    libraries = (
        "CPython with its standard library and numpy, pandas, scipy and matplotlib"
        if runtime == "python-data"
        else "CPython 3.14 with its whole standard library (no third-party packages)"
    )
    return (
        f"Write and run Python code in a sandbox: {libraries}. Classes, generators, `match`, "
        "`async` functions and tasks all work. There is no network; files go in `/mnt/data`, "
        "which lasts as long as the session."
    )


# The harness' own words on state and results, which hold here too (its first line, on
# `import *`, is Monty's restriction).
_DESCRIPTION_TAIL = harness._RUN_CODE_DESCRIPTION_TAIL.split("\n", 1)[1].lstrip("\n")

_FUNCTIONS_HEADER = (
    "\nThe following functions are available inside the sandbox. These functions are already defined"
    " in the sandbox; call them by name without redefining or importing them."
    " All tool functions are async: invoke them with `await`, e.g. `await tool_name(arg=value)`."
    " Calling without `await` returns a coroutine, not the value."
    "\n\nTo run calls concurrently, `import asyncio` and use `await asyncio.gather(...)`"
    " (or `asyncio.TaskGroup`). A failed call raises `ToolError` with the tool's message."
)


class _Printed:
    """Stands in for the harness' `PrintCapture`: what the program printed."""

    def __init__(self, text: str = "") -> None:
        self.joined = text

    def prepend_to(self, error_message: str) -> str:
        printed = self.joined.rstrip("\n")
        if not printed:
            return error_message
        return f"[stdout before error]\n{printed}\n[/stdout before error]\n{error_message}"


@dataclass
class _Repl:
    """The run's ptc-engine session, opened at the first `run_code` and shared by its steps."""

    sandbox: Sandbox
    limits: Limits | None
    runtime: str | None
    session: Session | None = None

    async def current(self) -> Session:
        if self.session is None:
            self.session = await self.sandbox.session(limits=self.limits, runtime=self.runtime)
        return self.session

    async def reset(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            try:
                await session.close()
            except PtcError:
                pass  # it ended already, or the server is gone: nothing to release


@dataclass
class PtcCodeModeToolset(CodeModeToolset[AgentDepsT]):
    """`CodeModeToolset` whose `run_code` runs on ptc-engine (built by `PtcCodeMode`)."""

    sandbox: Sandbox | None = field(default=None, kw_only=True, repr=False)
    timeout: float | None = field(default=None, kw_only=True)
    limits: Limits | None = field(default=None, kw_only=True)
    runtime: str | None = field(default=None, kw_only=True)

    _ptc: _Repl | None = field(default=None, init=False, repr=False, compare=False)

    async def for_run_step(self, ctx: RunContext[AgentDepsT]) -> AbstractToolset[AgentDepsT]:
        stepped = await super().for_run_step(ctx)
        if isinstance(stepped, PtcCodeModeToolset) and stepped is not self:
            stepped._ptc = self._ptc
        return stepped

    async def __aenter__(self) -> PtcCodeModeToolset[AgentDepsT]:
        await super().__aenter__()
        if self.sandbox is None:
            self.sandbox = sandbox_of(None, None)
        self._ptc = _Repl(self.sandbox, self.limits, self.runtime)
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        repl, self._ptc = self._ptc, None
        try:
            return await super().__aexit__(*args)
        finally:
            if repl is not None:
                await repl.reset()

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        tools = await super().get_tools(ctx)
        run_code = tools.get(RUN_CODE_TOOL_NAME)
        if isinstance(run_code, harness._RunCodeTool):
            head = f"{_description_head(self.runtime)}\n{_DESCRIPTION_TAIL}"
            catalog = "" if self.dynamic_catalog else self._render_catalog(run_code.callable_defs)
            description = f"{head}\n\n{catalog}" if catalog else head
            tools[RUN_CODE_TOOL_NAME] = replace(
                run_code, tool_def=replace(run_code.tool_def, description=description)
            )
        return tools

    @staticmethod
    def _render_catalog(callable_defs: dict[str, ToolDefinition]) -> str:
        """The functions' signatures, every one `async def`: a program awaits every tool."""
        if not callable_defs:
            return ""
        sigs, conflicting = harness._get_sigs_and_conflicting(callable_defs)
        type_blocks = FunctionSignature.render_type_definitions(sigs, conflicting)
        function_blocks = [
            td.render_signature("...", is_async=True, conflicting_type_names=conflicting)
            for td in callable_defs.values()
        ]
        sections = [_FUNCTIONS_HEADER]
        if type_blocks:
            sections.append("```python\n" + "\n\n".join(type_blocks) + "\n```")
        sections.append("```python\n" + "\n\n".join(function_blocks) + "\n```")
        return "\n\n".join(sections)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        if tool_args.get("restart") and self._ptc is not None and self._as_run_code_tool(tool) is not None:
            await self._ptc.reset()
        return await super().call_tool(name, tool_args, ctx, tool)

    async def _execute_code(
        self,
        code: str,
        ctx: RunContext[AgentDepsT],
        tool: harness._RunCodeTool[AgentDepsT],
        execution: harness.RunCodeExecution,
    ) -> Any:
        repl = self._ptc
        assert repl is not None, "`PtcCodeModeToolset` must be entered before calling `run_code`"
        parent = ctx.tool_manager
        assert parent is not None, "code mode requires ctx.tool_manager to be set"
        # Nested calls go through a ToolManager of the wrapped tools, as in the harness:
        # validation, capability hooks, approvals and usage limits apply to each.
        tool_manager = ToolManager(
            toolset=self.wrapped, root_capability=parent.root_capability, ctx=ctx, tools=tool.wrapped_tools
        )
        in_order = harness.global_mode_is_sequential(tool_manager.get_parallel_execution_mode)
        sequential = {name for name, td in tool.callable_defs.items() if td.sequential}
        one_at_a_time = asyncio.Lock()

        def dispatcher(sandbox_name: str) -> Callable[..., Awaitable[Any]]:
            original = tool.sanitized_to_original.get(sandbox_name, sandbox_name)

            async def dispatch(**kwargs: Any) -> Any:
                try:
                    call_id = execution.next_tool_call_id(max_tool_calls=self.max_tool_calls)
                except RuntimeError as e:
                    raise ToolFailure(str(e)) from None
                call_part = ToolCallPart(tool_name=original, args=kwargs, tool_call_id=call_id)
                execution.nested_calls[call_id] = call_part
                if in_order or sandbox_name in sequential:
                    async with one_at_a_time:
                        outcome = await harness.run_nested_call(tool_manager, call_part)
                else:
                    outcome = await harness.run_nested_call(tool_manager, call_part)
                try:
                    return execution.finish(call_part, outcome)
                except Exception as e:
                    if e is outcome.error:
                        raise ToolFailure(str(e) or type(e).__name__) from e
                    # The harness' conversion of the result for the sandbox failed; its words
                    # ("Unable to serialize unknown type: ...") do not say which tool.
                    raise ToolFailure(
                        f"tool {original!r} returned a value that is not JSON "
                        f"({type(outcome.content).__name__}: {e}): return data (dicts, lists, text, numbers)"
                    ) from e

            return dispatch

        tools = [
            Tool(
                name=name,
                handler=dispatcher(name),
                description=td.description or "",
                parameters=dict(td.parameters_json_schema),
            )
            for name, td in tool.callable_defs.items()
        ]
        try:
            session = await repl.current()
            code = returning_last_expression(code)
            result = await session.run(code, tools, timeout=self.timeout, limits=limits_with_rounds(self.limits))
        except ExecutionError as e:
            execution.capture = _Printed(e.result.stdout)  # type: ignore[assignment]
            if execution.usage_limit_exceeded is not None:
                raise execution.usage_limit_exceeded from None
            if e.kind in _ENDS_SESSION:
                await repl.reset()
            message = _retry_message(e)
            if execution.nested_calls and (execution.budget_exhausted or e.kind in _ENDS_SESSION):
                # As the harness: the calls that already ran, so a retry does not repeat them.
                started = harness._describe_started_calls(execution.nested_calls, execution.nested_returns)
                message += f"\n\n{started}"
            raise ModelRetry(message) from None
        except SessionNotFound as e:
            await repl.reset()
            raise ModelRetry(
                f"The sandbox session ended ({e}), so its variables and imports are gone. "
                "Re-run any imports, recreate the state you need, and try again."
            ) from None
        execution.capture = _Printed(printed(result))  # type: ignore[assignment]
        if execution.usage_limit_exceeded is not None:
            raise execution.usage_limit_exceeded
        value = result.return_value
        if value is not None:
            value = harness._model_safe_result(harness._TOOL_RETURN_CONTENT_TA.validate_python(value))
        return value


def _retry_message(error: ExecutionError) -> str:
    # A program that did not compile has a traceback of its source lines only, no frames; so
    # has one the server's pre-run check of its tool calls refused (`ToolCheckError`), which the
    # harness calls a type error, as it does Monty's check against the tools' signatures.
    compiled = error.kind != "python_error" or error.traceback.startswith("Traceback")
    if error.message.startswith("ToolCheckError:"):
        kind = "Type error in code"
    else:
        kind = "Runtime error" if compiled else "Syntax error in code"
    # The calls made are listed as the harness lists them (see `_execute_code`).
    message = f"{kind}:\n{failure_text(error, calls=False)}"
    if error.kind in _ENDS_SESSION:
        message += (
            "\n\nThe sandbox was stopped, so the session was reset: re-run any imports and "
            "recreate any state you need."
        )
    return message


_MONTY_ONLY = ("os_access", "mount", "monty_sandbox", "repl_store", "resource_limits", "speculate")


@dataclass
class PtcCodeMode(CodeMode[AgentDepsT]):
    """Pydantic AI harness' `CodeMode`, its programs run by a ptc-engine server.

    `sandbox`: a `Sandbox`, or the server's URL (default `PTC_ENGINE_URL`, else the engine in
    this process, as `Sandbox()`) with `api_key` (default `PTC_ENGINE_API_KEY`). `timeout` (seconds
    per `run_code`, tool calls included), `limits` (the session's, memory among them) and
    `runtime` (`"python"` or `"python-data"`). The harness' own options (`tools`,
    `max_retries`, `max_tool_calls`, `dynamic_catalog`) work as documented there."""

    _: KW_ONLY
    sandbox: Sandbox | str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float | None = None
    limits: Limits | None = None
    runtime: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        given = [name for name in _MONTY_ONLY if getattr(self, name) is not None]
        if self.eager:
            given.append("eager")
        if given:
            raise UserError(
                f"PtcCodeMode does not take {', '.join(given)}: those configure Monty. Programs run on "
                "ptc-engine (files in /mnt/data, limits with `timeout=` and `limits=ptc_engine.Limits(...)`)."
            )
        self.sandbox = sandbox_of(self.sandbox, self.api_key)
        self.timeout = checked_timeout(self.timeout)

    def get_wrapper_toolset(self, toolset: AbstractToolset[AgentDepsT]) -> AbstractToolset[AgentDepsT] | None:
        assert isinstance(self.sandbox, Sandbox)
        return PtcCodeModeToolset(
            wrapped=toolset,
            tool_selector=self.tools,
            max_retries=self.max_retries,
            max_tool_calls=self.max_tool_calls,
            dynamic_catalog=self.dynamic_catalog,
            capability=self,
            sandbox=self.sandbox,
            timeout=self.timeout,
            limits=self.limits,
            runtime=self.runtime,
        )

