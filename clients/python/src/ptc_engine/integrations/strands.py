"""Strands Agents on ptc-engine, in both of its shapes:

- `make_ptc_tool_caller()` / `ptc_tool_caller`: the programmatic tool caller (as
  `strands-harness`' `programmatic_tool_caller`, which runs in Monty): the model sends one
  Python program, the agent's other tools are `async` functions in it, run by the agent's own
  executor on the host (hooks, policies, `invocation_state` as for a direct call), and only
  what the program prints comes back.

      from strands import Agent
      from ptc_engine.integrations.strands import make_ptc_tool_caller

      agent = Agent(tools=[search, fetch, make_ptc_tool_caller(sandbox="http://127.0.0.1:50051")])

- `PtcSandbox`: a `strands.sandbox.Sandbox` for plain code execution (`Agent(sandbox=...)`;
  it vends a `python_repl` bound to itself). It is one ptc-engine session: variables, imports
  and files in `/mnt/data` (the working directory) last as long as the sandbox. It runs Python
  only: shell commands get exit code 127 and a message saying so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from strands.sandbox import Sandbox as StrandsSandbox
from strands.sandbox.errors import SandboxTimeoutError
from strands.sandbox.types import ExecutionResult, FileInfo, StreamChunk
from strands.tools.decorator import tool
from strands.tools.executors._executor import ToolExecutor
from strands.types._events import ToolInterruptEvent
from strands.types.tools import AgentTool, ToolContext, ToolResult, ToolUse

from .. import Event, Limits, Output, Sandbox, Session
from .._errors import ExecutionError, ExecutionTimeout, ProgramExit, PtcError, PythonError, SessionNotFound
from .._tools import Tool, ToolFailure
from ._common import checked_timeout, limits_with_rounds, sandbox_of
from ._program import failure_text, printed, unshift, with_preamble

__all__ = ["PtcSandbox", "make_ptc_tool_caller", "ptc_tool_caller"]

# As strands-harness: inner calls in flight at once per program, so that `gather` over a long
# list does not fan out unbounded against the agent's tools.
_MAX_CONCURRENT_TOOL_CALLS = 10
# As strands-harness: the text returned to the model is capped.
_MAX_OUTPUT_CHARS = 200_000

# Every caller made here; none is ever offered to a program (two callers would recurse).
_INSTANCES: weakref.WeakSet[Any] = weakref.WeakSet()

DEFAULT_DESCRIPTION = (
    "Execute Python code that orchestrates the agent's other tools, each exposed as an async function "
    'taking keyword arguments -- always `await` them, e.g. `result = await read(path="/etc/hosts")`. '
    "The code runs in an async context, so `await` and `asyncio.gather(...)` work without boilerplate. "
    "A tool result that is structured content or JSON text (an object or array) arrives parsed, as a "
    "dict/list; anything else arrives as a string. A tool that fails raises RuntimeError (as ToolError, "
    "a subclass), which you can catch. Only text sent to `print()` is returned to you: a tool's return "
    "value stays in the code's local scope unless you print it. A tool whose name is not a valid Python "
    "identifier (for example `fetch-url`) is available with those characters replaced by underscores "
    "(`fetch_url`). The code runs in CPython 3.14 with the whole standard library (classes, generators, "
    "`match`, dataclasses, statistics, ...) in a sandbox without network or host files -- use the "
    "agent's tools for those. Use this to chain, loop over, filter, or parallelize tool calls in a single "
    "turn instead of one tool call per model round-trip, keeping large intermediate results out of the "
    "conversation."
)


def _cap(text: str, limit: int = _MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text.strip()
    return f"{text[:limit].strip()}\n[output truncated at {limit} characters]"


def _error_result(message: str) -> dict[str, Any]:
    return {"status": "error", "content": [{"text": _cap(message)}]}


def _join_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(
        b["text"] if "text" in b else json.dumps(b["json"]) for b in blocks if "text" in b or "json" in b
    )


def _unwrap(tool_name: str, tool_result: ToolResult) -> Any:
    """A tool result as the program gets it (the rule strands-harness uses): structured content
    or a lone JSON block or JSON text as data, else the text; an error result raises."""
    result: dict[str, Any] = dict(tool_result)
    blocks: list[dict[str, Any]] = [dict(b) for b in (result.get("content") or []) if isinstance(b, dict)]
    if result.get("status") == "error":
        raise ToolFailure(f"Tool '{tool_name}' error: {_join_text(blocks) or 'Unknown error'}")
    structured = result.get("structuredContent")
    if structured is not None:
        return structured
    if len(blocks) == 1 and "json" in blocks[0]:
        return blocks[0]["json"]
    text = _join_text(blocks)
    if len(blocks) == 1 and text[:1] in "[{":
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return text


def _caller(tool_context: ToolContext, name: str, slots: asyncio.Semaphore) -> Callable[..., Awaitable[Any]]:
    """One agent tool as a program's function: run by the agent's executor with a copy of the
    parent call's `invocation_state`, as a direct call (not recorded in the history)."""

    async def call(**tool_input: Any) -> Any:
        async with slots:
            use: ToolUse = {
                "toolUseId": f"tooluse_{name}_{random.randint(100000000, 999999999)}",
                "name": name,
                "input": tool_input,
            }
            results: list[ToolResult] = []
            try:
                async for event in ToolExecutor._stream(
                    tool_context.agent, use, results, {**tool_context.invocation_state}
                ):
                    if isinstance(event, ToolInterruptEvent):
                        tool_context.agent._interrupt_state.deactivate()
                        raise ToolFailure(
                            f"Tool '{name}' needs approval, which a program cannot ask for; "
                            "call it as a normal tool call instead."
                        )
            except ToolFailure:
                raise
            except Exception as e:
                raise ToolFailure(f"Failed to execute tool '{name}': {e}") from e
            if not results:
                raise ToolFailure(f"Tool '{name}' produced no result.")
            return _unwrap(name, results[0])

    return call


def _offered(agent: Any, allowed: list[str] | None) -> dict[str, AgentTool]:
    registry = {n: t for n, t in agent.tool_registry.registry.items() if t not in _INSTANCES}
    return {n: t for n, t in registry.items() if allowed is None or n in allowed}


def _schema(agent_tool: AgentTool) -> dict[str, Any]:
    spec = agent_tool.tool_spec.get("inputSchema") or {}
    schema = spec.get("json", spec) if isinstance(spec, dict) else {}
    return dict(schema) if isinstance(schema, dict) else {}


def make_ptc_tool_caller(
    *,
    sandbox: Sandbox | str | None = None,
    api_key: str | None = None,
    allowed_tools: list[str] | None = None,
    name: str = "programmatic_tool_caller",
    description: str = DEFAULT_DESCRIPTION,
    timeout: float | None = None,
    limits: Limits | None = None,
    runtime: str | None = None,
) -> Any:
    """A tool that runs the model's Python program on ptc-engine with the agent's other tools
    (or `allowed_tools`) as `async` functions; the program's printed output is its result.

    `sandbox`: a `Sandbox`, or the server's URL (default `PTC_ENGINE_URL`, else the engine in
    this process, as `Sandbox()`) with `api_key` (default `PTC_ENGINE_API_KEY`). `timeout`: seconds
    for the whole program, tool calls included (the server's default, 60 s, when unset).
    Programs get up to 1000 rounds of tool calls unless `limits` says otherwise."""
    # Made at the first call, so that the module's default caller reads PTC_ENGINE_URL then,
    # not when the module is imported.
    servers: list[Sandbox] = [sandbox] if isinstance(sandbox, Sandbox) else []
    allowed = list(allowed_tools) if allowed_tools is not None else None
    timeout = checked_timeout(timeout)
    limits = limits_with_rounds(limits)

    @tool(name=name, description=description, context="tool_context")
    async def ptc_tool_caller_tool(code: str, tool_context: ToolContext) -> dict[str, Any]:
        """Execute Python code with the agent's other tools as async functions.

        Args:
            code: Python code to execute. Use ``await tool_name(...)`` to call tools.
            tool_context: Injected by the framework. Not user-facing.
        """
        agent = tool_context.agent
        if agent is None:
            return _error_result("No agent available: the programmatic tool caller needs an agent context.")
        slots = asyncio.Semaphore(_MAX_CONCURRENT_TOOL_CALLS)
        tools = [
            Tool(
                name=tool_name,
                handler=_caller(tool_context, tool_name, slots),
                description=agent_tool.tool_spec.get("description", ""),
                parameters=_schema(agent_tool),
            )
            for tool_name, agent_tool in _offered(agent, allowed).items()
        ]
        if not servers:
            servers.append(sandbox_of(sandbox, api_key))
        run = asyncio.ensure_future(servers[0].run(code, tools, timeout=timeout, limits=limits, runtime=runtime))
        watch = asyncio.ensure_future(_cancelled(tool_context))
        try:
            await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done():
                return _error_result("Execution cancelled.")
            result = run.result()
        except ExecutionError as e:
            return _error_result(f"Execution error:\n{failure_text(e)}")
        except PtcError as e:
            return _error_result(f"Execution error: {e}")
        finally:
            for task in (run, watch):
                task.cancel()
        return {"status": "success", "content": [{"text": _cap(printed(result)) or "(no output)"}]}

    _INSTANCES.add(ptc_tool_caller_tool)
    return ptc_tool_caller_tool


async def _cancelled(tool_context: ToolContext) -> None:
    while not tool_context.cancel_signal.is_set():
        await asyncio.sleep(0.05)


ptc_tool_caller = make_ptc_tool_caller()
"""The programmatic tool caller for the server at `PTC_ENGINE_URL` (else the engine in this
process), offering every other tool of the agent."""


_PYTHON = {"python", "python3", "py"}

PYTHON_REPL_DESCRIPTION = (
    "Executes Python code and returns output (stdout), error (stderr), and exit_code (non-zero means the "
    "code failed). The code runs in CPython 3.14 with the standard library, in a sandbox without network. "
    "Variables, imports, definitions and files in the working directory (/mnt/data) persist across calls "
    "for as long as the sandbox lives. stdin is not available. Use print() to surface values."
)


class PtcSandbox(StrandsSandbox):
    """A Strands sandbox that is one ptc-engine session (opened at first use; `aclose()` ends it,
    as does the server's idle timeout).

    `sandbox`: a `Sandbox`, or the server's URL with `api_key` (defaults as for the tool
    caller); `limits` and `runtime` (`"python"` or `"python-data"`) are the session's."""

    def __init__(
        self,
        sandbox: Sandbox | str | None = None,
        *,
        api_key: str | None = None,
        limits: Limits | None = None,
        runtime: str | None = None,
    ) -> None:
        self.server = sandbox_of(sandbox, api_key)
        self.limits = limits
        self.runtime = runtime
        self._session: Session | None = None

    async def session(self) -> Session:
        """The sandbox's session (opened now if it is not yet, or if the server ended it)."""
        if self._session is None:
            opened = await self.server.session(limits=self.limits, runtime=self.runtime)
            # The working directory is the session's files (the guest starts in "/").
            await opened.run("import os\nos.chdir('/mnt/data')")
            if self._session is None:
                self._session = opened
            else:  # opened meanwhile by a concurrent call (tools may run on several loops)
                with contextlib.suppress(PtcError):
                    await opened.close()
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(PtcError):
                await session.close()

    def get_tools(self) -> list[AgentTool]:
        from strands.vended_tools.python_repl import make_python_repl

        return [make_python_repl(sandbox=self, description=PYTHON_REPL_DESCRIPTION, language="python3")]

    async def execute_streaming(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        message = (
            "This sandbox runs Python only (ptc-engine): there is no shell to run commands in. "
            "Write the step in Python and run it with the Python tool.\n"
        )
        yield StreamChunk(message, "stderr")
        yield ExecutionResult(exit_code=127, stdout="", stderr=message)

    async def execute_code_streaming(
        self,
        code: str,
        language: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        if language.lower() not in _PYTHON:
            message = f"This sandbox runs Python only (ptc-engine), not {language!r}.\n"
            yield StreamChunk(message, "stderr")
            yield ExecutionResult(exit_code=127, stdout="", stderr=message)
            return
        preamble = []
        if env:
            preamble.append(f"__import__('os').environ.update(__import__('json').loads({json.dumps(env)!r}))")
        if cwd:
            preamble.append(f"__import__('os').chdir({cwd!r})")
        program, shift = with_preamble(code, "; ".join(preamble))
        if timeout is not None:
            # The model picks it (python_repl's `timeout`); a server takes 1 to 300 s.
            timeout = min(max(timeout, 1.0), 300.0)
        queue: asyncio.Queue[StreamChunk | None] = asyncio.Queue()

        async def on_event(event: Event) -> None:
            if isinstance(event, Output):
                await queue.put(StreamChunk(unshift(event.text, shift), event.stream))

        async def run() -> ExecutionResult:
            try:
                session = await self.session()
                try:
                    result = await session.run(program, timeout=timeout, on_event=on_event)
                except SessionNotFound:
                    # The server ended it (idle, or a limit): a new one, and the program again.
                    self._session = None
                    session = await self.session()
                    result = await session.run(program, timeout=timeout, on_event=on_event)
                return ExecutionResult(exit_code=result.exit_code or 0, stdout=result.stdout, stderr=result.stderr)
            except ExecutionTimeout as e:
                self._session = None
                raise SandboxTimeoutError(timeout, e.result.stdout, e.result.stderr) from None
            except ExecutionError as e:
                if not isinstance(e, (PythonError, ProgramExit)):
                    self._session = None  # the server stopped the sandbox and ended the session
                stderr = unshift(e.result.stderr, shift)
                # A raised exception's traceback is on stderr already (the message repeated it
                # after the traceback, 2026-11-27); a stopped program's reason is not.
                shown = isinstance(e, ProgramExit) or (e.traceback and e.traceback in e.result.stderr)
                text = "" if shown else unshift(str(e), shift)
                if text and text not in stderr:
                    stderr = f"{stderr}{text}"
                return ExecutionResult(exit_code=e.result.exit_code or 1, stdout=e.result.stdout, stderr=stderr)
            finally:
                await queue.put(None)

        task = asyncio.ensure_future(run())
        try:
            while (chunk := await queue.get()) is not None:
                yield chunk
            yield await task
        finally:
            task.cancel()

    async def _python(self, code: str, **files: bytes) -> Any:
        session = await self.session()
        try:
            return (await session.run(code, files=files or None)).return_value
        except PythonError as e:
            raise _os_error(e) from None

    async def read_file(self, path: str, **kwargs: Any) -> bytes:
        data = await self._python(f"import base64\nreturn base64.b64encode(open({path!r}, 'rb').read()).decode()")
        return base64.b64decode(data)

    async def write_file(self, path: str, content: bytes, **kwargs: Any) -> None:
        # Bytes travel as bytes (Start.files) when the path is under /mnt/data; else by program.
        relative = _under_data(path)
        if relative is not None:
            await self._python("pass", **{relative: content})
            return
        encoded = base64.b64encode(content).decode()
        await self._python(
            "import base64, os\n"
            f"os.makedirs(os.path.dirname(os.path.abspath({path!r})), exist_ok=True)\n"
            f"open({path!r}, 'wb').write(base64.b64decode({encoded!r}))"
        )

    async def remove_file(self, path: str, **kwargs: Any) -> None:
        await self._python(f"import os\nos.remove({path!r})")

    async def list_files(self, path: str, **kwargs: Any) -> list[FileInfo]:
        entries = await self._python(
            "import os\n"
            f"return [[e.name, e.is_dir(), None if e.is_dir() else e.stat().st_size] for e in os.scandir({path!r})]"
        )
        return [FileInfo(name=n, is_dir=d, size=s) for n, d, s in sorted(entries)]


def _under_data(path: str) -> str | None:
    """`path` relative to /mnt/data (the working directory), or None if it is elsewhere."""
    if path.startswith("/mnt/data/"):
        path = path[len("/mnt/data/") :]
    elif path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _os_error(error: PythonError) -> OSError:
    last = error.traceback.strip().splitlines()[-1] if error.traceback.strip() else str(error)
    if "FileNotFoundError" in last or "NotADirectoryError" in last:
        return FileNotFoundError(last)
    return OSError(last)
