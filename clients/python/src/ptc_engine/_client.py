"""The client: one `Sandbox` per server (one HTTP/2 connection, reused by every execution), runs
a program and answers its tool calls with your tools, concurrently within each round."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import grpc
import grpc.aio

from . import _result
from ._errors import (
    EXECUTION_ERRORS,
    AuthenticationError,
    DuplicateRequest,
    ExecutionError,
    InternalError,
    InvalidRequest,
    PtcError,
    ServerBusy,
    ServerUnavailable,
    SessionBusy,
    SessionNotFound,
)
from ._proto import sandbox_pb2 as pb
from ._proto import sandbox_pb2_grpc as pb_grpc
from ._result import Result
from ._tools import Handler, Tool, ToolFailure, as_tool

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:50051"

ToolLike = Tool | Handler

# Snapshots may be as large as the server's --max-snapshot-bytes (64 MiB by default).
_MAX_MESSAGE_BYTES = 80 << 20
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    # Keep the connection alive between executions (and notice a dead one).
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


@dataclass(frozen=True)
class Limits:
    """Per-execution limits; `None` takes the server's default (see docs/limits.md in the repository)."""

    timeout_s: float | None = None
    max_round_trips: int | None = None
    max_tool_calls: int | None = None
    max_memory_bytes: int | None = None
    max_output_bytes: int | None = None
    fuel: int | None = None

    def to_proto(self) -> pb.Limits:
        limits = pb.Limits()
        if self.timeout_s is not None:
            limits.timeout_ms = max(0, round(self.timeout_s * 1000))
        for name in ("max_round_trips", "max_tool_calls", "max_memory_bytes", "max_output_bytes", "fuel"):
            value = getattr(self, name)
            if value is not None:
                setattr(limits, name, value)
        return limits


@dataclass(frozen=True)
class Call:
    """A tool call of the program, as the server handed it out."""

    id: str
    name: str
    namespace: str | None
    input: Any


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


def _target(url: str) -> tuple[str, bool]:
    """`http://host:port` (or `host:port`) → plaintext; `https://...` → TLS."""
    if url.startswith("https://"):
        return url[len("https://") :].rstrip("/"), True
    if url.startswith("http://"):
        return url[len("http://") :].rstrip("/"), False
    return url, False


class Sandbox:
    """A ptc-engine server. Async: `async with Sandbox(url, api_key=...) as sb: await sb.run(...)`;
    sync (scripts, notebooks): `with Sandbox(...) as sb: sb.run_sync(...)`.

    `url` defaults to `PTC_ENGINE_URL`, else `http://127.0.0.1:50051` (`https://` for TLS);
    `api_key` to `PTC_ENGINE_API_KEY`, else none (a server in local mode takes none).

    Tools are Python functions (sync or async) or `Tool`s; their JSON Schemas come from type
    hints and docstrings. All calls of one round are answered concurrently; a tool that raises
    becomes a `ToolError` with its message in the program."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None) -> None:
        self.url = url or os.environ.get("PTC_ENGINE_URL") or DEFAULT_URL
        self._target, self._tls = _target(self.url)
        if api_key is None:
            api_key = os.environ.get("PTC_ENGINE_API_KEY")
        self._metadata: tuple[tuple[str, str], ...] = (("x-api-key", api_key),) if api_key else ()
        self._stubs: dict[asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, pb_grpc.SandboxStub]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- connection

    def _stub(self) -> pb_grpc.SandboxStub:
        loop = asyncio.get_running_loop()
        with self._lock:
            if loop not in self._stubs:
                # Loops that ended (a framework running each call under asyncio.run) leave
                # channels nothing can use again: drop them rather than keep one per loop.
                for ended in [l for l in self._stubs if l.is_closed()]:
                    del self._stubs[ended]
                if self._tls:
                    channel = grpc.aio.secure_channel(
                        self._target, grpc.ssl_channel_credentials(), options=_CHANNEL_OPTIONS
                    )
                else:
                    channel = grpc.aio.insecure_channel(self._target, options=_CHANNEL_OPTIONS)
                self._stubs[loop] = (channel, pb_grpc.SandboxStub(channel))  # type: ignore[no-untyped-call]
            return self._stubs[loop][1]

    async def aclose(self) -> None:
        """Closes this loop's connection (and the sync twin's, if it was used)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._stubs.pop(loop, None)
        if entry is not None:
            await entry[0].close()
        self._stop_thread()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the sync twin's connection and its thread."""
        self._stop_thread()

    # ---------------------------------------------------------------- running

    async def run(
        self,
        code: str,
        tools: Iterable[ToolLike] = (),
        *,
        timeout: float | None = None,
        limits: Limits | None = None,
        runtime: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        return_files: bool = False,
        request_id: str | None = None,
        on_output: Callable[[Output], Awaitable[None] | None] | None = None,
        on_event: Callable[[Event], Awaitable[None] | None] | None = None,
        on_approval: ApprovalHandler | None = None,
        network_allow: Sequence[str] = (),
    ) -> Result:
        """Runs `code` and answers its tool calls with `tools` until it ends; its `Result`, or
        an `ExecutionError` (one subclass per failure kind) if it failed.

        `timeout` (seconds) is the whole run's, tool calls included; `files` are written into
        `/mnt/data` first; with `return_files` the files it writes come back in `result.files`;
        `on_output` sees printed text as it comes, `on_event` every event. A call of a tool
        with `requires_approval` waits for `on_approval` (sync or async), which answers
        `True`/`Approve(input=...)` to run it or `False`/`Deny(reason)` not to, while the
        program's other calls go on. Cancelling the calling task cancels the execution on the
        server at once. `network_allow` narrows what the server's network policy lets the
        program reach over HTTP to these hosts (it never widens it)."""
        start = self._start(code, tools, timeout, limits, runtime, files, return_files, request_id)
        start.network_allow.extend(network_allow)
        return await self._execute(start, tools, on_output, on_event, on_approval)

    async def stream(
        self,
        code: str,
        tools: Iterable[ToolLike] = (),
        **options: Any,
    ) -> AsyncIterator[Event]:
        """`run` as an async iterator of events: `Output` and `ToolCalls` as they happen, then
        `Finished` (or the `ExecutionError` raised)."""
        queue: asyncio.Queue[Event | BaseException | None] = asyncio.Queue()

        async def push(event: Event) -> None:
            await queue.put(event)

        async def drive() -> None:
            try:
                result = await self.run(code, tools, on_event=push, **options)
                await queue.put(Finished(result))
            except BaseException as e:  # handed to the consumer
                await queue.put(e)
            finally:
                await queue.put(None)

        task = asyncio.ensure_future(drive())
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            task.cancel()

    def run_sync(self, code: str, tools: Iterable[ToolLike] = (), **options: Any) -> Result:
        """`run`, for code without an event loop (scripts) or inside one (notebooks): it runs
        on a loop of its own in a background thread; async tools run there too."""
        return self._sync(self.run(code, tools, **options))

    async def describe(self, tools: Iterable[ToolLike]) -> Description:
        """The compact signatures and `.pyi` stub of `tools`, as programs see them (for a
        model's prompt)."""
        request = pb.DescribeToolsRequest(tools=[_wire(as_tool(t)) for t in tools])
        response = await self._unary(self._stub().DescribeTools, request)
        return Description(
            tools=[DescribedTool(t.name, t.python_name, t.signature) for t in response.tools],
            stub=response.stub,
        )

    def describe_sync(self, tools: Iterable[ToolLike]) -> Description:
        return self._sync(self.describe(tools))

    def session(
        self,
        *,
        id: str | None = None,
        limits: Limits | None = None,
        idle_timeout: float | None = None,
        runtime: str | None = None,
        snapshot: Snapshot | bytes | None = None,
    ) -> _Opening:
        """A live session: its programs share globals, imports and `/mnt/data`. Use it as
        `async with sb.session() as s:` (closed at the end) or `s = await sb.session()`;
        `snapshot=` restores a `Snapshot` taken earlier."""
        request = pb.OpenSessionRequest(session_id=id or "", runtime=runtime or "")
        if limits is not None:
            request.limits.CopyFrom(limits.to_proto())
        if idle_timeout is not None:
            request.idle_timeout_ms = max(1, round(idle_timeout * 1000))
        if snapshot is not None:
            request.snapshot = snapshot.data if isinstance(snapshot, Snapshot) else snapshot
        return _Opening(self, request)

    # ---------------------------------------------------------------- internals

    def _start(
        self,
        code: str,
        tools: Iterable[ToolLike],
        timeout: float | None,
        limits: Limits | None,
        runtime: str | None,
        files: Mapping[str, bytes | str] | None,
        return_files: bool,
        request_id: str | None,
        session_id: str = "",
    ) -> pb.Start:
        if not isinstance(code, str):
            raise InvalidRequest(f"code must be a string of Python, got {type(code).__name__}")
        if timeout is not None:
            limits = Limits(**{**(limits.__dict__ if limits else {}), "timeout_s": timeout})
        start = pb.Start(
            code=code,
            tools=[_wire(as_tool(t)) for t in tools],
            runtime=runtime or "",
            return_files=return_files,
            request_id=request_id or "",
            session_id=session_id,
        )
        if limits is not None:
            start.limits.CopyFrom(limits.to_proto())
        for name, content in (files or {}).items():
            data = content.encode() if isinstance(content, str) else bytes(content)
            start.files.append(pb.File(name=name, content=data))
        return start

    async def _execute(
        self,
        start: pb.Start,
        tools: Iterable[ToolLike],
        on_output: Callable[[Output], Awaitable[None] | None] | None,
        on_event: Callable[[Event], Awaitable[None] | None] | None,
        on_approval: ApprovalHandler | None = None,
    ) -> Result:
        tools = list(tools)
        asking = [t.name for t in map(as_tool, tools) if t.requires_approval]
        if asking and on_approval is None:
            raise InvalidRequest(
                f"tools {asking} need the user's approval for each call: pass on_approval= to decide them"
            )
        for attempt in range(_REFUSAL_ATTEMPTS):
            try:
                return await self._execute_once(
                    start, tools, on_output, on_event, attempt + 1 < _REFUSAL_ATTEMPTS, on_approval
                )
            except _RefusalLost:
                continue
        raise AssertionError("unreachable: the last attempt raises")

    async def _execute_once(
        self,
        start: pb.Start,
        tools: Iterable[ToolLike],
        on_output: Callable[[Output], Awaitable[None] | None] | None,
        on_event: Callable[[Event], Awaitable[None] | None] | None,
        may_retry: bool,
        on_approval: ApprovalHandler | None = None,
    ) -> Result:
        by_name = {(t.namespace or None, t.name): t for t in map(as_tool, tools)}
        call = self._stub().Execute(metadata=self._metadata)
        writing = asyncio.Lock()
        answering: set[asyncio.Task[None]] = set()
        execution_id = ""

        async def send(message: pb.ClientMessage) -> None:
            async with writing:
                await call.write(message)

        async def emit(event: Event) -> None:
            returned = [on_event(event) if on_event else None]
            if on_output is not None and isinstance(event, Output):
                returned.append(on_output(event))
            for r in returned:
                if asyncio.iscoroutine(r):
                    await r

        try:
            try:
                await send(pb.ClientMessage(start=start))
            except asyncio.InvalidStateError:
                pass  # The server ended the call already: reading it says why.
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    raise InternalError(
                        "the server ended the execution's stream without its result",
                        _result.Result(execution_id=execution_id),
                    )
                kind = message.WhichOneof("message")
                if kind == "started":
                    execution_id = message.started.execution_id
                elif kind == "tool_calls":
                    calls = [_call(c) for c in message.tool_calls.calls]
                    asked = [ApprovalRequest(_call(a.call), a.reason or None) for a in message.tool_calls.approvals]
                    await emit(ToolCalls(message.tool_calls.round, calls, asked))
                    work = [_answer(by_name, c, send) for c in calls]
                    work += [_decide(on_approval, a, send) for a in asked if on_approval is not None]
                    for job in work:
                        task = asyncio.ensure_future(job)
                        answering.add(task)
                        task.add_done_callback(answering.discard)
                elif kind == "output":
                    stream: Literal["stdout", "stderr"] = (
                        "stderr" if message.output.stream == pb.OUTPUT_STREAM_STDERR else "stdout"
                    )
                    await emit(Output(stream, message.output.data.decode("utf-8", "replace")))
                elif kind == "completed":
                    result = _result.completed(message.completed, execution_id)
                    await emit(Finished(result))
                    return result
                elif kind == "failed":
                    raise _execution_error(message.failed, execution_id)
                elif kind == "error":
                    # The server refused results this client sent (a bug here, not the program's).
                    raise PtcError(f"the server refused a message: {message.error.code}: {message.error.message}")
        except grpc.aio.AioRpcError as e:
            if may_retry and not execution_id and _lost_refusal(e):
                raise _RefusalLost() from None
            raise _rpc_error(e, self.url, bool(self._metadata)) from None
        finally:
            for task in answering:
                task.cancel()
            # Ends the stream; before the end that cancels the execution on the server.
            call.cancel()

    async def _unary(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            raise _rpc_error(e, self.url, bool(self._metadata)) from None

    def _sync(self, coroutine: Awaitable[T]) -> T:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="ptc-engine-client", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(_awaited(coroutine), loop).result()

    def _stop_thread(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            entry = self._stubs.pop(loop, None) if loop is not None else None
        if loop is None or thread is None:
            return
        if entry is not None:
            asyncio.run_coroutine_threadsafe(entry[0].close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class Session:
    """A live session (see `Sandbox.session`)."""

    def __init__(self, sandbox: Sandbox, response: pb.OpenSessionResponse) -> None:
        self.sandbox = sandbox
        self.id = response.session_id
        self.restored = list(response.restored)
        self.dropped = {d.name: d.reason for d in response.dropped}
        self.files = list(response.files)
        self.idle_timeout_s = response.idle_timeout_ms / 1000

    async def run(
        self,
        code: str,
        tools: Iterable[ToolLike] = (),
        *,
        timeout: float | None = None,
        limits: Limits | None = None,
        files: Mapping[str, bytes | str] | None = None,
        return_files: bool = False,
        on_output: Callable[[Output], Awaitable[None] | None] | None = None,
        on_event: Callable[[Event], Awaitable[None] | None] | None = None,
        on_approval: ApprovalHandler | None = None,
    ) -> Result:
        """Runs `code` in the session (after its earlier programs); one at a time."""
        sb = self.sandbox
        start = sb._start(code, tools, timeout, limits, None, files, return_files, None, session_id=self.id)
        return await sb._execute(start, tools, on_output, on_event, on_approval)

    async def snapshot(self, *, include_files: bool = False) -> Snapshot:
        """The session's state (and with `include_files` its `/mnt/data`), sealed."""
        request = pb.SnapshotSessionRequest(session_id=self.id, include_files=include_files)
        r = await self.sandbox._unary(self.sandbox._stub().SnapshotSession, request)
        return Snapshot(
            data=r.snapshot,
            kept=list(r.kept),
            modules=list(r.modules),
            dropped={d.name: d.reason for d in r.dropped},
            files=list(r.files),
        )

    async def close(self) -> bool:
        """Ends the session; False if it had ended already."""
        r = await self.sandbox._unary(self.sandbox._stub().CloseSession, pb.CloseSessionRequest(session_id=self.id))
        return bool(r.closed)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Opening:
    """`sb.session(...)`: awaitable (a `Session`) and an async context manager (closed at exit)."""

    def __init__(self, sandbox: Sandbox, request: pb.OpenSessionRequest) -> None:
        self._sandbox = sandbox
        self._request = request
        self._session: Session | None = None

    async def _open(self) -> Session:
        sb = self._sandbox
        response = await sb._unary(sb._stub().OpenSession, self._request)
        return Session(sb, response)

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


# ------------------------------------------------------------------------ helpers


def _wire(tool: Tool) -> pb.Tool:
    return pb.Tool(
        name=tool.name,
        description=tool.description,
        parameters_json=json.dumps(tool.parameters) if tool.parameters is not None else "",
        namespace=tool.namespace or "",
        requires_approval=tool.requires_approval,
        returns_json=json.dumps(tool.returns) if tool.returns is not None else "",
    )


def _call(c: pb.ToolCall) -> Call:
    return Call(c.id, c.name, c.namespace or None, _decode(c.input_json))


async def _decide(
    on_approval: ApprovalHandler, request: ApprovalRequest, send: Callable[[pb.ClientMessage], Awaitable[None]]
) -> None:
    """Asks `on_approval` about one held call and sends its answer; a callback that fails
    denies the call, saying so."""
    verdict: Verdict
    try:
        answered = on_approval(request)
        verdict = await answered if inspect.isawaitable(answered) else answered
    except asyncio.CancelledError:
        raise
    except Exception as e:
        verdict = Deny(f"asking the user failed ({type(e).__name__}: {e})")
    decision = pb.Decision(call_id=request.call.id)
    if verdict is True or (isinstance(verdict, Approve) and verdict.input is None):
        decision.approve.SetInParent()
    elif isinstance(verdict, Approve):
        decision.approve.input_json = json.dumps(verdict.input)
    elif isinstance(verdict, Deny):
        decision.deny.reason = verdict.reason
    else:
        decision.deny.reason = ""
    try:
        await send(pb.ClientMessage(decisions=pb.Decisions(decisions=[decision])))
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
        pass  # the execution ended meanwhile


def _decode(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


async def _answer(
    tools: Mapping[tuple[str | None, str], Tool], call: Call, send: Callable[[pb.ClientMessage], Awaitable[None]]
) -> None:
    tool = tools.get((call.namespace, call.name))
    result = pb.ToolResult(call_id=call.id)
    try:
        if tool is None:
            raise LookupError(f"this client has no tool {call.name!r}")
        arguments = call.input if isinstance(call.input, dict) else {}
        result.result_json = await tool.call(arguments)
    except asyncio.CancelledError:
        raise
    except ToolFailure as e:
        result.error = str(e)
    except Exception as e:
        result.error = f"{type(e).__name__}: {e}"
    try:
        await send(pb.ClientMessage(tool_results=pb.ToolResults(results=[result])))
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
        pass  # the execution ended meanwhile


_KINDS = {value: name.removeprefix("FAILURE_KIND_").lower() for name, value in pb.FailureKind.items()}


# What the program's author (a model, mostly) can do about a limit, after the server's message
# (which says only which limit). The caller's remedy, a larger `Limits(...)`, is in the docs.
_HINTS = {
    "round_trips": "each tool call awaited on its own is a round; gather independent calls with "
    "asyncio.gather so that they share one",
    "tool_calls": "make fewer tool calls: filter or batch the inputs first",
    "timeout": "the deadline counts the time tools take too; do less in one program, or split the work",
    "memory": "hold less data at once: process it in parts and keep only what is needed",
    "fuel": "the program used its CPU budget; do less computation in one program",
}


def _execution_error(failed: pb.Failed, execution_id: str) -> ExecutionError:
    kind = _KINDS.get(failed.kind, "internal")
    result = _result.failed(failed, execution_id)
    cls = EXECUTION_ERRORS.get(kind, InternalError)
    message = failed.message
    if kind in _HINTS:
        message = f"{message}: {_HINTS[kind]}"
    if failed.traceback and failed.traceback not in message:
        message = f"{message}\n{failed.traceback}"
    return cls(message, result)


_REFUSAL_ATTEMPTS = 3
"""How many times an `Execute` refused at once is made again to learn why (`_lost_refusal`)."""


class _RefusalLost(Exception):
    """An `Execute` the server refused before it started was reported as grpcio's own error."""


def _lost_refusal(e: grpc.aio.AioRpcError) -> bool:
    """Whether `e` is grpcio's "Internal error from Core": what a client that is still sending
    `Start` reports when the server has already ended the call (a refused key, a full
    tenant), instead of the server's status. Nothing ran (the server never read `Start`), so
    the call can be made again to learn the real status; seen once in a CI run."""
    return e.code() == grpc.StatusCode.INTERNAL and (e.details() or "") == "Internal error from Core"


def _rpc_error(e: grpc.aio.AioRpcError, url: str, keyed: bool) -> PtcError:
    """`e` as this package's error; `keyed`: whether the call carried an API key."""
    code, details = e.code(), e.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return ServerUnavailable(
            f"cannot reach the ptc-engine server at {url} ({details}): start it (`ptc-engine serve`) or check "
            "the address and port"
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        what = "refused the API key" if keyed else "wants an API key and none was sent"
        return AuthenticationError(
            f"the server at {url} {what} ({details}): set one of its keys (`--api-keys tenant:key`) in the "
            "environment variable PTC_ENGINE_API_KEY, which Sandbox() and every integration read, or pass it "
            "as Sandbox(url, api_key=...) (`api_key=` in each integration)"
        )
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE):
        return InvalidRequest(details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ServerBusy(details)
    if code == grpc.StatusCode.NOT_FOUND:
        return SessionNotFound(details)
    if code == grpc.StatusCode.ABORTED:
        return SessionBusy(details)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return DuplicateRequest(details)
    return PtcError(f"{code.name}: {details}")


__all__: Sequence[str] = [
    "Call",
    "Description",
    "DescribedTool",
    "Event",
    "Finished",
    "Limits",
    "Output",
    "Sandbox",
    "Session",
    "Snapshot",
    "ToolCalls",
]
