"""Signatures of real servers' tools (the lists in runtime-python-wasm/toolsets/, captured from the official
filesystem, everything, GitHub, Playwright and Notion MCP servers) lose nothing a model needs
to call them: every parameter name two levels deep and every enum value in the compact line,
and everything the stub's depth reaches in the stub, which is valid Python."""

import json
import os
import unittest

from helpers import ScriptedHost  # noqa: F401  (sets sys.path)
from ptc_runtime.shapes import Shapes
from ptc_runtime.stubs import STUB_DEPTH, describe, parse_tools

# Outside python/: the component bundles what is on its Python path.
HERE = os.path.join(os.path.dirname(__file__), "..", "..", "toolsets")
SETS = ["filesystem", "everything", "github", "playwright", "notion"]


def load(name):
    with open(os.path.join(HERE, f"{name}.json")) as f:
        return json.load(f)


def expected(schema, depth):
    """(names by level, enum values) a rendering to `depth` object levels must show."""
    shapes = Shapes(schema)
    names, values = [], []

    def walk(s, level, seen=frozenset()):
        s, seen = shapes.resolve(s, seen)
        if not isinstance(s, dict):
            return
        for v in s.get("enum") or []:
            values.append(v)
        if "const" in s:
            values.append(s["const"])
        for key in ("anyOf", "oneOf"):
            for option in s.get(key) or []:
                walk({**{k: v for k, v in s.items() if k not in ("anyOf", "oneOf")}, **option}
                     if set(option) != {"$ref"} else option, level, seen)
        if isinstance(s.get("items"), dict):
            walk(s["items"], level, seen)
        props, _ = shapes.properties(s, seen)
        if props and level <= depth:
            for name, sub in props.items():
                names.append((level, name))
                walk(sub, level + 1, seen)

    walk(schema, 0)
    return names, values


class RealToolSets(unittest.TestCase):
    def test_compact_lines_keep_two_levels_of_names_and_every_enum_value(self):
        for name in SETS:
            tools = load(name)
            specs = parse_tools([(t["name"], t.get("description", ""), t["inputSchema"], name) for t in tools])
            lines, _ = describe(specs)
            for tool, (_, _, line) in zip(tools, lines):
                names, values = expected(tool["inputSchema"], 1)
                with self.subTest(tool=f"{name}.{tool['name']}"):
                    for level, prop in names:
                        self.assertTrue(f"{prop}:" in line or f"{prop}?:" in line, f"{prop} (level {level}) lost: {line}")
                    for v in values:
                        self.assertIn(json.dumps(v, ensure_ascii=False) if v is not None else "None", line)

    def test_stubs_keep_every_name_their_depth_reaches_and_compile(self):
        for name in SETS:
            tools = load(name)
            specs = parse_tools([(t["name"], t.get("description", ""), t["inputSchema"], name) for t in tools])
            _, stub = describe(specs)
            compile(stub, f"<{name} stub>", "exec")
            for tool in tools:
                names, values = expected(tool["inputSchema"], STUB_DEPTH)
                with self.subTest(tool=f"{name}.{tool['name']}"):
                    for level, prop in names:
                        self.assertTrue(f'"{prop}' in stub or f"{prop}:" in stub, f"{prop} (level {level}) lost")
                    for v in values:
                        if isinstance(v, str):
                            self.assertIn(json.dumps(v, ensure_ascii=False), stub)

    def test_shapes(self):
        root = {
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                      "loop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/loop"}}}},
            "type": "object",
        }
        compact = Shapes(root, depth=1)
        self.assertEqual(compact.render({"$ref": "#/$defs/point"}), "{x: float}")
        self.assertEqual(compact.render({"type": ["string", "null"]}), "str | None")
        self.assertEqual(compact.render({"anyOf": [{"type": "integer"}, {"const": "all"}]}), 'int | "all"')
        self.assertEqual(compact.render({"type": "array", "items": {"$ref": "#/$defs/point"}}), "list[{x: float}]")
        self.assertEqual(compact.render({"type": "object", "additionalProperties": {"type": "string"}}), "dict[str, str]")
        self.assertEqual(compact.render({"$ref": "#/$defs/missing"}), "dict")
        self.assertEqual(Shapes(root, depth=5).render({"$ref": "#/$defs/loop"}), "{next?: dict}",
                         "a cycle ends in dict")
        deep = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
        self.assertEqual(compact.render(deep), "{a?: dict}", "objects beyond the depth are dict")
        stub = Shapes(root, depth=4, literal=True)
        self.assertEqual(stub.render(deep), '{"a?": {"b?": str}}')
        self.assertEqual(stub.render({"enum": ["a", None]}), 'Literal["a", None]')


if __name__ == "__main__":
    unittest.main()
