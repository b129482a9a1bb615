"""The check of a program against its tools before it runs: a call the program makes to a tool,
written so that it can only fail, refuses the program before any of it runs (so no earlier call
has had its side effect), with what the model needs to write it right.

It looks only at calls it can read for sure: `tool(...)` and `namespace.tool(...)` where the
name is the tool's (the program binds it to nothing else, anywhere), with no `*args` or
`**kwargs` it cannot see into. For those it refuses:

- an attribute a namespace has no tool of (`github.create_isue`), and a name bound nowhere
  that is one letter or so from a tool's (`get_wether`), each with "did you mean";
- an awaited call of a name bound nowhere and far from every tool's (`await web_search(...)`,
  `await gitlab.create_issue(...)`), saying where a namespaced tool of that name is, or what
  the tools are (`stubs.tools_overview`); not in a program that may bind names it does not
  write (`from m import *`, `exec`, `globals()`, ...);
- a keyword the tool does not take, a required one missing, more positional arguments than it
  takes;
- a literal of a JSON type the tool's schema does not take for that argument (`days="3"` for
  an integer);
- a call that is a statement of its own, unawaited, so that it would never run.

Anything else passes: a call through another name, `getattr`, a tool passed as a value, a
schema it cannot read simply (`anyOf`, `$ref`, ...), and any call in the body of a `try` that
catches something (the program means to handle what it raises). A call in a branch that never
runs is checked all the same: it is the program's bug either way.
"""

import ast
import builtins
import difflib

from .stubs import _listing, _ordered_properties, _takes_extra, _usable, signature_line, tools_overview, where_is


class ToolCheckError(SyntaxError):
    """The program's calls to its tools cannot work as written; it did not run."""


# Tracebacks name it as the program knows it.
ToolCheckError.__module__ = "builtins"

# The most problems a refusal lists (the first ones, in line order).
MAX_SHOWN = 5

_BUILTINS = frozenset(dir(builtins))

# Names through which a program may bind a global it never writes: with one of them (or a
# `from m import *`), an unknown name is not refused, as it might exist by the time it is called.
_DYNAMIC = frozenset({"exec", "eval", "globals", "vars", "builtins", "__builtins__"})

# `ast.unparse` imports its implementation on first use; in the component only what the
# snapshot imported exists at run time.
ast.unparse(ast.Constant(0))


def _bind_name(node, names):
    if type(node.ctx) is not ast.Load:
        names.add(node.id)


def _bind_def(node, names):
    names.add(node.name)


def _bind_import(node, names):
    for alias in node.names:
        names.add((alias.asname or alias.name).split(".")[0])


def _bind_declared(node, names):
    names.update(node.names)


def _bind_named(node, names):
    if node.name:
        names.add(node.name)


def _bind_arg(node, names):
    names.add(node.arg)


def _bind_rest(node, names):
    if node.rest:
        names.add(node.rest)


# What each kind of node binds (a stored or deleted name: assignments, loops, `with`,
# comprehensions, walrus; defs, imports, `global`/`nonlocal`, `except ... as`, parameters,
# patterns): looked up by the node's exact type, which took the check of a one-call program
# from 24 to 12 µs on host CPython (a chain of `isinstance` per node before).
_BINDERS = {
    ast.Name: _bind_name,
    ast.FunctionDef: _bind_def, ast.AsyncFunctionDef: _bind_def, ast.ClassDef: _bind_def,
    ast.Import: _bind_import, ast.ImportFrom: _bind_import,
    ast.Global: _bind_declared, ast.Nonlocal: _bind_declared,
    ast.ExceptHandler: _bind_named, ast.MatchAs: _bind_named, ast.MatchStar: _bind_named,
    ast.arg: _bind_arg,
    ast.MatchMapping: _bind_rest,
}


_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}
_NAMES = {
    "string": "a string", "boolean": "a boolean (True or False)", "integer": "an integer", "number": "a number",
    "null": "None", "array": "a list", "object": "a dict",
}


def _literal_type(node):
    """The JSON type of a literal argument, if it is one."""
    if isinstance(node, ast.Constant):
        return _JSON_TYPES.get(type(node.value))
    if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
        return "array"
    if isinstance(node, (ast.Dict, ast.DictComp)):
        return "object"
    if isinstance(node, ast.JoinedStr):
        return "string"
    return None


def _accepts(schema, kind):
    """Whether a property schema takes a value of JSON type `kind`; `None`: it cannot say."""
    if not isinstance(schema, dict) or any(k in schema for k in ("anyOf", "oneOf", "allOf", "$ref", "not", "if")):
        return None
    t = schema.get("type")
    types = [t] if isinstance(t, str) else t if isinstance(t, list) else None
    if not types or not all(isinstance(x, str) for x in types):
        return None
    if kind in types:
        return True
    if kind == "integer" and "number" in types:
        return True
    return False


# The last tool set checked against, by top-level name and by namespace (a session checks
# each of its programs against the same one).
_by_name = (None, None, None)


def _index(specs):
    global _by_name
    if _by_name[0] is not specs:
        top = {s.python_name: s for s in specs if not s.python_namespace}
        spaces = {}
        for s in specs:
            if s.python_namespace:
                spaces.setdefault(s.python_namespace, {})[s.python_name] = s
        _by_name = (specs, top, spaces)
    return _by_name[1], _by_name[2]


class _Checker:
    def __init__(self, specs, bound, known, dynamic=False):
        self.specs = specs
        self.top, self.spaces = _index(specs)
        self.dynamic = dynamic
        # Names the program rebinds are not the tools any more, wherever it uses them.
        self.rebound = bound
        # Looked up in each, not merged: one set of them all, made for every program, took 4
        # of a one-call program's 14 µs of checking on host CPython, and 30 of 40 µs in a
        # session of 1,000 globals (`benches/python/guest_check.py`).
        self.known = known
        self.problems = []

    def defined(self, name):
        """Whether the program, the names it finds (`known`) or the builtins define `name`."""
        return name in self.rebound or name in self.known or name in _BUILTINS

    def spec_of(self, func, awaited=False):
        """The tool a call's function certainly is, or its problem's words; (None, None) when it
        cannot say. `awaited`: the call is awaited, so the program means a tool (or its own
        async function)."""
        if isinstance(func, ast.Name):
            name = func.id
            if name in self.rebound:
                return None, None
            if name in self.top:
                return self.top[name], None
            if not self.defined(name) and name not in self.spaces:
                close = difflib.get_close_matches(name, list(self.top), n=1, cutoff=0.8)
                if close:
                    spec = self.top[close[0]]
                    return None, f"{name} is not defined; did you mean the tool {signature_line(spec)}?"
                if awaited and not self.dynamic:
                    hint = where_is(self.specs, name) or f"no tool has that name: {tools_overview(self.specs)}"
                    return None, f"{name} is not defined; {hint}"
            return None, None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            space = func.value.id
            if space in self.rebound or func.attr.startswith("_"):
                return None, None
            if space not in self.spaces:
                if awaited and not self.dynamic and not self.defined(space) and space not in self.top:
                    return None, f"{space} is not defined; no tool namespace has that name: {tools_overview(self.specs)}"
                return None, None
            members = self.spaces[space]
            if func.attr in members:
                return members[func.attr], None
            close = difflib.get_close_matches(func.attr, list(members), n=1, cutoff=0.75)
            hint = f"; did you mean {signature_line(members[close[0]])}?" if close else ""
            return None, f"{space} has no callable tool {func.attr!r}{hint}; its callable tools are: {_listing(members, 30)}"
        return None, None

    def check_call(self, call, awaited=False):
        spec, problem = self.spec_of(call.func, awaited)
        if problem:
            self.add(call, problem)
            return
        if spec is None:
            return
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return
        props = spec.properties
        positional = [p for p in _ordered_properties(spec) if _usable(p)]
        extra = _takes_extra(spec)
        if len(call.args) > len(positional):
            self.add(call, f"{spec.qualified}() takes at most {len(positional)} positional arguments "
                           f"({len(call.args)} given): {signature_line(spec)}")
            return
        given = dict(zip(positional, call.args))
        for k in call.keywords:
            if k.arg in given:
                self.add(call, f"{spec.qualified}() got {k.arg!r} twice: {signature_line(spec)}")
                return
            if k.arg not in props and not extra:
                close = difflib.get_close_matches(k.arg, list(props), n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.add(call, f"{spec.qualified}() takes no argument {k.arg!r}{hint}: {signature_line(spec)}")
                return
            given[k.arg] = k.value
        missing = [p for p in spec.required if _usable(p) and p not in given]
        if missing:
            names = ", ".join(repr(m) for m in missing)
            self.add(call, f"{spec.qualified}() is missing the required argument{'s' if len(missing) > 1 else ''} "
                           f"{names}: {signature_line(spec)}")
            return
        for name, value in given.items():
            kind = _literal_type(value)
            if kind is None or name not in props:
                continue
            if _accepts(props[name], kind) is False:
                wanted = props[name].get("type")
                wanted = " or ".join(_NAMES.get(t, t) for t in ([wanted] if isinstance(wanted, str) else wanted))
                shown = ast.unparse(value)
                shown = shown if len(shown) <= 40 else shown[:39] + "…"
                self.add(call, f"{spec.qualified}({name}=...) takes {wanted}, not {shown} ({_NAMES[kind]}): {signature_line(spec)}")
                return

    def check_unawaited(self, stmt):
        """A tool call that is a statement of its own: never awaited, it would never run."""
        call = stmt.value
        if not isinstance(call, ast.Call):
            return
        spec, problem = self.spec_of(call.func)
        if spec is not None and problem is None:
            text = ast.unparse(call)
            text = text if len(text) <= 60 else f"{spec.qualified}(...)"
            self.add(call, f"{text} is not awaited, so it would never run: write `await {text}`")

    def add(self, node, message):
        self.problems.append((node.lineno, node.col_offset, message))


def check_program(tree, specs, known=()):
    """The problems of `tree`'s tool calls, as `(line, column, message)` in line order; `known`:
    names the program finds defined besides its own (a live session's globals)."""
    if not specs:
        return []
    # One walk: the names the program binds, and the calls and statements to check; none in
    # the body of a `try` with an `except` (a program that catches what a call raises means to
    # handle it: `try: await fs.nope() except ToolError: ...`).
    bound, calls, statements, awaited, dynamic = set(), [], [], set(), False
    stack = [(tree, False)]
    pop, push, binders, AST = stack.pop, stack.append, _BINDERS, ast.AST
    while stack:
        node, handled = pop()
        kind = type(node)
        binder = binders.get(kind)
        if binder is not None:
            binder(node, bound)
            if kind is ast.Name:
                if node.id in _DYNAMIC:
                    dynamic = True
                continue  # a name has no children but its context
            if kind is ast.ImportFrom and any(a.name == "*" for a in node.names):
                dynamic = True
        if not handled:
            if kind is ast.Call:
                calls.append(node)
            elif kind is ast.Expr:
                statements.append(node)
            elif kind is ast.Await and type(node.value) is ast.Call:
                awaited.add(id(node.value))
        if (kind is ast.Try or kind is ast.TryStar) and node.handlers:
            for child in node.body:
                push((child, True))
            for child in (*node.handlers, *node.orelse, *node.finalbody):
                push((child, handled))
            continue
        # The children, as `ast.iter_child_nodes` gives them, without its generator.
        for field in kind._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, AST):
                        push((item, handled))
            elif isinstance(value, AST):
                push((value, handled))
    checker = _Checker(specs, bound, known, dynamic)
    for call in calls:
        checker.check_call(call, id(call) in awaited)
    for statement in statements:
        checker.check_unawaited(statement)
    seen = set()
    unique = []
    for p in sorted(checker.problems):
        if (p[0], p[2]) not in seen:
            seen.add((p[0], p[2]))
            unique.append(p)
    return unique


def refusal(problems, filename, code):
    """The error a refused program raises: every problem (at most `MAX_SHOWN`), the first one's
    line shown."""
    line, col, _ = problems[0]
    shown = problems[:MAX_SHOWN]
    more = f"\n  … and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
    listed = "\n".join(f"  line {ln}: {msg}" for ln, _, msg in shown)
    message = (
        f"the program was not run: {'its tool call cannot' if len(problems) == 1 else 'its tool calls cannot'} "
        f"work as written (nothing ran, so nothing needs undoing); fix and run it again:\n{listed}{more}"
    )
    lines = code.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else None
    return ToolCheckError(message, (filename, line, col + 1, text))
