"""Conversion between the server's protobuf messages and this package's Python values: tools,
limits and a run's options into requests; tool calls, output, results, failures, descriptions
and snapshots out of answers. The only module besides the transport's stub that builds or reads
a message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from ._errors import ExecutionError, InvalidRequest, for_failure
from ._proto import sandbox_pb2 as pb
from ._result import Result, Stats, ToolCallRecord
from ._tools import Tool
from ._types import (
    ApprovalRequest,
    Approve,
    Call,
    DescribedTool,
    Description,
    Deny,
    Limits,
    Output,
    SessionRunOptions,
    Snapshot,
    ToolCalls,
    Verdict,
)

# ------------------------------------------------------------------------ requests


def tool(t: Tool) -> pb.Tool:
    """`t` as offered to the server (its handler stays here)."""
    return pb.Tool(
        name=t.name,
        description=t.description,
        parameters_json=json.dumps(t.parameters) if t.parameters is not None else "",
        namespace=t.namespace or "",
        requires_approval=t.requires_approval,
        returns_json=json.dumps(t.returns) if t.returns is not None else "",
    )


def limits(given: Limits) -> pb.Limits:
    message = pb.Limits()
    if given.timeout_s is not None:
        message.timeout_ms = max(0, round(given.timeout_s * 1000))
    for name in ("max_round_trips", "max_tool_calls", "max_memory_bytes", "max_output_bytes", "fuel"):
        value = getattr(given, name)
        if value is not None:
            setattr(message, name, value)
    return message


def start(
    code: str,
    tools: Sequence[Tool],
    options: SessionRunOptions,
    *,
    runtime: str | None = None,
    request_id: str | None = None,
    network_allow: Iterable[str] = (),
    session_id: str = "",
) -> pb.Start:
    """The `Start` of a run of `code` with `tools` and `options` (in the session `session_id`)."""
    if not isinstance(code, str):
        raise InvalidRequest(f"code must be a string of Python, got {type(code).__name__}")
    run_limits = options.get("limits")
    timeout = options.get("timeout")
    if timeout is not None:
        run_limits = Limits(**{**(run_limits.__dict__ if run_limits else {}), "timeout_s": timeout})
    message = pb.Start(
        code=code,
        tools=[tool(t) for t in tools],
        runtime=runtime or "",
        return_files=bool(options.get("return_files", False)),
        request_id=request_id or "",
        session_id=session_id,
        network_allow=list(network_allow),
    )
    if run_limits is not None:
        message.limits.CopyFrom(limits(run_limits))
    for name, content in (options.get("files") or {}).items():
        data = content.encode() if isinstance(content, str) else bytes(content)
        message.files.append(pb.File(name=name, content=data))
    return message


def open_session(
    id: str | None,
    session_limits: Limits | None,
    idle_timeout: float | None,
    runtime: str | None,
    snapshot: Snapshot | bytes | None,
) -> pb.OpenSessionRequest:
    request = pb.OpenSessionRequest(session_id=id or "", runtime=runtime or "")
    if session_limits is not None:
        request.limits.CopyFrom(limits(session_limits))
    if idle_timeout is not None:
        request.idle_timeout_ms = max(1, round(idle_timeout * 1000))
    if snapshot is not None:
        request.snapshot = snapshot.data if isinstance(snapshot, Snapshot) else snapshot
    return request


def describe_request(tools: Sequence[Tool], runtime: str | None = None) -> pb.DescribeToolsRequest:
    return pb.DescribeToolsRequest(tools=[tool(t) for t in tools], runtime=runtime or "")


def snapshot_request(session_id: str, include_files: bool) -> pb.SnapshotSessionRequest:
    return pb.SnapshotSessionRequest(session_id=session_id, include_files=include_files)


def close_request(session_id: str) -> pb.CloseSessionRequest:
    return pb.CloseSessionRequest(session_id=session_id)


def decision(call_id: str, verdict: Verdict) -> pb.ClientMessage:
    """`on_approval`'s `verdict` on the call `call_id`; anything but an approval denies it."""
    message = pb.Decision(call_id=call_id)
    if verdict is True or (isinstance(verdict, Approve) and verdict.input is None):
        message.approve.SetInParent()
    elif isinstance(verdict, Approve):
        message.approve.input_json = json.dumps(verdict.input)
    elif isinstance(verdict, Deny):
        message.deny.reason = verdict.reason
    else:
        message.deny.reason = ""
    return pb.ClientMessage(decisions=pb.Decisions(decisions=[message]))


def tool_result(call_id: str, *, result_json: str | None = None, error: str | None = None) -> pb.ClientMessage:
    """A tool call's answer: its result as JSON text, or the error the program gets."""
    message = pb.ToolResult(call_id=call_id)
    if error is not None:
        message.error = error
    else:
        message.result_json = result_json or ""
    return pb.ClientMessage(tool_results=pb.ToolResults(results=[message]))


# ------------------------------------------------------------------------ answers


def _input(text: str) -> Any:
    """A call's input: its JSON, or the text itself if it is not JSON."""
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


def call(c: pb.ToolCall) -> Call:
    return Call(c.id, c.name, c.namespace or None, _input(c.input_json), c.traceparent or None)


def tool_calls(message: pb.ToolCalls) -> ToolCalls:
    asked = [ApprovalRequest(call(a.call), a.reason or None) for a in message.approvals]
    return ToolCalls(message.round, [call(c) for c in message.calls], asked)


def output(message: pb.Output) -> Output:
    stream: Literal["stdout", "stderr"] = "stderr" if message.stream == pb.OUTPUT_STREAM_STDERR else "stdout"
    return Output(stream, message.data.decode("utf-8", "replace"))


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


def _common(message: pb.Completed | pb.Failed, execution_id: str) -> dict[str, Any]:
    """What a completed and a failed execution both bring back."""
    return {
        "stdout": message.stdout,
        "stderr": message.stderr,
        "files": {f.name: (None if f.omitted else bytes(f.content)) for f in message.files},
        "tool_calls": _records(message.tool_calls),
        "stats": _stats(message.stats),
        "execution_id": execution_id,
    }


def completed(message: pb.Completed, execution_id: str) -> Result:
    return Result(return_value=_json(message.return_value_json), **_common(message, execution_id))


def failed(message: pb.Failed, execution_id: str) -> Result:
    return Result(
        traceback=message.traceback,
        exit_code=message.exit_code if message.HasField("exit_code") else None,
        **_common(message, execution_id),
    )


_KINDS = {value: name.removeprefix("FAILURE_KIND_").lower() for name, value in pb.FailureKind.items()}


def failure(message: pb.Failed, execution_id: str, request_id: str | None) -> ExecutionError:
    """The error of the run that ended with `message`."""
    kind = _KINDS.get(message.kind, "internal")
    result = failed(message, execution_id)
    return for_failure(kind, message.message, message.traceback, result, request_id=request_id)


def dropped(items: Iterable[pb.DroppedGlobal]) -> dict[str, str]:
    """Globals a session could not keep, by name: why."""
    return {d.name: d.reason for d in items}


def description(response: pb.DescribeToolsResponse) -> Description:
    return Description(
        tools=[DescribedTool(t.name, t.python_name, t.signature) for t in response.tools],
        stub=response.stub,
    )


def snapshot(response: pb.SessionSnapshot) -> Snapshot:
    return Snapshot(
        data=response.snapshot,
        kept=list(response.kept),
        modules=list(response.modules),
        dropped=dropped(response.dropped),
        files=list(response.files),
    )
