"""Traces: a run continues the caller's OpenTelemetry span, and each tool runs within the span
its call was handed out with, so that the tool's own spans nest under the program's call. The
suite's server (`tests/tests/all/python_client.rs`) exports its spans over OTLP; the engine in
process has no exporter, and the client makes its spans with the caller's tracer provider."""

import os
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import ptc_engine

REMOTE = bool(os.environ.get("PTC_ENGINE_URL"))
_EXPORTER = InMemorySpanExporter()


def _tracer():
    """The process's tracer provider (the client's spans go there, as an instrumented
    library's do), exporting to `_EXPORTER`, emptied."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_ptc_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._ptc_test_exporter = True
    _EXPORTER.clear()
    return provider.get_tracer("test"), _EXPORTER


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
    # The execute_tool spans: one per call, none of them the caller's; the server's (remote),
    # or the client's own under its ptc.execution span (the engine in process).
    assert len({s.span_id for s in seen.values()}) == 3
    assert all(s.is_remote == REMOTE and s.span_id != caller.span_id for s in seen.values())
    if not REMOTE:
        execution = spans["ptc.execution"]
        assert execution.parent.span_id == caller.span_id
        assert execution.attributes["ptc.outcome"] == "completed"
        assert execution.attributes["ptc.tool_calls"] == 3
        tools = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool ")]
        assert sorted(s.name for s in tools) == ["execute_tool fetch", "execute_tool lookup", "execute_tool lookup"]
        assert {s.context.span_id for s in tools} == {s.span_id for s in seen.values()}
        for span in tools:
            assert span.parent.span_id == execution.context.span_id
            assert span.attributes["gen_ai.operation.name"] == "execute_tool"
            assert span.attributes["gen_ai.tool.call.id"]


async def test_without_a_current_span_a_run_starts_no_trace_of_the_caller_s(sb):
    seen = []

    async def lookup(q: str) -> str:
        """Looks `q` up."""
        seen.append(trace.get_current_span().get_span_context())
        return q

    _tracer()
    result = await sb.run("print(await lookup(q='a'))", tools=[lookup])
    assert result.stdout == "a\n"
    # The server's own trace (its execute_tool span), or in process the client's.
    assert seen[0].is_valid
    assert seen[0].trace_id != trace.get_current_span().get_span_context().trace_id


@pytest.mark.skipif(REMOTE, reason="the server makes these spans (tests/tests/all/traces.rs)")
async def test_in_process_a_failed_call_and_a_failed_program_are_error_spans_without_their_text(sb):
    tracer, exporter = _tracer()

    async def broken(q: str) -> str:
        """Fails."""
        raise ptc_engine.ToolFailure(f"no such thing: {q}")

    with tracer.start_as_current_span("agent code tool"):
        with pytest.raises(ptc_engine.PythonError):
            await sb.run("await broken(q='secret-input-XYZ')", tools=[broken])
    spans = {s.name: s for s in exporter.get_finished_spans()}
    call, execution = spans["execute_tool broken"], spans["ptc.execution"]
    assert call.status.status_code == StatusCode.ERROR and call.attributes["error.type"] == "ToolFailure"
    assert execution.status.status_code == StatusCode.ERROR
    assert execution.attributes["ptc.outcome"] == "python_error"
    for span in (call, execution):
        text = repr(span.to_json())
        assert "secret-input-XYZ" not in text and "no such thing" not in text, text
