"""What can go wrong, one exception type per case, each message saying what happened and what
to do, in words a model can act on (`str(e)`).

Two families: `ExecutionError`, when the program ran and failed (one subclass per failure
kind, with the program's output, traceback and call log in `.result`); and the rest, when the
request itself was refused or could not be sent (`ServerUnavailable`, `AuthenticationError`,
`InvalidRequest`, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._result import Result


class PtcError(Exception):
    """Every error of this package."""


class InvalidToolError(PtcError, ValueError):
    """A tool cannot be offered as given (no name, `*args`, a parameter type with no schema)."""


class ServerUnavailable(PtcError):
    """The server cannot be reached (or is shutting down): check the address, start it with
    `ptc-engine serve`, or retry shortly."""


class AuthenticationError(PtcError):
    """The server refused the API key (or none was sent)."""


class InvalidRequest(PtcError, ValueError):
    """The server refused the request as malformed: a tool's schema, a limit out of range, a
    session id, a snapshot that does not verify."""


class ServerBusy(PtcError):
    """The server or this key's share of it is full (executions, sessions, memory): retry later
    or end some work first."""


class SessionNotFound(PtcError):
    """The session does not exist (or ended: the message says why)."""


class SessionBusy(PtcError):
    """The session is running another execution: one at a time per session."""


class DuplicateRequest(PtcError):
    """An execution with this `request_id` is still running."""


class ExecutionError(PtcError):
    """The program ran and failed. `kind` is the server's failure kind; `result` holds what it
    printed, its traceback, its tool calls and its stats up to the failure."""

    kind = "internal"

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.message = message
        self.result = result

    @property
    def traceback(self) -> str:
        return self.result.traceback


class PythonError(ExecutionError):
    """An exception escaped the program; `traceback` has the program's own line numbers."""

    kind = "python_error"


class ProgramExit(ExecutionError):
    """The program called `sys.exit(N)` with N != 0 (`result.exit_code`)."""

    kind = "exit"


class InvalidToolsError(ExecutionError):
    """The tools could not be bound in the program (names that collide once normalised)."""

    kind = "invalid_tools"


class ExecutionTimeout(ExecutionError):
    """The deadline passed (tool waits included)."""

    kind = "timeout"


class MemoryLimitError(ExecutionError):
    """The program grew past its memory limit (or the server's memory budget)."""

    kind = "memory"


class FuelExhausted(ExecutionError):
    """The program used up its fuel (CPU budget)."""

    kind = "fuel"


class RoundTripLimit(ExecutionError):
    """More batches of tool calls than allowed: gather independent calls with `asyncio.gather`."""

    kind = "round_trips"


class ToolCallLimit(ExecutionError):
    """More tool calls than allowed."""

    kind = "tool_calls"


class Cancelled(ExecutionError):
    """The execution was cancelled."""

    kind = "cancelled"


class Shutdown(ExecutionError):
    """The server shut down while the program ran: run it again."""

    kind = "shutdown"


class FileQuotaError(ExecutionError):
    """The program's files left the key over its file quota; what it wrote was removed."""

    kind = "file_quota"


class InternalError(ExecutionError):
    """The server failed (not the program's doing)."""

    kind = "internal"


EXECUTION_ERRORS: dict[str, type[ExecutionError]] = {
    cls.kind: cls
    for cls in (
        PythonError,
        ProgramExit,
        InvalidToolsError,
        ExecutionTimeout,
        MemoryLimitError,
        FuelExhausted,
        RoundTripLimit,
        ToolCallLimit,
        Cancelled,
        Shutdown,
        FileQuotaError,
        InternalError,
    )
}
