"""The in-process transport: the same `ptc.v1.Sandbox` calls `_transport.Transport` makes to a
server, with the same call objects (`NativeCall`), answered in this process by the native
module (`_native`, the engine and the server's own service compiled in): no server to start,
no socket, no other process. `Sandbox()` uses it
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
import os
import threading
from types import ModuleType
from typing import Any

from . import _data
from ._errors import PtcError
from ._transport import Transport, native

WHERE = "in-process"
"""What `Sandbox.url` says of a sandbox whose engine runs in this process."""

AHEAD_DIR = os.path.join(os.path.dirname(__file__), "_ahead")
"""The component compiled ahead, as the wheel ships it (`ptc-engine compile --out` at its build)."""

_lock = threading.Lock()
_module: ModuleType | None = None
_service: Any = None


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


class LocalTransport(Transport):
    """A `Transport` whose calls this process answers (its errors name no server)."""

    def __init__(self) -> None:
        super().__init__(WHERE, None)
        self.server = None

    async def started(self) -> tuple[ModuleType, Any]:
        if _module is not None and _service is not None:
            return _module, _service
        return await asyncio.to_thread(_started)
