"""The `ptc-engine` command the package installs (`serve`, `mcp`, `run`): the server's own,
compiled into the native module, run in this process: `ptc-engine serve` for a platform,
`uvx ptc-engine mcp --config servers.json` for a desktop MCP client."""

from __future__ import annotations

import importlib
import os
import signal
import sys


def main() -> None:
    native = importlib.import_module("ptc_engine._native")
    # The component compiled ahead that the wheel ships: a first start loads it instead of
    # compiling (`--ahead-dir` or PTC_AHEAD_DIR given by the caller win).
    ahead = os.path.join(os.path.dirname(__file__), "_ahead")
    if os.path.isdir(ahead):
        os.environ.setdefault("PTC_AHEAD_DIR", ahead)
    # The data runtime's files, which the `data` extra installs, when the command asks for it
    # (`serve --python-data`, `mcp --runtime python-data`, `run --local --runtime python-data`).
    args = sys.argv[1:]
    wants_data = any(a == "python-data" or a.startswith(("--python-data", "--runtime=python-data")) for a in args)
    if wants_data or os.environ.get("PTC_PYTHON_DATA", "").lower() in ("1", "true"):
        from . import _data

        try:
            found = _data.artifacts()
        except (OSError, RuntimeError) as e:
            sys.exit(f"ptc-engine: the python-data runtime's files could not be prepared: {e}")
        if found is None:
            sys.exit(f"ptc-engine: the python-data runtime needs its files: {_data.EXTRA}")
        os.environ["PTC_PYTHON_DATA_ARTIFACTS"] = found
    # The command stops on SIGINT and SIGTERM itself (a server shuts down gracefully): Python's
    # own SIGINT handler would raise KeyboardInterrupt after it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(native.main(["ptc-engine", *args]))


if __name__ == "__main__":
    main()
