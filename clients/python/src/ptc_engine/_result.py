"""What an execution brings back, as plain Python values (decoded from the wire)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ._proto import sandbox_pb2 as pb


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


def _json(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _records(records: Any) -> list[ToolCallRecord]:
    out = []
    for r in records:
        outcome = r.WhichOneof("outcome")
        out.append(
            ToolCallRecord(
                id=r.id,
                name=r.name,
                namespace=r.namespace or None,
                input=_json(r.input_json),
                result=_json(r.result_json) if outcome == "result_json" else None,
                error=r.error if outcome == "error" else None,
                round=r.round,
                duration_s=r.duration_us / 1e6,
            )
        )
    return out


def _stats(s: pb.Stats) -> Stats:
    return Stats(
        wall_time_s=s.wall_time_us / 1e6,
        instantiate_time_s=s.instantiate_time_us / 1e6,
        round_trips=s.round_trips,
        tool_calls=s.tool_calls,
        fuel_consumed=s.fuel_consumed if s.HasField("fuel_consumed") else None,
        peak_memory_bytes=s.peak_memory_bytes,
        stdout_bytes=s.stdout_bytes,
        stderr_bytes=s.stderr_bytes,
        output_truncated=s.output_truncated,
    )


def _files(files: Any) -> dict[str, bytes | None]:
    return {f.name: (None if f.omitted else bytes(f.content)) for f in files}


def completed(message: pb.Completed, execution_id: str) -> Result:
    return Result(return_value=_json(message.return_value_json), **_common(message, execution_id))


def failed(message: pb.Failed, execution_id: str) -> Result:
    return Result(
        traceback=message.traceback,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        **_common(message, execution_id),
    )


def _common(message: pb.Completed | pb.Failed, execution_id: str) -> dict[str, Any]:
    """What a completed and a failed execution both bring back."""
    return {
        "stdout": message.stdout,
        "stderr": message.stderr,
        "files": _files(message.files),
        "tool_calls": _records(message.tool_calls),
        "stats": _stats(message.stats),
        "execution_id": execution_id,
    }
