"""The facade: `Sandbox`, one server (one HTTP/2 connection per event loop, reused by every
execution), which runs programs and answers their tool calls with your tools, and `Session`, a
live session on it. Each async method has a blocking twin (`..._sync`) run by the transport's
background thread.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from . import _local, _run, _transport, _wire
from ._result import Result
from ._tools import Tool, as_tool
from ._transport import Transport
from ._types import (
    DEFAULT_URL,
    Description,
    Event,
    Limits,
    RunOptions,
    SessionRunOptions,
    Snapshot,
    ToolLike,
)

if TYPE_CHECKING:
    from ._proto import sandbox_pb2 as pb


class Sandbox:
    """A ptc-engine server. Async: `async with Sandbox(url, api_key=...) as sb: await sb.run(...)`;
    sync (scripts, notebooks): `with Sandbox(...) as sb: sb.run_sync(...)`.

    `url` defaults to `PTC_ENGINE_URL`; without either, the engine runs in this process when
    this installation has it (the `ptc-engine` wheel does; `url` is then `"in-process"`), else
    the server at `http://127.0.0.1:50051` is used (`https://` for TLS). `api_key` defaults
    to `PTC_ENGINE_API_KEY`, else none (a server in local mode takes none); in process there is
    nobody to check one, and it is not used.

    Tools are Python functions (sync or async) or `Tool`s; their JSON Schemas come from type
    hints and docstrings. All calls of one round are answered concurrently; a tool that raises
    becomes a `ToolError` with its message in the program."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None) -> None:
        url = url or os.environ.get("PTC_ENGINE_URL") or None  # an empty one names no server
        if url is None and _transport.native() is not None:
            # No server named, and the engine is installed: it runs in this process.
            self.url = _local.WHERE
            self._transport: Transport = _local.LocalTransport()
            return
        self.url = url or DEFAULT_URL
        if api_key is None:
            api_key = os.environ.get("PTC_ENGINE_API_KEY")
        self._transport = Transport(self.url, api_key)

    async def aclose(self) -> None:
        """Closes this loop's connection (and the sync twin's, if it was used)."""
        await self._transport.aclose()

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
        self._transport.close()

    # ---------------------------------------------------------------- running

    async def run(self, code: str, tools: Iterable[ToolLike] = (), **options: Unpack[RunOptions]) -> Result:
        """Runs `code` and answers its tool calls with `tools` until it ends; its `Result`, or
        an `ExecutionError` (one subclass per failure kind) if it failed.

        The options (`RunOptions`, each may be left out): `timeout` (seconds) is the whole
        run's, tool calls included; `limits`; `runtime`; `files` are written into `/mnt/data`
        first; with `return_files` the files it writes come back in `result.files`;
        `request_id`, an idempotency key; `on_output` sees printed text as it comes, `on_event`
        every event. A call of a tool with `requires_approval` waits for `on_approval` (sync or
        async), which answers `True`/`Approve(input=...)` to run it or `False`/`Deny(reason)`
        not to, while the program's other calls go on. `network_allow` narrows what the
        server's network policy lets the program reach over HTTP to these hosts (it never
        widens it). Cancelling the calling task cancels the execution on the server at once."""
        _check(options, RunOptions.__optional_keys__, "Sandbox.run")
        offered = _offered(tools)
        start = _wire.start(
            code,
            offered,
            options,
            runtime=options.get("runtime"),
            request_id=options.get("request_id"),
            network_allow=options.get("network_allow") or (),
        )
        return await _run.execute(self._transport, start, offered, options)

    async def stream(
        self, code: str, tools: Iterable[ToolLike] = (), **options: Unpack[RunOptions]
    ) -> AsyncIterator[Event]:
        """`run` as an async iterator of events: `Output` and `ToolCalls` as they happen, then
        `Finished` (or the `ExecutionError` raised). An `on_event` given sees them first."""
        queue: asyncio.Queue[Event | BaseException | None] = asyncio.Queue()
        on_event = options.get("on_event")

        async def push(event: Event) -> None:
            if on_event is not None:
                seen = on_event(event)
                if inspect.isawaitable(seen):
                    await seen
            await queue.put(event)

        chained = options.copy()
        chained["on_event"] = push

        async def drive() -> None:
            try:
                await self.run(code, tools, **chained)  # its last event is `Finished`
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

    def run_sync(self, code: str, tools: Iterable[ToolLike] = (), **options: Unpack[RunOptions]) -> Result:
        """`run`, for code without an event loop (scripts) or inside one (notebooks): it runs
        on a loop of its own in a background thread; async tools and callbacks run there too."""
        return self._transport.run_sync(self.run(code, tools, **options))

    async def describe(self, tools: Iterable[ToolLike], *, runtime: str | None = None) -> Description:
        """The compact signatures and stub of `tools`, as programs of `runtime` see them (for a
        model's prompt): a `.pyi` for Python (the default), a `.d.ts` for `"javascript"` and
        `"typescript"`."""
        request = _wire.describe_request(_offered(tools), runtime)
        return _wire.description(await self._transport.unary("DescribeTools", request))

    def describe_sync(self, tools: Iterable[ToolLike], *, runtime: str | None = None) -> Description:
        return self._transport.run_sync(self.describe(tools, runtime=runtime))

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
        return _Opening(self, _wire.open_session(id, limits, idle_timeout, runtime, snapshot))

    def session_sync(
        self,
        *,
        id: str | None = None,
        limits: Limits | None = None,
        idle_timeout: float | None = None,
        runtime: str | None = None,
        snapshot: Snapshot | bytes | None = None,
    ) -> Session:
        """`session`, opened now by the sync thread: `with sb.session_sync() as s:
        s.run_sync(...)` (closed at the end), or close it with `s.close_sync()`."""
        opening = self.session(id=id, limits=limits, idle_timeout=idle_timeout, runtime=runtime, snapshot=snapshot)
        return self._transport.run_sync(opening)


class Session:
    """A live session (see `Sandbox.session` and `Sandbox.session_sync`): async methods, and a
    blocking `_sync` twin of each, run by the sandbox's background thread as `run_sync` is."""

    def __init__(self, sandbox: Sandbox, response: pb.OpenSessionResponse) -> None:
        self.sandbox = sandbox
        self.id = response.session_id
        self.restored = list(response.restored)
        self.dropped = _wire.dropped(response.dropped)
        self.files = list(response.files)
        self.idle_timeout_s = response.idle_timeout_ms / 1000

    async def run(self, code: str, tools: Iterable[ToolLike] = (), **options: Unpack[SessionRunOptions]) -> Result:
        """Runs `code` in the session (after its earlier programs); one at a time. The options
        are `run`'s but `runtime` (the session's), `request_id` and `network_allow`."""
        _check(options, SessionRunOptions.__optional_keys__, "Session.run")
        offered = _offered(tools)
        start = _wire.start(code, offered, options, session_id=self.id)
        return await _run.execute(self.sandbox._transport, start, offered, options)

    def run_sync(self, code: str, tools: Iterable[ToolLike] = (), **options: Unpack[SessionRunOptions]) -> Result:
        """`run`, blocking (on the sandbox's background thread, as `Sandbox.run_sync`)."""
        return self.sandbox._transport.run_sync(self.run(code, tools, **options))

    async def snapshot(self, *, include_files: bool = False) -> Snapshot:
        """The session's state (and with `include_files` its `/mnt/data`), sealed."""
        request = _wire.snapshot_request(self.id, include_files)
        return _wire.snapshot(await self.sandbox._transport.unary("SnapshotSession", request))

    def snapshot_sync(self, *, include_files: bool = False) -> Snapshot:
        return self.sandbox._transport.run_sync(self.snapshot(include_files=include_files))

    async def close(self) -> bool:
        """Ends the session; False if it had ended already."""
        response = await self.sandbox._transport.unary("CloseSession", _wire.close_request(self.id))
        return bool(response.closed)

    def close_sync(self) -> bool:
        return self.sandbox._transport.run_sync(self.close())

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_sync()


class _Opening:
    """`sb.session(...)`: awaitable (a `Session`) and an async context manager (closed at exit)."""

    def __init__(self, sandbox: Sandbox, request: pb.OpenSessionRequest) -> None:
        self._sandbox = sandbox
        self._request = request
        self._session: Session | None = None

    async def _open(self) -> Session:
        response = await self._sandbox._transport.unary("OpenSession", self._request)
        return Session(self._sandbox, response)

    def __await__(self) -> Generator[Any, None, Session]:
        return self._open().__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._open()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


def _offered(tools: Iterable[ToolLike]) -> list[Tool]:
    """`tools` as `Tool`s, made once per run (a generator of tools is read once)."""
    return [as_tool(t) for t in tools]


def _check(options: Mapping[str, object], known: frozenset[str], method: str) -> None:
    """Refuses a keyword `method` does not take, as Python does for a signature that names its
    keywords (`**options` alone would take any)."""
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{method}() got an unexpected keyword argument {unknown[0]!r}")
