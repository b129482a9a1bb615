"""The connection to one server: a grpc.aio channel per event loop (grpc.aio channels belong to
the loop they were made on), the API key sent with every call, unary calls with their errors
mapped, the `Execute` stream opened, and the background thread whose event loop runs the
blocking twins (`run_sync`, `describe_sync`, a session's `_sync` methods).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc
import grpc.aio

from ._errors import PtcError, from_rpc_error
from ._proto import sandbox_pb2_grpc as pb_grpc

T = TypeVar("T")

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


def _target(url: str) -> tuple[str, bool]:
    """`http://host:port` (or `host:port`) → plaintext; `https://...` → TLS."""
    if url.startswith("https://"):
        return url[len("https://") :].rstrip("/"), True
    if url.startswith("http://"):
        return url[len("http://") :].rstrip("/"), False
    return url, False


class Transport:
    """The server at `url`, called with `api_key` (none: no key is sent)."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url
        self._target, self._tls = _target(url)
        self._metadata: tuple[tuple[str, str], ...] = (("x-api-key", api_key),) if api_key else ()
        self._stubs: dict[asyncio.AbstractEventLoop, tuple[grpc.aio.Channel, pb_grpc.SandboxStub]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- channels

    def stub(self) -> pb_grpc.SandboxStub:
        """The running loop's stub, its channel made at the first call on that loop."""
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

    def channels(self) -> int:
        """How many channels are open (one per loop that has called and not ended)."""
        with self._lock:
            return len(self._stubs)

    async def aclose(self) -> None:
        """Closes this loop's channel, and the sync thread with its own."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._stubs.pop(loop, None)
        if entry is not None:
            await entry[0].close()
        self.close()

    # ---------------------------------------------------------------- calls

    def error(self, e: grpc.aio.AioRpcError, request_id: str | None = None) -> PtcError:
        """`e`, which a call to this server ended with, as this package's error."""
        return from_rpc_error(e, self.url, bool(self._metadata), request_id)

    async def unary(self, method: str, request: Any) -> Any:
        """The answer of the unary RPC `method` (`"OpenSession"`, ...) to `request`."""
        call = getattr(self.stub(), method)
        try:
            return await call(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            raise self.error(e) from None

    def execute(self) -> grpc.aio.StreamStreamCall:
        """A new `Execute` stream (its first message is the run's `Start`)."""
        return self.stub().Execute(metadata=self._metadata)

    async def open_execute(self) -> Any:
        """`execute`, for a caller that may also hold the in-process transport (`_local`)."""
        return self.execute()

    # ---------------------------------------------------------------- the sync thread

    def run_sync(self, awaitable: Awaitable[T]) -> T:
        """Runs `awaitable` on the sync thread's loop (started at the first call) and waits for
        it: the blocking twins work from code without a loop (scripts) and inside a running
        one (notebooks), and every call of one `Sandbox` shares the thread's channel."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="ptc-engine-client", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()

    def close(self) -> None:
        """Closes the sync thread's channel and stops the thread (a later `run_sync` starts
        another)."""
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
