"""W3C trace context between the caller's OpenTelemetry trace and the server's spans, when
`opentelemetry-api` is installed (nothing happens without it): a run continues the caller's
current span, and each tool runs within the `execute_tool` span the server handed its call
out with, so that a framework's trace shows the program's nested calls under its code tool and
the tools' own spans under them.

The engine in this process has no exporter of its own: there the client makes the spans, with
the caller's tracer provider (`ptc.execution`, and an `execute_tool` span per nested call, in
the GenAI conventions' terms, as the server names them). Like the server's, they carry names,
ids and counts, never a tool's input, result or error text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from ._types import Call

_context: ModuleType | None
_propagate: ModuleType | None
_trace: ModuleType | None
try:
    from opentelemetry import context as _otel_context
    from opentelemetry import propagate as _otel_propagate
    from opentelemetry import trace as _otel_trace

    _context, _propagate, _trace = _otel_context, _otel_propagate, _otel_trace
except ImportError:  # pragma: no cover - exercised where opentelemetry is absent
    _context = _propagate = _trace = None

# A proxy until the application sets its provider, then that provider's tracer.
_tracer = _trace.get_tracer("ptc-engine") if _trace is not None else None


def current() -> str | None:
    """The caller's current span as a `traceparent`, if there is one."""
    if _propagate is None:
        return None
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return carrier.get("traceparent")


@contextlib.contextmanager
def within(traceparent: str | None) -> Iterator[None]:
    """Runs the block with `traceparent`'s span as the current one."""
    if _propagate is None or _context is None or not traceparent:
        yield
        return
    token = _context.attach(_propagate.extract({"traceparent": traceparent}))
    try:
        yield
    finally:
        _context.detach(token)


class Span:
    """A span this client makes (the engine in process), or nothing (no `opentelemetry-api`,
    or a server that makes its own)."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, key: str, value: str | int) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    def failed(self, kind: str) -> None:
        """Ends as an error of `kind` (a word, not the failure's text)."""
        if self._span is not None and _trace is not None:
            self._span.set_attribute("error.type", kind)
            self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, kind))


def _recording() -> bool:
    """Whether the application has set a tracer provider. Until it does, a span made here
    records nothing and carries on its parent's context, which stays current without it: it
    would only cost 7 µs, the run's and each tool call's (`opentelemetry-api` 1.45 on CPython
    3.11), so none is made."""
    return _trace is not None and not isinstance(
        _trace.get_tracer_provider(), (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
    )


_UNTRACED = contextlib.nullcontext(Span())
"""A block with no span to run in (no span object: nothing to set)."""


def execution(here: bool) -> contextlib.AbstractContextManager[Span]:
    """The run's `ptc.execution` span, current within the block, when the engine runs `here`
    (in this process) and so makes none."""
    if not here or _tracer is None or not _recording():
        return _UNTRACED
    return _execution()


@contextlib.contextmanager
def _execution() -> Iterator[Span]:
    assert _tracer is not None
    # Not the exception's words: they hold the program's traceback (`Span.failed` says the kind).
    with _tracer.start_as_current_span(
        "ptc.execution", record_exception=False, set_status_on_exception=False
    ) as span:
        yield Span(span)


def tool(call: Call, here: bool) -> contextlib.AbstractContextManager[Span]:
    """Runs the block (a tool answering `call`) within the call's `execute_tool` span: the one
    the server handed it out with, or (the engine `here`) one this client makes."""
    if call.traceparent or not here:
        # The server made the span: its context is the tools' (for what they call in turn),
        # whether or not this process records spans of its own.
        return _within(call.traceparent) if call.traceparent and _propagate is not None else _UNTRACED
    if _tracer is None or not _recording():
        return _UNTRACED
    return _tool(call)


@contextlib.contextmanager
def _within(traceparent: str) -> Iterator[Span]:
    with within(traceparent):
        yield Span()


@contextlib.contextmanager
def _tool(call: Call) -> Iterator[Span]:
    assert _tracer is not None
    attributes: dict[str, str] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
    }
    if call.namespace:
        attributes["ptc.tool.namespace"] = call.namespace
    with _tracer.start_as_current_span(
        f"execute_tool {call.name}", attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        yield Span(span)
