"""The in-process transport: the same `ptc.v1.Sandbox` calls `_transport.Transport` makes to a
server, answered in this process by the native module (`_native`, the engine and the server's
own service compiled in): no server to start, no socket, no other process. `Sandbox()` uses it
when it is given no URL (and `PTC_ENGINE_URL` is unset) and the module is installed.

One engine serves the whole process; it starts at the first call (loading its compiled
component from the cache, or compiling it the first time, which takes seconds).
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import threading
from types import ModuleType
from typing import Any

import grpc.aio

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
            _service = module.Local()
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


class LocalCall:
    """One `Execute` call in process, with `grpc.aio`'s stream-stream call's face: `write`,
    `read` (`grpc.aio.EOF` at the end), `cancel`."""

    def __init__(self, call: Any, rpc_error: type[BaseException]) -> None:
        self._call = call
        self._rpc_error = rpc_error

    async def write(self, message: pb.ClientMessage) -> None:
        try:
            await self._call.write(message.SerializeToString())
        except self._rpc_error:
            # As grpc.aio does once the call has ended: reading it says how.
            raise asyncio.InvalidStateError("the execution's call has ended") from None

    async def read(self) -> Any:
        try:
            data = await self._call.read()
        except self._rpc_error as e:
            raise error(e) from None
        if data is None:
            return grpc.aio.EOF
        return pb.ServerMessage.FromString(data)

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
