"""The in-process transport: the same `ptc.v1.Sandbox` calls `_transport.Transport` makes to a
server, answered in this process by the native module (`_native`, the engine and the server's
own service compiled in): no server to start, no socket, no other process. `Sandbox()` uses it
when it is given no URL (and `PTC_ENGINE_URL` is unset) and the module is installed.

One engine serves the whole process; it starts at the first call, loading its compiled
component from the cache. The first time, it takes the component compiled ahead that the wheel
ships (`_ahead/`, for any x86-64 CPU since 2009) into the cache, in about a second; where that
does not fit (another CPU, or a build without it), it compiles the component, which takes ~10 s.
The data runtime (`runtime="python-data"`) is there when the `data` extra is installed
(`_data.py`); it is prepared at the first program that asks for it.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import os
import threading
from types import ModuleType
from typing import Any

import grpc.aio

from . import _data
from ._errors import PtcError, from_status
from ._proto import sandbox_pb2 as pb
from ._transport import Transport

WHERE = "in-process"
"""What `Sandbox.url` says of a sandbox whose engine runs in this process."""

_RESPONSES: dict[str, Any] = {
    "OpenSession": pb.OpenSessionResponse,
    "CloseSession": pb.CloseSessionResponse,
    "SnapshotSession": pb.SessionSnapshot,
    "DescribeTools": pb.DescribeToolsResponse,
}

AHEAD_DIR = os.path.join(os.path.dirname(__file__), "_ahead")
"""The component compiled ahead, as the wheel ships it (`ptc-engine compile --out` at its build)."""

_lock = threading.Lock()
_module: ModuleType | None = None
_service: Any = None


def native() -> ModuleType | None:
    """The native module, if this installation has it."""
    try:
        return importlib.import_module("ptc_engine._native")
    except ImportError:
        return None


def _started() -> tuple[ModuleType, Any]:
    """The native module and the process's engine, started at the first call (in a worker
    thread: it takes seconds)."""
    global _module, _service
    with _lock:
        if _service is None:
            module = native()
            if module is None:
                raise PtcError("this installation of ptc-engine has no in-process engine: give Sandbox a server URL")
            try:
                # The data runtime's files, when the `data` extra installed them.
                data = _data.artifacts()
            except (OSError, RuntimeError) as e:
                raise PtcError(f"the python-data runtime's files could not be prepared: {e}") from e
            _service = module.Local(ahead=AHEAD_DIR if os.path.isdir(AHEAD_DIR) else None, python_data=data)
            _module = module
            # Its session files go with the process.
            atexit.register(_service.close)
        assert _module is not None
        return _module, _service


async def started() -> tuple[ModuleType, Any]:
    if _module is not None and _service is not None:
        return _module, _service
    return await asyncio.to_thread(_started)


def error(e: BaseException, request_id: str | None = None) -> PtcError:
    """The native module's `RpcError(code, message)` as this package's error."""
    code, message = e.args if len(e.args) == 2 else ("UNKNOWN", str(e))
    return from_status(code, message, None, False, request_id)


SPIN_MICROS = 200
"""How long a read spins for the engine's next message (the GIL released) when nothing else on
the event loop could run (no callback ready, no other task): a tool round's answer comes in
50-150 µs, and handing it over this way costs a few µs."""

BLOCK_MICROS = 2000
"""How long a read then sleeps for the message (the GIL released), at most, and never past the
loop's next timer: a fresh `pass` ends within it. Woken by the engine's thread directly, it
takes one wake-up where an asyncio future takes two (100-200 µs each on a VM whose idle CPU
must be woken); I/O for the loop's callbacks waits meanwhile, 2 ms at most (with another
task on the loop a read never spins nor sleeps: FastMCP's 10 calls took 59 ms instead of 37,
each call's answer from a thread waiting out the sleep). Past it, the read waits on the loop
like any other."""

YIELDS = 64
"""How many times a read lets the loop's other ready work run first before it waits on the
loop: each time, the answers of the round it read may be what the engine waits for."""


class LocalCall:
    """One `Execute` call in process, with `grpc.aio`'s stream-stream call's face: `write`,
    `read` (`grpc.aio.EOF` at the end), `cancel`. A write is handed to the engine at once; a
    read takes the engine's next message at once when it is there or comes within a short
    spin and sleep, and waits on the event loop otherwise."""

    def __init__(self, call: Any, rpc_error: type[BaseException]) -> None:
        self._call = call
        self._rpc_error = rpc_error
        self._request_id: str | None = None

    async def write(self, message: pb.ClientMessage) -> None:
        if message.HasField("start"):
            # A refusal of the run carries its request id, as a server's does.
            self._request_id = message.start.request_id or None
        try:
            waiting = self._call.send(message.SerializeToString())
            if waiting is not None:
                await waiting
        except self._rpc_error:
            # As grpc.aio does once the call has ended: reading it says how.
            raise asyncio.InvalidStateError("the execution's call has ended") from None

    async def read(self) -> Any:
        try:
            data = await self._next()
        except self._rpc_error as e:
            raise error(e, self._request_id) from None
        if data is None:
            return grpc.aio.EOF
        return pb.ServerMessage.FromString(data)

    async def _next(self) -> bytes | None:
        """The next message's bytes (`None` at the end): taken at once, or after the loop's
        other ready work (the round's answers) has run, or spun and slept for while nothing
        else could use the loop, or else waited for on the loop."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)  # CPython's loops have both
        timers = getattr(loop, "_scheduled", None)
        for _ in range(YIELDS):
            busy = ready is None or timers is None or len(ready) > 0
            spin = block = 0
            # Another task may be what the engine waits for (a tool's answer from a thread, an
            # MCP client's stream): holding the loop would hold it up.
            if not busy and timers is not None and len(asyncio.all_tasks(loop)) == 1:
                due = (timers[0].when() - loop.time()) * 1e6 if timers else BLOCK_MICROS
                spin, block = SPIN_MICROS, int(max(0, min(BLOCK_MICROS, due)))
            got = self._call.next(spin, block)
            if got is not False:
                return got  # type: ignore[no-any-return]
            if not busy:
                break
            await asyncio.sleep(0)
        return await self._call.wait()  # type: ignore[no-any-return]

    def cancel(self) -> bool:
        self._call.cancel()
        return True


class LocalTransport(Transport):
    """A `Transport` whose calls this process answers."""

    def __init__(self) -> None:
        super().__init__(WHERE, None)

    async def unary(self, method: str, request: Any) -> Any:
        module, local = await started()
        try:
            data = await local.unary(method, request.SerializeToString())
        except module.RpcError as e:
            raise error(e) from None
        return _RESPONSES[method].FromString(data)

    async def open_execute(self) -> Any:  # a LocalCall, with grpc.aio's call's face
        module, local = await started()
        return LocalCall(local.execute(), module.RpcError)

    async def aclose(self) -> None:
        self.close()
