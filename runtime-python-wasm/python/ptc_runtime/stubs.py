"""Tool definitions to async Python functions, and their description for a model's prompt.

A stub takes the schema's properties as arguments (required first, in schema order; positional
or keyword), plus `**kwargs` for properties that are not identifiers or when the schema allows
extra properties. Calling it sends the arguments as a JSON object; the host validates them.
"""

import inspect
import json
import keyword
from dataclasses import dataclass, field

from .names import assign_python_names

_JSON_TO_PY = {
    "string": "str", "integer": "int", "number": "float", "boolean": "bool",
    "array": "list", "object": "dict", "null": "None",
}


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
    parameters: dict = field(default_factory=dict)

    @property
    def properties(self):
        props = self.parameters.get("properties")
        return props if isinstance(props, dict) else {}

    @property
    def required(self):
        req = self.parameters.get("required")
        return [r for r in req if isinstance(r, str)] if isinstance(req, list) else []


def parse_tools(defs):
    """`defs`: iterable of (name, description, parameters) with parameters as JSON text or dict."""
    defs = list(defs)
    mapping = assign_python_names([d[0] for d in defs])
    specs = []
    for name, description, parameters in defs:
        if isinstance(parameters, str):
            try:
                parameters = json.loads(parameters) if parameters.strip() else {}
            except ValueError as e:
                from .errors import InvalidTools
                raise InvalidTools(f"parameters of tool {name!r} are not valid JSON: {e}") from None
        if not isinstance(parameters, dict):
            parameters = {}
        specs.append(ToolSpec(name, mapping[name], description or "", parameters))
    return specs


def type_hint(schema):
    """A short Python type for a JSON Schema fragment (`Any` when it says nothing useful)."""
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

    async def stub(*args, **kwargs):
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
        return await call_tool(spec.name, payload)

    stub.__name__ = stub.__qualname__ = spec.python_name
    stub.__doc__ = docstring(spec)
    stub.__signature__ = sig
    return stub


def signature_line(spec):
    """`get_weather(city: str, days?: int) -> Any`: one compact line per tool."""
    req = set(spec.required)
    parts = []
    for prop in _ordered_properties(spec):
        schema = spec.properties[prop]
        mark = "" if prop in req else "?"
        parts.append(f"{prop}{mark}: {type_hint(schema)}")
    return f"{spec.python_name}({', '.join(parts)}) -> Any"


def stub_text(specs):
    """A `.pyi`-style module describing every tool."""
    out = ["from typing import Any, Literal", "", "class ToolError(Exception): ...", ""]
    for spec in specs:
        req = set(spec.required)
        params = []
        for p in signature(spec).parameters.values():
            schema = spec.properties.get(p.name, {})
            if p.kind is p.VAR_KEYWORD:
                params.append(f"**{p.name}: Any")
            elif p.name in req:
                params.append(f"{p.name}: {type_hint(schema)}")
            else:
                params.append(f"{p.name}: {type_hint(schema)} = ...")
        doc = docstring(spec).replace('"""', '\\"\\"\\"')
        body = "\n".join("    " + line if line else "" for line in doc.splitlines())
        out.append(f"async def {spec.python_name}({', '.join(params)}) -> Any:")
        out.append(f'    """{body.lstrip()}\n    """')
        out.append("")
    return "\n".join(out)


def describe(specs):
    return [(s.name, s.python_name, signature_line(s)) for s in specs], stub_text(specs)
