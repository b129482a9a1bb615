"""One run: its `Execute` stream, from the `Start` sent to the result or error read; each
round's tool calls answered and each held call decided by tasks of their own (so the calls of
one round run concurrently), all cancelled, with the stream, when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from . import _threads, _tracing, _wire
from ._errors import ExecutionError, InternalError, InvalidRequest, PtcError
from ._proto import sandbox_pb2 as pb
from ._result import Result
from ._tools import Tool, ToolFailure
from ._transport import Transport
from ._types import (
    ApprovalHandler,
    ApprovalRequest,
    Call,
    Deny,
    Event,
    Finished,
    Output,
    SessionRunOptions,
    Verdict,
)

Send = Callable[[pb.ClientMessage], Awaitable[None]]

async def execute(transport: Transport, start: pb.Start, tools: Sequence[Tool], options: SessionRunOptions) -> Result:
    """Runs `start` on `transport`'s server, answering its calls with `tools`; its `Result`, or
    the `PtcError` it ended with. The engine in this process makes no spans: the run's
    `ptc.execution` span is made here (`_tracing`)."""
    here = transport.server is None
    with _tracing.execution(here) as span:
        try:
            result = await _execute(transport, start, tools, options, here)
        except ExecutionError as e:
            _traced(span, e.result)
            span.set("ptc.outcome", e.kind)
            span.failed(e.kind)
            raise
        except PtcError as e:
            span.failed(type(e).__name__)
            raise
        _traced(span, result)
        span.set("ptc.outcome", "completed")
        return result


def _traced(span: _tracing.Span, result: Result) -> None:
    span.set("ptc.execution.id", result.execution_id)
    span.set("ptc.rounds", result.stats.round_trips)
    span.set("ptc.tool_calls", result.stats.tool_calls)
    span.set("ptc.peak_memory_bytes", result.stats.peak_memory_bytes)


async def _execute(
    transport: Transport, start: pb.Start, tools: Sequence[Tool], options: SessionRunOptions, here: bool
) -> Result:
    on_approval = options.get("on_approval")
    asking = [t.name for t in tools if t.requires_approval]
    if asking and on_approval is None:
        raise InvalidRequest(
            f"tools {asking} need the user's approval for each call: pass on_approval= to decide them",
            request_id=start.request_id or None,
        )
    on_output, on_event = options.get("on_output"), options.get("on_event")
    watched = on_output is not None or on_event is not None
    by_name = {(t.namespace or None, t.name): t for t in tools}
    request_id = start.request_id or None
    call = await transport.open_execute(_tracing.current())
    loop = asyncio.get_running_loop()
    writing = asyncio.Lock()
    answering: set[asyncio.Task[None]] = set()
    execution_id = ""

    async def send(message: pb.ClientMessage) -> None:
        # One write at a time, in order; the answering tasks write whenever they finish. A
        # message the call has room for is handed over at once, with no lock taken.
        if not writing.locked():
            waiting = call.send(message)
            if waiting is None:
                return
            async with writing:  # free: taken without a pause, so nothing is written between
                await waiting
            return
        async with writing:
            await call.write(message)

    def post(message: pb.ClientMessage) -> None:
        """`send` from a tool's thread: handed over there if the call has room, else by the
        loop."""
        try:
            if call.offer(message):
                return
        except asyncio.InvalidStateError:
            return  # the execution ended meanwhile
        with contextlib.suppress(RuntimeError):  # a closed loop: the run has ended
            loop.call_soon_threadsafe(lambda: spawn(_sent(send, message)))

    async def emit(event: Event) -> None:
        returned = [on_event(event) if on_event else None]
        if on_output is not None and isinstance(event, Output):
            returned.append(on_output(event))
        for r in returned:
            if inspect.isawaitable(r):
                await r

    prune_at = 64

    def spawn(job: Coroutine[Any, Any, None]) -> None:
        nonlocal prune_at
        task = _started(job)
        if not task.done():
            # Tasks that ended are let go here, in bulk, not each by a callback: a callback is
            # one more turn of the loop before the run reads on. The next pass waits until the
            # set has doubled, so a round of many slow calls costs no pass per call.
            if len(answering) >= prune_at:
                answering.difference_update([t for t in answering if t.done()])
                prune_at = max(64, 2 * len(answering))
            answering.add(task)

    try:
        try:
            await send(pb.ClientMessage(start=start))
        except asyncio.InvalidStateError:
            pass  # The server ended the call already: reading it says why.
        while True:
            # Idle: every answer so far was sent at once, or comes from a tool thread.
            message = await call.read(idle=not _waiting(answering))
            if message is None:
                raise InternalError(
                    "the server ended the execution's stream without its result",
                    Result(execution_id=execution_id),
                    request_id=request_id,
                )
            kind = message.WhichOneof("message")
            if kind == "started":
                execution_id = message.started.execution_id
            elif kind == "tool_calls":
                batch = _wire.tool_calls(message.tool_calls)
                if watched:
                    await emit(batch)
                for c in batch.calls:
                    tool = by_name.get((c.namespace, c.name))
                    if tool is not None and tool.blocking:
                        # Sent from its thread: the loop takes no part (`_threads`).
                        context = contextvars.copy_context()
                        _threads.submit(context.run, _answer_blocking, tool, c, post, here, loop)
                    else:
                        spawn(_answer(tool, c, send, here))
                if on_approval is not None:
                    for asked in batch.approvals:
                        spawn(_decide(on_approval, asked, send))
            elif kind == "output":
                if watched:
                    await emit(_wire.output(message.output))
            elif kind == "completed":
                result = _wire.completed(message.completed, execution_id)
                if watched:
                    await emit(Finished(result))
                return result
            elif kind == "failed":
                raise _wire.failure(message.failed, execution_id, request_id)
            elif kind == "error":
                # The server refused results this client sent (a bug here, not the program's).
                raise PtcError(
                    f"the server refused a message: {message.error.code}: {message.error.message}",
                    request_id=request_id,
                )
    finally:
        for task in answering:
            task.cancel()
        # Ends the stream; before the end that cancels the execution on the server.
        call.cancel()


def _waiting(tasks: set[asyncio.Task[None]]) -> bool:
    """Whether one of a run's answering tasks has not ended."""
    return any(not t.done() for t in tasks)


if sys.version_info >= (3, 12):

    def _started(job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """`job` as a task that starts now, in the caller's turn of the loop: a tool that
        answers without waiting (most do) has its answer sent before the run reads on, with no
        turn of the loop for it (each turn polls the loop's selector: a system call)."""
        return asyncio.Task(job, loop=asyncio.get_running_loop(), eager_start=True)

else:

    def _started(job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """`job` as a task (started at the loop's next turn: before 3.12 a task cannot start
        eagerly)."""
        return asyncio.ensure_future(job)


async def _answer(tool: Tool | None, call: Call, send: Send, here: bool) -> None:
    """Runs one call with its tool, within the call's span, and sends the result, or the error
    the program gets."""
    with _tracing.tool(call, here) as span:
        try:
            if tool is None:
                raise LookupError(f"this client has no tool {call.name!r}")
            answer = _wire.tool_result(call.id, result_json=await tool.call(_arguments(call)))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            answer = _failed(call, span, e)
    await _sent(send, answer)


def _answer_blocking(
    tool: Tool, call: Call, post: Callable[[pb.ClientMessage], None], here: bool, loop: asyncio.AbstractEventLoop
) -> None:
    """`_answer` for a sync tool, in a tool thread (`_threads`), the answer sent from there."""
    with _tracing.tool(call, here) as span:
        try:
            answer = _wire.tool_result(call.id, result_json=tool.call_blocking(_arguments(call), loop))
        except BaseException as e:  # noqa: BLE001 - nobody else would see it: the run would wait forever
            answer = _failed(call, span, e)
    post(answer)


def _arguments(call: Call) -> dict[str, Any]:
    return call.input if isinstance(call.input, dict) else {}


def _failed(call: Call, span: _tracing.Span, e: BaseException) -> pb.ClientMessage:
    """The answer for a call whose tool raised `e`: a `ToolFailure`'s message as it is, any
    other exception's with its type."""
    if isinstance(e, ToolFailure):
        span.failed("ToolFailure")
        return _wire.tool_result(call.id, error=str(e))
    span.failed(type(e).__name__)
    return _wire.tool_result(call.id, error=f"{type(e).__name__}: {e}")


async def _sent(send: Send, answer: pb.ClientMessage) -> None:
    try:
        await send(answer)
    except (asyncio.InvalidStateError, RuntimeError):
        pass  # the execution ended meanwhile


async def _decide(on_approval: ApprovalHandler, request: ApprovalRequest, send: Send) -> None:
    """Asks `on_approval` about one held call and sends its answer; a callback that fails
    denies the call, saying so."""
    verdict: Verdict
    try:
        answered = on_approval(request)
        verdict = await answered if inspect.isawaitable(answered) else answered
    except asyncio.CancelledError:
        raise
    except Exception as e:
        verdict = Deny(f"asking the user failed ({type(e).__name__}: {e})")
    try:
        await send(_wire.decision(request.call.id, verdict))
    except (asyncio.InvalidStateError, RuntimeError):
        pass  # the execution ended meanwhile
