"""Runs one program: top-level await, top-level `return`, contained exits, user-only tracebacks."""

import ast
import asyncio
import builtins
import inspect
import json
import linecache
import math
import os
import re
import sys
import traceback
import warnings
from dataclasses import dataclass

from . import discovery
from .check import ToolCheckError, check_program, refusal
from .errors import InvalidTools, ToolError
from .loop import BatchingEventLoop, Broker, Hibernate
from .session import Live
from .stubs import bind_tools, parse_tools, tools_overview, where_is
from .wire import json_text

FILENAME = "<code>"


@dataclass
class Outcome:
    ok: bool
    value_json: str = "null"
    kind: str = ""  # python-error | exit | invalid-tools | internal
    message: str = ""
    traceback: str = ""
    exit_code: int | None = None


class _Return(BaseException):
    """Carries a top-level `return value` out of the program."""

    def __init__(self, value=None):
        super().__init__()
        self.value = value


def _rewrite_returns(statements):
    """Rewrites each `return x` among `statements`, and in the statements nested in them but not
    in a def or class, into `raise __ptc_return__(x)`, in place. Only statements are walked (a
    `return` is never inside an expression), and the new nodes take the `return`'s location:
    walking every node and then filling in missing locations took 133 µs of a one-line
    program's 0.4 ms of checking and compiling, in the component."""
    for i, node in enumerate(statements):
        if isinstance(node, ast.Return):
            value = node.value or ast.copy_location(ast.Constant(None), node)
            name = ast.copy_location(ast.Name("__ptc_return__", ast.Load()), node)
            call = ast.copy_location(ast.Call(name, [value], []), node)
            statements[i] = ast.copy_location(ast.Raise(exc=call, cause=None), node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    _rewrite_returns(inner)
            # `except` clauses (`Try`, `TryStar`) and `case` clauses (`Match`).
            for clause in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
                _rewrite_returns(clause.body)


def compile_program(code, filename=FILENAME, tree=None):
    """`code` compiled with top-level await and `return`; `tree`, its AST if it was parsed
    already (for the check of its tool calls)."""
    if tree is None and "return" not in code:
        # Nothing to rewrite: compiling the source directly skips building the AST as Python
        # objects, about a third of the cost.
        return compile(code, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    if tree is None:
        tree = ast.parse(code, filename=filename, mode="exec")
    if "return" in code:
        _rewrite_returns(tree.body)
    return compile(tree, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def _bind(specs, call_tool, code=None):
    """A program's tools (with `code`, those it names: `bind_tools`), and
    `search_tools`/`describe_tools` to find them (discovery.py)."""
    bound = bind_tools(specs, call_tool, code)
    bound.update(discovery.bind(specs))
    return bound


def _checked(tree, specs, namespace):
    """The check's problems; none if the check itself fails (a bug of the check's must never
    keep a program from running)."""
    try:
        return check_program(tree, specs, namespace.keys())
    except Exception:
        return []


def _mentions_tools(code, specs):
    """Whether `code` names a tool or a namespace, or awaits anything (a misspelt tool's call):
    a program that does neither (`pass`, `print(x)`) skips parsing for the check."""
    if "await" in code:
        return True
    names = {s.python_namespace or s.python_name for s in specs}
    return any(name in code for name in names)


class _Policy(asyncio.DefaultEventLoopPolicy):
    """Makes `asyncio.run()` in user code use the batching loop too."""

    def __init__(self, broker):
        super().__init__()
        self._broker = broker

    def new_event_loop(self):
        return BatchingEventLoop(self._broker)


# 3.14 deprecates the public setter; its private twin does the same without the warning
# machinery, which is most of the cost of a call.
_set_policy_quietly = getattr(asyncio.events, "_set_event_loop_policy", None)


def _set_policy(policy):
    if _set_policy_quietly is not None:
        _set_policy_quietly(policy)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(policy)


class _Session:
    """What one run needs before the program starts: broker, event loop and asyncio policy."""

    def __init__(self):
        self.broker = Broker()
        self.loop = BatchingEventLoop(self.broker)
        self.policy = _Policy(self.broker)


_prepared = None


def prepare():
    """Builds the next run's session ahead of time and warms the run paths (fresh and in a live
    session) up.

    In the component this runs during pre-initialisation, so every instance starts from a
    snapshot with its event loop already built and the interpreter's caches and specialised
    bytecode for the whole path to the first tool call already in place: less work before
    the first call, and fewer snapshot pages each instance writes to (and so copies).
    """
    global _prepared

    def answer(calls, timeout_ms):
        return [(call[0], True, '{"ok": true}') for call in calls]

    warm_up = (
        "import io\n"
        "r = await asyncio.gather(echo(text='a'), echo(text='b'))\n"
        "print(await echo(text=json.dumps(r)), file=io.StringIO())\n"
        "return len(r)\n"
    )
    tools = [("echo", "Echoes.", '{"type": "object", "properties": {"text": {"type": "string"}}}')]
    for persist in (False, False, False, True, True, True):
        outcome = run_program(warm_up, tools, answer, persist)
        if not outcome.ok:
            raise RuntimeError(f"warming up the runtime failed: {outcome.message}\n{outcome.traceback}")
    _forget_live_session()
    _prepared = _Session()


def _take_session(wait_for_tools):
    global _prepared
    session, _prepared = _prepared, None
    if session is None or session.loop.is_closed():
        session = _Session()
    session.broker.wait_for_tools = wait_for_tools
    return session


_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))


def _hide_runtime_frames(te):
    """Drops the runtime's own frames (the wrapper, the stubs, the loop) from a traceback and
    the exceptions chained to it, leaving the user's code and the library code it called."""
    seen = set()
    while te is not None and id(te) not in seen:
        seen.add(id(te))
        frames = [f for f in te.stack if not os.path.abspath(f.filename).startswith(_RUNTIME_DIR)]
        te.stack = traceback.StackSummary.from_list(frames)
        _hide_runtime_frames(te.__cause__)
        te = te.__context__


def _user_traceback(exc):
    """The traceback from the first frame of the user's code on, as Python would print it."""
    tb = exc.__traceback__
    while tb is not None and not _is_program(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb)
    _hide_runtime_frames(te)
    return "".join(te.format())


def _is_program(filename):
    """The program's own code: `<code>`, a session's `<code #N>` or a restored `<restored f>`."""
    return filename == FILENAME or filename.startswith(("<code #", "<restored "))


def _describe(exc):
    """The failure's headline: `Type: message`, the whole message (it may span lines) without
    the notes, which the traceback shows; for a SyntaxError, its last line (the lines before
    it quote the source)."""
    if isinstance(exc, ToolCheckError):
        return f"ToolCheckError: {exc.msg}"
    parts = traceback.format_exception_only(type(exc), exc)
    if isinstance(exc, SyntaxError):
        text = "".join(parts).strip()
        return text.splitlines()[-1] if text else type(exc).__name__
    return parts[0].strip() if parts and parts[0].strip() else type(exc).__name__


def _failure(kind, exc, exit_code=None):
    tb = _user_traceback(exc)
    sys.stderr.write(tb)
    return Outcome(False, kind=kind, message=_describe(exc), traceback=tb, exit_code=exit_code)


def _point_to_tools(exc, specs):
    """A NameError on a namespaced tool's bare name says where the tool is; one on a name the
    program calls (or reads an attribute of) that is no tool says what the tools are (bounded:
    `stubs.tools_overview`), which the pre-run check says only of awaited calls."""
    if type(exc) is not NameError or not isinstance(exc.name, str) or len(exc.args) != 1 or not specs:
        return
    hint = where_is(specs, exc.name)
    if hint is None and _called(exc):
        hint = f"no tool has that name either: {tools_overview(specs)}"
    if hint:
        exc.args = (f"{exc.args[0]}; {hint}",)


def _called(exc):
    """Whether the program's line that raised the NameError calls the name or reads an
    attribute of it (`web_search(...)`, `github.x`): a misspelt variable gets no tool list."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or not _is_program(tb.tb_frame.f_code.co_filename):
        return False
    line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    return re.search(rf"(?<![\w.]){re.escape(exc.name)}\s*[(.]", line) is not None


def _exit_outcome(exc):
    code = exc.code
    if code is None or code == 0 or code is False:
        return Outcome(True)
    if isinstance(code, int):
        return Outcome(False, kind="exit", message=f"SystemExit: {code}", exit_code=code)
    sys.stderr.write(f"{code}\n")
    return Outcome(False, kind="exit", message=f"SystemExit: {code}", exit_code=1)


def _to_json(value):
    """The return value as JSON; a part with no JSON form becomes its `repr` (a non-finite
    float too), a set a list and a key that is not text its JSON text or `repr`, so the rest
    keeps its shape (`[nan, 1.5]` returns `["nan", 1.5]`)."""
    try:
        return json_text(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return json_text(_jsonable(value, 0))
    except (TypeError, ValueError, RecursionError) as e:
        return json_text(f"<{type(value).__name__} with no JSON form: {e}>")


def _jsonable(value, depth):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        # JSON has no bound, but Python will not write an int of more than 4300 digits.
        return value if value.bit_length() <= 14_000 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= 64:
        return repr(value)
    if isinstance(value, dict):
        return {_key(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, depth + 1) for v in value]
    return repr(value)


def _key(key):
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int)) or (isinstance(key, float) and math.isfinite(key)):
        return json.dumps(key)
    return repr(key)


# What every program finds in its globals besides its tools.
INJECTED = {"asyncio": asyncio, "json": json, "ToolError": ToolError}

_live = None


def live_session():
    """The session of this instance, made on first use: the namespace its programs share."""
    global _live
    if _live is None:
        _live = Live(builtins, INJECTED)
    return _live


def _forget_live_session():
    """Drops the live session (and its cells' lines): after warming up the session path, so
    that every instance starts with an empty one."""
    global _live
    if _live is not None and _live.run is not None:
        _close(_live.run.loop)
    _live = None
    for name in [n for n in linecache.cache if isinstance(n, str) and n.startswith("<code #")]:
        del linecache.cache[name]


def run_program(code, tool_defs, wait_for_tools, persist=False):
    """Runs `code` with one async function per tool; never raises. With `persist`, it runs in
    the instance's live session (`session.py`): its globals stay for the next program."""
    if persist:
        return _run_in_session(code, tool_defs, wait_for_tools)
    try:
        if tool_defs is None:
            raise InvalidTools("no tools were given (only a live session's program may reuse the last ones)")
        specs = parse_tools(tool_defs)
    except InvalidTools as e:
        return Outcome(False, kind="invalid-tools", message=str(e))

    session = _take_session(wait_for_tools)
    broker, loop = session.broker, session.loop
    namespace = {"__name__": "__main__", "__builtins__": builtins, "__ptc_return__": _Return, **INJECTED}
    namespace.update(_bind(specs, broker.call_tool, code))

    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    _set_policy(session.policy)
    asyncio.set_event_loop(loop)

    def finish():
        _close(loop)
        asyncio.set_event_loop(None)
        _set_policy(None)
        linecache.cache.pop(FILENAME, None)

    return _settle(lambda: _evaluate(code, FILENAME, namespace, loop, specs), loop, specs, finish)


def _run_in_session(code, tool_defs, wait_for_tools):
    """A program of the live session. The session keeps what a fresh run builds each time
    while it stays valid: the stubs (while the tools are the same) and the event loop (while
    no task outlives a program), so a trivial program costs little more than compiling it."""
    live = live_session()
    try:
        specs, tools = live.tools_for(tool_defs, parse_tools, _bind)
    except InvalidTools as e:
        return Outcome(False, kind="invalid-tools", message=str(e))
    run = live.run
    if run is None or run.loop.is_closed():
        run = live.run = _Session()
    run.broker.reset(wait_for_tools)
    loop = run.loop
    filename = live.begin(run.broker, tools, _Return)
    previous_main = live.enter()
    # A session's cells stay in linecache: tracebacks through functions defined in an earlier
    # cell show their lines, and a snapshot reads those functions' source.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    _set_policy(run.policy)
    asyncio.set_event_loop(loop)

    def finish():
        if asyncio.all_tasks(loop):
            # Tasks the program left behind never run in the next program: they are
            # cancelled with this loop, and the next program gets a new one.
            _close(loop)
            live.run = None
        live.end(code)
        live.leave(previous_main)

    return _settle(lambda: _evaluate(code, filename, live.globals, loop, specs), loop, specs, finish)


HIBERNATED = Outcome(False, kind="hibernated")
"""What a run returns when the host asked it off the stack: `resume_program` carries on."""


class _Asleep:
    """A program off the stack: its task and loop, pending in memory, and what its run does
    once it ends (`finish`), which waits for the end."""

    def __init__(self, task, loop, specs, finish):
        self.task, self.loop, self.specs, self.finish = task, loop, specs, finish


_asleep = None


def _settle(step, loop, specs, finish):
    """`step` (a program's evaluation, or its resumption), then `finish`; unless the host asked
    the program off the stack, when it is kept, unfinished, for `resume_program`."""
    global _asleep
    try:
        outcome = step()
    except Hibernate as h:
        _asleep = _Asleep(h.task, loop, specs, finish)
        return HIBERNATED
    except BaseException:
        finish()
        raise
    finish()
    return outcome


def resume_program(wait_for_tools):
    """Re-enters the event loop of the program that was asked off the stack, and runs it on as
    `run_program` would have; never raises."""
    global _asleep
    asleep, _asleep = _asleep, None
    if asleep is None:
        return Outcome(False, kind="internal", message="resume: no program of this instance is waiting to go on")
    loop = asleep.loop
    loop._selector._broker.wait_for_tools = wait_for_tools
    asyncio.set_event_loop(loop)
    return _settle(lambda: _drive(loop, asleep.task, asleep.specs), loop, asleep.specs, asleep.finish)


def _evaluate(code, filename, namespace, loop, specs):
    try:
        tree = None
        if specs and _mentions_tools(code, specs):
            tree = ast.parse(code, filename=filename, mode="exec")
            problems = _checked(tree, specs, namespace)
            if problems:
                return _failure("python-error", refusal(problems, filename, code))
        program = compile_program(code, filename, tree)
    except (SyntaxError, ValueError) as e:
        return _failure("python-error", e)
    try:
        result = eval(program, namespace)
    except BaseException as e:
        return _ended(e, specs)
    if not inspect.iscoroutine(result):
        return Outcome(True)
    return _drive(loop, loop.create_task(result), specs)


def _drive(loop, task, specs):
    """Runs the program's task to its end on the runtime's own loop, the one place where a wait
    may unwind the loop (`Hibernate`, with the task)."""
    selector = loop._selector
    selector.hibernatable = True
    try:
        loop.run_until_complete(task)
    except Hibernate as h:
        h.task = task
        raise
    except BaseException as e:
        if task.done() and not task.cancelled():
            # An exit or interrupt left the loop with the task's exception unread, which
            # asyncio would log when the task is collected.
            task.exception()
        return _ended(e, specs)
    finally:
        selector.hibernatable = False
    return Outcome(True)


def _ended(e, specs):
    """How a program that raised `e` ended: its `return`, its exit, or a failure."""
    if isinstance(e, _Return):
        if inspect.iscoroutine(e.value):
            # A tool (or async function) called without `await`: it never ran, and its
            # repr as the result would look like success.
            name = getattr(e.value, "__qualname__", "a coroutine")
            e.value.close()
            return Outcome(
                False,
                kind="python-error",
                message=f"TypeError: the program's result is {name}(...) called without `await`, so it never ran: "
                f"write `await {name}(...)`",
            )
        return Outcome(True, value_json=_to_json(e.value))
    if isinstance(e, SystemExit):
        return _exit_outcome(e)
    _point_to_tools(e, specs)
    return _failure("python-error", e)


def _close(loop):
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        loop.close()
    except BaseException:
        pass
