"""Traces: a run continues the caller's OpenTelemetry span, and each tool runs within the span
its call was handed out with, so that the tool's own spans nest under the program's call. The
suite's server (`tests/tests/all/python_client.rs`) exports its spans over OTLP; the engine in
process makes none, and its tools run within the caller's span."""

import os
import threading

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

REMOTE = bool(os.environ.get("PTC_ENGINE_URL"))


def _tracer():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


async def test_each_tool_runs_within_its_call_s_span_of_the_caller_s_trace(sb):
    tracer, exporter = _tracer()
    seen = {}

    async def lookup(q: str) -> str:
        """Looks `q` up."""
        seen[q] = trace.get_current_span().get_span_context()
        with tracer.start_as_current_span(f"lookup {q}"):
            return q.upper()

    def fetch(q: str) -> str:
        """A sync tool, run off the event loop."""
        seen[q] = trace.get_current_span().get_span_context()
        assert threading.current_thread() is not threading.main_thread()
        with tracer.start_as_current_span(f"fetch {q}"):
            return q

    with tracer.start_as_current_span("agent code tool") as outer:
        result = await sb.run(
            "a, b = await asyncio.gather(lookup(q='a'), lookup(q='b'))\nprint(a, b, await fetch(q='c'))",
            tools=[lookup, fetch],
        )
    assert result.stdout == "A B c\n"
    caller = outer.get_span_context()
    assert set(seen) == {"a", "b", "c"}
    assert all(s.trace_id == caller.trace_id for s in seen.values()), "one trace, the caller's"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    for q, name in [("a", "lookup a"), ("b", "lookup b"), ("c", "fetch c")]:
        inner = spans[name]
        assert inner.context.trace_id == caller.trace_id
        # The tool's own span is a child of the span current while it ran.
        assert inner.parent.span_id == seen[q].span_id, name
    if REMOTE:
        # The server's execute_tool spans: one per call, none of them the caller's.
        assert len({s.span_id for s in seen.values()}) == 3
        assert all(s.is_remote and s.span_id != caller.span_id for s in seen.values())
    else:
        assert all(s.span_id == caller.span_id for s in seen.values())


async def test_without_a_current_span_a_run_starts_no_trace_of_the_caller_s(sb):
    seen = []

    async def lookup(q: str) -> str:
        """Looks `q` up."""
        seen.append(trace.get_current_span().get_span_context())
        return q

    result = await sb.run("print(await lookup(q='a'))", tools=[lookup])
    assert result.stdout == "a\n"
    # Remote: the server's own trace (its execute_tool span); in process: none at all.
    assert seen[0].is_valid == REMOTE
