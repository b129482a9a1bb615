"""JSON Schema fragments as short Python-like types a model reads at a glance.

`{path: str, edits: list[{oldText: str, newText: str}], dryRun?: bool}`: objects show their
properties (`?` marks optional ones), arrays their items, enums and consts their values
(`"asc"|"desc"`), `anyOf`/`oneOf` and nullable types a union (`str | None`); local `$ref`s
(`#/$defs/...`, `#/definitions/...`) are followed, a cycle or a missing target is `dict`.
Objects deeper than `depth` levels are `dict`: the compact form keeps every parameter's own
properties (two levels of names), the stub goes deeper.

Rendering is bounded: each `Shapes` takes at most `MAX_STEPS` steps (a `$ref` followed, a
fragment rendered), and what is left past them is `Any`. A chain of 21 `anyOf`s through
`$ref`s, each branch naming the next link, once took 60 s of CPU to render, doubling at every
link.
"""

import json

# Steps one Shapes may take: the tools of the real servers in `toolsets` (GitHub, Notion,
# Playwright, ...) take at most 45 each.
MAX_STEPS = 2000

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_COMBINATORS = ("anyOf", "oneOf")


def _is_shape(s):
    """Whether a schema fragment says anything about a value's type."""
    return isinstance(s, dict) and any(
        k in s for k in ("type", "properties", "items", "enum", "const", "$ref", "anyOf", "oneOf", "allOf")
    )


class Shapes:
    """Renders the fragments of one root schema (which holds the `$defs` its `$ref`s name)."""

    def __init__(self, root, depth=1, literal=False):
        self.root = root if isinstance(root, dict) else {}
        self.depth = depth
        # Stubs: Literal["a", "b"] and quoted keys, valid Python; compact: "a"|"b" and bare keys.
        self.literal = literal
        self.steps = 0

    def _spent(self):
        """Counts a step; True once the budget is used up."""
        self.steps += 1
        return self.steps > MAX_STEPS

    def resolve(self, schema, seen=frozenset()):
        """Follows `$ref` (with the referring schema's other keys); `(None, seen)` on a cycle
        (or once the budget is spent)."""
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
            if self._spent():
                return None, seen
            ref = schema["$ref"]
            if ref in seen or not ref.startswith("#/"):
                return None, seen
            target = self.root
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
            if not isinstance(target, dict):
                return None, seen
            seen = seen | {ref}
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return schema, seen

    def properties(self, schema, seen=frozenset()):
        """(properties, required) of an object schema, `$ref`s followed and `allOf` merged."""
        schema, seen = self.resolve(schema, seen)
        if not isinstance(schema, dict) or self._spent():
            return {}, set()
        props = dict(schema.get("properties") or {}) if isinstance(schema.get("properties"), dict) else {}
        req = {r for r in schema.get("required") or [] if isinstance(r, str)}
        for part in schema.get("allOf") or []:
            p, r = self.properties(part, seen)
            props.update(p)
            req |= r
        return props, req

    def render(self, schema, level=1, seen=frozenset()):
        if self._spent():
            return "Any"
        schema, seen = self.resolve(schema, seen)
        if schema is None:
            return "dict"
        if not isinstance(schema, dict) or schema is True:
            return "Any"
        if "const" in schema:
            return self._literals([schema["const"]])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self._literals(schema["enum"])
        for key in _COMBINATORS:
            options = [o for o in schema.get(key) or [] if _is_shape(o)]
            if options:
                base = {k: v for k, v in schema.items() if k not in _COMBINATORS}
                rendered = [self.render({**base, **o} if not _is_shape_only_ref(o) else o, level, seen) for o in options]
                return _union(rendered)
        if isinstance(schema.get("allOf"), list) and schema["allOf"]:
            props, req = self.properties(schema, seen)
            return self._object(props, req, level, seen) if props else "dict"
        t = schema.get("type")
        if isinstance(t, list):
            return _union([self.render({**schema, "type": x}, level, seen) for x in t if isinstance(x, str)]) or "Any"
        if t == "object" or (t is None and isinstance(schema.get("properties"), dict)):
            props, req = self.properties(schema, seen)
            if props:
                return self._object(props, req, level, seen)
            extra = schema.get("additionalProperties")
            if _is_shape(extra):
                return f"dict[str, {self.render(extra, level + 1, seen)}]"
            return "dict"
        if t == "array" or (t is None and "items" in schema):
            items = schema.get("items")
            return f"list[{self.render(items, level, seen)}]" if _is_shape(items) else "list"
        return _SCALARS.get(t, "Any")

    def _object(self, props, req, level, seen):
        if level > self.depth:
            return "dict"
        ordered = [p for p in props if p in req] + [p for p in props if p not in req]
        # Stubs quote the keys (`{"a": str, "b?": int}` is valid Python); the compact form does not.
        q = '"' if self.literal else ""
        fields = ", ".join(
            f"{q}{name}{'' if name in req else '?'}{q}: {self.render(props[name], level + 1, seen)}" for name in ordered
        )
        return "{" + fields + "}"

    def _literals(self, values):
        parts = ["None" if v is None else json.dumps(v, ensure_ascii=False) for v in values]
        if self.literal:
            return "Literal[" + ", ".join(parts) + "]"
        return "|".join(parts)


def _is_shape_only_ref(o):
    return isinstance(o, dict) and set(o) == {"$ref"}


def _union(parts):
    out = []
    for p in parts:
        if p not in out:
            out.append(p)
    if "Any" in out:
        return "Any"
    return " | ".join(out)
