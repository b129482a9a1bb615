"""What the frameworks' code modes promise about a program, on top of ptc-engine's own rules.

ptc-engine returns a program's top-level `return value`; the Monty-based code modes return the
value of its *last expression* too, and FastMCP binds `inputs` as globals. Both are done here
by editing the source without moving any line the model wrote, so tracebacks keep its line
numbers: the last expression gets `return ` put in front of it (on its own line, where it
already is), and inputs go in one line before the program whose number is taken back out of
the traceback (`File "<code>", line N`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

from .._errors import ExecutionError, InvalidRequest
from .._result import Result


def returning_last_expression(code: str) -> str:
    """`code` with its last top-level statement, if a bare expression, made `return <expr>`.

    Code the client's Python cannot parse (a newer syntax, or an error the server will report
    with its own message) is sent as it is."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    last = tree.body[-1]
    lines = code.splitlines(keepends=True)
    row, col = last.lineno - 1, last.col_offset
    line = lines[row]
    # col_offset counts UTF-8 bytes, not characters.
    prefix = line.encode()[:col].decode()
    lines[row] = prefix + "return " + line[len(prefix) :]
    return "".join(lines)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def with_globals(code: str, values: Mapping[str, Any]) -> tuple[str, int]:
    """`code` with `values` bound as globals first, and how many lines that put before it."""
    if not values:
        return code, 0
    for name in values:
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise InvalidRequest(f"input {name!r} is not a Python identifier, so it cannot be a global of the program")
    try:
        text = json.dumps(dict(values), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidRequest(f"the program's inputs are not JSON ({e}): pass numbers, text, lists and dicts") from None
    # One line, whatever the values hold: json.dumps escapes every newline inside a string.
    return with_preamble(code, f"globals().update(__import__('json').loads({text!r}))")


def with_preamble(code: str, line: str) -> tuple[str, int]:
    """`code` after `line` (one line of Python; none if empty), and how many lines that put
    before it (for `unshift`)."""
    if not line:
        return code, 0
    assert "\n" not in line, "a preamble is one line"
    return f"{line}\n{code}", 1


_LINE = re.compile(r'(File "<code[^"]*>", line )(\d+)')


def unshift(text: str, shift: int) -> str:
    """`text` (a message or traceback) with the program's line numbers as the model wrote them."""
    if not shift:
        return text
    return _LINE.sub(lambda m: f"{m.group(1)}{max(1, int(m.group(2)) - shift)}", text)


def failure_text(error: ExecutionError, shift: int = 0, *, calls: bool = True) -> str:
    """A failed program as a model should read it: what it printed first, then its traceback
    (which ends with the exception) or, for a stopped program, the server's message and what
    to do, then the tool calls it had made (so a retry does not repeat their effects)."""
    result = error.result
    parts = []
    printed = result.stdout.rstrip("\n")
    if printed:
        parts.append(f"[stdout before error]\n{printed}\n[/stdout before error]")
    # stderr ends with the traceback; what came before it (warnings) is worth reading too.
    warned = result.stderr.replace(error.traceback, "").strip("\n") if error.traceback else result.stderr.strip("\n")
    if warned:
        parts.append(f"[stderr before error]\n{unshift(warned, shift)}\n[/stderr before error]")
    parts.append(unshift(error.traceback or error.message, shift).rstrip("\n"))
    if calls and result.tool_calls and error.kind not in ("python_error", "exit"):
        made = ", ".join(f"{c.name}({_short(c.input)})" for c in result.tool_calls[:10])
        more = f" and {len(result.tool_calls) - 10} more" if len(result.tool_calls) > 10 else ""
        parts.append(f"Tool calls made before it stopped: {made}{more}.")
    return "\n".join(parts)


def printed(result: Result) -> str:
    """What a program printed, as a model should read it: stdout, then stderr (warnings, such
    as a tool call never awaited) after a marker."""
    if not result.stderr:
        return result.stdout
    stdout = result.stdout if not result.stdout or result.stdout.endswith("\n") else result.stdout + "\n"
    return f"{stdout}[stderr]\n{result.stderr}"


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if value else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"
