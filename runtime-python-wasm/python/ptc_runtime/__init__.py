"""The Python side of ptc-engine: turns tool definitions into async functions, runs the
user's program with top-level await, and batches tool calls through the host.

Nothing here imports the componentize-py bindings, so the same code runs (and is unit-tested)
on the host's CPython; `app.py` next to this package binds it to the WIT world.
"""

from .errors import ToolError, InvalidTools
from .names import normalize_name, assign_python_names
from .stubs import ToolSpec, make_stub, describe
from .loop import Broker, BatchingEventLoop, HIBERNATE
from .runner import Outcome, run_program, resume_program, prepare

__all__ = [
    "ToolError", "InvalidTools", "normalize_name", "assign_python_names", "ToolSpec",
    "make_stub", "describe", "Broker", "BatchingEventLoop", "HIBERNATE", "Outcome", "run_program",
    "resume_program", "prepare",
]
