"""How calls reach an engine: `Transport`, a server's client through the native module
(`_native.Remote`: tonic's gRPC on a thread of its own, one connection for every event loop,
the API key sent with every call), and `NativeCall`, one `Execute` call with the face the run
reads (`_run.py`): `send`, `write`, `read`, `cancel`. The in-process engine (`_local.py`)
answers the same calls with the same call objects. Also the background thread whose event loop
runs the blocking twins (`run_sync`, `describe_sync`, a session's `_sync` methods).
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Awaitable
from types import ModuleType
from typing import Any, TypeVar

from ._errors import PtcError, from_status
from ._proto import sandbox_pb2 as pb

T = TypeVar("T")

RESPONSES: dict[str, Any] = {
    "OpenSession": pb.OpenSessionResponse,
    "CloseSession": pb.CloseSessionResponse,
    "SnapshotSession": pb.SessionSnapshot,
    "DescribeTools": pb.DescribeToolsResponse,
}
"""Each unary method's answer."""

SPIN_MICROS = 200
"""How long a read spins for the engine's next message (the GIL released, yielding the CPU at
each turn) when nothing on the event loop is ready to run and the engine waits for nothing
there: a tool round's answer comes in 50-150 µs, and handing it over this way costs a few µs,
where an asyncio future takes two wake-ups (a round in process took 467 µs with another task on
the loop, which then kept a read from spinning, and 110-150 µs alone)."""

SPIN_ALONE_MICROS = 1000
"""How long it spins when its task is the loop's only one, which nobody else's I/O waits for:
a session's `pass` ends within it, and a thread that spins finds the message where one asleep
must be woken, on a VM with its CPU. Six alternating pairs of runs of a scratch loop
(2026-11-29), this against the 200 µs spin: a fresh `pass` after 5 ms of quiet 0.91-1.21
against 1.06-1.17 ms (faster in five pairs), a session's 0.66-0.82 against 0.71-0.89 ms; a
session's `pass` back to back (`session_rounds.py`) 0.305-0.324 against 0.325-0.359 ms."""

BLOCK_MICROS = 2000
"""How long a read then sleeps for the message (the GIL released), at most, and never past the
loop's next timer: a fresh `pass` ends within it. Woken by the engine's thread directly, it
takes one wake-up where an asyncio future takes two (100-200 µs each on a VM whose idle CPU
must be woken); I/O for the loop's callbacks waits meanwhile, 2 ms at most, so a read sleeps
only when no other task is on the loop (FastMCP's 10 calls took 59 ms instead of 37 when reads
slept while each call's answer came from a thread through the loop). Past it, the read waits on
the loop like any other."""

YIELDS = 64
"""How many times a read lets the loop's other ready work run first before it waits on the
loop: each time, the answers of the round it read may be what the engine waits for."""

TURN_EVERY = 0.002
"""Seconds a call's reads may go without the loop taking a turn: past it (or once a timer is
due) the next read lets it take one first. Answers sent eagerly (`_run.py`) need no turn, and a
message that comes within the spin is taken without one, so a run of quick rounds could
otherwise hold the loop for its whole length: a timer due (an `asyncio.timeout` around the run,
which cancels it) would not fire, nor would I/O be polled, until the run ended."""


def native() -> ModuleType | None:
    """The native module, if this installation has it (every wheel does)."""
    try:
        return importlib.import_module("ptc_engine._native")
    except ImportError:
        return None


def _url(url: str) -> str:
    """`url` as the native client takes it: `host:port` means `http://host:port`."""
    url = url.rstrip("/")
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


class Transport:
    """The server at `url` (`http://host:port`, `https://` for TLS), called with `api_key`
    (none: no key is sent)."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url
        self.server: str | None = url
        """The server errors name (`None`: the engine in this process)."""
        self._api_key = api_key
        self._client: Any = None
        self._module: ModuleType | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- the client

    async def started(self) -> tuple[ModuleType, Any]:
        """The native module and this server's client, made at the first call (it connects
        then, and again after the connection is lost)."""
        with self._lock:
            if self._client is None:
                module = native()
                if module is None:
                    raise PtcError(
                        "this installation of ptc-engine has no native module: reinstall it from its wheel "
                        "(`pip install --force-reinstall ptc-engine`)"
                    )
                try:
                    self._client = module.Remote(_url(self.url), self._api_key)
                except module.RpcError as e:
                    raise self.error(e) from None
                self._module = module
            assert self._module is not None
            return self._module, self._client

    def channels(self) -> int:
        """How many connections this sandbox holds: one, shared by every event loop, once it
        has called."""
        with self._lock:
            return 0 if self._client is None else 1

    async def aclose(self) -> None:
        """Closes the sync thread (the connection closes with the last call using it)."""
        self.close()

    # ---------------------------------------------------------------- calls

    def error(self, e: BaseException, request_id: str | None = None) -> PtcError:
        """The native module's `RpcError(code, message)` as this package's error."""
        code, message = e.args if len(e.args) == 2 else ("UNKNOWN", str(e))
        return from_status(code, message, self.server, bool(self._api_key), request_id)

    async def unary(self, method: str, request: Any) -> Any:
        """The answer of the unary RPC `method` (`"OpenSession"`, ...) to `request`."""
        module, client = await self.started()
        try:
            data = await client.unary(method, request.SerializeToString())
        except module.RpcError as e:
            raise self.error(e) from None
        return RESPONSES[method].FromString(data)

    async def open_execute(self, traceparent: str | None = None) -> NativeCall:
        """A new `Execute` call (its first message is the run's `Start`), continuing the
        caller's span `traceparent` (W3C) when given."""
        module, client = await self.started()
        return NativeCall(client.execute(traceparent), module.RpcError, self)

    # ---------------------------------------------------------------- the sync thread

    def run_sync(self, awaitable: Awaitable[T]) -> T:
        """Runs `awaitable` on the sync thread's loop (started at the first call) and waits for
        it: the blocking twins work from code without a loop (scripts) and inside a running
        one (notebooks)."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="ptc-engine-client", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()

    def close(self) -> None:
        """Stops the sync thread (a later `run_sync` starts another)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


class NativeCall:
    """One `Execute` call through the native module: `send` (or `write`, which waits for room
    if there is none), `read` (`None` at the end), `cancel`. A message is handed over at once;
    a read takes the next message at once when it is there or comes within a short spin and
    sleep, and waits on the event loop otherwise."""

    def __init__(self, call: Any, rpc_error: type[BaseException], transport: Transport) -> None:
        self._call = call
        self._rpc_error = rpc_error
        self._transport = transport
        self._request_id: str | None = None
        self._turned: float | None = None
        """When the loop last took a turn during a read (its clock); at the first, the call
        was just made in the loop's current turn."""

    def send(self, message: pb.ClientMessage) -> Awaitable[None] | None:
        """Hands `message` over: `None` once it is sent, else an awaitable to wait for room in
        the call (the message goes first, before any sent later); `asyncio.InvalidStateError`
        once the call has ended (reading it says how)."""
        if message.HasField("start"):
            # A refusal of the run carries its request id.
            self._request_id = message.start.request_id or None
        try:
            waiting = self._call.send(message.SerializeToString())
        except self._rpc_error:
            raise asyncio.InvalidStateError("the execution's call has ended") from None
        return None if waiting is None else self._room(waiting)

    def offer(self, message: pb.ClientMessage) -> bool:
        """Hands `message` over if the call has room for it now, from any thread: `False` when
        it has none (then `send` it on the loop); `asyncio.InvalidStateError` once the call has
        ended."""
        try:
            return bool(self._call.try_send(message.SerializeToString()))
        except self._rpc_error:
            raise asyncio.InvalidStateError("the execution's call has ended") from None

    async def _room(self, waiting: Awaitable[None]) -> None:
        try:
            await waiting
        except self._rpc_error:
            raise asyncio.InvalidStateError("the execution's call has ended") from None

    async def write(self, message: pb.ClientMessage) -> None:
        """`send`, waiting for room if the call has none."""
        waiting = self.send(message)
        if waiting is not None:
            await waiting

    async def read(self, idle: bool = False) -> pb.ServerMessage | None:
        """The next server message, `None` at the call's end; a refused call raises its
        `PtcError`. `idle`: nothing the engine waits for from this call runs on the loop (every
        answer so far is sent, or comes from a thread), so the read may hold the loop a little
        while the engine works (the loop's other tasks wait meanwhile: `SPIN_MICROS` at most)."""
        try:
            data = await self._next(idle)
        except self._rpc_error as e:
            raise self._transport.error(e, self._request_id) from None
        return None if data is None else pb.ServerMessage.FromString(data)

    async def _next(self, idle: bool) -> bytes | None:
        """The next message's bytes (`None` at the end): taken at once, or after the loop's
        other ready work (the round's answers) has run, or spun for while nothing is ready on
        the loop and the engine waits for nothing there (and slept for when no other task
        could use the loop), or else waited for on the loop."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)  # CPython's loops have both
        timers = getattr(loop, "_scheduled", None)
        if self._turned is None:
            self._turned = loop.time()
        for _ in range(YIELDS):
            now = loop.time()
            if now - self._turned > TURN_EVERY or (timers is not None and len(timers) > 0 and timers[0].when() <= now):
                # Overdue: the loop takes a turn first (its due timers fire, its I/O is polled).
                await asyncio.sleep(0)
                self._turned = loop.time()
            busy = ready is None or timers is None or len(ready) > 0
            spin = block = 0
            if not busy and idle:
                # Nothing on the loop can run now, and the engine waits for nothing there: the
                # read holds the loop for the engine's answer, as long as no timer is due. It
                # sleeps only when no other task is on the loop: another task (a server's
                # connection, an MCP client's stream) waits for I/O that only the loop polls.
                due = (timers[0].when() - loop.time()) * 1e6 if timers else BLOCK_MICROS
                spin = int(max(0, min(SPIN_MICROS, due)))
                if len(asyncio.all_tasks(loop)) == 1:
                    spin = int(max(0, min(SPIN_ALONE_MICROS, due)))
                    block = int(max(0, min(BLOCK_MICROS, due - spin)))
            got = self._call.next(spin, block)
            if got is not False:
                return got  # type: ignore[no-any-return]
            if not busy:
                break
            await asyncio.sleep(0)
            self._turned = loop.time()
        got = await self._wait(loop)
        self._turned = loop.time()
        return got

    async def _wait(self, loop: asyncio.AbstractEventLoop) -> bytes | None:
        """The next message's bytes, waited for on the loop: the engine's thread makes a socket
        readable once it has the message (one wake-up, the loop's own), or on a loop that
        cannot watch a file descriptor, sets an asyncio future."""
        try:
            fd = self._call.ready_fd()
            while True:
                ready = loop.create_future()
                loop.add_reader(fd, _settled, ready)
                try:
                    self._call.arm()
                    await ready
                finally:
                    loop.remove_reader(fd)
                got = self._call.next(0, 0)
                if got is not False:
                    return got  # type: ignore[no-any-return]
        except NotImplementedError:  # pragma: no cover - asyncio's loops on Linux all can
            return await self._call.wait()  # type: ignore[no-any-return]

    def cancel(self) -> None:
        """Ends the call: before its end, that cancels the execution."""
        self._call.cancel()


def _settled(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable
