"""The values the client takes and hands out, as plain Python: limits, the events of a run, the
approval callback's question and answers, tool descriptions, snapshots, and the options of a
run (`RunOptions`, the keyword arguments of `run`, `run_sync` and `stream`).

Nothing here knows the wire: `_wire` converts these to and from the server's messages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from typing_extensions import TypedDict

from ._result import Result
from ._tools import Handler, Tool

DEFAULT_URL = "http://127.0.0.1:50051"

ToolLike = Tool | Handler
"""A tool as the client takes it: a `Tool`, or a function made into one by `Tool.from_function`."""


@dataclass(frozen=True)
class Limits:
    """Per-execution limits; `None` takes the server's default (see docs/limits.md in the repository)."""

    timeout_s: float | None = None
    max_round_trips: int | None = None
    max_tool_calls: int | None = None
    max_memory_bytes: int | None = None
    max_output_bytes: int | None = None
    fuel: int | None = None


@dataclass(frozen=True)
class Call:
    """A tool call of the program, as the server handed it out."""

    id: str
    name: str
    namespace: str | None
    input: Any
    #: The call's `execute_tool` span on the server (W3C `traceparent`), when it traces; the
    #: tool runs within it when `opentelemetry-api` is installed.
    traceparent: str | None = None


@dataclass(frozen=True)
class Output:
    """Text the program printed, as it printed it."""

    stream: Literal["stdout", "stderr"]
    text: str


@dataclass(frozen=True)
class ApprovalRequest:
    """A call of a tool that needs the user's approval (`Tool(requires_approval=True)`), held
    until `on_approval` decides it; `reason` is the program's own words (its `_reason=`)."""

    call: Call
    reason: str | None


@dataclass(frozen=True)
class Approve:
    """`on_approval`'s answer: run the call, with `input` (the arguments to run it with
    instead, checked against the tool's schema again) if given. Arguments that do not fit are
    not run: the program gets a `ToolError` saying why, and the run goes on."""

    input: dict[str, Any] | None = None


@dataclass(frozen=True)
class Deny:
    """`on_approval`'s answer: do not run the call; the program gets
    `ToolError("denied by the user: <reason>")`."""

    reason: str = ""


Verdict = bool | Approve | Deny
ApprovalHandler = Callable[[ApprovalRequest], Verdict | Awaitable[Verdict]]


@dataclass(frozen=True)
class ToolCalls:
    """One round of tool calls (all the calls pending when the program blocked), and the calls
    that wait for the user's approval (a call approved later comes again in `calls`)."""

    round: int
    calls: list[Call]
    approvals: list[ApprovalRequest] = field(default_factory=list)


@dataclass(frozen=True)
class Finished:
    """The end of an execution that completed."""

    result: Result


Event = Output | ToolCalls | Finished
OutputHandler = Callable[[Output], Awaitable[None] | None]
EventHandler = Callable[[Event], Awaitable[None] | None]


class SessionRunOptions(TypedDict, total=False):
    """The keyword arguments of a run in a session (`Session.run`, `Session.run_sync`); every
    one may be left out."""

    timeout: float | None
    """Seconds for the whole run, tool calls included (`Limits.timeout_s`)."""
    limits: Limits | None
    """The run's limits; `None` for the server's defaults (in a session, its own)."""
    files: Mapping[str, bytes | str] | None
    """Files written into `/mnt/data` before the program runs: name to content (text is UTF-8)."""
    return_files: bool
    """Bring back the files the program writes in `/mnt/data`, in `result.files`."""
    on_output: OutputHandler | None
    """Called (sync or async) with each `Output` as the program prints."""
    on_event: EventHandler | None
    """Called (sync or async) with every event: `Output`, `ToolCalls`, `Finished`."""
    on_approval: ApprovalHandler | None
    """Decides each call of a tool with `requires_approval` (sync or async): `True` or
    `Approve(input=...)` runs it, `False` or `Deny(reason)` does not. Required when such a
    tool is offered."""


class RunOptions(SessionRunOptions, total=False):
    """The keyword arguments of `Sandbox.run`, `Sandbox.run_sync` and `Sandbox.stream`: those of
    a session's run, and these; every one may be left out."""

    runtime: str | None
    """`"python"` (the default), `"python-data"` (numpy, pandas, matplotlib), when the server
    enables it, or `"javascript"` (tools awaited as `await add({a: 1, b: 2})`)."""
    request_id: str | None
    """An idempotency key: while a run with it is alive, another is refused (`DuplicateRequest`).
    Errors of the run carry it as `request_id`."""
    network_allow: Sequence[str]
    """Hosts the server's network policy lets the program reach over HTTP, narrowed to these
    (it never widens it)."""


@dataclass(frozen=True)
class DescribedTool:
    name: str
    python_name: str
    signature: str


@dataclass(frozen=True)
class Description:
    """Tools as a model should read them: one compact signature line each, and a `.pyi` stub."""

    tools: list[DescribedTool]
    stub: str

    @property
    def signatures(self) -> str:
        return "\n".join(t.signature for t in self.tools)


@dataclass(frozen=True)
class Snapshot:
    """A session's state, sealed by the server: `bytes` opens a new session with it
    (`sandbox.session(snapshot=...)`) on any server sharing the token secret."""

    data: bytes
    kept: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
