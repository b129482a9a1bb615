"""Tool definitions to async Python functions, and their description for a model's prompt.

A stub takes the schema's properties as arguments (required first, in schema order; positional
or keyword), plus `**kwargs` for properties that are not identifiers or when the schema allows
extra properties. Calling it sends the arguments as a JSON object; the host validates them.

Tools with a namespace (one per MCP server) are attributes of one `ToolNamespace` object per
namespace, `await github.create_issue(...)`, so tools of different servers never collide.
"""

import inspect
import json
import keyword
from dataclasses import dataclass, field

from .errors import InvalidTools, UnknownToolError
from .names import assign_python_names
from .shapes import Shapes


class _Omitted:
    """Default of an optional argument: the key is left out of the call's input."""

    def __repr__(self):
        return "..."


OMITTED = _Omitted()


@dataclass
class ToolSpec:
    name: str
    python_name: str
    description: str = ""
    # The input schema as the host sent it: JSON text, decoded on first use (`parameters`). A
    # program of 102 MCP tools calls a few of them; decoding every schema up front was 11% of
    # binding them all (host CPython, 2026-11-25).
    schema: object = field(default_factory=dict)
    # The namespace's original name and its Python identifier ("" for a top-level tool).
    namespace: str = ""
    python_namespace: str = ""
    # JSON Schema text of the result ("" for none): declared, or the shape earlier results had
    # (`observed`, engine/src/observed.rs).
    returns: str = ""
    observed: bool = False

    @property
    def qualified(self):
        """How a program reaches the tool: `name` or `namespace.name`."""
        return f"{self.python_namespace}.{self.python_name}" if self.python_namespace else self.python_name

    _decoded: dict = field(default=None, repr=False, compare=False)
    _fields: tuple = field(default=None, repr=False, compare=False)

    @property
    def parameters(self):
        """The input schema as a dict ({} when it is not an object). The host refuses text that
        is not JSON before it reaches the guest (`proto::tool_defs`; the library takes values)."""
        if self._decoded is None:
            schema = self.schema
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema) if schema.strip() else {}
                except ValueError as e:
                    raise InvalidTools(f"parameters of tool {self.name!r} are not valid JSON: {e}") from None
            self._decoded = schema if isinstance(schema, dict) else {}
        return self._decoded

    def _resolved(self):
        if self._fields is None:
            props, req = Shapes(self.parameters).properties(self.parameters)
            self._fields = (props, [p for p in props if p in req])
        return self._fields

    @property
    def properties(self):
        """The input's properties, the root's `$ref` followed and `allOf` merged."""
        return self._resolved()[0]

    @property
    def required(self):
        return self._resolved()[1]


_DEF_DEFAULTS = ("", "", "", "", "", False)


def parse_tools(defs):
    """`defs`: iterable of (name, description, parameters[, namespace[, returns, observed]])
    with parameters as JSON text or dict, namespace "" for a top-level tool, and returns a
    JSON Schema's text ("" for none), observed or declared."""
    defs = [tuple(d) + _DEF_DEFAULTS[len(d):] for d in defs]
    top = [d[0] for d in defs if not d[3]]
    spaces = list(dict.fromkeys(d[3] for d in defs if d[3]))
    top_names = assign_python_names(top)
    space_names = assign_python_names(spaces, what="namespace")
    taken = {ident: name for name, ident in top_names.items()}
    for space, ident in space_names.items():
        if ident in taken:
            raise InvalidTools(
                f"namespace {space!r} and tool {taken[ident]!r} both become the Python name {ident!r}; "
                "rename one of them"
            )
    members = {
        space: assign_python_names([d[0] for d in defs if d[3] == space], member=True) for space in spaces
    }
    specs = []
    for name, description, parameters, space, returns, observed in defs:
        python_name = members[space][name] if space else top_names[name]
        spec = ToolSpec(name, python_name, description or "", parameters, space, space_names.get(space, ""),
                        returns or "", bool(observed))
        if not space:
            # A top-level tool's schema is read now, so a bad one is refused before the program
            # starts, even where its stub is made only for a program that names it.
            spec.parameters
        specs.append(spec)
    return specs


def _listing(names, limit=60):
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f", … and {len(names) - limit} more" if len(names) > limit else "") if names else "none"


class ToolNamespace:
    """The tools of one namespace (one MCP server) as attributes: `await fs.read_file(path=...)`.

    A tool's stub is made the first time the program reaches it: a program of 102 MCP tools
    calls a few, and making every stub (signature, docstring, schema) before it ran took 6.7
    of 8.4 ms on host CPython (2026-11-25)."""

    def __init__(self, name, specs, call_tool):
        object.__setattr__(self, "_ToolNamespace__name", name)
        object.__setattr__(self, "_ToolNamespace__specs", specs)
        object.__setattr__(self, "_ToolNamespace__call", call_tool)

    def __getattr__(self, attr):
        # Reached only for a name not yet in the instance's dict: a stub not made yet, or none.
        specs = self.__dict__.get("_ToolNamespace__specs", {})
        spec = specs.get(attr)
        if spec is not None:
            stub = make_stub(spec, self.__dict__["_ToolNamespace__call"])
            self.__dict__[attr] = stub
            return stub
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = self.__dict__.get("_ToolNamespace__name", "?")
        raise UnknownToolError(
            f"{name} has no callable tool {attr!r}; its callable tools are: {_listing(specs)}", tool=attr, obj=self
        )

    def __setattr__(self, attr, value):
        raise AttributeError(f"the tools of {self.__name} cannot be replaced or added to")

    def __delattr__(self, attr):
        raise AttributeError(f"the tools of {self.__name} cannot be removed")

    def __dir__(self):
        return sorted(self.__specs)

    def __repr__(self):
        return f"<tools {self.__name}: {_listing(self.__dir__(), 20)}>"


# Words a program reaches its globals by without naming them (`globals()["add"]`,
# `eval(name)`, `vars()`, `dir()`, a frame's `f_globals`, `sys.modules["__main__"]`): a program
# that says one gets every top-level tool's stub.
_REACHES_GLOBALS = ("globals", "locals", "vars", "dir", "eval", "exec", "__dict__", "__main__", "modules")


def bind_tools(specs, call_tool, code=None):
    """The program's globals for `specs`: one stub per top-level tool and one ToolNamespace per
    namespace (whose stubs are made when first reached).

    With `code` (a fresh run's program), only the top-level tools whose names its text holds
    get a stub, unless it may reach its globals otherwise (`_REACHES_GLOBALS`): a program names
    every tool it calls, and making the stubs (signature, docstring) of tools it never used
    took half of a fresh run given 20 (a fresh `pass` 5 ms apart, `phases --toolset F
    --top-level`: 2.17-2.20 ms with every stub, 1.02-1.08 ms with none; 2026-12-07).
    A session's programs get them all: a function one program defines may call a tool a later
    program does not name."""
    bound = {}
    spaces = {}
    every = code is None or any(word in code for word in _REACHES_GLOBALS)
    for spec in specs:
        if spec.python_namespace:
            spaces.setdefault(spec.python_namespace, {})[spec.python_name] = spec
        elif every or spec.python_name in code:
            bound[spec.python_name] = make_stub(spec, call_tool)
    for ident, members in spaces.items():
        bound[ident] = ToolNamespace(ident, members, call_tool)
    return bound


def where_is(specs, name):
    """For a NameError on `name`: where a tool of that Python name lives, if it is namespaced."""
    found = [s.qualified for s in specs if s.python_namespace and s.python_name == name]
    if not found:
        return None
    return f"it is a tool in a namespace: call it as `await {found[0]}(...)`" + (
        f" (also: {', '.join(found[1:])})" if len(found) > 1 else ""
    )


# The most tool names (and namespaces) `tools_overview` shows: a NameError's message is read
# by a model, and a server of 510 tools would otherwise fill it.
OVERVIEW_NAMES = 10


def tools_overview(specs):
    """For a name that is no tool: what the program's tools are, in one bounded line (at most
    `OVERVIEW_NAMES` top-level names and namespaces each), and how to find the rest."""
    top = sorted({s.python_name for s in specs if not s.python_namespace})
    spaces = {}
    for s in specs:
        if s.python_namespace:
            spaces[s.python_namespace] = spaces.get(s.python_namespace, 0) + 1
    parts = []
    if top:
        parts.append(f"the program's tools are {_listing(top, OVERVIEW_NAMES)}")
    if spaces:
        shown = [f"{ns} ({n} tool{'s' if n > 1 else ''})" for ns, n in sorted(spaces.items())]
        more = f", … and {len(shown) - OVERVIEW_NAMES} more" if len(shown) > OVERVIEW_NAMES else ""
        whose = "its" if top else "the program's"
        parts.append(f"{whose} tool namespaces are {', '.join(shown[:OVERVIEW_NAMES])}{more}")
    text = "; ".join(parts) if parts else "the program has no tools"
    if spaces or len(top) > OVERVIEW_NAMES:
        text += "; print(search_tools('what the tool does')) finds a tool by what it does"
    return text


_JSON_TO_PY = {
    "string": "str", "integer": "int", "number": "float", "boolean": "bool",
    "array": "list", "object": "dict", "null": "None",
}


def type_hint(schema):
    """A one-word type for the runtime docstring (`help(tool)` in a program): built for every
    tool of every execution, so it reads only the fragment's own `type` and `enum`; the shapes
    (nested objects, `$ref`s, unions) are rendered by `describe` (`shapes.py`), off that path."""
    if not isinstance(schema, dict):
        return "Any"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"]) + "]"
    t = schema.get("type")
    if isinstance(t, str):
        return _JSON_TO_PY.get(t, "Any")
    if isinstance(t, list) and t:
        return " | ".join(_JSON_TO_PY.get(x, "Any") for x in t if isinstance(x, str)) or "Any"
    return "Any"


def _usable(prop):
    return prop.isidentifier() and not keyword.iskeyword(prop)


def _ordered_properties(spec):
    req = set(spec.required)
    props = list(spec.properties)
    return [p for p in props if p in req] + [p for p in props if p not in req]


def _takes_extra(spec):
    if spec.parameters.get("additionalProperties") is False:
        return any(not _usable(p) for p in spec.properties)
    return True


def signature(spec):
    req = set(spec.required)
    params = []
    for prop in _ordered_properties(spec):
        if not _usable(prop):
            continue
        params.append(inspect.Parameter(
            prop, inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty if prop in req else OMITTED,
        ))
    if _takes_extra(spec):
        extra = "kwargs"
        while extra in spec.properties:
            extra += "_"
        params.append(inspect.Parameter(extra, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def docstring(spec):
    lines = [spec.description.strip() or f"Calls the tool {spec.name!r}."]
    props = spec.properties
    if props:
        lines += ["", "Args:"]
        req = set(spec.required)
        for prop in _ordered_properties(spec):
            schema = props[prop] if isinstance(props[prop], dict) else {}
            desc = str(schema.get("description", "")).strip()
            opt = "" if prop in req else ", optional"
            how = "" if _usable(prop) else f" (pass as **{{{json.dumps(prop)}: ...}})"
            lines.append(f"    {prop} ({type_hint(schema)}{opt}){how}: {desc}".rstrip(": ").rstrip())
    lines += ["", "Returns the tool's result as decoded JSON; raises ToolError if the tool fails."]
    return "\n".join(lines)


def make_stub(spec, call_tool):
    """An `async def` named after the tool; `call_tool(name, args)` returns an awaitable result."""
    sig = signature(spec)
    var_kw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
    named = tuple(p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD)
    known = frozenset(named)
    required = frozenset(p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD
                         and p.default is p.empty)

    async def stub(*args, **kwargs):
        if not args and required <= kwargs.keys() and (var_kw is not None or kwargs.keys() <= known):
            # Keywords only, as programs mostly call tools: what `sig.bind` below gives, in the
            # same order, without it (it took 7 of a call's 16 µs on host CPython).
            payload = {name: kwargs[name] for name in named if name in kwargs and kwargs[name] is not OMITTED}
            if var_kw is not None and len(payload) < len(kwargs):
                payload.update((k, v) for k, v in kwargs.items() if k not in known)
        else:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{spec.python_name}(): {e}") from None
            payload = {}
            for key, value in bound.arguments.items():
                if key == var_kw:
                    payload.update(value)
                elif value is not OMITTED:
                    payload[key] = value
        if spec.namespace:
            return await call_tool(spec.name, payload, spec.namespace)
        return await call_tool(spec.name, payload)

    stub.__name__ = spec.python_name
    stub.__qualname__ = spec.qualified
    stub.__doc__ = docstring(spec)
    stub.__signature__ = sig
    return stub


_STUB_CODE = next(c for c in make_stub.__code__.co_consts if getattr(c, "co_name", None) == "stub")
"""The code every tool's stub runs: how `stub_of` knows a stub from a function of the same name."""


def stub_of(specs, obj):
    """The spec of the tool whose stub `obj` is, if it is one of `specs`'."""
    if getattr(obj, "__code__", None) is not _STUB_CODE:
        return None
    qualified = getattr(obj, "__qualname__", None)
    return next((s for s in specs if s.qualified == qualified), None)


def specs_by_name(specs):
    """`specs` by every name a program may give a tool as text: its Python name
    (`github.create_issue`) and its original one (`notion.API-post-search`)."""
    by_name = {}
    for spec in specs:
        by_name[spec.qualified] = spec
        by_name.setdefault(spec.name if not spec.namespace else f"{spec.namespace}.{spec.name}", spec)
    return by_name


def namespace_members(space):
    """A `ToolNamespace`'s Python name and its specs by member name."""
    own = object.__getattribute__(space, "__dict__")
    return own["_ToolNamespace__name"], own["_ToolNamespace__specs"]


def signature_line(spec):
    """`get_weather(city: str, days?: int, units?: "c"|"f")`: one compact line per tool, with
    every parameter, its type, whether it is optional (`?`), enum values, and the properties
    of object parameters (one level down); then what it returns, if known
    (`-> {temp: float, sky: str} (observed)`)."""
    shapes = Shapes(spec.parameters, depth=1)
    req = set(spec.required)
    parts = []
    for prop in _ordered_properties(spec):
        mark = "" if prop in req else "?"
        parts.append(f"{prop}{mark}: {shapes.render(spec.properties[prop])}")
    line = f"{spec.qualified}({', '.join(parts)})"
    returns = returns_text(spec)
    if returns:
        line += f" -> {returns}" + (" (observed)" if spec.observed else "")
    return line


# A result's shape in the compact line: two levels of fields while that fits in this many
# characters, else one, else only the names of its first RETURNS_FIELDS fields (the names are
# what a program needs not to fail on a KeyError). A GitHub issue's 24 fields so cost 55 tokens
# more on its line (16 names), against 51 for eight of them typed.
RETURNS_WIDTH = 160
RETURNS_FIELDS = 16


def returns_text(spec, literal=False):
    """What `spec` returns, rendered ("" when unknown or anything)."""
    if not spec.returns:
        return ""
    try:
        schema = json.loads(spec.returns) if isinstance(spec.returns, str) else spec.returns
    except ValueError:
        return ""
    if literal:
        text = Shapes(schema, STUB_DEPTH, literal=True).render(schema)
    else:
        text = Shapes(schema, depth=2).render(schema)
        if len(text) > RETURNS_WIDTH:
            text = Shapes(schema, depth=1).render(schema)
        if len(text) > RETURNS_WIDTH:
            text = _first_fields(schema) or text
    return "" if text == "Any" else text


def _first_fields(schema):
    """`{a, b?, c, … 8 more}`: the names of an object's (or a list of objects') first
    RETURNS_FIELDS fields, required ones first; "" for other shapes."""
    if not isinstance(schema, dict):
        return ""
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        inner = _first_fields(schema["items"])
        return f"list[{inner}]" if inner else ""
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return ""
    req = [r for r in schema.get("required") or [] if r in props]
    names = req + [p for p in props if p not in req]
    shown = [n if n in req else f"{n}?" for n in names[:RETURNS_FIELDS]]
    more = f", … {len(names) - RETURNS_FIELDS} more" if len(names) > RETURNS_FIELDS else ""
    return "{" + ", ".join(shown) + more + "}"


# How deep the stub spells out nested objects (the compact line stops after one level).
STUB_DEPTH = 4


def _nested_docs(schema, shapes, pad, level=1):
    """Lines documenting the described properties inside an object (or array of objects)."""
    schema, _ = shapes.resolve(schema)
    if not isinstance(schema, dict) or level > 2:
        return []
    if schema.get("type") == "array" or "items" in schema:
        return _nested_docs(schema.get("items"), shapes, pad, level)
    props, _ = shapes.properties(schema)
    lines = []
    for name, sub in props.items():
        sub_resolved, _ = shapes.resolve(sub)
        desc = str((sub_resolved or {}).get("description", "") if isinstance(sub_resolved, dict) else "").strip()
        if desc:
            lines.append(f"{pad}{name}: {' '.join(desc.split())}")
        lines += _nested_docs(sub, shapes, pad + "    ", level + 1)
    return lines


def _stub_doc(spec):
    """The stub's docstring: the description, then what each parameter means (types are in the
    signature, not repeated here)."""
    lines = [spec.description.strip()] if spec.description.strip() else []
    shapes = Shapes(spec.parameters, STUB_DEPTH, literal=True)
    args = []
    for prop in _ordered_properties(spec):
        schema, _ = shapes.resolve(spec.properties[prop])
        desc = " ".join(str((schema or {}).get("description", "")).split()) if isinstance(schema, dict) else ""
        how = "" if _usable(prop) else f" (pass as **{{{json.dumps(prop)}: ...}})"
        nested = _nested_docs(spec.properties[prop], shapes, "    ")
        if desc or how or nested:
            args.append(f"{prop}{how}: {desc}".rstrip(": ").rstrip() + (":" if nested and not desc else ""))
            args += nested
    if args:
        lines += ["Args:"] + ["    " + a for a in args]
    return "\n".join(lines)


def _stub_def(spec, indent):
    shapes = Shapes(spec.parameters, STUB_DEPTH, literal=True)
    req = set(spec.required)
    params = []
    odd = False
    for prop in _ordered_properties(spec):
        if not _usable(prop):
            odd = True
            continue
        hint = shapes.render(spec.properties[prop])
        params.append(f"{prop}: {hint}" if prop in req else f"{prop}: {hint} = ...")
    if odd:
        params.append("**kwargs: Any")
    doc = _stub_doc(spec).replace('"""', '\\"\\"\\"')
    pad = indent + "    "
    returns = returns_text(spec, literal=True)
    arrow = f" -> {returns}" if returns else ""
    head = f"{indent}async def {spec.python_name}({', '.join(params)}){arrow}:"
    if returns and spec.observed:
        head += "  # result shape observed in earlier calls"
    if not doc:
        return [head + " ..."]
    body = "\n".join(pad + line if line else "" for line in doc.splitlines())
    return [head, f'{pad}"""{body.lstrip()}"""']


def tool_help(spec):
    """One tool's full stub, as `help(tool)` prints it: how to call it, then its `def`."""
    call = f"await {spec.qualified}(...)"
    head = f"# {call} returns the tool's result as a Python value and raises ToolError when it fails."
    return "\n".join([head, *_stub_def(spec, "")])


def stub_text(specs):
    """A `.pyi`-style module describing every tool; a namespace's tools are listed in a class
    named after it (called as `await namespace.tool(...)`), without `self` or `@staticmethod`:
    the stub is for reading, and every token counts."""
    out = [
        "# Every tool returns its result as a Python value and raises ToolError when it fails.",
        '# `{"a": str, "b?": int}` is a dict with key a and optional key b.',
        "from typing import Any, Literal",
        "",
        "class ToolError(RuntimeError): ...",
        "",
    ]
    spaces = {}
    for spec in specs:
        if spec.python_namespace:
            spaces.setdefault(spec.python_namespace, []).append(spec)
        else:
            out += _stub_def(spec, "")
            out.append("")
    for ident, members in spaces.items():
        out.append(f"class {ident}:  # call as `await {ident}.tool(...)`")
        for spec in members:
            out += _stub_def(spec, "    ")
        out.append("")
    return "\n".join(out)


def describe(specs):
    return [(s.name, s.qualified, signature_line(s)) for s in specs], stub_text(specs)
