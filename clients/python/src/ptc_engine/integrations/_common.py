"""What every integration needs: the server to use, and framework tools whose errors reach the
program in the framework's own words."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from .. import Limits, Sandbox
from .._tools import ToolFailure

# The server's default is 20 rounds; the frameworks budget tool calls, not rounds (FastMCP 50
# calls, Pydantic AI's harness 100, strands-harness ~500 sequential ones), so their programs
# get as many rounds as a server allows by default (its ceiling, 1000).
ROUND_TRIPS = 1000


def limits_with_rounds(limits: Limits | None, rounds: int = ROUND_TRIPS) -> Limits:
    """`limits`, with `max_round_trips` set to `rounds` unless it is set."""
    if limits is not None and limits.max_round_trips is not None:
        return limits
    return dataclasses.replace(limits or Limits(), max_round_trips=rounds)


def checked_timeout(timeout: float | None) -> float | None:
    """`timeout` if a server can take it: refused here, when the integration is made, rather
    than at the model's first program."""
    if timeout is not None and not 1 <= timeout <= 300:
        raise ValueError(f"timeout must be between 1 and 300 seconds (a server's deadlines), got {timeout}")
    return timeout

def sandbox_of(sandbox: Sandbox | str | None, api_key: str | None) -> Sandbox:
    """`sandbox` as a `Sandbox`: itself (shared; its owner closes it), or one for its URL
    (default `PTC_ENGINE_URL`, else the engine in this process, as `Sandbox()`) with `api_key` (default
    `PTC_ENGINE_API_KEY`)."""
    return sandbox if isinstance(sandbox, Sandbox) else Sandbox(sandbox, api_key=api_key)


def passing_messages(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (sync: run in a thread) as an async function of the same signature whose exceptions
    reach the program with their message as it is: the frameworks write theirs for the model
    ("Unknown tool: x"), so no exception type is put in front."""

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            if inspect.iscoroutinefunction(fn):
                return await fn(*args, **kwargs)
            value = await asyncio.to_thread(fn, *args, **kwargs)
            return await value if inspect.isawaitable(value) else value
        except ToolFailure:
            raise
        except Exception as e:
            raise ToolFailure(str(e) or type(e).__name__) from e

    return call
