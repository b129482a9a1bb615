"""The threads sync tools run in: the process's own, not the event loop's default executor,
because a call answered there is sent from there (`_run.py`): the event loop takes no part in
it.

Through `asyncio.to_thread` a sync tool's answer took four wake-ups (the executor's thread, the
event loop for its future, the answering task, then the engine's message, which the read could
not wait for directly while a task was pending), each about 40 µs on a VM. Here a thread that
has just run a job waits for the next by spinning a little first, the GIL released (the native
`Jobs`), so a program's next call finds it awake.

Threads end after a minute without work, and at the interpreter's exit once their jobs are
done (as `concurrent.futures`' threads do): a thread must not be left waiting in the native
module while the interpreter finalizes.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from ._transport import native

WORKERS = min(32, (os.cpu_count() or 1) + 4)
"""As many threads as asyncio's default executor has: sync tools running at once past it
wait for a thread, as they did there."""

SPIN_MICROS = 200
"""How long a thread that has run a job spins for the next one before it sleeps: a tool round
of the engine in this process comes back in 50-200 µs."""

IDLE_SECONDS = 60.0
"""How long a thread sleeps for a job before it ends."""


class _Pool:
    def __init__(self, jobs: Any) -> None:
        self._jobs = jobs
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._closed = False

    def submit(self, job: Callable[[], Any]) -> None:
        if self._jobs.put(job):
            return  # a thread waits for it
        with self._lock:
            if self._closed:
                raise RuntimeError("the interpreter is shutting down: no more tool calls")
            if len(self._threads) < WORKERS:
                thread = threading.Thread(target=self._work, name=f"ptc-engine-tool-{len(self._threads)}")
                self._threads.add(thread)
                thread.start()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            # Once `close` has closed the jobs, a take returns at once: a job, or None.
            job = self._jobs.take(SPIN_MICROS, IDLE_SECONDS)
            if job is None:
                with self._lock:
                    if len(self._jobs) == 0 or self._closed:
                        self._threads.discard(me)
                        return
                continue
            job()
            del job

    def close(self) -> None:
        """At the interpreter's exit: lets the threads finish their jobs and end."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        self._jobs.close()
        for thread in threads:
            thread.join()


_lock = threading.Lock()
_pool: _Pool | None = None


def submit(job: Callable[..., Any], *args: Any) -> None:
    """Runs `job(*args)` in a tool thread; `job` handles its own errors."""
    pool = _pool or _started()
    pool.submit(functools.partial(job, *args))


def _started() -> _Pool:
    global _pool
    with _lock:
        if _pool is None:
            module = native()
            assert module is not None, "sync tools run in threads of the native module's"
            _pool = _Pool(module.Jobs())
            _at_exit(_pool.close)
        return _pool


def _at_exit(close: Callable[[], None]) -> None:
    """Runs `close` when the interpreter exits, before it waits for its threads (where
    `concurrent.futures` stops its own)."""
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(close)
    else:  # pragma: no cover - CPython has it since 3.9
        import atexit

        atexit.register(close)


def _forget() -> None:
    """In a child made by `fork`: the parent's threads are not there, so neither is its pool."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
