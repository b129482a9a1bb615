"""W3C trace context between the caller's OpenTelemetry trace and the server's spans, when
`opentelemetry-api` is installed (nothing happens without it): a run continues the caller's
current span, and each tool runs within the `execute_tool` span the server handed its call
out with, so that a framework's trace shows the program's nested calls under its code tool and
the tools' own spans under them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

_context: ModuleType | None
_propagate: ModuleType | None
try:
    from opentelemetry import context as _otel_context
    from opentelemetry import propagate as _otel_propagate

    _context, _propagate = _otel_context, _otel_propagate
except ImportError:  # pragma: no cover - exercised where opentelemetry is absent
    _context = _propagate = None


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
