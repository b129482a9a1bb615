"""The keyword options of a run (`RunOptions`, `SessionRunOptions`) as the methods take them, and
what an error carries beside its message: the gRPC status it came from (in process too: the
server's own service answers there, with the same statuses) and the run's request id."""

import asyncio

import pytest

import ptc_engine
from ptc_engine import Output, RunOptions, Sandbox, SessionRunOptions


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


def test_the_run_options_are_a_session_runs_and_three_more():
    session = {"timeout", "limits", "files", "return_files", "on_output", "on_event", "on_approval"}
    assert SessionRunOptions.__optional_keys__ == session and not SessionRunOptions.__required_keys__
    assert RunOptions.__optional_keys__ == session | {"runtime", "request_id", "network_allow"}


async def test_a_keyword_no_method_takes_is_refused_as_python_refuses_it(sb):
    with pytest.raises(TypeError, match=r"Sandbox.run\(\) got an unexpected keyword argument 'timout'"):
        await sb.run("pass", timout=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'timout'"):
        [e async for e in sb.stream("pass", timout=3)]
    async with sb.session() as s:
        # A session's runtime is the one it was opened with.
        with pytest.raises(TypeError, match=r"Session.run\(\) got an unexpected keyword argument 'runtime'"):
            await s.run("pass", runtime="python")


async def test_stream_takes_the_run_options_and_an_on_event_sees_every_event_first(sb):
    seen = []
    printed = []
    events = [
        e
        async for e in sb.stream(
            "print(await add(a=1, b=2))\nopen('/mnt/data/o.txt', 'w').write('x')",
            tools=[add],
            timeout=30,
            return_files=True,
            on_event=seen.append,
            on_output=printed.append,
        )
    ]
    assert seen == events
    # One `Finished`, the last event.
    assert [type(e) for e in events].count(ptc_engine.Finished) == 1 and isinstance(events[-1], ptc_engine.Finished)
    # Output goes out in pieces as the program writes it (an epoch tick can fall between
    # print's "3" and its "\n"): together they are what it printed.
    assert "".join(o.text for o in printed) == "3\n" and all(isinstance(o, Output) for o in printed)
    assert events[-1].result.files == {"o.txt": b"x"}


async def test_errors_carry_the_grpc_status_and_the_runs_request_id(url, key, sb):
    # A program that failed: the run's request id, no status (the server said so in the stream).
    with pytest.raises(ptc_engine.PythonError) as failed:
        await sb.run("1 / 0", request_id="req-45-a")
    assert failed.value.request_id == "req-45-a" and failed.value.status is None
    assert failed.value.message.startswith("ZeroDivisionError") and str(failed.value) == failed.value.message

    # A run the server refused: its status, and the request id.
    with pytest.raises(ptc_engine.InvalidRequest) as refused:
        await sb.run("pass", runtime="python-7", request_id="req-45-b")
    assert (refused.value.status, refused.value.request_id) == ("INVALID_ARGUMENT", "req-45-b")
    assert "unknown runtime" in refused.value.message

    # The same request id while the first run still waits for a tool: ALREADY_EXISTS. The
    # second is sent once the first is surely running (its tool was called): sent before, it
    # could take the id first and refuse the other.
    gate, called = asyncio.Event(), asyncio.Event()

    async def wait() -> str:
        called.set()
        await gate.wait()
        return "done"

    first = asyncio.ensure_future(sb.run("print(await wait())", tools=[wait], request_id="req-45-c"))
    try:
        await asyncio.wait_for(called.wait(), 60)
        with pytest.raises(ptc_engine.DuplicateRequest) as duplicate:
            await sb.run("pass", request_id="req-45-c")
        assert (duplicate.value.status, duplicate.value.request_id) == ("ALREADY_EXISTS", "req-45-c")
        assert "req-45-c" in duplicate.value.message
    finally:
        gate.set()
    assert (await first).stdout == "done\n"

    # Calls that are not runs carry no request id.
    s = await sb.session()
    await s.close()
    with pytest.raises(ptc_engine.SessionNotFound) as gone:
        await s.snapshot()
    assert (gone.value.status, gone.value.request_id) == ("NOT_FOUND", None)
    async with Sandbox("http://127.0.0.1:9", api_key=key) as nowhere:
        with pytest.raises(ptc_engine.ServerUnavailable) as unreachable:
            await nowhere.run("pass", request_id="req-45-d")
    assert (unreachable.value.status, unreachable.value.request_id) == ("UNAVAILABLE", "req-45-d")
