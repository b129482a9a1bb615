"""A session through the blocking twins (`Sandbox.session_sync`, `Session.run_sync`, ...), as a
script or a notebook cell uses it: driven by the same background thread as `run_sync`."""

import asyncio
import threading

import pytest

import ptc_engine
from ptc_engine import Sandbox


def test_a_session_opened_and_run_without_an_event_loop_keeps_its_state(url, key):
    threads = []

    def total(xs: list[int]) -> int:
        """Adds numbers up."""
        return sum(xs)

    async def seen(xs: list[int]) -> int:
        """How many numbers there are."""
        threads.append(threading.current_thread().name)
        return len(xs)

    with Sandbox(url, api_key=key) as sb:
        with sb.session_sync() as s:
            s.run_sync("rows = [3, 1, 2]")
            result = s.run_sync("print(await total(xs=rows), await seen(xs=rows))", tools=[total, seen])
            assert result.stdout == "6 3\n"
            # Async tools run on the sync thread's loop, as they do for `Sandbox.run_sync`.
            assert threads == ["ptc-engine-client"]
            snapshot = s.snapshot_sync()
            assert "rows" in snapshot.kept
        # Closed at the end of the `with`: it is gone on the server.
        with pytest.raises(ptc_engine.SessionNotFound):
            s.run_sync("pass")
        assert s.close_sync() is False

        restored = sb.session_sync(snapshot=snapshot)
        try:
            assert "rows" in restored.restored
            assert restored.run_sync("return sorted(rows)").return_value == [1, 2, 3]
        finally:
            assert restored.close_sync() is True


def test_a_sync_session_works_inside_a_running_loop(url, key):
    with Sandbox(url, api_key=key) as sb:

        async def notebook_cell():
            # A notebook's cell already runs in an event loop: the thread's loop runs the calls.
            with sb.session_sync() as s:
                s.run_sync("x = 41")
                return s.run_sync("return x + 1").return_value

        assert asyncio.run(notebook_cell()) == 42


async def test_a_session_opened_async_can_be_driven_by_the_sync_twins(url, key):
    async with Sandbox(url, api_key=key) as sb:
        s = await sb.session()
        await s.run("x = 'async'")
        # From a worker thread (as a sync library would call it), on the sandbox's own thread.
        result = await asyncio.to_thread(s.run_sync, "return x")
        assert result.return_value == "async"
        assert await asyncio.to_thread(s.close_sync) is True
