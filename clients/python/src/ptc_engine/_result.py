"""What an execution brings back, as plain Python values (`_wire` decodes them from the server's
messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call the program made: its input, and the result or error it got."""

    id: str
    name: str
    namespace: str | None
    input: Any
    result: Any = None
    error: str | None = None
    round: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True)
class Stats:
    wall_time_s: float = 0.0
    instantiate_time_s: float = 0.0
    round_trips: int = 0
    tool_calls: int = 0
    fuel_consumed: int | None = None
    peak_memory_bytes: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    output_truncated: bool = False


@dataclass(frozen=True)
class Result:
    """A finished execution: what it printed and returned, the files it wrote (with
    `return_files`; `None` for one past the byte limit), its tool calls, and its stats.
    For a failed one (inside an `ExecutionError`): also the traceback and exit code."""

    stdout: str = ""
    stderr: str = ""
    return_value: Any = None
    files: dict[str, bytes | None] = field(default_factory=dict)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    execution_id: str = ""
    traceback: str = ""
    exit_code: int | None = None
