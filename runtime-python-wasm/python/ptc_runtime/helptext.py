"""`help(obj)` in a program. Python's own `help` needs `pydoc`, which the sandbox does not
have (a program calling it got `ModuleNotFoundError: No module named 'pydoc'`), and a model
asks it mostly about its tools. So every program gets this one (`discovery.bind`): a tool's
full stub (every parameter and what it means), a tool namespace's tools, or for anything else
its signature, its docstring and its public members, bounded.
"""

import inspect

from .stubs import ToolNamespace, namespace_members, signature_line, specs_by_name, stub_of, tool_help

# The most members (of a module, a class or a tool namespace) one `help` lists, and the most
# lines of a docstring it prints: a model reads all of it, and `help(os)` would otherwise print
# hundreds of members, `help(json)` a docstring of 100 lines.
MAX_MEMBERS = 60
MAX_DOC_LINES = 30

USAGE = (
    "help(obj) prints what obj is: help(a_tool) its parameters and what they mean, help(a_namespace) "
    "its tools, help(len) or help(json) a function's or module's signature and documentation. "
    "search_tools('what it does') finds a tool; describe_tools(['name']) prints full stubs."
)


def text(specs, obj, given=True):
    """What `help(obj)` prints for a program whose tools are `specs` (`given`: an object was
    passed at all)."""
    if not given:
        return USAGE
    if isinstance(obj, str):
        named = specs_by_name(specs).get(obj)
        if named is not None:
            return tool_help(named)
        return f"help() looks at an object, not at its name: write help({obj}) without quotes. {USAGE}"
    spec = stub_of(specs, obj)
    if spec is not None:
        return tool_help(spec)
    if isinstance(obj, ToolNamespace):
        return _namespace(*namespace_members(obj))
    return _described(obj)


def _namespace(name, specs):
    lines = [f"Tool namespace {name}: {len(specs)} tools, each called as `await {name}.tool(...)`."]
    for spec in list(specs.values())[:MAX_MEMBERS]:
        lines.append(f"  {signature_line(spec)}")
    if len(specs) > MAX_MEMBERS:
        lines.append(f"  … and {len(specs) - MAX_MEMBERS} more: search_tools('what it does') finds one")
    lines.append(f"describe_tools(['{name}.tool']) prints a tool's full stub.")
    return "\n".join(lines)


def _described(obj):
    if not (inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj)):
        # An instance: what its type is, as Python's help does.
        return f"{_short(obj)} is an instance of {type(obj).__qualname__}.\n\n" + _described(type(obj))
    lines = [_head(obj), ""]
    doc = inspect.getdoc(obj)
    lines.append(_indent(doc) if doc else "    (no documentation)")
    if inspect.ismodule(obj) or inspect.isclass(obj):
        lines += _members(obj)
    return "\n".join(lines).rstrip()


def _head(obj):
    if inspect.ismodule(obj):
        return f"module {obj.__name__}"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    if inspect.isclass(obj):
        bases = ", ".join(b.__qualname__ for b in obj.__bases__ if b is not object)
        return f"class {name}" + (f"({bases})" if bases else "")
    prefix = "async " if inspect.iscoroutinefunction(obj) else ""
    return f"{prefix}{name}{_signature(obj)}"


def _signature(obj):
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _members(obj):
    names = [n for n in dir(obj) if not n.startswith("_")]
    if not names:
        return []
    lines = ["", "Members:"]
    for name in names[:MAX_MEMBERS]:
        try:
            value = getattr(obj, name)
        except Exception:
            continue
        if inspect.isclass(value):
            first = _first_line(value)
            lines.append(f"    class {name}" + (f": {first}" if first else ""))
        elif callable(value):
            first = _first_line(value)
            lines.append(f"    {name}{_signature(value)}" + (f": {first}" if first else ""))
        else:
            lines.append(f"    {name}: {_short(value)}")
    if len(names) > MAX_MEMBERS:
        lines.append(f"    … and {len(names) - MAX_MEMBERS} more (dir() lists them)")
    return lines


def _first_line(obj):
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n", 1)[0]


def _short(value, limit=60):
    try:
        shown = repr(value)
    except Exception:
        shown = f"<{type(value).__qualname__}>"
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _indent(doc):
    lines = doc.splitlines()
    shown = [f"    {line}" if line else "" for line in lines[:MAX_DOC_LINES]]
    if len(lines) > MAX_DOC_LINES:
        shown.append(f"    … ({len(lines) - MAX_DOC_LINES} more lines: print(obj.__doc__) shows them)")
    return "\n".join(shown)
