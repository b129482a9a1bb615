from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OutputStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_STREAM_UNSPECIFIED: _ClassVar[OutputStream]
    OUTPUT_STREAM_STDOUT: _ClassVar[OutputStream]
    OUTPUT_STREAM_STDERR: _ClassVar[OutputStream]

class FailureKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_KIND_UNSPECIFIED: _ClassVar[FailureKind]
    FAILURE_KIND_PYTHON_ERROR: _ClassVar[FailureKind]
    FAILURE_KIND_EXIT: _ClassVar[FailureKind]
    FAILURE_KIND_INVALID_TOOLS: _ClassVar[FailureKind]
    FAILURE_KIND_TIMEOUT: _ClassVar[FailureKind]
    FAILURE_KIND_MEMORY: _ClassVar[FailureKind]
    FAILURE_KIND_FUEL: _ClassVar[FailureKind]
    FAILURE_KIND_ROUND_TRIPS: _ClassVar[FailureKind]
    FAILURE_KIND_TOOL_CALLS: _ClassVar[FailureKind]
    FAILURE_KIND_CANCELLED: _ClassVar[FailureKind]
    FAILURE_KIND_SHUTDOWN: _ClassVar[FailureKind]
    FAILURE_KIND_INTERNAL: _ClassVar[FailureKind]
    FAILURE_KIND_FILE_QUOTA: _ClassVar[FailureKind]
OUTPUT_STREAM_UNSPECIFIED: OutputStream
OUTPUT_STREAM_STDOUT: OutputStream
OUTPUT_STREAM_STDERR: OutputStream
FAILURE_KIND_UNSPECIFIED: FailureKind
FAILURE_KIND_PYTHON_ERROR: FailureKind
FAILURE_KIND_EXIT: FailureKind
FAILURE_KIND_INVALID_TOOLS: FailureKind
FAILURE_KIND_TIMEOUT: FailureKind
FAILURE_KIND_MEMORY: FailureKind
FAILURE_KIND_FUEL: FailureKind
FAILURE_KIND_ROUND_TRIPS: FailureKind
FAILURE_KIND_TOOL_CALLS: FailureKind
FAILURE_KIND_CANCELLED: FailureKind
FAILURE_KIND_SHUTDOWN: FailureKind
FAILURE_KIND_INTERNAL: FailureKind
FAILURE_KIND_FILE_QUOTA: FailureKind

class ClientMessage(_message.Message):
    __slots__ = ("start", "tool_results", "cancel", "decisions")
    START_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    start: Start
    tool_results: ToolResults
    cancel: Cancel
    decisions: Decisions
    def __init__(self, start: _Optional[_Union[Start, _Mapping]] = ..., tool_results: _Optional[_Union[ToolResults, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., decisions: _Optional[_Union[Decisions, _Mapping]] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json", "namespace", "requires_approval", "returns_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    RETURNS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    namespace: str
    requires_approval: bool
    returns_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., namespace: _Optional[str] = ..., requires_approval: _Optional[bool] = ..., returns_json: _Optional[str] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("timeout_ms", "max_round_trips", "max_tool_calls", "max_memory_bytes", "max_output_bytes", "fuel")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROUND_TRIPS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    FUEL_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    max_round_trips: int
    max_tool_calls: int
    max_memory_bytes: int
    max_output_bytes: int
    fuel: int
    def __init__(self, timeout_ms: _Optional[int] = ..., max_round_trips: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., max_memory_bytes: _Optional[int] = ..., max_output_bytes: _Optional[int] = ..., fuel: _Optional[int] = ...) -> None: ...

class Start(_message.Message):
    __slots__ = ("code", "tools", "limits", "session_id", "request_id", "open_session", "runtime", "return_files", "files", "network_allow")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    RETURN_FILES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_ALLOW_FIELD_NUMBER: _ClassVar[int]
    code: str
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    limits: Limits
    session_id: str
    request_id: str
    open_session: bool
    runtime: str
    return_files: bool
    files: _containers.RepeatedCompositeFieldContainer[File]
    network_allow: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., session_id: _Optional[str] = ..., request_id: _Optional[str] = ..., open_session: _Optional[bool] = ..., runtime: _Optional[str] = ..., return_files: _Optional[bool] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ..., network_allow: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "result_json", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    result_json: str
    error: str
    def __init__(self, call_id: _Optional[str] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ToolResults(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ToolResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ToolResult, _Mapping]]] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Decisions(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("call_id", "approve", "deny")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    approve: Approve
    deny: Deny
    def __init__(self, call_id: _Optional[str] = ..., approve: _Optional[_Union[Approve, _Mapping]] = ..., deny: _Optional[_Union[Deny, _Mapping]] = ...) -> None: ...

class Approve(_message.Message):
    __slots__ = ("input_json",)
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    input_json: str
    def __init__(self, input_json: _Optional[str] = ...) -> None: ...

class Deny(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("started", "tool_calls", "output", "completed", "failed", "error")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    started: Started
    tool_calls: ToolCalls
    output: Output
    completed: Completed
    failed: Failed
    error: Error
    def __init__(self, started: _Optional[_Union[Started, _Mapping]] = ..., tool_calls: _Optional[_Union[ToolCalls, _Mapping]] = ..., output: _Optional[_Union[Output, _Mapping]] = ..., completed: _Optional[_Union[Completed, _Mapping]] = ..., failed: _Optional[_Union[Failed, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ("execution_id",)
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    def __init__(self, execution_id: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "input_json", "namespace", "traceparent")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    input_json: str
    namespace: str
    traceparent: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input_json: _Optional[str] = ..., namespace: _Optional[str] = ..., traceparent: _Optional[str] = ...) -> None: ...

class ToolCalls(_message.Message):
    __slots__ = ("calls", "round", "approvals")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    round: int
    approvals: _containers.RepeatedCompositeFieldContainer[ApprovalRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., round: _Optional[int] = ..., approvals: _Optional[_Iterable[_Union[ApprovalRequest, _Mapping]]] = ...) -> None: ...

class ApprovalRequest(_message.Message):
    __slots__ = ("call", "reason")
    CALL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    call: ToolCall
    reason: str
    def __init__(self, call: _Optional[_Union[ToolCall, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class Output(_message.Message):
    __slots__ = ("stream", "data")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    stream: OutputStream
    data: bytes
    def __init__(self, stream: _Optional[_Union[OutputStream, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ToolCallRecord(_message.Message):
    __slots__ = ("id", "name", "input_json", "result_json", "error", "round", "duration_us", "namespace")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    DURATION_US_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    input_json: str
    result_json: str
    error: str
    round: int
    duration_us: int
    namespace: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input_json: _Optional[str] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ..., round: _Optional[int] = ..., duration_us: _Optional[int] = ..., namespace: _Optional[str] = ...) -> None: ...

class Stats(_message.Message):
    __slots__ = ("wall_time_us", "instantiate_time_us", "round_trips", "tool_calls", "fuel_consumed", "peak_memory_bytes", "stdout_bytes", "stderr_bytes", "output_truncated")
    WALL_TIME_US_FIELD_NUMBER: _ClassVar[int]
    INSTANTIATE_TIME_US_FIELD_NUMBER: _ClassVar[int]
    ROUND_TRIPS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    FUEL_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    wall_time_us: int
    instantiate_time_us: int
    round_trips: int
    tool_calls: int
    fuel_consumed: int
    peak_memory_bytes: int
    stdout_bytes: int
    stderr_bytes: int
    output_truncated: bool
    def __init__(self, wall_time_us: _Optional[int] = ..., instantiate_time_us: _Optional[int] = ..., round_trips: _Optional[int] = ..., tool_calls: _Optional[int] = ..., fuel_consumed: _Optional[int] = ..., peak_memory_bytes: _Optional[int] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., output_truncated: _Optional[bool] = ...) -> None: ...

class File(_message.Message):
    __slots__ = ("name", "size", "content", "omitted")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    content: bytes
    omitted: bool
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., content: _Optional[bytes] = ..., omitted: _Optional[bool] = ...) -> None: ...

class Completed(_message.Message):
    __slots__ = ("stdout", "stderr", "return_value_json", "tool_calls", "stats", "files")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    RETURN_VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    stdout: str
    stderr: str
    return_value_json: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallRecord]
    stats: Stats
    files: _containers.RepeatedCompositeFieldContainer[File]
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., return_value_json: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallRecord, _Mapping]]] = ..., stats: _Optional[_Union[Stats, _Mapping]] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ...) -> None: ...

class Failed(_message.Message):
    __slots__ = ("kind", "message", "traceback", "exit_code", "stdout", "stderr", "tool_calls", "stats", "files")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    kind: FailureKind
    message: str
    traceback: str
    exit_code: int
    stdout: str
    stderr: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallRecord]
    stats: Stats
    files: _containers.RepeatedCompositeFieldContainer[File]
    def __init__(self, kind: _Optional[_Union[FailureKind, str]] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., exit_code: _Optional[int] = ..., stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallRecord, _Mapping]]] = ..., stats: _Optional[_Union[Stats, _Mapping]] = ..., files: _Optional[_Iterable[_Union[File, _Mapping]]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class DescribeToolsRequest(_message.Message):
    __slots__ = ("tools", "runtime")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    runtime: str
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., runtime: _Optional[str] = ...) -> None: ...

class DescribedTool(_message.Message):
    __slots__ = ("name", "python_name", "signature")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PYTHON_NAME_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    python_name: str
    signature: str
    def __init__(self, name: _Optional[str] = ..., python_name: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class DescribeToolsResponse(_message.Message):
    __slots__ = ("tools", "stub")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    STUB_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[DescribedTool]
    stub: str
    def __init__(self, tools: _Optional[_Iterable[_Union[DescribedTool, _Mapping]]] = ..., stub: _Optional[str] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("session_id", "limits", "idle_timeout_ms", "snapshot", "runtime")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    limits: Limits
    idle_timeout_ms: int
    snapshot: bytes
    runtime: str
    def __init__(self, session_id: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., idle_timeout_ms: _Optional[int] = ..., snapshot: _Optional[bytes] = ..., runtime: _Optional[str] = ...) -> None: ...

class DroppedGlobal(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("session_id", "restored", "dropped", "idle_timeout_ms", "files")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    restored: _containers.RepeatedScalarFieldContainer[str]
    dropped: _containers.RepeatedCompositeFieldContainer[DroppedGlobal]
    idle_timeout_ms: int
    files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session_id: _Optional[str] = ..., restored: _Optional[_Iterable[str]] = ..., dropped: _Optional[_Iterable[_Union[DroppedGlobal, _Mapping]]] = ..., idle_timeout_ms: _Optional[int] = ..., files: _Optional[_Iterable[str]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("closed",)
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    closed: bool
    def __init__(self, closed: _Optional[bool] = ...) -> None: ...

class SnapshotSessionRequest(_message.Message):
    __slots__ = ("session_id", "include_files")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FILES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    include_files: bool
    def __init__(self, session_id: _Optional[str] = ..., include_files: _Optional[bool] = ...) -> None: ...

class SessionSnapshot(_message.Message):
    __slots__ = ("snapshot", "kept", "modules", "dropped", "files")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    MODULES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    snapshot: bytes
    kept: _containers.RepeatedScalarFieldContainer[str]
    modules: _containers.RepeatedScalarFieldContainer[str]
    dropped: _containers.RepeatedCompositeFieldContainer[DroppedGlobal]
    files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, snapshot: _Optional[bytes] = ..., kept: _Optional[_Iterable[str]] = ..., modules: _Optional[_Iterable[str]] = ..., dropped: _Optional[_Iterable[_Union[DroppedGlobal, _Mapping]]] = ..., files: _Optional[_Iterable[str]] = ...) -> None: ...
