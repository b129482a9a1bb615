"""What can go wrong, one exception type per case, each message saying what happened and what
to do, in words a model can act on (`str(e)`); and which of them the server's answers become:
a gRPC status (`from_status`, the only place that reads status codes) or a program's failure
(`for_failure`).

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
    """Every error of this package.

    Attributes:
        message: What happened and what to do (also `str(e)`).
        status: The name of the gRPC status the server answered with (`"UNAVAILABLE"`,
            `"NOT_FOUND"`, ...); `None` when the error did not come from one (a program that
            failed, a request this client refused before sending it).
        request_id: The `request_id=` of the run that failed; `None` without one (and for
            calls that are not runs).
    """

    def __init__(self, message: str = "", *, status: str | None = None, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.request_id = request_id


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
    """The program ran and failed.

    Attributes:
        kind: The server's failure kind (`"python_error"`, `"timeout"`, ...).
        result: What the program printed, its traceback, its tool calls and its stats up to
            the failure.
        message, request_id: as for every `PtcError`; `status` is `None` (the server reported
            the failure in the run's stream, not as a gRPC status).
    """

    kind = "internal"

    def __init__(self, message: str, result: Result, *, request_id: str | None = None) -> None:
        super().__init__(message, request_id=request_id)
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


# What the program's author (a model, mostly) can do about a limit, after the server's message
# (which says only which limit). The caller's remedy, a larger `Limits(...)`, is in the docs.
_HINTS = {
    "round_trips": "each tool call awaited on its own is a round; gather independent calls with "
    "asyncio.gather (Promise.all in JavaScript) so that they share one",
    "tool_calls": "make fewer tool calls: filter or batch the inputs first",
    "timeout": "the deadline counts the time tools take too; do less in one program, or split the work",
    "memory": "hold less data at once: process it in parts and keep only what is needed",
    "fuel": "the program used its CPU budget; do less computation in one program",
}


def for_failure(
    kind: str, message: str, traceback: str, result: Result, *, request_id: str | None = None
) -> ExecutionError:
    """The error of a program that failed with the server's failure `kind` and `message`."""
    cls = EXECUTION_ERRORS.get(kind, InternalError)
    if kind in _HINTS:
        message = f"{message}: {_HINTS[kind]}"
    if traceback and traceback not in message:
        message = f"{message}\n{traceback}"
    return cls(message, result, request_id=request_id)


# The statuses the server answers with, and what each means here (see the proto's `Sandbox`).
_BY_STATUS: dict[str, type[PtcError]] = {
    "INVALID_ARGUMENT": InvalidRequest,
    "FAILED_PRECONDITION": InvalidRequest,
    "OUT_OF_RANGE": InvalidRequest,
    "RESOURCE_EXHAUSTED": ServerBusy,
    "NOT_FOUND": SessionNotFound,
    "ABORTED": SessionBusy,
    "ALREADY_EXISTS": DuplicateRequest,
}

_CODES = frozenset(
    "OK CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS PERMISSION_DENIED "
    "RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE UNIMPLEMENTED INTERNAL UNAVAILABLE DATA_LOSS "
    "UNAUTHENTICATED".split()
)
"""The gRPC status codes' names."""


def from_status(code: str, details: str, url: str | None, keyed: bool, request_id: str | None = None) -> PtcError:
    """A call refused with the gRPC status named `code` (`"INVALID_ARGUMENT"`) and `details`,
    by the server at `url` (`None`: the engine in this process), as this package's error."""
    status = code if code in _CODES else "UNKNOWN"
    cls: type[PtcError]
    if status == "UNAVAILABLE" and url is None:
        cls, message = ServerUnavailable, details
    elif status == "UNAVAILABLE":
        cls, message = ServerUnavailable, (
            f"cannot reach the ptc-engine server at {url} ({details}): start it (`ptc-engine serve`) or check "
            "the address and port"
        )
    elif status == "UNAUTHENTICATED":
        what = "refused the API key" if keyed else "wants an API key and none was sent"
        cls, message = AuthenticationError, (
            f"the server at {url} {what} ({details}): set one of its keys (`--api-keys tenant:key`) in the "
            "environment variable PTC_ENGINE_API_KEY, which Sandbox() and every integration read, or pass it "
            "as Sandbox(url, api_key=...) (`api_key=` in each integration)"
        )
    elif status in _BY_STATUS:
        cls, message = _BY_STATUS[status], details
    else:
        cls, message = PtcError, f"{status}: {details}"
    return cls(message, status=status, request_id=request_id)
