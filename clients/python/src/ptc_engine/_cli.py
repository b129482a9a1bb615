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
    # The command stops on SIGINT and SIGTERM itself (a server shuts down gracefully): Python's
    # own SIGINT handler would raise KeyboardInterrupt after it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(native.main(["ptc-engine", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
