"""ptc-engine's Python client: run a model's Python program with full CPython in ptc-engine's
sandbox, its tool calls answered by your Python functions.

    from ptc_engine import Sandbox

    async def get_weather(city: str) -> dict:
        \"\"\"The weather in a city.\"\"\"
        return {"city": city, "temp": 21}

    async with Sandbox("http://127.0.0.1:50051", api_key="...") as sb:
        result = await sb.run("print(await get_weather(city='Oslo'))", tools=[get_weather])
        print(result.stdout)

Integrations with agent frameworks' code modes are in `ptc_engine.integrations`.
"""

from ._errors import (
    AuthenticationError,
    Cancelled,
    DuplicateRequest,
    ExecutionError,
    ExecutionTimeout,
    FileQuotaError,
    FuelExhausted,
    InternalError,
    InvalidRequest,
    InvalidToolError,
    InvalidToolsError,
    MemoryLimitError,
    ProgramExit,
    PtcError,
    PythonError,
    RoundTripLimit,
    ServerBusy,
    ServerUnavailable,
    SessionBusy,
    SessionNotFound,
    Shutdown,
    ToolCallLimit,
)
from ._result import Result, Stats, ToolCallRecord
from ._sandbox import Sandbox, Session
from ._tools import Tool, ToolFailure, tool
from ._types import (
    ApprovalRequest,
    Approve,
    Call,
    DescribedTool,
    Description,
    Deny,
    Event,
    Finished,
    Limits,
    Output,
    RunOptions,
    SessionRunOptions,
    Snapshot,
    ToolCalls,
)

__all__ = [
    "ApprovalRequest",
    "Approve",
    "AuthenticationError",
    "Call",
    "Cancelled",
    "DescribedTool",
    "Deny",
    "Description",
    "DuplicateRequest",
    "Event",
    "ExecutionError",
    "ExecutionTimeout",
    "FileQuotaError",
    "Finished",
    "FuelExhausted",
    "InternalError",
    "InvalidRequest",
    "InvalidToolError",
    "InvalidToolsError",
    "Limits",
    "MemoryLimitError",
    "Output",
    "ProgramExit",
    "PtcError",
    "PythonError",
    "Result",
    "RoundTripLimit",
    "RunOptions",
    "Sandbox",
    "ServerBusy",
    "ServerUnavailable",
    "Session",
    "SessionBusy",
    "SessionNotFound",
    "SessionRunOptions",
    "Shutdown",
    "Snapshot",
    "Stats",
    "Tool",
    "ToolCallLimit",
    "ToolCallRecord",
    "ToolCalls",
    "ToolFailure",
    "tool",
]
